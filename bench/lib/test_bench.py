#!/usr/bin/env python3
"""Checks of the rig's shared arithmetic (bench.py) and of the registrar comparison's turn-taking
and report: `python3 bench/lib/test_bench.py` (no servers)."""

import os
import socket
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import registrar  # noqa: E402


class MedianRun(unittest.TestCase):
    def test_the_median_run_is_kept_with_every_round(self):
        runs = [{"x": 30, "id": "a"}, {"x": 10, "id": "b"}, {"x": 20, "id": "c"}]
        self.assertEqual(b.median_run(runs, "x"), {"x": 20, "id": "c", "rounds_us": [30, 10, 20]})

    def test_even_rounds_take_the_lower_middle_and_runs_without_a_figure_rank_last(self):
        runs = [{"x": None}, {"x": 40}, {"x": 10}, {"x": 30}]
        self.assertEqual(b.median_run(runs, "x")["x"], 30)
        self.assertEqual(b.median_run([{"x": None}], "x"), {"x": None, "rounds_us": [None]})


class Ports(unittest.TestCase):
    def test_released_ports_are_given_again_unless_still_bound(self):
        lo = b.alloc_ports(4)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
            held.bind(("127.0.0.1", lo))
            with mock.patch("random.randrange", return_value=lo + 2):
                with self.assertRaises(RuntimeError):
                    b.alloc_ports(2)  # taken by this process
                b.release_ports(lo, 4)
                self.assertEqual(b.alloc_ports(2), lo + 2)
            with mock.patch("random.randrange", return_value=lo):
                with self.assertRaises(RuntimeError):
                    b.alloc_ports(2)  # released, but bound
        b.release_ports(lo + 2, 2)


class Paired(unittest.TestCase):
    def test_ratios_are_taken_round_by_round(self):
        p = b.paired([10, 30, 20], [20, 30, 10])
        self.assertEqual(p, {"ratios": [0.5, 1.0, 2.0], "median": 1.0, "min": 0.5, "max": 2.0})

    def test_a_round_without_a_figure_on_either_side_gives_no_ratio(self):
        self.assertEqual(b.paired([10, None, 9], [5, 5, None])["ratios"], [2.0])
        self.assertEqual(b.paired([], [])["median"], None)


class Record(unittest.TestCase):
    def test_a_recorded_section_says_command_date_commit_and_machine(self):
        import datetime
        utc = datetime.timezone.utc
        text = b.record_section("title", "| a |\n", "python3 bench/lib/x.py --n 1",
                                datetime.datetime(2026, 1, 2, 3, 4, tzinfo=utc),
                                datetime.datetime(2026, 1, 2, 3, 9, tzinfo=utc), "abc123", 2, "Some CPU",
                                "0.50 0.40 0.30", "2.10 1.00 0.50")
        self.assertTrue(text.startswith("\n## 2026-01-02 03:04–03:09 UTC — title\n\n"), text)
        for part in ("`python3 bench/lib/x.py --n 1`", "Commit: `abc123`", "2 × Some CPU",
                     "0.50 0.40 0.30 at the start, 2.10 1.00 0.50 at the end"):
            self.assertIn(part, text)
        self.assertTrue(text.endswith("\n\n| a |\n"), text)

    def test_record_appends_one_section_and_only_when_asked(self):
        import tempfile
        real = b.RESULTS_MD
        with tempfile.TemporaryDirectory() as d:
            b.RESULTS_MD = os.path.join(d, "RESULTS.md")
            try:
                with open(b.RESULTS_MD, "w") as f:
                    f.write("# Results\n")
                b.summary(type("Args", (), {"record": False})(), "not kept", "| no |")
                b.summary(type("Args", (), {"record": True})(), "kept", "| yes |")
                text = open(b.RESULTS_MD).read()
            finally:
                b.RESULTS_MD = real
        self.assertTrue(text.startswith("# Results\n\n## "), text)
        self.assertEqual((text.count("## "), "not kept" in text), (1, False))
        self.assertIn(f"Commit: `{b.git_rev()}`", text)
        self.assertIn(" UTC — kept\n\n", text)
        self.assertTrue(text.endswith("\n\n| yes |\n"), text)

    def test_result_files_stay_in_the_run_directory_unless_recorded(self):
        import json
        import tempfile
        real = b.RESULTS
        with tempfile.TemporaryDirectory() as d:
            b.RESULTS = os.path.join(d, "results")
            rundir = os.path.join(d, "out")
            os.makedirs(rundir)
            try:
                path = b.keep(type("Args", (), {"record": False})(), rundir, "x.json", {"n": 1})
                self.assertEqual((path, json.load(open(path))), (os.path.join(rundir, "x.json"), {"n": 1}))
                self.assertFalse(os.path.exists(b.RESULTS))
                with open(os.path.join(rundir, "x.png"), "w") as f:
                    f.write("png")
                b.keep(type("Args", (), {"record": True})(), rundir, "x.png")
                b.keep(type("Args", (), {"record": True})(), rundir, "x.json", {"n": 2})
                self.assertEqual(sorted(os.listdir(b.RESULTS)), ["x.json", "x.png"])
                self.assertEqual(json.load(open(os.path.join(b.RESULTS, "x.json"))), {"n": 2})
            finally:
                b.RESULTS = real


class Side:
    """A stand-in server: its name and the CPU per REGISTER each of its runs gets."""

    def __init__(self, name, figures):
        self.server = type("Proc", (), {"name": name})()
        self.figures = iter(figures)
        self.rows, self.going = [], True


class Sweep(unittest.TestCase):
    def test_the_sides_take_turns_and_a_side_stops_after_its_first_unclean_step(self):
        order = []

        def run(side, auth, rate, seconds, rundir):
            order.append((side.server.name, rate))
            us = next(side.figures)
            return {"rate": rate, "server_cpu_us_per_op": us, "failure_pct": 5.0 if us is None else 0.0,
                    "achieved_per_s": rate, "latency_p99_us": 1000}

        real, registrar.register_run = registrar.register_run, run
        try:
            kam = Side("kamailio", [10, 12, None, None])
            ours = Side("strowger", [5, 4, 6, 3, 3, 3])
            registrar.sweep([kam, ours], False, [100, 200, 300], 1.0, 2, "/nonexistent")
        finally:
            registrar.register_run = real
        self.assertEqual(order, [("kamailio", 100), ("strowger", 100), ("kamailio", 100), ("strowger", 100),
                                 ("kamailio", 200), ("strowger", 200), ("kamailio", 200), ("strowger", 200),
                                 ("strowger", 300), ("strowger", 300)])
        self.assertEqual([r["server_cpu_us_per_op"] for r in kam.rows], [10, None])
        self.assertEqual([r["rounds_us"] for r in ours.rows], [[5, 4], [6, 3], [3, 3]])


class Report(unittest.TestCase):
    def row(self, rate, rounds):
        r = b.median_run([{"server_cpu_us_per_op": x} for x in rounds], "server_cpu_us_per_op")
        return {**r, "rate": rate, "registered": 10, "failure_pct": 0.0, "server_cpu_pct": 50.0,
                "load_cpu_pct": 40.0, "backend_cpu_us_per_op": None, "latency_p50_us": 100,
                "latency_p99_us": 900, "limited_by": "server (50 % of a core)"}

    def test_the_ratio_table_gives_each_rounds_spread(self):
        res = {"date": "2026-01-01 00:00 UTC", "strowger_rev": "abc", "nproc": 2, "cpu_model": "x",
               "invite": [], "register": [
                   {"server": "kamailio", "backend": "usrloc in memory", "auth": False, "clean_rate": 1000,
                    "pss_mib": 50, "rows": [self.row(1000, [20.0, 40.0, 30.0])]},
                   {"server": "strowger", "backend": "local", "auth": False, "clean_rate": 1000,
                    "rss_mib_start": 10, "rss_mib_end": 12, "rows": [self.row(1000, [10.0, 10.0, 12.0])]}]}
        text = registrar.report(res)
        # Medians 10 and 30; the rounds' ratios 0.5, 0.25, 0.4.
        self.assertIn("| local | none | 1,000 | 10.0 | usrloc in memory | 30.0 | **0.33×** | "
                      "0.40× (0.25–0.50, 3 rounds) |", text)
        self.assertIn("**10.0** (10.0, 10.0, 12.0)", text)


if __name__ == "__main__":
    unittest.main()
