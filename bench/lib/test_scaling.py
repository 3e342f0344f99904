#!/usr/bin/env python3
"""Checks of scaling.py's arithmetic on known inputs: `python3 bench/lib/test_scaling.py` (no servers)."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaling  # noqa: E402


def inputs(**per_unit):
    """Round numbers: 3,600 phones re-registering hourly, keep-alives every 10 s, 100 calls of
    100 s with one leg each, 4-core nodes and shards planned at half use."""
    v = {
        "workload": {"phones": 3600, "reregister_s": 3600, "keepalive_s": 10, "nat_fraction": 0.5,
                     "calls": 100, "hold_s": 100, "legs_per_call": 1, "lookups_per_call": 2},
        "node": {"cores": 4, "memory_gib": 1, "rtp_ports": 100, "nic_pps": 10000, "target_util": 0.5},
        "shard": {"memory_gib": 1, "min_shards": 1, "target_util": 0.5},
        "per_unit": {"register_cpu_us": 1000, "keepalive_cpu_us": 1000, "call_setup_cpu_ms": 1,
                     "media_cpu_ms_per_leg_s": 10, "memory_kib_per_leg": 1024, "packets_per_leg_s": 100,
                     "ports_per_leg": 2, "redis_cpu_us_per_register": 100000, "redis_cpu_us_per_lookup": 100000,
                     "redis_commands_per_register": 5, "redis_cluster_commands_per_change": 1,
                     "redis_commands_per_lookup": 2, "redis_bytes_per_binding": 1024},
    }
    v["per_unit"].update(per_unit)
    return v


class Model(unittest.TestCase):
    def test_rates_and_cpu_per_kind_of_work(self):
        d = scaling.demand(inputs())
        self.assertEqual(d["rates"], {"register_s": 1.0, "keepalive_s": 180.0, "calls_s": 1.0, "lookups_s": 2.0})
        # 1 REGISTER/s × 1 ms, 180 keep-alives/s × 1 ms, 1 call/s × 1 ms, 100 legs × 10 ms per s.
        self.assertEqual(d["node_cores"], {"register": 0.001, "keepalive": 0.18, "call_setup": 0.001, "media": 1.0})
        self.assertAlmostEqual(d["redis_cores"], 0.1 + 0.2)
        self.assertAlmostEqual(d["node_memory_gib"], 100 / 1024)
        self.assertEqual((d["rtp_ports"], d["pps"]), (200, 10000))

    def test_the_tightest_resource_sets_the_units_and_the_others_have_headroom(self):
        rows, tiers, _ = scaling.size(inputs())
        by = {(r["tier"], r["resource"]): r for r in rows}
        # 200 ports against 50 per node at half use: 4 nodes; CPU 1.182 cores against 2: 1.
        self.assertEqual(by[("node", "RTP ports")]["needed"], 4)
        self.assertEqual(by[("node", "CPU (cores)")]["needed"], 1)
        self.assertEqual(by[("node", "packets/s")]["needed"], 2)
        self.assertEqual(tiers["node"], {"units": 4, "bottleneck": "RTP ports", "floor": None})
        # 4 nodes hold 400 ports at full use: twice the 200 asked; 16 cores for 1.182.
        self.assertAlmostEqual(by[("node", "RTP ports")]["headroom"], 2.0)
        self.assertAlmostEqual(by[("node", "CPU (cores)")]["headroom"], 16 / 1.182)
        # Redis: 0.3 of a core against 0.5 per shard: 1 shard, CPU first.
        self.assertEqual(tiers["shard"], {"units": 1, "bottleneck": "CPU (one core)", "floor": None})

    def test_a_slower_media_path_moves_the_bottleneck_to_cpu(self):
        rows, tiers, _ = scaling.size(inputs(media_cpu_ms_per_leg_s=100))
        self.assertEqual(tiers["node"]["bottleneck"], "CPU (cores)")
        self.assertEqual(tiers["node"]["units"], 6)  # 10.182 cores against 2 per node

    def test_a_cluster_has_at_least_its_floor_of_shards(self):
        v = inputs()
        v["shard"]["min_shards"] = 3
        _, tiers, _ = scaling.size(v)
        self.assertEqual(tiers["shard"], {"units": 3, "bottleneck": "CPU (one core)", "floor": 3})

    def test_the_shipped_inputs_name_a_source_for_every_figure(self):
        with open(scaling.INPUTS) as f:
            shipped = json.load(f)
        for name, fig in shipped["per_unit"].items():
            self.assertTrue(fig.get("source"), name)
        _, tiers, _ = scaling.size(scaling.values(shipped))
        self.assertGreaterEqual(tiers["shard"]["units"], shipped["shard"]["min_shards"]["value"])


def redis(calls, memory=0, keys=0, clients=0):
    """One Redis as `scaling.info` gives it."""
    return {"calls": calls, "memory": memory, "data": memory - clients, "keys": keys}


class ClusterCheck(unittest.TestCase):
    NODES = """\
07c3 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
1a2b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 [10923->-3c4d]
3c4d 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
5e6f 127.0.0.1:7004@17004 slave 3c4d 0 0 3 connected
"""

    def test_the_masters_and_their_slots_from_cluster_nodes(self):
        # A slot being migrated ([…]) is its owner's still; replicas own none.
        self.assertEqual(scaling.slots(self.NODES), {7001: 5461, 7002: 5462, 7003: 5461})

    def test_the_prediction_for_a_cluster_run(self):
        p = scaling.predict_cluster(inputs(), {1: 4096, 2: 12288})
        # A binding change is the script's 5 commands and a WAIT; a call looks 2 callees up with
        # 2 commands each (the user, its bindings).
        self.assertEqual((p["commands_per_register"], p["commands_per_call"]), (6, 4))
        self.assertEqual(p["share"], {1: 0.25, 2: 0.75})
        self.assertEqual(p["redis_cpu_us_per_call"], 200000)
        self.assertEqual((p["node_cpu_us_per_register"], p["node_cpu_ms_per_call"]), (1000, 1))

    def test_a_phase_sums_the_masters_and_leaves_out_admin_commands_and_replicas(self):
        s0 = {"redis": {1: redis({"evalsha": 10, "info": 5}, 1000, 0),
                        2: redis({"evalsha": 30}, 1000, 0),
                        3: redis({"evalsha": 0}, 1000, 0)},
              "t": 100.0, "cpu": {"node0": 1.0, "edge": 2.0}}
        s1 = {"redis": {1: redis({"evalsha": 20, "hset": 10, "info": 9, "cluster|slots": 3}, 6000, 10, 1000),
                        2: redis({"evalsha": 60, "hset": 30, "wait": 30}, 13000, 30),
                        3: redis({"evalsha": 40, "hset": 40}, 99000, 40)},  # a replica
              "t": 110.0, "cpu": {"node0": 1.004, "edge": 2.002}}
        # Idle, the edge spends 0.1 ms a second and node0 nothing.
        idle = ({"t": 0.0, "cpu": {"node0": 0.5, "edge": 0.0}}, {"t": 5.0, "cpu": {"node0": 0.5, "edge": 0.0005}})
        ph = scaling.phase(s0, s1, [1, 2], 40, idle)
        self.assertEqual(ph["by_command"], {"evalsha": 1.0, "hset": 1.0, "wait": 0.75})
        self.assertEqual(ph["commands"], 2.75)
        self.assertEqual(ph["keys"], 1.0)
        # (6000 - 1000 client buffers - 1000) + (13000 - 1000) bytes over 40 bindings.
        self.assertEqual(ph["bytes"], 16000 / 40)
        self.assertEqual(ph["key_share"], {1: 0.25, 2: 0.75})
        self.assertAlmostEqual(ph["command_share"][2], 90 / 110)
        self.assertAlmostEqual(ph["cpu_us"]["node0"], 100)
        self.assertAlmostEqual(ph["cpu_us"]["edge"], 50)
        # 2 ms over the 10 s, 1 ms of it idle: 1 ms over 40.
        self.assertAlmostEqual(ph["net_cpu_us"]["edge"], 25)
        self.assertAlmostEqual(ph["net_cpu_us"]["node0"], 100)
        self.assertIsNone(scaling.phase(s0, s1, [1, 2], 40)["net_cpu_us"])

    def test_only_counts_off_by_more_than_the_tolerance_fail(self):
        rows, failed = scaling.verdict([
            ("commands per REGISTER", 6, 6.5, True),   # ×1.083: within 10 %
            ("commands per call", 2, 2.4, True),       # ×1.2
            ("CPU per call", 0.33, 3.3, False),        # ×10, but CPU
            ("edge CPU", None, 1.0, False),            # nothing predicted
        ])
        self.assertEqual(failed, ["commands per call"])
        self.assertAlmostEqual(rows[0][3], 6.5 / 6)
        self.assertIsNone(rows[3][3])
        self.assertEqual(scaling.verdict([("keys", 1, 0.85, True)])[1], ["keys"])


if __name__ == "__main__":
    unittest.main()
