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
                     "redis_commands_per_register": 5, "redis_bytes_per_binding": 1024},
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


if __name__ == "__main__":
    unittest.main()
