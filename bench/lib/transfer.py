#!/usr/bin/env python3
"""Blind transfers: transfers per second per core, and the CPU of one transfer beside one B2BUA call
set-up in the same run (the call-control issue's second benchmark).

SIPp (bench/sipp/refer_blind.xml) calls 2001 on strowger A (1 worker), which bridges it to strowger B
(echo). Once answered, SIPp transfers B's leg to 2002 by a blind REFER: A takes the REFER (202, NOTIFY
100), runs 2002's rule for the transferee — a new INVITE to B, where 2002 answers, waits a second and
hangs up — bridges the two, sends the final NOTIFY (200), and SIPp hangs up. The same calls without the
REFER (the scenario without its transfer part) are the plain B2BUA calls. A's CPU per call of each
kind, measured alternately --repeat times; one transfer costs the difference, and transfers/s per core
are 1000 / that many CPU-ms.

    python3 bench/lib/transfer.py [--calls 3000] [--rate 100] [--repeat 3] [--bin target/release/strowger]

Results: transfer.json in the run directory (bench/out/transfer-TIME/); --record also copies it to
bench/results/ and appends the summary to bench/RESULTS.md. Loopback only; every run is bounded in calls
and time.
"""

import argparse
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale as S  # noqa: E402

SCENARIO = os.path.join(b.ROOT, "bench", "sipp", "refer_blind.xml")


def plain_scenario(rundir):
    """refer_blind.xml without its transfer part: call, pause, hang up."""
    text = open(SCENARIO).read()
    head, rest = text.split("  <!-- transfer -->\n", 1)
    _, tail = rest.split("  <!-- /transfer -->\n", 1)
    path = os.path.join(rundir, "plain.xml")
    with open(path, "w") as f:
        f.write(head + tail.replace('  <Reference variables="done"/>\n', ""))
    return path


def far_config(args, rundir, name):
    """B: 2001 echoes (the transferee's far end); 2002 answers, waits a second and hangs up."""
    path = S.config(args, rundir, name, steps='["answer", "echo"]')
    text = open(path).read()
    rule = '[[dialplan.contexts.default.rules]]\nexten = "2002"\nsteps = ["answer", "wait 1", "hangup"]\n\n'
    text = text.replace("# 2000-2999", rule + "# 2000-2999", 1)
    open(path, "w").write(text)
    return path


def run_once(args, rundir, label, scenario):
    far = S.Server(args, rundir, f"{label}-b", 1, "30000-31999", far_config(args, rundir, f"{label}-b.toml"))
    near = S.Server(args, rundir, f"{label}-a", 1, "32000-33999", S.config(args, rundir, f"{label}-a.toml"),
                    ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    c0 = near.cpu()
    sipp = b.Sipp(rundir, f"{label}-sipp",
                  ["-sf", scenario, "-s", "2001", "-key", "target", "2002", f"127.0.0.1:{near.port}",
                   "-i", "127.0.0.1", "-p", str(b.alloc_ports(1, 1)), "-mp", str(b.media_port()),
                   "-m", str(args.calls), "-r", str(args.rate), "-l", str(args.rate * 5)],
                  args.calls / args.rate + 60)
    code = sipp.wait(args.calls / args.rate + 90)
    time.sleep(2.5)  # B's 2002 calls end a second after they answer
    c1 = near.cpu()
    st = sipp.stat()
    near.stop()
    far.stop()
    ok = st["SuccessfulCall(C)"]
    ms = (c1 - c0) * 1000 / max(1, ok)
    row = {"kind": label.split("-")[0], "calls": args.calls, "rate": args.rate, "successful": ok,
           "failed": st["FailedCall(C)"], "sipp_exit": code, "cpu_ms_per_call": round(ms, 4),
           "server_cmd": b.fmt_cmd(near.cmd), "sipp_cmd": b.fmt_cmd(sipp.cmd)}
    b.log(f"{label}: {ok} calls ({st['FailedCall(C)']} failed): {ms:.4f} CPU-ms per call on A")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    b.add_record_flag(ap)
    args = ap.parse_args()
    args = types.SimpleNamespace(**vars(args), realtime=0, server="strowger", workers=1, sipp_rcvbuf=None)
    rundir = b.run_dir("transfer")
    plain = plain_scenario(rundir)
    rows = []
    for i in range(args.repeat):
        b.quiet_check(set())
        order = [("transfer", SCENARIO), ("plain", plain)]
        if i % 2:
            order.reverse()
        for kind, scenario in order:
            rows.append(run_once(args, rundir, f"{kind}-{i}", scenario))
    good = [r for r in rows if r["failed"] == 0 and r["successful"] == args.calls]
    med = {k: statistics.median([r["cpu_ms_per_call"] for r in good if r["kind"] == k] or [float("nan")])
           for k in ("transfer", "plain")}
    one = med["transfer"] - med["plain"]
    summary = {"b2bua_call_cpu_ms": round(med["plain"], 4), "transferred_call_cpu_ms": round(med["transfer"], 4),
               "transfer_cpu_ms": round(one, 4), "transfers_per_s_per_core": round(1000 / one) if one > 0 else None,
               "transfer_vs_b2bua_call": round(one / med["plain"], 3), "runs_clean": len(good), "runs": len(rows)}
    b.log(f"one transfer {one:.4f} CPU-ms = {summary['transfer_vs_b2bua_call']}x a B2BUA call "
          f"({med['plain']:.4f}); {summary['transfers_per_s_per_core']} transfers/s per core")
    b.keep(args, rundir, "transfer.json", {"rows": rows, "summary": summary, "machine": b.machine_info(args)})
    b.summary(args, "blind transfers against B2BUA calls, alternated (bench/lib/transfer.py)", "\n".join([
        "| B2BUA call | transferred call | one transfer | transfers/s per core | ÷ B2BUA call | clean runs |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {summary['b2bua_call_cpu_ms']} CPU-ms | {summary['transferred_call_cpu_ms']} CPU-ms | "
        f"{summary['transfer_cpu_ms']} CPU-ms | {summary['transfers_per_s_per_core']} | "
        f"×{summary['transfer_vs_b2bua_call']} | {summary['runs_clean']} of {summary['runs']} |"]))


if __name__ == "__main__":
    S.signal_setup()
    main()
