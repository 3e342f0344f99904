#!/usr/bin/env python3
"""Calls through an edge to strowger nodes (bench/dispatch.sh).

Three set-ups in one run: SIPp straight to one node ("direct"), and through an edge whose
`[[dispatch]]` set holds one node ("edge-1") or two ("edge-2"). The nodes answer extension 9196
(`answer`, then wait for the caller's BYE) and trust the edge; the edge serves edge.test with
`proxy.dispatch`. At each --rates R a SIPp caller (tests/sipp/proxy_uac.xml, -d 0) places R × --seconds
calls. Each process runs in its own session; its CPU is the run time of its threads
(/proc/PID/task/*/schedstat) from the caller's start to when its last call ended (or the
calls' span + 2 s), divided by the calls completed.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import proxy  # noqa: E402  (its SIPp runner and SIPp statistics readers)

NODE = """[general]
max_calls = 100000
[security]
trusted = ["127.0.0.1"]
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = ["answer", "wait 30"]
"""


def start(args, rundir, name, text):
    """A strowger with configuration `text`, on a port of its own; returns (process, port)."""
    path = os.path.join(rundir, f"{name}.toml")
    open(path, "w").write(text)
    port, rtp = b.alloc_ports(1), b.alloc_ports(1000)
    cmd = [args.bin, "--config", path, "--sip-listen", f"127.0.0.1:{port}", "--rtp-ports",
           f"{rtp}-{rtp + 999}", "--data-dir", os.path.join(rundir, f"{name}-data"), "--api-listen",
           f"127.0.0.1:{b.alloc_ports(1)}"]
    log = open(os.path.join(rundir, f"{name}.log"), "w")
    p = b.spawn(cmd, rundir, log, log)
    b.raise_priority(p.pid)
    return p, port


def edge_config(ports):
    nodes = ", ".join(f'"sip:127.0.0.1:{p}"' for p in ports)
    return (f'[proxy]\ndomains = ["edge.test"]\ndispatch = "nodes"\n'
            f'[[dialplan.contexts.default.rules]]\nexten = "9196"\nsteps = ["answer"]\n'
            f'[[dispatch]]\nname = "nodes"\nnodes = [{nodes}]\n')


def run_rate(rundir, setup, target, rate, seconds, watched):
    """One step: `rate` calls/s for `seconds` to `target`; CPU of each of `watched` (name → pid)."""
    calls, tag = rate * seconds, f"{setup}-{rate}"
    cpu = lambda: {n: b.session_cpu(pid) for n, pid in watched.items()}  # noqa: E731
    t0, cpu0 = time.time(), cpu()
    uac = proxy.sipp([f"127.0.0.1:{target}", "-sf", os.path.join(proxy.SIPP, "proxy_uac.xml"), "-s",
                      "9196", "-key", "domain", "edge.test", "-d", "0", "-r", str(rate), "-m",
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
    row = {"setup": setup, "rate": rate, "calls": calls, "completed": ok, "failed": failed,
           "wall_s": round(t1 - t0, 1)}
    for n in watched:
        row[f"{n}_cpu_ms_per_call"] = round((cpu1[n] - cpu0[n]) * 1000 / ok, 4) if ok else None
    b.log(f"{setup} {rate} calls/s: {row}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    args = ap.parse_args()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, b._on_signal)
    rundir = b.run_dir("dispatch")
    rows = []
    try:
        for setup, count in (("direct", 1), ("edge-1", 1), ("edge-2", 2)):
            nodes = [start(args, rundir, f"{setup}-node{i}", NODE) for i in range(count)]
            watched = {f"node{i}": p.pid for i, (p, _) in enumerate(nodes)}
            target = nodes[0][1]
            if setup != "direct":
                edge, target = start(args, rundir, f"{setup}-edge", edge_config([n[1] for n in nodes]))
                watched["edge"] = edge.pid
            time.sleep(2)  # started, and the edge's first probes answered
            for rate in args.rates:
                rows.append(run_rate(rundir, setup, target, rate, args.seconds, watched))
            for pid in watched.values():
                os.killpg(pid, signal.SIGTERM)
            time.sleep(1)
    finally:
        b.kill_children()
    print("\n| set-up | rate (calls/s) | completed / failed | edge CPU-ms per call | nodes' CPU-ms per call |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        nodes = sum(v for k, v in r.items() if k.startswith("node") and v)
        edge = r.get("edge_cpu_ms_per_call")
        print(f"| {r['setup']} | {r['rate']} | {r['completed']} / {r['failed']} | "
              f"{edge if edge is not None else '–'} | {nodes:.4f} |")
    b.write_rows("dispatch.json", {"seconds": args.seconds, "rates": args.rates}, rows)


if __name__ == "__main__":
    main()
