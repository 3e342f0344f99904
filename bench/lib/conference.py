#!/usr/bin/env python3
"""Conference rooms against echo calls, on the same machine in the same run (bench/conference.sh).

Each run has a fresh strowger (2 workers, the default configuration with rooms 8600-8699 added, each with the
room defaults: 16 kHz, the loudest 3 mixed). Every caller is a strowger-load call with
--rtp send (a 440 Hz tone in PCMU, 50 packets/s, whatever arrives), so every member talks and the mix is
full; the echo calls (9196) send the same and get it back.
  rooms-S   --participants callers in rooms of S (one strowger-load per room, --participants / S of them);
  echo      as many calls to 9196, for comparison;
  largest   one room of N for each N of --largest (max_members raised): whether one worker mixes it in
            time, by the frames the callers got more than a frame late (strowger-load's late_arrivals,
            measured on the RTP timestamps' clock with the kernel's arrival stamps).
With --old-bin, the echo calls and the rooms of S also run against that (older) build in the same run, each
right after the same run of --bin, so a change is measured against its base on the same machine minutes apart.
All calls come up at --rate; once every call is up (+5 s), the server's CPU (run time of all its threads) is
taken over --window s: CPU-ms per participant-second = CPU-s / window / calls x 1000. Every child runs in its
own session, is bounded in calls and time, and dies with this script. Results: conference.json in the run directory (bench/out/, and bench/results/ with --record)
and a Markdown table on stdout.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402

# Rooms 8600-8698 for the rooms of S, 8699 for the largest room (8500 is the voicemail rule).
RULES = "".join(f'[[dialplan.contexts.default.rules]]\nexten = "86{i:02d}"\nsteps = ["conference 86{i:02d}"]\n\n'
                for i in range(100))


def conference_config(args, rundir, name, largest=None):
    """The scale rig's configuration with rooms 8600-8699, and room 8699 holding `largest`."""
    path = scale.config(args, rundir, name)
    text = open(path).read()
    marker = "# Everything else: 404 Not Found."
    if marker not in text:
        sys.exit("bench: cannot find the catch-all rule in the default configuration")
    text = text.replace(marker, RULES + marker)
    if largest:
        text += f"\n[conferences.8699]\nmax_members = {largest}\n"
    with open(path, "w") as f:
        f.write(text)
    return path


def one(args, rundir, kind, size, calls, build="new"):
    """`calls` callers in rooms of `size` (kind "rooms", "largest") or echo calls (kind "echo")."""
    label = f"{kind}-{size}-{calls}" if build == "new" else f"{build}-{kind}-{size}-{calls}"
    cfg = conference_config(args, rundir, f"{label}.toml", largest=size if kind == "largest" else None)
    run_args = argparse.Namespace(**{**vars(args), "bin": args.bin if build == "new" else args.old_bin})
    srv = scale.Server(run_args, rundir, label, 2, "10000-29999", cfg)
    ramp = calls / args.rate
    hold = ramp + 5 + args.window + 3
    if kind == "echo":
        groups = [("9196", calls)]
    elif kind == "largest":
        groups = [("8699", calls)]
    else:
        groups = [(f"86{i:02d}", size) for i in range(calls // size)]
    procs = []
    for i, (ext, n) in enumerate(groups):
        out = os.path.join(srv.dir, f"load-{i}.json")
        # Every group at the same total rate, started together.
        lp = scale.load(args, f"127.0.0.1:{srv.port}", ext, n, args.rate * n / calls, hold, "send", out)
        procs.append((lp, out))
    time.sleep(ramp + 5)
    w = b.cpu_window(args.window, srv.cpu, [p.pid for p, _ in procs])
    for p, _ in procs:
        p.wait()
    srv.stop()
    reps = [scale.report_of(out) for _, out in procs]
    failed = sum(r["failed"] for r in reps)
    up = max(1, calls - failed)
    received = sum(r["rtp"]["received"] for r in reps)
    late = sum(r["rtp"]["late_arrivals"] for r in reps)
    row = {
        "build": build, "kind": kind, "room_size": size if kind != "echo" else None, "calls": calls, "calls_up": up,
        "rate": args.rate, "hold_s": round(hold, 1), "window_s": w["window_s"],
        "server_cpu_pct": w["server_cpu_pct"],
        "cpu_ms_per_call_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / up, 4),
        "load_cpu_pct": w["load_cpu_pct"], "machine_busy_pct": w["machine_busy_pct"],
        "others_cpu_pct": w["others_cpu_pct"], "quiet": w["quiet"],
        "failed": failed, "rtp_received": received, "late_arrivals": late,
        "late_pct": round(100 * late / max(1, received), 3),
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": procs[0][0].cmd,
    }
    b.log(f"{label}: {row['cpu_ms_per_call_s']} CPU-ms per call-second ({row['server_cpu_pct']} %), "
          f"load generators {row['load_cpu_pct']} %, machine {row['machine_busy_pct']} %, failed {failed}, "
          f"RTP received {received}, late {late} ({row['late_pct']} %)")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--old-bin", help="an older strowger build to run beside --bin (echo and rooms of S)")
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--participants", type=int, default=100)
    ap.add_argument("--sizes", type=int, nargs="*", default=[5, 50])
    ap.add_argument("--largest", type=int, nargs="*", default=[100, 200, 400])
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--window", type=float, default=15)
    ap.add_argument("--results", default="conference.json", help="file name under bench/results")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.server, args.sipp_rcvbuf, args.workers = "strowger", None, 2
    scale.signal_setup()
    rundir = b.run_dir("conference")
    info = b.machine_info(args)
    rows = []
    try:
        builds = ["new", "old"] if args.old_bin else ["new"]
        for build in builds:
            rows.append(one(args, rundir, "echo", None, args.participants, build))
        for s in args.sizes:
            for build in builds:
                rows.append(one(args, rundir, "rooms", s, args.participants, build))
        for n in args.largest:
            rows.append(one(args, rundir, "largest", n, n))
    finally:
        b.kill_children()
    b.write_rows(args, rundir, args.results, info, rows)
    table = []
    echo = {r["build"]: r["cpu_ms_per_call_s"] for r in rows if r["kind"] == "echo"}
    table.append("| run | build | calls | server CPU | CPU-ms per call-second | vs echo | RTP received | late (> 1 frame) | failed |")
    table.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        name = "echo (9196)" if r["kind"] == "echo" else f"{r['kind']} of {r['room_size']}"
        vs = f"{r['cpu_ms_per_call_s'] / echo[r['build']]:.2f}" if echo.get(r["build"]) else "-"
        table.append(f"| {name} | {r['build']} | {r['calls']} | {r['server_cpu_pct']} % | {r['cpu_ms_per_call_s']} | {vs} | "
                     f"{r['rtp_received']} | {r['late_arrivals']} ({r['late_pct']} %) | {r['failed']} |")
    b.summary(args, "conferences: CPU per call-second by room size (bench/conference.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
