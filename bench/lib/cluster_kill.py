#!/usr/bin/env python3
"""A node killed under load (bench/cluster_kill.sh): the reference cluster (a Redis Cluster of
three masters and three replicas, three strowger nodes on 127.0.0.2, .3 and .4 sharing it, an
edge on 127.0.0.1 dispatching to them, probing every second, a node down after two failed
probes, an INVITE left silent 1 s failed over), SIPp calls through the edge at --rate a second
held --hold-ms each, for --seconds. After --kill-after s, node 1 gets SIGKILL and a second SIPp
starts placing new calls at the same rate for --after-seconds.

Reported: the calls lost (the first SIPp's failed calls: node 1's, and no other's), the new
calls that failed, when the edge took node 1 out of its set (its log line, from the kill), and,
with node 1 restarted on its data directory, the CDRs it writes from its journal of calls in
progress (`node_failure`, answered ones apart) against the calls lost.
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import cluster  # noqa: E402  (the reference cluster: Redis Cluster, node and edge)
import proxy  # noqa: E402  (its SIPp runner and statistics readers)

EDGE_TIMING = "probe_interval_s = 1\nprobe_failures = 2\ntimeout_ms = 1000\n"


def node(args, rundir, n, store, port=None):
    """Node `n` on 127.0.0.`n + 2` with data in rundir/node`n`-data (`port`: its old one)."""
    ip = f"127.0.0.{n + 2}"
    # A pair per echo call: room for two thirds of the calls up (a survivor's share after the kill).
    ports = max(200, args.rate * (args.hold_ms // 1000 + 2) * 4 // 3) // 2 * 2
    p, port = cluster.start(args.bin, rundir, f"node{n}", cluster.node_config(store), ip, port, ports,
                            ["--workers", "1"])
    return p, ip, port


def cdrs(rundir, n):
    try:
        with open(os.path.join(rundir, f"node{n}-data", "cdr.jsonl")) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def calls(rundir, target, tag, rate, count, hold_ms, timeout_s):
    return proxy.sipp([f"127.0.0.1:{target}", "-sf", os.path.join(proxy.SIPP, "proxy_uac.xml"),
                       "-s", "9196", "-key", "domain", "edge.test", "-d", str(hold_ms), "-r",
                       str(rate), "-m", str(count), "-l", str(rate * (hold_ms // 1000 + 4)),
                       "-max_non_invite_retrans", "3", "-p", str(b.alloc_ports(1))], tag, rundir,
                      timeout_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=200, help="calls a second through the edge")
    ap.add_argument("--seconds", type=int, default=12, help="how long the first SIPp places calls")
    ap.add_argument("--hold-ms", type=int, default=2000)
    ap.add_argument("--kill-after", type=float, default=5.0)
    ap.add_argument("--after-seconds", type=int, default=4)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    b.add_record_flag(ap)
    args = ap.parse_args()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, b._on_signal)
    rundir = b.run_dir("cluster_kill")
    try:
        store, _ = cluster.redis_cluster(rundir)
        nodes = [node(args, rundir, n, store) for n in range(3)]
        uris = [(ip, port) for _, ip, port in nodes]
        edge_text = cluster.edge_config(uris) + EDGE_TIMING
        edge, target = cluster.start(args.bin, rundir, "edge", edge_text)
        time.sleep(3)  # started, and the edge's first probes answered
        before_n = args.rate * args.seconds
        limit = args.seconds + args.hold_ms // 1000 + 30
        before = calls(rundir, target, "before", args.rate, before_n, args.hold_ms, limit)
        time.sleep(args.kill_after)
        victim, ip, port = nodes[1]
        load_at_kill = b.loadavg()
        killed = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        after_n = args.rate * args.after_seconds
        after = calls(rundir, target, "after", args.rate, after_n, 500, args.after_seconds + 30)
        edge_log = os.path.join(rundir, "edge.log")
        down = f"node sip:{ip}:{port} is down"
        out_s = None
        while time.time() < killed + 20:
            if down in open(edge_log).read():
                out_s = round(time.time() - killed, 2)
                break
            time.sleep(0.05)
        victim.wait()
        for p in (before, after):
            p.wait(timeout=limit + 10)
        ok_b, failed_b = proxy.sipp_counts(rundir, "before")
        ok_a, failed_a = proxy.sipp_counts(rundir, "after")
        # Node 1 back on its address and data directory: its journal's calls become CDRs.
        restarted, _, _ = node(args, rundir, 1, store, port)
        deadline = time.time() + 30
        up = f"node sip:{ip}:{port} is up"
        while up not in open(edge_log).read() and time.time() < deadline:
            time.sleep(0.1)
        recovered = [c for c in cdrs(rundir, 1) if c.get("cause_text") == "node_failure"]
        answered = [c for c in recovered if c.get("answer") is not None]
        others_cut = sum(1 for n in (0, 2) for c in cdrs(rundir, n) if c.get("cause") != 16)
    finally:
        b.kill_children()
    row = {"rate": args.rate, "hold_ms": args.hold_ms, "before_calls": before_n,
           "before_completed": ok_b, "lost": failed_b, "after_calls": after_n,
           "after_completed": ok_a, "after_failed": failed_a, "edge_out_s": out_s,
           "recovered_cdrs": len(recovered), "recovered_answered": len(answered),
           "other_nodes_abnormal_cdrs": others_cut, "loadavg_at_kill": load_at_kill}
    b.keep(args, rundir, "cluster_kill.json", row)
    text = (f"{args.rate} calls/s through the edge, held {args.hold_ms} ms; node 1 of 3 killed "
            f"(SIGKILL) {args.kill_after} s in.\n\n"
            "| calls lost (of those placed before) | new calls failed | edge took the node out after "
            "| CDRs written by the restarted node (answered) | other nodes' calls not ended normally |\n"
            "| --- | --- | --- | --- | --- |\n"
            f"| {failed_b} of {before_n} | {failed_a} of {after_n} | "
            f"{out_s if out_s is not None else 'not within 20'} s | {len(recovered)} ({len(answered)}) | "
            f"{others_cut} |\n")
    b.summary(args, f"A node killed under {args.rate} calls/s (bench/cluster_kill.sh)", text)


if __name__ == "__main__":
    main()
