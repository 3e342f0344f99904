#!/usr/bin/env python3
"""A bridged call's media relayed by strowger against rtpengine, in one run (bench/relay.sh).

For each N of --levels, --pairs times, strowger then rtpengine relay the same calls' RTP:
  strowger   strowger-load -> strowger (2XXX: bridge, no transcoding; the legs on the workers' shared
             ports, strowger's default, or with --own-ports a port pair per leg) -> the far end;
  rtpengine  strowger-load -> Kamailio (bench/kamailio/rtpengine.cfg: offer on the INVITE, answer on
             the 200, delete on the BYE, over rtpengine's ng protocol) -> the far end, the media of
             both legs anchored in rtpengine (Debian rtpengine-daemon, run here on loopback with
             --table=-1: userspace forwarding, no kernel module; --num-threads as strowger's
             --workers).
The far end is a strowger answering 2XXX with the echo; strowger-load, each call from an address of its
own (--address-per-call: a phone's or trunk's own address, which shared ports tell calls apart by; the same
for both relays), sends 50 PCMU packets/s per
call (20 ms), the far end echoes them, so each relay forwards 50 packets/s each way per call. Once
all N calls are up (+5 s), the relay's CPU (run time of all its threads, /proc/PID/task/*/schedstat)
is taken over --window s: CPU-ms per relayed call-second = CPU-s / window / N x 1000. The ratio
strowger / rtpengine is taken per pair; its median and min-max are the figure. A run where a call
failed had fewer than N calls up, and a relay that dropped packets (less than 99 % of what was sent
came back) did less work: their figures are shown, marked, and left out of medians and ratios. Kamailio's and the
far end's CPU are not the relay's and are not counted.

Every child runs in its own session with its autogroup priority raised, is bounded in calls and
time, and dies with this script. Results: relay.json in the run directory (bench/out/, and bench/results/ with --record), a Markdown table on stdout
(and at the end of bench/RESULTS.md with --record); the raw runs under bench/out/relay-TIME/.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale  # noqa: E402

# RTP ports below the ephemeral range, clear of strowger-load's 40000-59999: the relay of the turn
# (strowger or rtpengine, never both at once) takes two legs x (RTP, RTCP) per call, the far end
# one pair per call. bench.alloc_ports (SIP and ng ports) is kept out of them.
RELAY_PORTS = (14000, 23999)
FAR_PORTS = (24000, 29999)
# The relaying strowger's API token (its /metrics count the packets it relayed).
TOKEN = "relay-bench-token-0123456789"


def far_end(args, rundir, label):
    """The far end: strowger answering 2XXX with the echo, one worker."""
    cfg = scale.config(args, rundir, f"{label}-far.toml", steps='["answer", "echo"]')
    return scale.Server(args, rundir, f"{label}-far", 1, f"{FAR_PORTS[0]}-{FAR_PORTS[1]}", cfg)


class Rtpengine:
    """rtpengine on loopback (userspace forwarding) with Kamailio in front of it for the signalling."""

    def __init__(self, args, rundir, label, far_port):
        self.dir = os.path.join(rundir, label)
        os.makedirs(self.dir, exist_ok=True)
        ng, self.http = b.alloc_ports(1), b.alloc_ports(1)
        self.cmd = [args.rtpengine_bin, "--config-file=none", "--foreground", "--log-stderr", "--log-level=4",
                    "--table=-1", "--interface=127.0.0.1", f"--listen-ng=127.0.0.1:{ng}",
                    f"--port-min={RELAY_PORTS[0]}", f"--port-max={RELAY_PORTS[1]}",
                    f"--num-threads={args.workers}", f"--listen-http=127.0.0.1:{self.http}", "--timeout=0", "--silent-timeout=0", "--delete-delay=0"]
        self.log = open(os.path.join(self.dir, "rtpengine.log"), "w")
        self.proc = b.spawn(self.cmd, self.dir, self.log, self.log)
        b.raise_priority(self.proc.pid)
        ready = ng_ping(ng, 10)
        if not ready:
            sys.exit(f"bench: rtpengine does not answer an ng ping on 127.0.0.1:{ng}: see {self.dir}/rtpengine.log")
        self.port = b.alloc_ports(1)
        kam = ["kamailio", "-f", os.path.join(b.ROOT, "bench", "kamailio", "rtpengine.cfg"), "-DD", "-E",
               "-l", f"udp:127.0.0.1:{self.port}", "-n", "8", "-m", "512",
               "-A", f'RTPENGINE="udp:127.0.0.1:{ng}"', "-A", f'FAR="sip:127.0.0.1:{far_port}"']
        self.kam_log = open(os.path.join(self.dir, "kamailio.log"), "w")
        self.kam = b.spawn(kam, self.dir, self.kam_log, self.kam_log)
        self.kam_cmd = b.fmt_cmd(kam)
        time.sleep(1.5)
        for p, what in ((self.proc, "rtpengine.log"), (self.kam, "kamailio.log")):
            if p.poll() is not None:
                sys.exit(f"bench: {what.split('.')[0]} did not start: see {self.dir}/{what}")

    def cpu(self):
        return b.proc_cpu(self.proc.pid)

    def relayed(self):
        """Packets rtpengine has relayed (userspace forwarding), from its /metrics."""
        return metric(f"http://127.0.0.1:{self.http}/metrics", None, 'rtpengine_packets_total{type="userspace"}')

    def stop(self):
        for p in (self.kam, self.proc):
            try:
                os.killpg(p.pid, 15)
                p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                p.kill()


def ng_ping(port, seconds):
    """Whether rtpengine answers the ng protocol's ping (a cookie, then a bencoded dictionary) on
    127.0.0.1:`port` within `seconds`; Kamailio starts only then, or it would take rtpengine for dead."""
    deadline = time.time() + seconds
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.time() < deadline:
            s.sendto(b"ping1 d7:command4:pinge", ("127.0.0.1", port))
            try:
                if s.recv(512).startswith(b"ping1 d6:result4:pong"):
                    return True
            except OSError:
                pass
    return False


def metric(url, token, series):
    """The value of one `series` (name and labels, as /metrics writes it) at `url`."""
    for line in b.metrics_lines(url, token):
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise RuntimeError(f"no {series} at {url}")


def one(args, rundir, relay, calls, rnd):
    label = f"{relay}-{calls}-r{rnd}"
    far = far_end(args, rundir, label)
    if relay == "strowger":
        cfg = scale.config(args, rundir, f"{label}.toml", shared_ports=not args.own_ports)
        api = b.alloc_ports(1)
        scale.api_config(cfg, api, TOKEN)
        srv = scale.Server(args, rundir, label, args.workers, f"{RELAY_PORTS[0]}-{RELAY_PORTS[1]}", cfg,
                           ("--var", f"bridge_target=127.0.0.1:{far.port}"))
        cmd = b.fmt_cmd(srv.cmd)
        # What strowger sends of the relayed packets; each was received once. Its workers publish their
        # counts once a second, so a window's count spans the window give or take up to a second (±5 % of
        # the default 20 s window).
        srv.relayed = lambda: metric(f"http://127.0.0.1:{api}/metrics", TOKEN,
                                     'strowger_rtp_packets_total{direction="out"}')
    else:
        srv = Rtpengine(args, rundir, label, far.port)
        cmd = f"{b.fmt_cmd(srv.cmd)}; {srv.kam_cmd}"
    ramp = calls / args.rate
    hold = ramp + 5 + args.window + 3
    out = os.path.join(srv.dir, "load.json")
    lp = scale.load(args, f"127.0.0.1:{srv.port}", "2001", calls, args.rate, hold, "send", out,
                    max_time=int(hold + ramp + 60), far_ends="address")
    time.sleep(ramp + 5)
    p0 = srv.relayed()
    w = b.cpu_window(args.window, srv.cpu, [lp.pid, far.proc.pid])
    relayed = srv.relayed() - p0
    lp.wait()
    srv.stop()
    far.stop()
    rep = scale.report_of(out)
    rtp = rep["rtp"]
    row = {
        "relay": relay, "shared_ports": relay == "strowger" and not args.own_ports, "calls": calls, "round": rnd, "rate": args.rate, "workers": args.workers,
        "window_s": w["window_s"], "relay_cpu_pct": w["server_cpu_pct"],
        "cpu_ms_per_call_s": round(w["server_cpu_s"] * 1000 / w["window_s"] / calls, 4),
        "relayed_pps": round(relayed / w["window_s"]),
        "cpu_us_per_packet": round(w["server_cpu_s"] * 1e6 / max(1, relayed), 3),
        "others_cpu_pct": w["others_cpu_pct"], "quiet": w["quiet"],
        "load_and_far_end_cpu_pct": w["load_cpu_pct"],
        "completed": rep["completed"], "failed": rep["failed"], "failed_reasons": rep["failed_reasons"],
        "rtp_sent": rtp["sent"], "rtp_received": rtp["received"], "rtp_lost": rtp["lost"],
        "rtp_delivered_pct": round(100 * rtp["received"] / max(1, rtp["sent"]), 2),
        "setup_p50_ms": round(rep["setup_us"]["p50"] / 1000, 1), "setup_p99_ms": round(rep["setup_us"]["p99"] / 1000, 1),
        "relay_cmd": cmd, "load_cmd": lp.cmd, "far_cmd": b.fmt_cmd(far.cmd),
    }
    b.log(f"{relay}, {calls} calls (pair {rnd + 1}): {row['cpu_ms_per_call_s']} CPU-ms per relayed call-second "
          f"({row['relay_cpu_pct']} %), {row['cpu_us_per_packet']} µs per relayed packet "
          f"({row['relayed_pps']} packets/s), completed {row['completed']}, failed {row['failed']}"
          f"{' (left out of the ratio: not every call was up)' if row['failed'] else ''}, "
          f"set-up p50 {row['setup_p50_ms']} ms, RTP sent {row['rtp_sent']}, came back {row['rtp_received']} "
          f"({row['rtp_delivered_pct']} %{', left out of the ratio: the relay dropped packets' if dropped(row) else ''})")
    return row


def dropped(row):
    """Whether the relay dropped packets: less than 99 % of what strowger-load sent came back (the far end
    echoes all it gets); such a relay did less work than the other, so its figure is not paired."""
    return row.get("rtp_delivered_pct", 100) < 99


def table(rows, levels):
    lines = ["| calls | strowger CPU-ms per call-s (pairs) | rtpengine CPU-ms per call-s (pairs) "
             "| strowger ÷ rtpengine per pair: median (min–max) | µs per relayed packet, strowger; rtpengine "
             "| strowger ÷ rtpengine per packet: median (min–max) | failed calls "
             "| RTP back of sent, % (strowger; rtpengine) | busy windows |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in levels:
        side = {r: [x for x in rows if x["calls"] == n and x["relay"] == r] for r in ("strowger", "rtpengine")}
        # A run with a failed call had fewer calls up than N, one that dropped packets relayed fewer: its
        # figure per call-second is shown, not paired. Per relayed packet (each relay's own count over the
        # window) every run pairs: a relay that falls behind only batches more.
        ours, theirs = ([x["cpu_ms_per_call_s"] if not (x["failed"] or dropped(x)) else None for x in side[r]]
                        for r in ("strowger", "rtpengine"))
        p = b.paired(ours, theirs)
        ratio = f"{p['median']} ({p['min']}–{p['max']}, {len(p['ratios'])})" if p["ratios"] else "-"
        pk = b.paired(*([x.get("cpu_us_per_packet") for x in side[r]] for r in ("strowger", "rtpengine")))
        per_packet = f"{pk['median']} ({pk['min']}–{pk['max']}, {len(pk['ratios'])})" if pk["ratios"] else "-"
        med = {r: (statistics.median(good) if (good := [x for x in v if x is not None]) else None)
               for r, v in (("strowger", ours), ("rtpengine", theirs))}
        shown = {r: ", ".join(str(x["cpu_ms_per_call_s"]) + ("*" if x["failed"] else "") + ("†" if dropped(x) else "")
                              for x in side[r])
                 for r in side}
        packets = "; ".join(", ".join(str(x.get("cpu_us_per_packet", "-")) for x in side[r]) for r in side)
        back = {r: ", ".join(str(x.get("rtp_delivered_pct", "-")) for x in side[r]) for r in side}
        lines.append(
            f"| {n} | {med['strowger']} ({shown['strowger']}) | {med['rtpengine']} "
            f"({shown['rtpengine']}) | {ratio} | {packets} | {per_packet} "
            f"| {sum(x['failed'] for x in rows if x['calls'] == n)} "
            f"| {back['strowger']}; {back['rtpengine']} "
            f"| {sum(not x['quiet'] for x in rows if x['calls'] == n)} of {len(side['strowger']) + len(side['rtpengine'])} |")
    notes = [("\\* a run with failed calls (fewer than N up)", any(x["failed"] for x in rows)),
             ("† a relay that dropped packets (less than 99 % of those sent came back)", any(map(dropped, rows)))]
    shown = [n for n, on in notes if on]
    return "\n".join(lines) + (f"\n\n{'; '.join(shown)}: not in the medians or the ratio per call-second." if shown else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--rtpengine-bin", default="/usr/bin/rtpengine")
    ap.add_argument("--levels", type=int, nargs="+", default=[2000], help="bridged calls held at once")
    ap.add_argument("--pairs", type=int, default=3, help="strowger-then-rtpengine pairs per level (default 3)")
    ap.add_argument("--rate", type=float, default=100, help="new calls per second while the calls come up")
    ap.add_argument("--window", type=float, default=20, help="seconds of CPU measured once all calls are up")
    ap.add_argument("--workers", type=int, default=2,
                    help="strowger's --workers and rtpengine's --num-threads (default 2)")
    ap.add_argument("--own-ports", action="store_true",
                    help="strowger with a port pair per leg instead of its default, the workers' shared ports")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.realtime, args.server, args.sipp_rcvbuf = 0, "strowger", None
    most = min((RELAY_PORTS[1] - RELAY_PORTS[0]) // 4, (FAR_PORTS[1] - FAR_PORTS[0]) // 2)
    if max(args.levels) > most:
        ap.error(f"at most {most} calls (4 relay ports and 2 far-end ports per call)")
    b._taken.update(range(RELAY_PORTS[0], FAR_PORTS[1] + 1))
    scale.signal_setup()
    rundir = b.run_dir("relay")
    info = b.machine_info(args)
    rows = []
    try:
        for n in args.levels:
            for rnd in range(args.pairs):
                for relay in ("strowger", "rtpengine"):
                    rows.append(one(args, rundir, relay, n, rnd))
    finally:
        b.kill_children()
    b.write_rows(args, rundir, "relay.json", info, rows)
    text = (f"Bridged calls, 20 ms PCMU both ways, each from an address of its own, relayed by strowger "
            f"(--workers {args.workers}, {'a port pair per leg' if args.own_ports else 'shared ports'}) and by rtpengine "
            f"(userspace, --num-threads {args.workers}) in turns; CPU-ms per relayed call-second over {args.window} s "
            f"once all calls are up.\n\n" + table(rows, args.levels))
    b.summary(args, "media relay: strowger against rtpengine (bench/relay.sh)", text)


if __name__ == "__main__":
    main()
