#!/usr/bin/env python3
"""Held IPv6 echo calls beside IPv4 ones on the same machine in the same run (bench/ipv6.sh).

For each N of --levels and each of --rounds, two runs one after the other, each against a fresh
dual-stack strowger (2 workers, listening on 127.0.0.1 and [::1]):
  ipv4  sipp -sn uac -rtp_echo -i 127.0.0.1 -s 44444 ... 127.0.0.1:PORT: N calls to the demo,
        50 PCMU packets/s from strowger per call, echoed back by SIPp;
  ipv6  the same with -i ::1 to [::1]:PORT (IPv6 signalling, IPv6 media).
All calls come up at --rate; once every call is up (+5 s), the server's CPU (run time of all its
threads, /proc/PID/task/*/schedstat) is taken over --window s: CPU-ms per call-second =
CPU-s / window / calls up x 1000. The RTP strowger sent and received is read from its CDRs.
Every child runs in its own session with its autogroup priority raised, is bounded in calls and
time, and dies with this script. Results: ipv6.json in the run directory (bench/out/, and bench/results/ with --record) and a Markdown table on stdout.
"""

import argparse
import json
import os
import time

import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402


def cdr_rtp(srv):
    """Packets sent, received and refused (send_errors) summed over the server's CDRs."""
    sent = received = errors = 0
    path = os.path.join(srv.dir, "data", "cdr.jsonl")
    if os.path.exists(path):
        for line in open(path):
            c = json.loads(line)
            sent += c.get("packets_sent", 0)
            received += c.get("packets_received", 0)
            errors += c.get("send_errors", 0)
    return sent, received, errors


def one(args, rundir, family, calls, rnd):
    label = f"{family}-{calls}-r{rnd}"
    cfg = scale.config(args, rundir, f"{label}.toml")
    # SIPp over ::1 trusted as over 127.0.0.1, so both families' calls take the same path.
    text = open(cfg).read().replace('trusted = ["127.0.0.1"]', 'trusted = ["127.0.0.1", "::1"]')
    with open(cfg, "w") as f:
        f.write(text)
    srv = scale.Server(args, rundir, label, 2, "10000-29999", cfg, ipv6=True)
    ip, target = ("::1", f"[::1]:{srv.port}") if family == "ipv6" else ("127.0.0.1", f"127.0.0.1:{srv.port}")
    ramp = calls / args.rate
    hold_ms = int((ramp + 5 + args.window + 3) * 1000)
    sipp = b.Sipp(srv.dir, "sipp", [target, "-sn", "uac", "-rtp_echo", "-i", ip, "-mi", ip,
                                    "-p", str(b.alloc_ports(1)), "-mp", str(b.media_port()),
                                    "-s", "44444", "-d", str(hold_ms), "-l", str(calls), "-m", str(calls),
                                    "-r", str(args.rate)], hold_ms / 1000 + ramp + 60)
    time.sleep(ramp + 5)
    up = sipp.stat()["CurrentCall"]
    w = b.cpu_window(args.window, srv.cpu, [sipp.pid])
    sipp.wait(hold_ms / 1000 + 60)
    st = sipp.stat()
    sipp.kill()
    time.sleep(1)
    srv.stop()
    sent, received, errors = cdr_rtp(srv)
    row = {
        "family": family, "calls": calls, "calls_up": up, "round": rnd, "rate": args.rate,
        "window_s": w["window_s"], "server_cpu_pct": w["server_cpu_pct"],
        "cpu_ms_per_call_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / max(1, up), 4),
        "sipp_cpu_pct": w["load_cpu_pct"], "others_cpu_pct": w["others_cpu_pct"], "quiet": w["quiet"],
        "successful": st["SuccessfulCall(C)"], "failed": st["FailedCall(C)"],
        "rtp_sent": sent, "rtp_received": received, "send_errors": errors,
        "server_cmd": b.fmt_cmd(srv.cmd), "sipp_cmd": b.fmt_cmd(sipp.full_cmd),
    }
    b.log(f"{family} {calls} (round {rnd}): {row['cpu_ms_per_call_s']} CPU-ms per call-second "
          f"({row['server_cpu_pct']} %, {up} up), SIPp {row['sipp_cpu_pct']} %, failed {row['failed']}, "
          f"RTP sent {sent} received {received} send errors {errors}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--levels", type=int, nargs="+", default=[200])
    ap.add_argument("--rounds", type=int, default=2, help="ipv4 then ipv6, this many times")
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--results", default="ipv6.json", help="file name under bench/results")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.server, args.sipp_rcvbuf, args.workers = "strowger", None, 2
    scale.signal_setup()
    rundir = b.run_dir("ipv6")
    info = b.machine_info(args)
    rows = []
    try:
        for n in args.levels:
            for rnd in range(args.rounds):
                for family in ("ipv4", "ipv6"):
                    rows.append(one(args, rundir, family, n, rnd))
    finally:
        b.kill_children()
    b.write_rows(args, rundir, args.results, info, rows)
    table = []
    table.append("| calls | family | round | server CPU | CPU-ms per call-second | IPv6/IPv4 | SIPp CPU | RTP sent | received | send errors | failed |")
    table.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        v4 = next((x for x in rows if x["family"] == "ipv4" and x["calls"] == r["calls"] and x["round"] == r["round"]),
                  None)
        ratio = f"{r['cpu_ms_per_call_s'] / v4['cpu_ms_per_call_s']:.2f}" if v4 and v4["cpu_ms_per_call_s"] else "-"
        table.append(f"| {r['calls']} | {r['family']} | {r['round']} | {r['server_cpu_pct']} % | {r['cpu_ms_per_call_s']} | "
                     f"{ratio} | {r['sipp_cpu_pct']} % | {r['rtp_sent']} | {r['rtp_received']} | {r['send_errors']} | "
                     f"{r['failed']} |")
    b.summary(args, "IPv6 against IPv4 calls (bench/ipv6.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
