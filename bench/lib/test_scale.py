#!/usr/bin/env python3
"""Checks of scale.py's arithmetic: `python3 bench/lib/test_scale.py` (no servers)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402


class Summary(unittest.TestCase):
    def test_failed_runs_are_counted_not_dropped(self):
        rows = [{"workers": 1, "failed": 0, "x": 10}, {"workers": 1, "failed": 2, "x": 1},
                {"workers": 2, "failed": 0, "x": 11}, {"workers": 2, "failed": 0, "x": 12, "quiet": False},
                {"workers": 4, "failed": 1, "x": 3}]
        s = scale.summary(rows, "x")
        self.assertEqual(s["1"], {"runs": 1, "failed_runs": 1, "not_quiet_runs": 0, "median": 10, "min": 10,
                                  "max": 10, "speedup": 1.0})
        # A run taken beside other work is kept in the figure and counted as such.
        self.assertEqual((s["2"]["runs"], s["2"]["failed_runs"], s["2"]["not_quiet_runs"], s["2"]["median"]),
                         (2, 0, 1, 11.5))
        self.assertEqual(s["2"]["speedup"], round(2 * 10 / 11.5, 3))
        self.assertEqual(s["4"], {"runs": 0, "failed_runs": 1, "not_quiet_runs": 0})


class PairSpeedups(unittest.TestCase):
    def test_each_round_gives_its_own_speedup_and_a_failed_pair_is_counted(self):
        rows = [{"workers": 1, "round": 1, "failed": 0, "x": 10}, {"workers": 2, "round": 1, "failed": 0, "x": 10},
                {"workers": 2, "round": 2, "failed": 0, "x": 12}, {"workers": 1, "round": 2, "failed": 0, "x": 9},
                {"workers": 1, "round": 3, "failed": 0, "x": 11}, {"workers": 2, "round": 3, "failed": 3, "x": 1},
                {"workers": 1, "round": 4, "failed": 0, "x": 10}, {"workers": 2, "round": 4, "failed": 0, "x": 11}]
        s = scale.pair_speedups(rows, "x")
        # 2 x 10/10, 2 x 9/12, round 3 left out (a failed call), 2 x 10/11 (paired's ratios, 3 places).
        self.assertEqual(s, {"2": {"speedups": [2.0, 1.5, 1.818], "pairs": 3, "failed_pairs": 1,
                                   "median": 1.818, "min": 1.5, "max": 2.0}})

    def test_no_clean_pair_gives_no_median(self):
        rows = [{"workers": 1, "round": 1, "failed": 1, "x": 10}, {"workers": 4, "round": 1, "failed": 0, "x": 10}]
        self.assertEqual(scale.pair_speedups(rows, "x"), {"4": {"speedups": [], "pairs": 0, "failed_pairs": 1}})


if __name__ == "__main__":
    unittest.main()
