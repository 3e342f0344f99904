#!/usr/bin/env python3
"""Calls and REGISTERs through an edge to strowger nodes (bench/dispatch.sh).

Set-ups in one run (--setups): SIPp straight to one node ("direct"), and through an edge whose
`[[dispatch]]` set holds one, two or three nodes ("edge-1", "edge-2", "edge-3"), each node on
its own loopback address (127.0.0.2, .3, .4). The nodes answer extension 9196 (`answer`, then
wait for the caller's BYE), know user 1001 and trust the edge; the edge serves edge.test and
strowger with `proxy.dispatch`. At each --rates R a SIPp caller (tests/sipp/proxy_uac.xml, -d 0)
places R × --seconds calls; at each --register-rates R SIPp registers 1001 with digest
(tests/sipp/register.xml, each REGISTER a new Call-ID, so they spread over the nodes) R × --seconds
times. The nodes' store is each its own local file, or with --redis-cluster one Redis Cluster of
three masters and three replicas started here (every binding change waits for a replica).
Each process runs in its own session; its CPU is the run time of its threads
(/proc/PID/task/*/schedstat) from the caller's start to when its last call ended (or the
calls' span + 2 s), divided by the calls completed.
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import cluster  # noqa: E402  (the reference cluster: Redis Cluster, node and edge)
import proxy  # noqa: E402  (its SIPp runner and SIPp statistics readers)


def run_rate(rundir, setup, target, rate, seconds, watched, what="calls"):
    """One step: `rate` calls (or REGISTERs) a second for `seconds` to `target`; CPU of each of
    `watched` (name → pid)."""
    calls, tag = rate * seconds, f"{setup}-{what}-{rate}"
    cpu = lambda: {n: b.session_cpu(pid) for n, pid in watched.items()}  # noqa: E731
    t0, cpu0 = time.time(), cpu()
    scenario = (["-sf", os.path.join(proxy.SIPP, "proxy_uac.xml"), "-s", "9196", "-key", "domain",
                 "edge.test", "-d", "0"] if what == "calls" else
                ["-sf", os.path.join(proxy.SIPP, "register.xml"), "-s", "1001", "-au", "1001",
                 "-ap", "secret-1001"])
    uac = proxy.sipp([f"127.0.0.1:{target}", *scenario, "-r", str(rate), "-m",
                      str(calls), "-l", str(rate * 4), "-p", str(b.alloc_ports(1))], f"uac-{tag}",
                     rundir, seconds + 30)
    deadline = t0 + seconds + 2
    while uac.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    if uac.poll() is None:
        time.sleep(1.1)  # one more -trace_stat row, then SIPp goes
        os.killpg(uac.pid, signal.SIGTERM)
        uac.wait()
    t1, cpu1 = time.time(), cpu()
    ok, failed = proxy.sipp_counts(rundir, f"uac-{tag}")
    failed = max(failed, calls - ok)
    row = {"setup": setup, "what": what, "rate": rate, "calls": calls, "completed": ok,
           "failed": failed, "wall_s": round(t1 - t0, 1), "loadavg": b.loadavg()}
    for n in watched:
        row[f"{n}_cpu_ms_per_call"] = round((cpu1[n] - cpu0[n]) * 1000 / ok, 4) if ok else None
    b.log(f"{setup} {rate} {what}/s: {row}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--register-rates", type=int, nargs="*", default=[200])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--setups", nargs="+", default=["direct", "edge-1", "edge-2", "edge-3"],
                    choices=["direct", "edge-1", "edge-2", "edge-3"])
    ap.add_argument("--redis-cluster", action="store_true",
                    help="the nodes' store: a 3+3 Redis Cluster started here (default: local files)")
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    b.add_record_flag(ap)
    args = ap.parse_args()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, b._on_signal)
    rundir = b.run_dir("dispatch")
    rows = []
    try:
        store = cluster.redis_cluster(rundir)[0] if args.redis_cluster else None
        for setup in args.setups:
            count = 1 if setup == "direct" else int(setup.split("-")[1])
            nodes = []
            for i in range(count):
                url = store or f"local:{rundir}/{setup}-node{i}.snap"
                ip = "127.0.0.1" if setup == "direct" else f"127.0.0.{i + 2}"
                p, port = cluster.start(args.bin, rundir, f"{setup}-node{i}",
                                        cluster.node_config(url, cluster.HOLD), ip)
                nodes.append((p, ip, port))
            watched = {f"node{i}": p.pid for i, (p, _, _) in enumerate(nodes)}
            target = nodes[0][2]
            if setup != "direct":
                edge, target = cluster.start(args.bin, rundir, f"{setup}-edge",
                                             cluster.edge_config([(ip, port) for _, ip, port in nodes]))
                watched["edge"] = edge.pid
            time.sleep(2)  # started, and the edge's first probes answered
            for rate in args.rates:
                rows.append(run_rate(rundir, setup, target, rate, args.seconds, watched))
            for rate in args.register_rates:
                rows.append(run_rate(rundir, setup, target, rate, args.seconds, watched, "register"))
            for pid in watched.values():
                os.killpg(pid, signal.SIGTERM)
            time.sleep(1)
    finally:
        b.kill_children()
    print("\n| set-up | what | rate (/s) | completed / failed | edge CPU-ms each | nodes' CPU-ms each "
          "| load avg |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        nodes = sum(v for k, v in r.items() if k.startswith("node") and v)
        edge = r.get("edge_cpu_ms_per_call")
        print(f"| {r['setup']} | {r['what']} | {r['rate']} | {r['completed']} / {r['failed']} | "
              f"{edge if edge is not None else '–'} | {nodes:.4f} | {r['loadavg']} |")
    b.write_rows(args, rundir, "dispatch.json", {"seconds": args.seconds, "rates": args.rates,
                                   "register_rates": args.register_rates,
                                   "store": "redis-cluster 3+3" if args.redis_cluster else "local"},
                 rows)


if __name__ == "__main__":
    main()
