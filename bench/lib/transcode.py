#!/usr/bin/env python3
"""The transcoding-capacity test of the Intel/Asterisk paper, on one core.

A GSM file (assets/demo.wav encoded by sox, an independent GSM encoder) plays in a loop to callers
that offer only iLBC (20 ms), then only Speex (8 kHz): strowger-load places N calls
(`--codec ilbc20|speex --rtp echo`, so strowger also receives 50 packets/s per call as in Test A)
and holds them. strowger runs one worker (one thread: at most one core; not pinned, so that on a
shared machine the scheduler can move it away from other work).
For each N of --levels: server CPU (run time of all threads, /proc/PID/task/*/schedstat) over a 15 s window once all
calls are up, CPU-ms per call-second, failed calls, RTP lost, and late frames (frames that reached
the caller more than 20 ms behind their call's earliest, by the kernel's arrival stamps). A series
stops at the first level with failed calls, more than 0.1 % late frames or the core saturated
(> 95 %) (`--keep-going`: late frames do not stop it); it reports the most calls with no late frame at
all and with at most 0.1 %.

Two ways to play the file, each its own series:
  cached   `playback demo.gsm loop=true`: the prompt is encoded to the caller's codec once and every
           call sends those packets (what a strowger user gets);
  live     `playback demo.gsm loop=true cache=false`: every call decodes the GSM frames and encodes
           them to its codec as it plays (what the paper measured: Asterisk transcodes per call).

Speex is encoded at --speex-quality (rtp.speex_quality; default 3, Asterisk's codecs.conf default,
so both switches do the same work; strowger's own default is 8).

Writes transcode.json to the run directory (bench/out/transcode-TIME/); --record also copies it to
bench/results/ and appends the summary to bench/RESULTS.md. Every run is bounded in calls and time, on
loopback only.
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale as s  # noqa: E402

EXTEN = {"cached": "44445", "live": "44446"}


def config(args, rundir, name):
    """The default configuration (logging at info, no call cap, no media timeout) offering iLBC and
    Speex, with 44445/44446 playing demo.gsm cached and live."""
    path = s.config(args, rundir, name)
    text = open(path).read()
    text, n = re.subn(r'(?m)^codecs = .*$', 'codecs = ["PCMU", "GSM", "iLBC20", "speex"]', text)
    text, q = re.subn(r'(?m)^speex_quality = .*$', f"speex_quality = {args.speex_quality}", text)
    n *= q
    rules = "".join(
        f'[[dialplan.contexts.default.rules]]\nexten = "{e}"\n'
        f'steps = ["answer", "playback demo.gsm loop=true{"" if m == "cached" else " cache=false"}"]\n\n'
        for m, e in EXTEN.items())
    text, k = re.subn(r"(?m)^# Echo test\.$", rules + "# Echo test.", text)
    if n != 1 or k != 1:
        sys.exit("bench: cannot find the codecs or speex_quality line or the echo rule in the default configuration")
    with open(path, "w") as f:
        f.write(text)
    return path


def level(args, rundir, codec, mode, calls):
    label = f"{codec}-{mode}-{calls}"
    srv = s.Server(args, rundir, label, 1, "34000-39999", config(args, rundir, f"{label}.toml"))
    data = os.path.join(srv.dir, "data")
    subprocess.run(["sox", os.path.join(b.ROOT, "assets", "demo.wav"), "-r", "8000", "-c", "1",
                    os.path.join(data, "demo.gsm")], check=True, timeout=60)
    out = os.path.join(srv.dir, "load.json")
    ramp = calls / args.rate
    hold = ramp + 3 + args.window + 2
    cmd = [args.load_bin, "call", "--target", f"127.0.0.1:{srv.port}", "--ext",
           EXTEN[mode], "--codec", codec, "--calls", str(calls), "--rate", str(args.rate), "--hold", str(hold),
           "--rtp", "echo", "--json", "--quiet", "--rtp-ports", "40000-59999",
           "--max-time", str(int(hold + ramp + 30))]
    lp = b.spawn(cmd, srv.dir, open(out, "w"), open(out + ".err", "w"))
    b.raise_priority(lp.pid)
    time.sleep(ramp + 3)
    c0, l0, m0, t0 = srv.cpu(), b.proc_cpu(lp.pid), b.machine_cpu(), time.time()
    time.sleep(args.window)
    c1, l1, m1, t1 = srv.cpu(), b.proc_cpu(lp.pid), b.machine_cpu(), time.time()
    lp.wait()
    srv.stop()
    rep = s.report_of(out)
    span = t1 - t0
    rtp = rep["rtp"]
    row = {
        "codec": codec, "mode": mode, "calls": calls, "speex_quality": args.speex_quality, "completed": rep["completed"], "failed": rep["failed"],
        "failed_reasons": rep["failed_reasons"],
        "server_cpu_pct": round((c1 - c0) / span * 100, 1),
        "cpu_ms_per_call_s": round((c1 - c0) * 1000 / span / calls, 4),
        "load_cpu_pct": round((l1 - l0) / span * 100, 1),
        # What the rest of the machine used meanwhile (other builds): late frames then may not be ours.
        "others_cpu_pct": round(max(0.0, (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * 100 * (os.cpu_count() or 1)
                                    - (c1 - c0 + l1 - l0) / span * 100), 1),
        "rtp_received": rtp["received"], "rtp_lost": rtp["lost"], "late_arrivals": rtp.get("late_arrivals", 0),
        "late_pct": round(100 * rtp.get("late_arrivals", 0) / max(1, rtp["received"]), 4),
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": b.fmt_cmd(cmd),
    }
    # One core is 1000 CPU-ms per second.
    row["calls_per_core_at_full_cpu"] = round(1000 / row["cpu_ms_per_call_s"]) if row["cpu_ms_per_call_s"] else None
    b.log(f"{codec} {mode} {calls} calls: server {row['server_cpu_pct']} % of a core, "
          f"{row['cpu_ms_per_call_s']} CPU-ms per call-second, failed {row['failed']}, "
          f"late {row['late_arrivals']} of {row['rtp_received']}, lost {row['rtp_lost']}, "
          f"load generator {row['load_cpu_pct']} %, others {row['others_cpu_pct']} %")
    return row


def capacity(args, rundir):
    series = {}
    for codec in args.codecs:
        for mode in args.modes:
            rows = []
            for n in args.levels[mode]:
                b.quiet_check(set())
                row = level(args, rundir, codec, mode, n)
                rows.append(row)
                late = row["late_pct"] > 0.1 and not args.keep_going
                if late or row["failed"] or row["server_cpu_pct"] > 95:
                    break
            ok = [r for r in rows if not r["failed"]]
            sums = {"rows": rows,
                    "max_calls_no_late_frame": max([r["calls"] for r in ok if not r["late_arrivals"]], default=0),
                    "max_calls_late_under_0.1pct": max([r["calls"] for r in ok if r["late_pct"] <= 0.1], default=0)}
            series[f"{codec}-{mode}"] = sums
            b.log(f"{codec} {mode}: {sums['max_calls_no_late_frame']} calls with no late frame, "
                  f"{sums['max_calls_late_under_0.1pct']} with at most 0.1 % (of the levels tried)")
    res = {"series": series, "machine": b.machine_info(args),
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    b.keep(args, rundir, "transcode.json", res)
    table = ["| series | most calls, no late frame | most calls, ≤ 0.1 % late | CPU-ms per call-s at each level |",
             "| --- | ---: | ---: | --- |"]
    for name, sums in series.items():
        levels = ", ".join(f"{r['calls']}: {r['cpu_ms_per_call_s']}" for r in sums["rows"])
        table.append(f"| {name} | {sums['max_calls_no_late_frame']} | {sums['max_calls_late_under_0.1pct']} | {levels} |")
    b.summary(args, "transcoding capacity on one worker (bench/transcode.sh)", "\n".join(table))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--codecs", nargs="+", default=["ilbc20", "speex"])
    ap.add_argument("--speex-quality", type=int, default=3, help="rtp.speex_quality (Asterisk's default: 3)")
    ap.add_argument("--modes", nargs="+", default=["live", "cached"], choices=list(EXTEN))
    ap.add_argument("--live-levels", type=int, nargs="+", default=[200, 300, 400, 500, 600, 700])
    ap.add_argument("--cached-levels", type=int, nargs="+", default=[500, 1000, 1500, 2000])
    ap.add_argument("--rate", type=float, default=100, help="new calls per second while ramping up")
    ap.add_argument("--window", type=float, default=15, help="seconds of steady state measured")
    ap.add_argument("--keep-going", action="store_true",
                    help="go on past levels with late frames (for CPU figures on a machine that is not quiet)")
    ap.add_argument("--quiet-wait", type=float, default=10,
                    help="seconds to wait before each level while other processes use > 1/4 core")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.levels = {"live": args.live_levels, "cached": args.cached_levels}
    args.server = "strowger"
    args.sipp_rcvbuf = None
    args.workers = 1
    b.QUIET_WAIT[0] = args.quiet_wait
    s.signal_setup()
    rundir = b.run_dir("transcode")
    try:
        capacity(args, rundir)
    finally:
        b.kill_children()


if __name__ == "__main__":
    main()
