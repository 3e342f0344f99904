#!/usr/bin/env python3
"""IAX2 beside SIP on the same machine in the same run (bench/iax2.sh).

For each N of --levels, three runs one after the other, each against a fresh strowger (2 workers):
  sip         strowger-load call --ext 9196 --rtp send: N SIP calls to the echo extension, 50 PCMU
              packets/s each way per call (one SIP leg with RTP per call);
  iax2        strowger-load iax2 --ext 9196: N IAX2 calls (call token, MD5) to the echo extension,
              50 µ-law mini frames/s each way per call (one IAX2 leg per call);
  iax2-trunk  the same with --trunk and the peer configured trunk = true: every call's voice in one
              meta trunk frame per 20 ms each way.
All calls come up at --rate; once every call is up (+5 s), the server's CPU (run time of all its
threads, /proc/PID/task/*/schedstat) is taken over --window s: CPU-ms per leg-second = CPU-s / window / legs x 1000,
where legs = N minus the calls that failed (they were never up).
The load generator's CPU and what came back (frames or RTP packets) are recorded too. Every child
runs in its own session with its autogroup priority raised, is bounded in calls and time, and
dies with this script. Results: iax2.json in the run directory (bench/out/, and bench/results/ with --record) (--results) and a Markdown table on stdout.
"""

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402


SECRET = "bench-secret"


def iax_config(args, rundir, name, trunk):
    """The scale rig's configuration plus an IAX2 peer `load` (MD5), no per-address cap, no qualify."""
    path = scale.config(args, rundir, name)
    text = open(path).read()
    for key, value in (("max_calls_per_ip", "65535"), ("qualify_s", "0")):
        text, n = re.subn(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", text)
        if n != 1:
            sys.exit(f"bench: cannot set iax2.{key} in the default configuration")
    text += (f'\n[[iax2.peers]]\nname = "load"\nhost = "127.0.0.1"\nsecret = "{SECRET}"\n'
             f'codecs = ["PCMU"]\ntrunk = {"true" if trunk else "false"}\n')
    with open(path, "w") as f:
        f.write(text)
    return path


def iax_load(args, target, calls, rate, hold, trunk, out):
    cmd = [args.load_bin, "iax2", "--target", target, "--ext", "9196", "--username", "load", "--secret", SECRET,
           "--calls", str(calls), "--rate", str(rate), "--hold", str(hold), "--json", "--quiet",
           "--max-time", str(int(hold + calls / rate + 60))]
    if trunk:
        cmd.append("--trunk")
    p = b.spawn(cmd, os.path.dirname(out), open(out, "w"), open(out + ".err", "w"))
    b.raise_priority(p.pid)
    p.cmd = b.fmt_cmd(cmd)
    return p


def one(args, rundir, kind, calls, tag=""):
    label = f"{kind}-{calls}{tag}"
    extra = []
    if kind == "sip":
        cfg = scale.config(args, rundir, f"{label}.toml")
    else:
        iax_port = b.alloc_ports(1)
        extra = ["--iax-listen", f"127.0.0.1:{iax_port}"]
        cfg = iax_config(args, rundir, f"{label}.toml", kind == "iax2-trunk")
    srv = scale.Server(args, rundir, label, 2, "10000-29999", cfg, extra)
    out = os.path.join(srv.dir, "load.json")
    ramp = calls / args.rate
    hold = ramp + 5 + args.window + 3
    if kind == "sip":
        lp = scale.load(args, f"127.0.0.1:{srv.port}", "9196", calls, args.rate, hold, "send", out)
    else:
        lp = iax_load(args, f"127.0.0.1:{iax_port}", calls, args.rate, hold, kind == "iax2-trunk", out)
    time.sleep(ramp + 5)
    w = b.cpu_window(args.window, srv.cpu, [lp.pid])
    lp.wait()
    srv.stop()
    rep = scale.report_of(out)
    # A call that failed (e.g. 503 when another process held ports of the RTP range) was never up.
    legs = max(1, calls - rep["failed"])
    row = {
        "kind": kind, "calls": calls, "legs_up": legs, "rate": args.rate, "hold_s": round(hold, 1),
        "window_s": w["window_s"],
        "server_cpu_pct": w["server_cpu_pct"],
        "cpu_ms_per_leg_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / legs, 4),
        "load_cpu_pct": w["load_cpu_pct"], "machine_busy_pct": w["machine_busy_pct"],
        "others_cpu_pct": w["others_cpu_pct"], "quiet": w["quiet"],
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd,
    }
    if kind == "sip":
        row.update(completed=rep["completed"], failed=rep["failed"], sent=rep["rtp"].get("sent"),
                   received=rep["rtp"]["received"], lost=rep["rtp"]["lost"])
    else:
        row.update(completed=rep["completed"], failed=rep["failed"], sent=rep["frames_sent"],
                   received=rep["frames_received"])
    row["returned_pct"] = round(100 * row["received"] / max(1, row["sent"] or 0), 2) if row["sent"] else None
    b.log(f"{kind} {calls}: {row['cpu_ms_per_leg_s']} CPU-ms per leg-second ({row['server_cpu_pct']} %), "
          f"load generator {row['load_cpu_pct']} %, machine {row['machine_busy_pct']} %, failed {row['failed']}, "
          f"returned {row['returned_pct']} %")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--levels", type=int, nargs="+", default=[200, 1000, 2000])
    ap.add_argument("--kinds", nargs="+", default=["sip", "iax2", "iax2-trunk"],
                    choices=["sip", "iax2", "iax2-trunk"])
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--results", default="iax2.json", help="file name under bench/results")
    ap.add_argument("--compare", metavar="BIN",
                    help="a second strowger binary (e.g. before a change): each run is repeated with it "
                         "right after, so the two compare as a ratio within one run")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.server, args.sipp_rcvbuf, args.workers = "strowger", None, 2
    scale.signal_setup()
    rundir = b.run_dir("iax2")
    info = b.machine_info(args)
    rows = []
    try:
        for n in args.levels:
            for kind in args.kinds:
                rows.append(one(args, rundir, kind, n))
                rows[-1]["bin"] = args.bin
                if args.compare:
                    main_bin, args.bin = args.bin, args.compare
                    rows.append(one(args, rundir, kind, n, "-compare"))
                    rows[-1]["bin"] = args.bin
                    args.bin = main_bin
    finally:
        b.kill_children()
    b.write_rows(args, rundir, args.results, info, rows)
    table = []
    table.append("| calls | kind | binary | server CPU | CPU-ms per leg-second | vs SIP | load generator CPU | returned | failed |")
    table.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        sip = next((s for s in rows if s["kind"] == "sip" and s["calls"] == r["calls"] and s["bin"] == r["bin"]),
                   None)
        vs = f"{r['cpu_ms_per_leg_s'] / sip['cpu_ms_per_leg_s']:.2f}" if sip and sip["cpu_ms_per_leg_s"] else "-"
        table.append(f"| {r['calls']} | {r['kind']} | {r['bin']} | {r['server_cpu_pct']} % | {r['cpu_ms_per_leg_s']} | {vs} | "
                     f"{r['load_cpu_pct']} % | {r['returned_pct']} % | {r['failed']} |")
    b.summary(args, "IAX2 legs against SIP legs (bench/iax2.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
