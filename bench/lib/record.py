#!/usr/bin/env python3
"""Music-on-hold calls recorded whole against the same calls unrecorded, in the same run (bench/record.sh).

For each N of --levels, two runs one after the other (their order alternating from level to level and, with
--rounds, from round to round), each against a fresh strowger (2 workers):
  moh        strowger-load call --ext 9199 --rtp echo: N calls hear the default music class (the `moh` step);
  recorded   the same to 9188, which answers, starts `record-call calls/${CALLID}.wav` (mixed mono WAV, 8 kHz)
             and plays the same music: the tap decodes both directions, the writer thread writes 16 kB/s per call.
With --old-bin, every level also runs both kinds against that (older) build, in the same run and order, so a change
is measured against its base on the same machine minutes apart. The load generator echoes what it hears, so each call has a stream each way (the recording mixes both).
All calls come up at --rate; once every call is up (+5 s), the server's CPU (run time of all its threads,
/proc/PID/task/*/schedstat) and the bytes it wrote (/proc/PID/io wchar) are taken over --window s: CPU-ms per
call-second, disk MB/s. Late frames: frames from the server that reached the load generator more than 20 ms behind
their call's earliest (kernel arrival stamps); beside them, from the server's /metrics (its API on loopback, read
three times a run), its media passes that ran more than 20 ms after their grid point (whole run and window) and the
frames its ticks sent late — a late frame with no late pass was delayed after the server sent it. After each recorded run every CDR is checked: a recording, complete,
and its WAV's length within 50 ms of the CDR's recording_s; then the recordings are deleted. Every child runs in its
own session, is bounded in calls and time, and dies with this script.
Results: record.json and record.png (gnuplot; --results names both) in the run directory, also in bench/results/
with --record, and a Markdown table on stdout.
`record.py --plot FILE.json` redraws the PNG of a results file.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402

RECORDED = "9188"
RULE = ('[[dialplan.contexts.default.rules]]\nexten = "9188"\n'
        'steps = ["answer", "record-call calls/${CALLID}.wav", "moh"]\n\n')


def record_config(args, rundir, name, shared_ports=False):
    """The scale rig's configuration with 9188: music on hold, recorded whole (`shared_ports`: as scale.config)."""
    path = scale.config(args, rundir, name, shared_ports=shared_ports)
    text = open(path).read()
    marker = "# Echo test."
    if marker not in text:
        sys.exit("bench: cannot find the echo rule in the default configuration")
    with open(path, "w") as f:
        f.write(text.replace(marker, RULE + marker, 1))
    return path


def wchar(pid):
    """Bytes the process passed to write(2) and kin (/proc/PID/io, all threads)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def server_late(port, token):
    """From the server's /metrics: its media passes that ran more than 20 ms after their grid point (all
    workers), and the frames its ticks sent late (a leg that had more than one frame due at once)."""
    passes, within, frames = 0, 0, 0
    for line in b.metrics_lines(f"http://127.0.0.1:{port}/metrics", token):
        m = re.match(r'^strowger_worker_tick_lag_seconds_(count|bucket)\{([^}]*)\} ([0-9.e+]+)$', line)
        if m and m.group(1) == "count":
            passes += int(float(m.group(3)))
        elif m and 'le="0.02"' in m.group(2):
            within += int(float(m.group(3)))
        elif line.startswith("strowger_media_late_frames_total"):
            frames += int(float(line.split()[-1]))
    return passes - within, frames


def check_recordings(data):
    """Every answered call's CDR names a complete recording whose WAV is as long as the CDR says."""
    checked, bad = 0, []
    for line in open(os.path.join(data, "cdr.jsonl")):
        cdr = json.loads(line)
        if cdr.get("answer") is None:
            continue  # refused (503 past capacity): never reached its steps
        name = cdr.get("recording")
        path = os.path.join(data, name) if name else None
        if not path or not os.path.exists(path):
            bad.append(f"{cdr['call_id']}: no recording")
            continue
        secs = (os.path.getsize(path) - 44) / 2 / 8000
        if not cdr.get("recording_complete") or abs(secs - cdr["recording_s"]) > 0.05:
            bad.append(f"{cdr['call_id']}: complete {cdr.get('recording_complete')}, file {secs:.3f} s, "
                       f"CDR {cdr['recording_s']} s")
        checked += 1
    return checked, bad


def one(args, rundir, build, kind, calls, rnd):
    label = f"{kind}-{calls}" if build == "new" else f"{build}-{kind}-{calls}"
    label += f"-r{rnd}" if args.rounds > 1 else ""
    # Each build runs its own default configuration: an older one refuses keys it predates.
    run_args = argparse.Namespace(**{**vars(args), "bin": args.bin if build == "new" else args.old_bin})
    cfg = record_config(run_args, rundir, f"{label}.toml")
    api = b.alloc_ports(1)
    token = scale.observed(run_args, cfg, api)
    # 4,000 port pairs: within a file descriptor limit of 20,000 (8,000 sockets and the files).
    srv = scale.Server(run_args, rundir, label, 2, "10000-17999", cfg)
    out = os.path.join(srv.dir, "load.json")
    ramp = calls / args.rate
    hold = ramp + 5 + args.window + 3
    ext = {"moh": "9199", "recorded": RECORDED}[kind]
    lp = scale.load(args, f"127.0.0.1:{srv.port}", ext, calls, args.rate, hold, "echo", out)
    time.sleep(ramp + 5)
    c0, w0, t0, s0 = srv.cpu(), wchar(srv.proc.pid), time.time(), server_late(api, token)
    time.sleep(args.window)
    c1, w1, t1, s1 = srv.cpu(), wchar(srv.proc.pid), time.time(), server_late(api, token)
    lp.wait()
    time.sleep(1)  # the writer threads finish the last files
    s2 = server_late(api, token)
    srv.stop()
    rep = scale.report_of(out)
    data = os.path.join(srv.dir, "data")
    checked, bad = check_recordings(data) if kind == "recorded" else (0, [])
    shutil.rmtree(os.path.join(data, "calls"), ignore_errors=True)
    span = t1 - t0
    up = max(1, calls - rep["failed"])
    rtp = rep["rtp"]
    row = {
        "build": build, "kind": kind, "calls": calls, "round": rnd, "calls_up": up, "rate": args.rate, "hold_s": round(hold, 1),
        "window_s": round(span, 2),
        "server_cpu_pct": round((c1 - c0) / span * 100, 1),
        "cpu_ms_per_call_s": round((c1 - c0) * 1000 / span / up, 4),
        "disk_mb_s": round((w1 - w0) / span / 1e6, 2),
        "completed": rep["completed"], "failed": rep["failed"], "rtp_received": rtp["received"],
        "late_arrivals": rtp.get("late_arrivals", 0), "load_late_frames": rtp["late_frames"],
        "server_late_passes": s2[0], "server_late_passes_window": s1[0] - s0[0], "server_late_frames": s2[1],
        "recordings_checked": checked, "recordings_bad": len(bad), "bad_examples": bad[:5],
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd,
    }
    b.log(f"{label}: {row['cpu_ms_per_call_s']} CPU-ms per call-second ({row['server_cpu_pct']} %), "
          f"disk {row['disk_mb_s']} MB/s, late {row['late_arrivals']} (server: {s2[0]} passes over 20 ms late, "
          f"{s1[0] - s0[0]} in the window; {s2[1]} frames), failed {row['failed']}, "
          f"recordings {checked} checked, {len(bad)} bad")
    return row


def plot(rows, png):
    dat = png[:-4] + ".dat"
    series = [(build, kind) for build in ("new", "old") for kind in ("moh", "recorded")
              if any(r.get("build", "new") == build and r["kind"] == kind for r in rows)]
    with open(dat, "w") as f:
        for build, kind in series:
            f.write(f"# {build} {kind}\n")
            for r in sorted((r for r in rows if r.get("build", "new") == build and r["kind"] == kind),
                            key=lambda r: r["calls"]):
                f.write(f"{r['calls']} {r['cpu_ms_per_call_s']} {r['server_cpu_pct']}\n")
            f.write("\n\n")
    titles = {"moh": "moh", "recorded": "moh + record-call"}
    lines = ", ".join(f'"{dat}" index {i} using 1:2 with linespoints lw 2 '
                      f'title "{titles[kind]}{" (old build)" if build == "old" else ""}"'
                      for i, (build, kind) in enumerate(series))
    script = f"""
set terminal pngcairo size 900,500 font ",10"
set output "{png}"
set title "Server CPU per call-second: music on hold, recorded whole (mono WAV) and not"
set xlabel "concurrent calls"; set ylabel "CPU-ms per call-second"; set yrange [0:*]; set grid
set key top left
plot {lines}
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    os.remove(dat)
    b.log(f"wrote {os.path.relpath(png, b.ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--old-bin", help="an older strowger build to run beside --bin at every level")
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--levels", type=int, nargs="+", default=[400, 800, 1600])
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--window", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every kind (and build) per level, the order reversed from one round to the next "
                         "(ABBA), so a busy host's drift falls on both; the ratio is taken within each round")
    ap.add_argument("--results", default="record.json", help="file name under bench/results")
    ap.add_argument("--plot", help="only redraw the PNG of this results file")
    b.add_record_flag(ap)
    args = ap.parse_args()
    if args.plot:
        return plot(json.load(open(args.plot))["rows"], args.plot[:-len(".json")] + ".png")
    args.server, args.sipp_rcvbuf, args.workers, args.realtime = "strowger", None, 2, 0
    scale.signal_setup()
    rundir = b.run_dir("record")
    info = b.machine_info(args)
    rows = []
    try:
        builds = ["new", "old"] if args.old_bin else ["new"]
        turn = 0
        for n in args.levels:
            runs = [(build, kind) for build in builds for kind in ("moh", "recorded")]
            for rnd in range(1, args.rounds + 1):
                for build, kind in runs if turn % 2 == 0 else runs[::-1]:
                    rows.append(one(args, rundir, build, kind, n, rnd))
                turn += 1
    finally:
        b.kill_children()
    path = b.write_rows(args, rundir, args.results, info, rows)
    table = []
    plot(rows, path[:-len(".json")] + ".png")
    b.keep(args, rundir, os.path.basename(path)[:-len(".json")] + ".png")
    table.append("| calls | round | build | kind | server CPU | CPU-ms per call-second | recorded / moh | disk MB/s | late frames | "
                 "server passes > 20 ms late (window) | RTP received | failed | recordings complete |")
    table.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        base = next((p for p in rows if p["kind"] == "moh" and p["calls"] == r["calls"]
                     and p["build"] == r["build"] and p.get("round") == r.get("round")), None)
        ratio = f"{r['cpu_ms_per_call_s'] / base['cpu_ms_per_call_s']:.2f}" if base and base["cpu_ms_per_call_s"] else "-"
        done = f"{r['recordings_checked'] - r['recordings_bad']}/{r['recordings_checked']}" if r["kind"] == "recorded" else "-"
        table.append(f"| {r['calls']} | {r.get('round', 1)} | {r['build']} | {r['kind']} | {r['server_cpu_pct']} % | {r['cpu_ms_per_call_s']} | {ratio} | "
                     f"{r['disk_mb_s']} | {r['late_arrivals']} | {r['server_late_passes']} ({r['server_late_passes_window']}) | "
                     f"{r['rtp_received']} | {r['failed']} | {done} |")
    b.summary(args, "whole-call recording against music on hold (bench/record.sh)", "\n".join(table))


if __name__ == "__main__":
    main()
