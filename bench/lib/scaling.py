#!/usr/bin/env python3
"""How many strowger nodes and Redis Cluster shards a workload needs, from per-unit figures
measured here (docs/scaling.md).

  python3 bench/lib/scaling.py model [--inputs bench/lib/scaling_inputs.json]
      prints, per resource, the demand, one unit's capacity, the units needed and the headroom,
      and names the bottleneck.
  python3 bench/lib/scaling.py check [--users 10000 --rate 1000]
      registers phones with strowger-load against strowger on a Redis store (loopback, bounded)
      and prints the Redis commands per REGISTER the model predicts against `INFO commandstats`,
      and Redis memory per binding (`INFO memory`).
"""

import argparse
import json
import math
import os
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "scaling_inputs.json")


def values(inputs):
    """{section: {name: value}} from the inputs table (each figure carries unit and source)."""
    return {s: {k: f["value"] for k, f in t.items()} for s, t in inputs.items() if not s.startswith("_")}


def demand(v):
    """What the workload asks of the whole system, per resource."""
    w, u = v["workload"], v["per_unit"]
    legs = w["calls"] * w["legs_per_call"]
    reg_s = w["phones"] / w["reregister_s"]
    ka_s = w["phones"] * w["nat_fraction"] / w["keepalive_s"]
    calls_s = w["calls"] / w["hold_s"]
    lookups_s = calls_s * w["lookups_per_call"]
    return {
        "rates": {"register_s": reg_s, "keepalive_s": ka_s, "calls_s": calls_s, "lookups_s": lookups_s},
        "node_cores": {
            "register": reg_s * u["register_cpu_us"] / 1e6,
            "keepalive": ka_s * u["keepalive_cpu_us"] / 1e6,
            "call_setup": calls_s * u["call_setup_cpu_ms"] / 1e3,
            "media": legs * u["media_cpu_ms_per_leg_s"] / 1e3,
        },
        "node_memory_gib": legs * u["memory_kib_per_leg"] / 2**20,
        "rtp_ports": legs * u["ports_per_leg"],
        "pps": legs * u["packets_per_leg_s"],
        "redis_cores": reg_s * u["redis_cpu_us_per_register"] / 1e6 + lookups_s * u["redis_cpu_us_per_lookup"] / 1e6,
        "redis_memory_gib": w["phones"] * u["redis_bytes_per_binding"] / 2**30,
    }


def size(v):
    """Rows (tier, resource, demand, capacity per unit at target use, units) and the units of
    each tier: the largest need among its resources, the bottleneck being that resource."""
    d, n, s = demand(v), v["node"], v["shard"]
    cpu = sum(d["node_cores"].values())
    rows = [
        ("node", "CPU (cores)", cpu, n["cores"] * n["target_util"]),
        ("node", "memory (GiB)", d["node_memory_gib"], n["memory_gib"] * n["target_util"]),
        ("node", "RTP ports", d["rtp_ports"], n["rtp_ports"] * n["target_util"]),
        ("node", "packets/s", d["pps"], n["nic_pps"] * n["target_util"]),
        ("shard", "CPU (one core)", d["redis_cores"], s["target_util"]),
        ("shard", "memory (GiB)", d["redis_memory_gib"], s["memory_gib"] * s["target_util"]),
    ]
    rows = [(t, r, dem, cap, math.ceil(dem / cap - 1e-9)) for t, r, dem, cap in rows]
    tiers = {}
    for tier, floor in (("node", 1), ("shard", s["min_shards"])):
        mine = [r for r in rows if r[0] == tier]
        worst = max(mine, key=lambda r: r[2] / r[3])
        units = max(floor, worst[4])
        tiers[tier] = {"units": units, "bottleneck": worst[1],
                       "floor": floor if floor > worst[4] else None}
    out = []
    for tier, res, dem, cap, need in rows:
        units = tiers[tier]["units"]
        # Headroom: how much more of this resource the chosen units take at full use.
        full = cap / v[tier]["target_util"] * units
        out.append({"tier": tier, "resource": res, "demand": dem, "per_unit": cap, "needed": need,
                    "headroom": full / dem if dem else math.inf})
    return out, tiers, d


def fmt(x):
    if x == math.inf:
        return "∞"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def model(args):
    with open(args.inputs) as f:
        inputs = json.load(f)
    v = values(inputs)
    rows, tiers, d = size(v)
    print("| rate | per second |\n| --- | ---: |")
    for k, x in d["rates"].items():
        print(f"| {k} | {fmt(x)} |")
    print("\n| node CPU by work | cores |\n| --- | ---: |")
    for k, x in d["node_cores"].items():
        print(f"| {k} | {fmt(x)} |")
    print("\n| tier | resource | demand | one unit at target use | units needed | headroom at the chosen units |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['tier']} | {r['resource']} | {fmt(r['demand'])} | {fmt(r['per_unit'])} | {r['needed']} "
              f"| ×{fmt(r['headroom'])} |")
    for tier, t in tiers.items():
        why = f" (the floor of {t['floor']}; the busiest resource is {t['bottleneck']})" if t["floor"] else \
            f": {t['bottleneck']} saturates first"
        print(f"\n{tier}s: {t['units']}{why}")
    print("\nPer-unit figures and their sources:")
    for k, f in inputs["per_unit"].items():
        print(f"- {k} = {f['value']} {f['unit']} — {f['source']}")


def check(args):
    sys.path.insert(0, HERE)
    import bench as b
    import registrar as r
    with open(args.inputs) as f:
        v = values(json.load(f))
    predicted = v["per_unit"]["redis_commands_per_register"]
    rundir = tempfile.mkdtemp(prefix="scaling-check-")
    try:
        _, url = r.start_backend("redis", rundir)
        port = int(url.rsplit(":", 1)[1])
        _, sip = r.start_strowger("strowger", url, False, 0, rundir, args.strowger)
        calls0, mem0 = info(port)
        cmd, res = r.load_register(sip, args.rate, args.users, r.FIRST_USER, False, rundir)
        calls1, mem1 = info(port)
    finally:
        b.kill_children()
    ok = res["registered"]
    if not ok:
        raise SystemExit(f"no phone registered: {res.get('failed_reasons')}")
    diff = {k: calls1.get(k, 0) - calls0.get(k, 0) for k in calls1}
    diff = {k: n for k, n in diff.items() if n and k not in ("info", "ping", "client", "hello")}
    measured = sum(diff.values()) / ok
    print(f"command: {' '.join(['strowger-load'] + cmd[1:])}")
    print(f"registered {ok} of {args.users} ({res['failed']} failed) at {res['registers_per_s']:.0f}/s")
    print("| command | calls | per REGISTER |\n| --- | ---: | ---: |")
    for k, n in sorted(diff.items()):
        print(f"| {k} | {n:,} | {n / ok:.3f} |")
    print(f"Redis commands per REGISTER: predicted {predicted}, measured {measured:.3f}, "
          f"measured / predicted = ×{measured / predicted:.3f}")
    print(f"Redis used_memory per binding: {(mem1 - mem0) / ok:,.0f} B "
          f"({mem0:,} -> {mem1:,} B; model input {v['per_unit']['redis_bytes_per_binding']} B)")


def info(port):
    """({command: calls} from INFO commandstats, used_memory) of the Redis on 127.0.0.1:`port`."""
    s = socket.create_connection(("127.0.0.1", port), 5)
    out, mem = {}, None
    for section in ("commandstats", "memory"):
        s.sendall(f"INFO {section}\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n"):
            head += s.recv(1)
        n = int(head[1:-2])
        body = b""
        while len(body) < n + 2:
            body += s.recv(n + 2 - len(body))
        for line in body.decode().splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                out[name] = int(rest.split(",")[0].split("=")[1])
            elif line.startswith("used_memory:"):
                mem = int(line.split(":")[1])
    s.close()
    return out, mem


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["model", "check"])
    p.add_argument("--inputs", default=INPUTS, help="the per-unit figures (JSON; default %(default)s)")
    p.add_argument("--users", type=int, default=10000, help="check: phones registered (default 10000)")
    p.add_argument("--rate", type=int, default=1000, help="check: REGISTERs per second (default 1000)")
    p.add_argument("--strowger", default=None, help="check: the strowger binary (default target/release)")
    args = p.parse_args()
    {"model": model, "check": check}[args.what](args)


if __name__ == "__main__":
    main()
