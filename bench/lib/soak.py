#!/usr/bin/env python3
"""Call-control soak: many transfer, park and queue cycles through one strowger, then what is left.

strowger A (2 workers, the default configuration trusting 127.0.0.1) takes, one kind after another:
  - blind transfers (bench/sipp/refer_blind.xml: 2001 bridged to strowger B, transferred by REFER to
    2002, which B answers and ends a second later);
  - park cycles (SIPp calls 700, is parked and told its slot, hangs up 200 ms later);
  - queue cycles (SIPp calls the support queue, 7000, whose agents are not registered: it waits with
    music and announcements and hangs up after a second).
A warm-up round of each (--warm of the counts) comes first, then the measured round; after each, 70 s
idle so every call is over and the ended calls' timers and transactions are due. A's resident memory is
read after start-up, after the warm-up round (the allocator's high-water mark for this load: glibc keeps
what it freed) and after the measured round — a leak shows as growth between the last two. Then A is
stopped and each worker's "at shutdown" line says what its call table still held (calls, legs,
Call-IDs, transactions, media legs, timers, orphaned INVITEs: all must be zero).

    python3 bench/lib/soak.py [--transfers 6000] [--parks 2000] [--queued 2000] [--warm 1.0]

Results: call-control-soak.json in the run directory (bench/out/call-control-soak-TIME/); --record also
copies it to bench/results/ and appends the summary to bench/RESULTS.md. Loopback only; every phase is
bounded in calls and time.
"""

import argparse
import os
import re
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale as S  # noqa: E402
import transfer as T  # noqa: E402


def sipp(rundir, label, near, scenario_args, calls, rate, limit):
    """SIPp against A for `calls` calls at `rate`/s, at most `limit` at once; its final statistics."""
    p = b.Sipp(rundir, label, [*scenario_args, f"127.0.0.1:{near.port}", "-i", "127.0.0.1",
                               "-p", str(b.alloc_ports(1, 1)), "-mp", str(b.media_port()),
                               "-m", str(calls), "-r", str(rate), "-l", str(limit)],
               calls / rate + 120)
    p.wait(calls / rate + 150)
    st = p.stat()
    b.log(f"{label}: {st['SuccessfulCall(C)']} of {calls} calls completed, {st['FailedCall(C)']} failed; "
          f"A's RSS {near.rss_kib()} KiB")
    return {"calls": calls, "rate": rate, "successful": st["SuccessfulCall(C)"], "failed": st["FailedCall(C)"],
            "cmd": b.fmt_cmd(p.cmd)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transfers", type=int, default=6000)
    ap.add_argument("--parks", type=int, default=2000)
    ap.add_argument("--queued", type=int, default=2000)
    ap.add_argument("--warm", type=float, default=1.0,
                    help="the warm-up round's share of each count (its memory high-water mark is the baseline)")
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    b.add_record_flag(ap)
    args = types.SimpleNamespace(**vars(ap.parse_args()), realtime=0, server="strowger", workers=2,
                                 sipp_rcvbuf=None)
    rundir = b.run_dir("call-control-soak")
    b.quiet_check(set())
    far = S.Server(args, rundir, "b", 1, "30000-31999", T.far_config(args, rundir, "b.toml"))
    near = S.Server(args, rundir, "a", 2, "32000-35999", S.config(args, rundir, "a.toml"),
                    ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    time.sleep(1)
    rss = {"start": near.rss_kib()}
    transfer = ["-sf", T.SCENARIO, "-s", "2001", "-key", "target", "2002"]

    def round_of(label, scale):
        """A round of every kind of cycle, `scale` times the counts asked for; then idle until the
        last calls are over and their timers and transactions are due."""
        n = lambda count: max(1, int(count * scale))  # noqa: E731
        phases = {"transfers": sipp(rundir, f"{label}-transfers", near, transfer, n(args.transfers), 200, 1000),
                  "parks": sipp(rundir, f"{label}-parks", near, ["-sn", "uac", "-s", "700", "-d", "200"],
                                n(args.parks), 40, 15),
                  "queued": sipp(rundir, f"{label}-queued", near, ["-sn", "uac", "-s", "7000", "-d", "1000"],
                                 n(args.queued), 40, 100)}
        b.log(f"{label}: idle 70 s, so the last calls end and their timers and transactions fall due")
        time.sleep(70)
        return phases

    phases = {"warm_up": round_of("warm", args.warm)}
    rss["after_warm_up"] = near.rss_kib()
    phases["measured"] = round_of("measured", 1.0)
    rss["end"] = near.rss_kib()
    near.stop()
    far.stop()
    left = [ln.split("at shutdown: ", 1)[1].strip() for ln in open(os.path.join(near.dir, "strowger.log"))
            if "at shutdown:" in ln]
    clean = bool(left) and all(not re.search(r"[1-9]", ln) for ln in left)
    summary = {"cycles": args.transfers + args.parks + args.queued, "rss_kib": rss,
               "rss_end_vs_warm": round(rss["end"] / rss["after_warm_up"], 4),
               "rss_end_vs_start": round(rss["end"] / rss["start"], 4),
               "failed_calls": sum(p["failed"] for r in phases.values() for p in r.values()),
               "tables_at_shutdown": left,
               "tables_empty": clean}
    b.log(f"RSS start {rss['start']} KiB, after warm-up {rss['after_warm_up']}, end {rss['end']} "
          f"(x{summary['rss_end_vs_warm']} of warm-up); tables at shutdown: {left}")
    b.keep(args, rundir, "call-control-soak.json", {"phases": phases, "summary": summary,
                                                    "server_cmd": b.fmt_cmd(near.cmd), "machine": b.machine_info(args)})
    b.summary(args, "call-control soak: transfer, park and queue cycles (bench/lib/soak.py)", "\n".join([
        "| cycles | failed calls | RSS start | after warm-up | end | end ÷ warm-up | tables at shutdown |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {summary['cycles']} | {summary['failed_calls']} | {rss['start']} KiB | {rss['after_warm_up']} KiB | "
        f"{rss['end']} KiB | ×{summary['rss_end_vs_warm']} | {'empty' if clean else '; '.join(left) or 'not logged'} |"]))


if __name__ == "__main__":
    S.signal_setup()
    main()
