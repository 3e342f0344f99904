#!/usr/bin/env python3
"""Held SDES-SRTP calls against the same calls in plain RTP, in one run (bench/srtp.sh; issue 22's target: SRTP
at most 1.3 times plain RTP's CPU per call-second).

Each --pairs round runs both kinds one after the other, the order reversed from one round to the next (ABBA), each
against a fresh strowger (--workers workers) with a `tls:` listener on its self-signed certificate:
  plain  strowger-load call --ext 44444 --rtp echo --tls-ca CERT: N calls signalled over TLS offering RTP/AVP; strowger
         plays the announcement and the load generator echoes it, a stream each way in clear;
  srtp   the same with --srtp: RTP/SAVP with an AES_CM_128_HMAC_SHA1_80 key per call, so strowger encrypts what it
         plays and authenticates and decrypts every echoed packet (crates/srtp); the load generator checks and
         decrypts what it gets and protects its echo.
Both kinds are signalled over TLS, so the pair differs in the media's encryption alone. The load generator's
--threads (default 4) are its TLS connections: each carries its share of the calls, as a trunk's connection does.
All calls come up at --rate; once every call is up (+5 s), strowger's CPU is taken over --window s: CPU-ms per
call-second, and the ratio srtp / plain within each round, with the median and spread over rounds. Every window
also records the other processes' CPU (quiet: false above a quarter of a core). Every child runs in its own session,
is bounded in calls and time, and dies with this script.
Results: the run directory under bench/out (srtp.json and each run's logs and reports); with --record also
bench/results/srtp.json and a section at the end of bench/RESULTS.md.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402

KINDS = ("plain", "srtp")


def one(args, rundir, kind, rnd):
    """One run of `kind`: its row."""
    label = f"{kind}-{args.calls}-r{rnd}"
    cfg = scale.config(args, rundir, f"{label}.toml")
    tls = b.alloc_ports(1)
    srv = scale.Server(args, rundir, label, args.workers, "10000-29999", cfg,
                       extra=["--tls-listen", f"127.0.0.1:{tls}"])
    cert = os.path.join(srv.dir, "data", "tls", "cert.pem")
    out = os.path.join(srv.dir, "load.json")
    ramp = args.calls / args.rate
    hold = ramp + 5 + args.window + 3
    extra = ["--tls-ca", cert] + (["--srtp"] if kind == "srtp" else [])
    lp = scale.load(args, f"127.0.0.1:{tls}", "44444", args.calls, args.rate, hold, "echo", out,
                    threads=args.threads, extra=extra)
    b.log(f"{label}: {args.calls} calls coming up at {args.rate:g}/s over {args.threads} TLS connection(s), "
          f"then {args.window:g} s measured")
    time.sleep(ramp + 5)
    w = b.cpu_window(args.window, srv.cpu, [lp.pid])
    lp.wait()
    srv.stop()
    rep = scale.report_of(out)
    up = max(1, args.calls - rep["failed"])
    rtp = rep["rtp"]
    row = {
        "kind": kind, "round": rnd, "calls": args.calls, "calls_up": up, "rate": args.rate, "hold_s": round(hold, 1),
        "tls_connections": args.threads, **w,
        "cpu_ms_per_call_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / up, 4),
        "completed": rep["completed"], "failed": rep["failed"], "failed_reasons": rep["failed_reasons"],
        "rtp_sent": rtp["sent"], "rtp_received": rtp["received"], "rtp_lost": rtp["lost"],
        "late_arrivals": rtp.get("late_arrivals", 0), "load_late_frames": rtp["late_frames"],
        "srtp_rejected": rtp.get("srtp_rejected", 0), "srtp_unkeyed_calls": rtp.get("srtp_unkeyed_calls", 0),
        "loadavg": b.loadavg(), "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd,
    }
    del row["server_cpu_s"]
    b.log(f"{label}: {row['cpu_ms_per_call_s']} CPU-ms per call-second ({row['server_cpu_pct']} % server, "
          f"{row['load_cpu_pct']} % load generator), completed {row['completed']}, failed {row['failed']}, "
          f"RTP received {row['rtp_received']} lost {row['rtp_lost']}, SRTP rejected {row['srtp_rejected']}, "
          f"unkeyed calls {row['srtp_unkeyed_calls']}, late {row['late_arrivals']}, "
          f"others {row['others_cpu_pct']} % (load average {row['loadavg']})")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--calls", type=int, default=2000, help="held calls of each kind (default 2000)")
    ap.add_argument("--pairs", type=int, default=3, help="rounds of one plain and one SRTP run (at least 3)")
    ap.add_argument("--rate", type=float, default=200, help="new calls per second while they come up")
    ap.add_argument("--window", type=float, default=20, help="seconds of CPU measured once every call is up")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4,
                    help="load generator threads, each with its own TLS connection (default 4)")
    ap.add_argument("--results", default="srtp.json", help="file name under bench/results (with --record)")
    b.add_record_flag(ap)
    args = ap.parse_args()
    if args.pairs < 3:
        sys.exit("bench: --pairs must be at least 3 (a median and a spread need three ratios)")
    args.server, args.sipp_rcvbuf, args.realtime = "strowger", None, 0
    for path in (args.bin, args.load_bin):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: {path} is missing: cargo build --release -p strowger -p strowger-load")
    scale.signal_setup()
    rundir = b.run_dir("srtp")
    info = b.machine_info(args)
    b.quiet_check([os.getpid()])
    rows = []
    try:
        for rnd in range(1, args.pairs + 1):
            for kind in KINDS if rnd % 2 else KINDS[::-1]:
                rows.append(one(args, rundir, kind, rnd))
    finally:
        b.kill_children()
    with open(os.path.join(rundir, "srtp.json"), "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1, sort_keys=True)
    b.log(f"rows: {os.path.relpath(os.path.join(rundir, 'srtp.json'), b.ROOT)}")
    if args.record:
        b.write_rows(args, rundir, args.results, info, rows)
    by = {k: [next(r["cpu_ms_per_call_s"] for r in rows if r["kind"] == k and r["round"] == n)
              for n in range(1, args.pairs + 1)] for k in KINDS}
    ratio = b.paired(by["srtp"], by["plain"])
    table = [f"{args.calls} held echo calls (44444) per run, {args.workers} workers, signalled over TLS on "
             f"{args.threads} connections; strowger's CPU over {args.window:g} s once all were up. "
             "Rounds alternate the order (ABBA).", "",
             "| round | kind | CPU-ms per call-second | server CPU | load generator CPU | others' CPU | quiet | "
             "load average | completed | failed | RTP received | lost | SRTP rejected | late |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        table.append(f"| {r['round']} | {r['kind']} | {r['cpu_ms_per_call_s']} | {r['server_cpu_pct']} % | "
                     f"{r['load_cpu_pct']} % | {r['others_cpu_pct']} % | {r['quiet']} | {r['loadavg']} | "
                     f"{r['completed']} | {r['failed']} | {r['rtp_received']} | {r['rtp_lost']} | "
                     f"{r['srtp_rejected']} | {r['late_arrivals']} |")
    verdict = "met" if ratio["median"] is not None and ratio["median"] <= 1.3 else "not met"
    table += ["", f"SRTP / plain, by round: {', '.join(f'×{x}' for x in ratio['ratios'])}; median "
              f"**×{ratio['median']}** (min ×{ratio['min']}, max ×{ratio['max']}); target ≤ ×1.3: {verdict}."]
    if not all(r["quiet"] for r in rows):
        table.append("Not every window was quiet (others' CPU above a quarter of a core): the ratio is less sure.")
    b.summary(args, f"SDES-SRTP against plain RTP, {args.calls} held calls (bench/srtp.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
