#!/usr/bin/env python3
"""Callers waiting in a call queue beside playback calls, on the same machine in the same run (bench/queue.sh).

For each N of --levels, three runs one after the other, each against a fresh strowger (2 workers):
  queue     strowger-load call --ext 7000 --rtp echo: N callers wait in queue `support`, which has no agent
            (members = [], so none is ever logged in), hearing its music and, every --announce s, their position
            and expected wait (the queue's prompts from asterisk-core-sounds-en-wav); max_wait_s is past the hold;
  moh       the same to 9199, which answers and plays the same music class (the `moh` step): the music alone,
            so queue / moh is what the queue itself adds (board, announcements);
  playback  the same to 44444, which answers and loops the built-in announcement: the cheapest call that sends
            a stream, for comparison.
The load generator echoes what it hears (as Test A's SIPp does), so each call has a stream each way and what
came back shows the callers heard a stream.
All calls come up at --rate; once every call is up (+5 s), the server's CPU (run time of all its threads,
/proc/PID/task/*/schedstat) is taken over --window s: CPU-ms per waiting call-second = CPU-s / window / calls
x 1000 (calls that failed are not counted as up). The ratios to playback and to moh are printed per level. Every
child runs in its own session with its autogroup priority raised, is bounded in calls and time, and dies
with this script. Results: queue.json in the run directory (bench/out/, and bench/results/ with --record) (--results) and a Markdown table on stdout.
"""

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402


def queue_config(args, rundir, name):
    """The scale rig's configuration with queue `support` agentless, announcing every --announce s."""
    path = scale.config(args, rundir, name)
    head, table, queue = open(path).read().partition("\n[queues.support]\n")
    for key, value in (("members", "[]"), ("max_wait_s", "86400"), ("announce_s", str(args.announce))):
        # The first such key of the queue's table (other tables have members too).
        queue, n = re.subn(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", queue, count=1)
        if n != 1 or not table:
            sys.exit(f"bench: cannot set queues.support.{key} in the default configuration")
    with open(path, "w") as f:
        f.write(head + table + queue)
    return path


def one(args, rundir, kind, calls):
    label = f"{kind}-{calls}"
    cfg = queue_config(args, rundir, f"{label}.toml")
    srv = scale.Server(args, rundir, label, 2, "10000-29999", cfg)
    out = os.path.join(srv.dir, "load.json")
    ramp = calls / args.rate
    hold = ramp + 5 + args.window + 3
    ext = {"queue": "7000", "moh": "9199", "playback": "44444"}[kind]
    lp = scale.load(args, f"127.0.0.1:{srv.port}", ext, calls, args.rate, hold, "echo", out)
    time.sleep(ramp + 5)
    w = b.cpu_window(args.window, srv.cpu, [lp.pid])
    lp.wait()
    srv.stop()
    rep = scale.report_of(out)
    up = max(1, calls - rep["failed"])
    row = {
        "kind": kind, "calls": calls, "calls_up": up, "rate": args.rate, "hold_s": round(hold, 1),
        "window_s": w["window_s"], "announce_s": args.announce if kind == "queue" else None,
        "server_cpu_pct": w["server_cpu_pct"],
        "cpu_ms_per_call_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / up, 4),
        "load_cpu_pct": w["load_cpu_pct"], "machine_busy_pct": w["machine_busy_pct"],
        "others_cpu_pct": w["others_cpu_pct"], "quiet": w["quiet"],
        "completed": rep["completed"], "failed": rep["failed"], "rtp_received": rep["rtp"]["received"],
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd,
    }
    b.log(f"{kind} {calls}: {row['cpu_ms_per_call_s']} CPU-ms per call-second ({row['server_cpu_pct']} %), "
          f"load generator {row['load_cpu_pct']} %, machine {row['machine_busy_pct']} %, failed {row['failed']}, "
          f"RTP received {row['rtp_received']}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--levels", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--announce", type=int, default=10, help="the queue's announce_s")
    ap.add_argument("--kinds", nargs="+", default=["queue", "moh", "playback"], choices=["queue", "moh", "playback"])
    ap.add_argument("--results", default="queue.json", help="file name under bench/results")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.server, args.sipp_rcvbuf, args.workers = "strowger", None, 2
    scale.signal_setup()
    rundir = b.run_dir("queue")
    info = b.machine_info(args)
    rows = []
    try:
        for n in args.levels:
            for kind in args.kinds:
                rows.append(one(args, rundir, kind, n))
    finally:
        b.kill_children()
    b.write_rows(args, rundir, args.results, info, rows)
    table = []
    table.append("| calls | kind | server CPU | CPU-ms per call-second | vs playback | vs moh | load generator CPU | "
                 "RTP received | failed |")
    table.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def vs(r, kind):
        base = next((p for p in rows if p["kind"] == kind and p["calls"] == r["calls"]), None)
        return f"{r['cpu_ms_per_call_s'] / base['cpu_ms_per_call_s']:.2f}" if base and base["cpu_ms_per_call_s"] else "-"

    for r in rows:
        table.append(f"| {r['calls']} | {r['kind']} | {r['server_cpu_pct']} % | {r['cpu_ms_per_call_s']} | {vs(r, 'playback')} | "
                     f"{vs(r, 'moh')} | {r['load_cpu_pct']} % | {r['rtp_received']} | {r['failed']} |")
    b.summary(args, "queued callers against playback and music on hold (bench/queue.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
