#!/usr/bin/env python3
"""strowger's scale benchmarks (issue "Scale"), driven by strowger-load.

  capacity   N playback+echo calls to 44444 held (strowger-load --rtp echo) for each N of --levels:
             server CPU-ms per call-second over 20 s once all calls are up, RSS per call, the load
             generator's own CPU, failed calls, RTP loss and the server's late frames (frames that
             reached the load generator more than 20 ms behind their call's earliest, by the
             kernel's arrival stamps).
  b2bua      strowger-load -> strowger A (2XXX: bridge) -> strowger B (answers): INVITE ... BYE with
             no media at --rate for --calls; A's CPU-ms per B2BUA call and calls/s per core, for each
             worker count of --workers, interleaved --repeat times.
  speedup    the same media load (--calls held echo calls, up at --rate, held just past a 20 s window)
             with 1 and with 2 workers, in --repeat pairs whose order flips every pair (1 2, 2 1, ...) after
             a warm-up pair that is left out: CPU per call-second, and each pair's speed-up
             (W x cost(1) / cost(W): the calls W workers would carry with a core each, against one
             worker on one core), reported as the pairs' median and spread. Not a saturation run: the
             load generator shares the cores one would need (bench/README.md says what that means).
  overload   backpressure: --calls held echo calls on one worker (pinned to core 0; the load
             generators to core 1), then a flood of new calls at --flood calls/s for 20 s; the held
             calls' late frames and loss against the same run without the flood; how many flood
             calls got 503.
             With --shared: the server with rtp.shared_ports, the generator with --address-per-call.
  flood      attack traffic beside real service: --calls held echo calls and --real-rate real calls/s
             (9196, 1 s each) from a trusted address, then strowger-load flood for 15 s from 1,000
             rotating addresses (--flood-invites unauthenticated INVITEs/s and --flood-digests wrong
             digest REGISTERs/s), then one banned address sending --flood-invites INVITEs/s: the server's
             CPU per flood request and per banned datagram (over the same window without the flood),
             real calls failed, held calls' late frames, and what the flood got back.
  floor      for each N of --levels, alternately --repeat times: strowger's held calls (as capacity; with a
             port pair per call, and with rtp.shared_ports against strowger-load --address-per-call) and
             the kernel's own cost for the same packets (strowger-load floor: a connected socket per
             call, 50 packets/s each, echoes read every 80 ms; --one-socket; --address-per-call, whose
             echo — a bare recvmmsg/sendmmsg echo on one socket — serves the packets of shared ports),
             CPU-ms per call-second of each and strowger's ratios to the floors, measured minutes apart
             instead of sessions apart.
  shared     for each N of --levels, alternately --repeat times: held calls with a port pair per call and
             with rtp.shared_ports (a few ports per worker), both against strowger-load --address-per-call
             (every call its own address, as phones and trunks have; the shared ports need that), and the
             per-call ports against the usual generator (one address): CPU-ms per call-second and the ratio.
  metrics    the cost of being watched: --levels[0] held echo calls on --workers, then B2BUA calls at
             --b2b-rate calls/s; in each, 10 s windows rotated between nobody listening, a client GETting
             /metrics (bearer token) every second and `strowger ctl events --json` subscribed to every
             event: the server's CPU per call-second (held) or per call (B2BUA) and the ratios, in one run.
  combined   the issue's one-run figures, in parts (--parts, default all three): `held`, --levels[0] held
             echo calls in --repeat (at least 3) interleaved pairs of 10 s windows, nobody watching vs a
             /metrics scrape every --scrape-interval s and an event client at once (the API listens in
             both); `b2bua`, B2BUA calls at --b2b-rate calls/s without vs with the event client: each pair's
             ratio, median and spread, the media frames sent late per window, and where the time went (each
             server thread's CPU and wake-ups, the load generator's and the event client's CPU). `stream`,
             the event stream beside media: --stream-held held echo calls and B2BUA calls at --b2b-rate
             calls/s through one server, windows without vs with an event client subscribed to every event
             (its output counted): events carried per window and per call, and the media frames the server
             sent late in each window (strowger_media_late_frames_total; the issue's target is 0).
  report     writes bench/results/scale.md and bench/results/scale.png from bench/results/scale.json.

CPU is the run time of all threads (/proc/PID/task/*/schedstat). Every run is bounded in calls and time, on
loopback only; every child runs in its own session and dies with this script.
"""

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (the rig's process, /proc and port helpers)

# SCALE_RESULTS: another file (bench/core_ab.sh keeps each of its runs apart).
RESULTS = os.environ.get("SCALE_RESULTS") or os.path.join(b.RESULTS, "scale.json")


def save(section, data):
    res = json.load(open(RESULTS)) if os.path.exists(RESULTS) else {}
    res[section] = data
    os.makedirs(b.RESULTS, exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    b.log(f"results: {os.path.relpath(RESULTS, b.ROOT)} [{section}]")


def config(args, rundir, name, steps=None, shared_ports=False):
    """The embedded default configuration, logging at info (start-up line, admission changes), no call cap, no media timeout,
    the load generators on 127.0.0.1 trusted (their calls run in the default context unchallenged, the path calls took
    before calls were authenticated: an ACL lookup more), the workers' real-time priority of --realtime (0: none), and
    rtp.shared_ports as asked (a port pair per call otherwise)."""
    text = subprocess.run([args.bin, "default-config"], capture_output=True, text=True, timeout=10,
                          check=True).stdout
    keys = [("max_calls", "100000"), ("log_level", '"info"'), ("media_timeout_s", "0")]
    if "\n[security]\n" in text:  # builds before it took every call unchallenged
        keys.append(("trusted", '["127.0.0.1"]'))
    if getattr(args, "realtime", 0):
        keys.append(("realtime_priority", str(args.realtime)))
    # Set either way: it is on by default since 2026-11-27, off before.
    keys.append(("shared_ports", "true" if shared_ports else "false"))
    for key, value in keys:
        text, n = re.subn(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", text)
        if n != 1:
            sys.exit(f"bench: cannot set {key} in the default configuration")
    if steps:
        text, n = re.subn(r'(?m)^steps = \["bridge sip:\$\{EXTEN\}@\$\{bridge_target\}.*$', f"steps = {steps}", text)
        if n != 1:
            sys.exit("bench: cannot find the 2XXX bridge rule in the default configuration")
    path = os.path.join(rundir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Server:
    """A strowger started for one run."""

    def __init__(self, args, rundir, label, workers, rtp_ports, cfg, extra=(), cpus=None, ipv6=False):
        """`ipv6`: listen on [::1] too, at the same port (dual-stack)."""
        self.dir = os.path.join(rundir, label)
        os.makedirs(self.dir, exist_ok=True)
        self.port = b.alloc_ports(1)
        listen = f"127.0.0.1:{self.port}" + (f",[::1]:{self.port}" if ipv6 else "")
        cmd = [args.bin, "--config", cfg, "--sip-listen", listen, "--rtp-ports", rtp_ports,
               "--data-dir", os.path.join(self.dir, "data"), "--workers", str(workers), *extra]
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        self.cmd = cmd
        self.log = open(os.path.join(self.dir, "strowger.log"), "w")
        self.proc = b.spawn(cmd, self.dir, self.log, self.log)
        b.raise_priority(self.proc.pid)
        deadline = time.time() + 10
        while time.time() < deadline:
            if "worker(s)" in open(os.path.join(self.dir, "strowger.log")).read():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        sys.exit(f"bench: strowger did not start: see {self.dir}/strowger.log")

    def cpu(self):
        return b.proc_cpu(self.proc.pid)

    def rss_kib(self):
        return b.proc_status(self.proc.pid, "VmRSS")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def load(args, target, ext, calls, rate, hold, rtp, out, threads=1, max_time=None, cpus=None, far_ends=None,
         extra=()):
    """Starts strowger-load (`far_ends`: "socket" or "address" per call, else one address for all; `extra`: more
    of its options); returns the process (its JSON report goes to `out`)."""
    cmd = ["taskset", "-c", cpus] if cpus else []
    cmd += [args.load_bin, "call", "--target", target, "--ext", ext, "--calls", str(calls), "--rate", str(rate),
           "--hold", str(hold), "--rtp", rtp, "--json", "--quiet", "--threads", str(threads),
           "--rtp-ports", "40000-59999", "--max-time", str(max_time or int(hold + calls / rate + 60))]
    if far_ends:
        cmd.append(f"--{far_ends}-per-call")
    cmd += extra
    p = b.spawn(cmd, os.path.dirname(out), open(out, "w"), open(out + ".err", "w"))
    b.raise_priority(p.pid)
    p.cmd = b.fmt_cmd(cmd)
    return p


def report_of(path):
    with open(path) as f:
        return json.load(f)


def held_calls(args, rundir, label, workers, calls, rate, hold, window, shared_ports=False, far_ends=None):
    """Brings `calls` echo calls up, measures over `window` s of steady state, lets them end.
    `shared_ports`: the server's rtp.shared_ports; `far_ends`: as for `load`."""
    cfg = config(args, rundir, f"{label}.toml", shared_ports=shared_ports)
    srv = Server(args, rundir, label, workers, "10000-29999", cfg)
    out = os.path.join(srv.dir, "load.json")
    rss0 = srv.rss_kib()
    lp = load(args, f"127.0.0.1:{srv.port}", "44444", calls, rate, hold, "echo", out, far_ends=far_ends)
    time.sleep(calls / rate + 5)
    c0, u0, l0, m0, t0 = srv.cpu(), user_cpu(srv.proc.pid), b.proc_cpu(lp.pid), b.machine_cpu(), time.time()
    time.sleep(window)
    c1, u1, l1, m1, t1 = srv.cpu(), user_cpu(srv.proc.pid), b.proc_cpu(lp.pid), b.machine_cpu(), time.time()
    rss = srv.rss_kib()
    lp.wait()
    srv.stop()
    rep = report_of(out)
    span = t1 - t0
    rtp = rep["rtp"]
    row = {
        "workers": workers, "calls": calls, "rate": rate, "hold_s": hold, "realtime_priority": args.realtime,
        "shared_ports": shared_ports, "far_ends": far_ends or "one address",
        "server_cpu_pct": round((c1 - c0) / span * 100, 1),
        "cpu_ms_per_call_s": round((c1 - c0) * 1000 / span / calls, 4),
        "user_ms_per_call_s": round((u1 - u0) * 1000 / span / calls, 4),
        "load_cpu_pct": round((l1 - l0) / span * 100, 1),
        "rss_kib_per_call": round((rss - rss0) / calls, 2),
        "completed": rep["completed"], "failed": rep["failed"], "failed_reasons": rep["failed_reasons"],
        "retransmissions": rep["retransmissions"],
        "rtp_received": rtp["received"], "rtp_lost": rtp["lost"],
        "late_arrivals": rtp.get("late_arrivals", 0),
        "late_pct": round(100 * rtp.get("late_arrivals", 0) / max(1, rtp["received"]), 4),
        "load_late_frames": rtp["late_frames"], "jitter_mean_us": rtp["jitter_mean_us"],
        **b.quiet_fields(m0, m1, (c1 - c0) + (l1 - l0), span),
        "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd,
    }
    b.log(f"{workers} worker(s), {calls} calls: {row['cpu_ms_per_call_s']} CPU-ms per call-s "
          f"({row['server_cpu_pct']} %), {row['rss_kib_per_call']} KiB/call, failed {row['failed']}, "
          f"retransmissions {row['retransmissions']}, "
          f"late {row['late_pct']} %, load generator {row['load_cpu_pct']} %")
    return row


def capacity(args, rundir):
    rows = []
    for n in args.levels:
        b.quiet_check(set())
        row = held_calls(args, rundir, f"cap-{n}", args.workers[0], n, args.rate, args.hold, 20,
                         shared_ports=args.shared, far_ends="address" if args.shared else None)
        rows.append(row)
        if row["failed"] > n * 0.001 or row["late_pct"] > 1:
            b.log(f"{n} calls: more than 0.1 % of calls failed or 1 % of frames late: stopping here")
            break
    save("capacity_shared" if args.shared else "capacity", {"rows": rows, "machine": b.machine_info(args)})


def api_config(cfg, port, token):
    """`cfg` with the control API (and /metrics) on 127.0.0.1:`port` and bearer token `token`."""
    text = open(cfg).read()
    keys = {"listen": f'"127.0.0.1:{port}"', "token": f'"{token}"'}
    head, api, rest = text.partition("\n[api]\n")
    if api:
        # Only the [api] table's own keys: up to the next table.
        body, table, tail = rest.partition("\n[")
        for key, value in keys.items():
            body, n = re.subn(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", body, count=1)
            if n != 1:
                body = f"{key} = {value}\n" + body
        text = head + api + body + table + tail
    else:
        text += "\n[api]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    with open(cfg, "w") as f:
        f.write(text)


class Scraper:
    """GETs /metrics with the bearer token every `interval` s while `on`, as Prometheus would (once a
    second); 0: back to back, to make a scrape's cost stand out of a noisy machine's."""

    def __init__(self, port, token, interval=1.0):
        import threading
        self.req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                          headers={"Authorization": f"Bearer {token}"})
        self.on, self.stop, self.scrapes, self.failures, self.bytes = False, False, 0, 0, 0
        self.interval = interval
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            if self.on:
                try:
                    with urllib.request.urlopen(self.req, timeout=2) as r:
                        self.bytes = len(r.read())
                    self.scrapes += 1
                except OSError:
                    self.failures += 1
            time.sleep(self.interval if self.on else 0.05)


class EventClient:
    """`strowger ctl events --json` subscribed to every event type while on, its output to /dev/null
    or, with `record` (a directory), to a file per client there, whose events `lines` counts: what a
    dashboard costs the server. Started per window (the workers make notices only while a client is
    subscribed); one the server closed for lagging (1008) is counted, not hidden."""

    def __init__(self, args, port, token, record=None):
        self.cmd = [args.bin, "ctl", "--api", f"http://127.0.0.1:{port}", "--token", token, "--json", "events"]
        self.proc, self.closed, self.record, self.started, self.out = None, 0, record, 0, None

    def set(self, on):
        if on and self.proc is None:
            out = subprocess.DEVNULL
            if self.record:
                self.started += 1
                self.out = os.path.join(self.record, f"events-{self.started}.jsonl")
                out = open(self.out, "wb")
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
        elif not on and self.proc is not None:
            if self.proc.poll() is not None:
                self.closed += 1
            else:
                self.proc.terminate()
            self.proc.wait()
            self.proc, self.out = None, None

    def lines(self):
        """The events the running client has written (0 with none running)."""
        if self.out is None:
            return 0
        with open(self.out, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


MODES = ("none", "scrape", "events")


def windows(srv, scraper, events, window, rounds, per, modes=MODES, probe=None, others=None):
    """Rounds of one `window`-second window per mode (order rotated each round; `all` is a scrape and
    an event client at once): the server's CPU-ms per second divided by `per` of each window, by mode;
    what `probe()` (if given: a number, or a dict of them) rose by over each window; and where the time
    went in each window (`threads_ms_per_s`, `wakeups_per_s`: by server thread; `others_ms_per_s`: the
    processes of `others`, {name: pid}, and the event client; `scrapes`) — so a difference between the modes can be
    placed on a thread, or on the server's waking more often, instead of being guessed at."""
    cpu, rise, where = ({m: [] for m in modes} for _ in range(3))
    for r in range(rounds):
        for i in range(len(modes)):
            mode = modes[(i + r) % len(modes)]
            scraper.on = mode in ("scrape", "all")
            events.set(mode in ("events", "all"))
            time.sleep(1)
            p0 = probe() if probe else 0
            procs = {**(others or {}), **({"event client": events.proc.pid} if events.proc else {})}
            s0, o0 = server_threads(srv.proc.pid), {k: process_cpu(v) for k, v in procs.items()}
            n0 = scraper.scrapes
            c0, t0 = srv.cpu(), time.time()
            time.sleep(window)
            c1, t1 = srv.cpu(), time.time()
            s1, o1 = server_threads(srv.proc.pid), {k: process_cpu(v) for k, v in procs.items()}
            p1 = probe() if probe else 0
            span = t1 - t0
            rise[mode].append({k: p1[k] - p0[k] for k in p1} if isinstance(p1, dict) else p1 - p0)
            cpu[mode].append((c1 - c0) * 1000 / span / per)
            where[mode].append({
                "threads_ms_per_s": {k: round((v[0] - s0.get(k, (0, 0))[0]) / 1e6 / span, 2) for k, v in s1.items()},
                "wakeups_per_s": {k: round((v[1] - s0.get(k, (0, 0))[1]) / span, 1) for k, v in s1.items()},
                "others_ms_per_s": {k: round((o1[k] - o0[k]) * 1000 / span, 2) for k in o0
                                    if None not in (o0[k], o1[k])},
                "scrapes": scraper.scrapes - n0})
            w = where[mode][-1]
            b.log(f"  {mode}: {cpu[mode][-1]:.4f}" + (f", probe +{rise[mode][-1]}" if probe else "")
                  + f"; ms/s {w['threads_ms_per_s']}, wake-ups/s {w['wakeups_per_s']}, others {w['others_ms_per_s']}")
    scraper.on = False
    events.set(False)
    return cpu, rise, where


def process_cpu(pid):
    """`b.proc_cpu`, or None once the process is gone (an event client the server closed)."""
    try:
        return b.proc_cpu(pid)
    except OSError:
        return None


def server_threads(pid):
    """{thread name: (run ns, voluntary context switches)} of the server's threads, the workers by
    name and the rest summed as `other` (/proc/PID/task/*: schedstat, status)."""
    out = {}
    for d in glob.glob(f"/proc/{pid}/task/*"):
        try:
            name = open(d + "/comm").read().strip()
            run = int(open(d + "/schedstat").read().split()[0])
            vol = next(int(line.split()[1]) for line in open(d + "/status")
                       if line.startswith("voluntary_ctxt_switches"))
        except (OSError, ValueError, StopIteration):
            continue
        key = name if name.startswith("worker") or name == "api" else "other"
        r, v = out.get(key, (0, 0))
        out[key] = (r + run, v + vol)
    return out


def scrape(port, token):
    """strowger's /metrics as {series name without the `strowger_` prefix: value summed over labels}."""
    out = {}
    for line in b.metrics_lines(f"http://127.0.0.1:{port}/metrics", token):
        m = re.match(r"^strowger_([a-z_0-9]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def late_frames(port, token):
    """The server's `strowger_media_late_frames_total` (frames its media ticks sent late), from /metrics."""
    late = scrape(port, token).get("media_late_frames_total")
    if late is None:
        raise RuntimeError("no strowger_media_late_frames_total in /metrics")
    return int(late)


def pair_ratios(cpu, base, other):
    """Each interleaved pair's ratio (`other` window over the `base` window beside it), their median and
    spread: the machine's drift cancels within a pair, and the spread says how much it did not."""
    ratios = sorted(o / n for n, o in zip(cpu[base], cpu[other]))
    return {"ratios": [round(x, 4) for x in ratios], "median": round(statistics.median(ratios), 4),
            "min": round(ratios[0], 4), "max": round(ratios[-1], 4)}


def observed(args, srv_cfg, api_port):
    token = "bench-" + os.urandom(8).hex()
    api_config(srv_cfg, api_port, token)
    return token


def watched_row(load_name, unit, cpu, scraper, events, rep, srv, lp):
    """One row of `metrics`: each mode's CPU, the ratios to nobody listening, and what the watchers and the
    calls did."""
    return {"load": load_name, "unit": unit, **{m: round(v, 4) for m, v in cpu.items()},
            "scrape_ratio": round(cpu["scrape"] / cpu["none"], 4),
            "events_ratio": round(cpu["events"] / cpu["none"], 4),
            "scrapes": scraper.scrapes, "scrape_failures": scraper.failures,
            "event_clients_closed": events.closed, "completed": rep["completed"], "failed": rep["failed"],
            "server_cmd": b.fmt_cmd(srv.cmd), "load_cmd": lp.cmd}


def metrics(args, rundir):
    """The cost of being watched, in one run: held calls (--levels[0] echo calls on --workers) and B2BUA
    calls (--b2b-rate calls/s of INVITE ... BYE with no media), each in windows rotated between nobody
    listening, a /metrics scrape every second and an event client subscribed to all events: the server's
    CPU in each and the ratios to nobody listening."""
    n, workers = args.levels[0], args.workers[0]
    window, rounds = 10, 2
    rows = []

    label = f"metrics-held-{n}"
    cfg = config(args, rundir, f"{label}.toml")
    api_port = b.alloc_ports(1)
    token = observed(args, cfg, api_port)
    # Ports for the calls and to spare, not 20,000: each is a socket, and a file descriptor limit
    # of 20,000 (a common `ulimit -n`) would leave none for the calls.
    srv = Server(args, rundir, label, workers, f"10000-{min(29999, 10000 + 4 * n)}", cfg)
    out = os.path.join(srv.dir, "load.json")
    hold = n / args.rate + 5 + rounds * len(MODES) * (window + 1) + 10
    lp = load(args, f"127.0.0.1:{srv.port}", "44444", n, args.rate, hold, "echo", out)
    time.sleep(n / args.rate + 5)
    scraper, events = Scraper(api_port, token), EventClient(args, api_port, token)
    b.log(f"{n} held calls, CPU-ms per call-second:")
    cpu = mean(windows(srv, scraper, events, window, rounds, n)[0])
    scraper.stop = True
    lp.wait()
    srv.stop()
    rep = report_of(out)
    rows.append(watched_row(f"{n} held echo calls", "CPU-ms per call-second", cpu, scraper, events, rep, srv, lp))

    label = "metrics-b2bua"
    rate = args.b2b_rate
    far_cfg = config(args, rundir, f"{label}-b.toml", steps='["answer", "echo"]')
    far = Server(args, rundir, f"{label}-b", 1, "30000-31999", far_cfg)
    near_cfg = config(args, rundir, f"{label}-a.toml")
    api_port = b.alloc_ports(1)
    token = observed(args, near_cfg, api_port)
    near = Server(args, rundir, f"{label}-a", workers, "32000-33999", near_cfg,
                  ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    out = os.path.join(near.dir, "load.json")
    calls = int(rate * (5 + rounds * len(MODES) * (window + 1) + 5))
    lp = load(args, f"127.0.0.1:{near.port}", "2001", calls, rate, 0, "none", out, max_time=int(calls / rate + 60))
    time.sleep(5)
    scraper, events = Scraper(api_port, token), EventClient(args, api_port, token)
    b.log(f"B2BUA at {rate} calls/s, CPU-ms per call:")
    cpu = mean(windows(near, scraper, events, window, rounds, rate)[0])
    scraper.stop = True
    lp.wait()
    near.stop()
    far.stop()
    rep = report_of(out)
    rows.append(watched_row(f"B2BUA, {rate} calls/s offered", "CPU-ms per call", cpu, scraper, events, rep, near,
                            lp))
    for r in rows:
        b.log(f"{r['load']} ({r['unit']}): none {r['none']}, scrape {r['scrape']} (x{r['scrape_ratio']}), "
              f"events {r['events']} (x{r['events_ratio']}); {r['scrapes']} scrapes, {r['scrape_failures']} failed; "
              f"event clients closed {r['event_clients_closed']}; calls completed {r['completed']}, failed {r['failed']}")
    save("metrics", {"rows": rows, "machine": b.machine_info(args)})


def mean(cpu):
    return {m: sum(v) / len(v) for m, v in cpu.items()}


# Seconds a window of `combined` takes beyond its own: the second before it and the probes and
# /proc readings around it, so the loads outlast the last window.
SETTLE = 3


def combined(args, rundir):
    """The issue's figures, in one run, by part (--parts): `held`, `b2bua` and `stream` (see each)."""
    workers, window, pairs = args.workers[0], 10, max(3, args.repeat)
    parts = {"held": combined_held, "b2bua": combined_b2bua, "stream": stream}
    unknown = set(args.parts.split(",")) - set(parts)
    if unknown:
        sys.exit(f"bench: --parts {','.join(sorted(unknown))}: expected some of {','.join(parts)}")
    rows = [parts[p](args, rundir, workers, window, pairs) for p in args.parts.split(",")]
    for r in rows:
        w = r["watched_ratio"]
        b.log(f"{r['load']} ({r['unit']}): watched/unwatched median x{w['median']} (pairs {w['ratios']}, "
              f"spread x{w['min']}..x{w['max']}); late frames by window {r['late_frames']}; event clients closed "
              f"{r['event_clients_closed']}; calls completed {r['completed']}, failed {r['failed']}")
        if "events_per_s" in r:
            b.log(f"event stream beside {r['held_calls']} held calls: events per window {r['events']}, "
                  f"{r['events_per_s']} events/s carried, {r['events_per_call']} per call ended; media frames sent "
                  f"late: unwatched {r['late_frames']['none']}, with the event client {r['late_frames']['events']}; "
                  f"held calls' frames late at the caller {r['held_late_arrivals']} of {r['held_rtp_received']}")
    save("combined", {"rows": rows, "machine": b.machine_info(args)})


def combined_held(args, rundir, workers, window, pairs):
    """--levels[0] held echo calls on `workers` in `pairs` interleaved pairs of windows (A B, B A, ...) with
    nobody watching and with a /metrics scrape every --scrape-interval s and an event client subscribed to
    every event at once (the API listens in both): CPU-ms per call-second, each pair's ratio, their median
    and spread, and the media frames sent late in each window."""
    n, modes = args.levels[0], ("none", "all")
    label = f"combined-held-{n}"
    cfg = config(args, rundir, f"{label}.toml")
    api_port = b.alloc_ports(1)
    token = observed(args, cfg, api_port)
    srv = Server(args, rundir, label, workers, f"10000-{min(29999, 10000 + 4 * n)}", cfg)
    out = os.path.join(srv.dir, "load.json")
    hold = n / args.rate + 5 + pairs * len(modes) * (window + SETTLE) + 10
    lp = load(args, f"127.0.0.1:{srv.port}", "44444", n, args.rate, hold, "echo", out)
    time.sleep(n / args.rate + 5)
    scraper = Scraper(api_port, token, args.scrape_interval)
    events = EventClient(args, api_port, token)
    b.log(f"{n} held calls, CPU-ms per call-second, nobody watching vs scrape + event client:")
    cpu, late, where = windows(srv, scraper, events, window, pairs, n, modes, lambda: late_frames(api_port, token),
                               {"load generator": lp.pid})
    scraper.stop = True
    lp.wait()
    srv.stop()
    rep = report_of(out)
    return {"load": f"{n} held echo calls", "unit": "CPU-ms per call-second", "cpu": cpu,
            "watched_ratio": pair_ratios(cpu, "none", "all"), "late_frames": late, "where": where,
            "scrape_interval_s": args.scrape_interval, "scrapes": scraper.scrapes, "scrape_failures": scraper.failures,
            "event_clients_closed": events.closed, "completed": rep["completed"], "failed": rep["failed"]}


def combined_b2bua(args, rundir, workers, window, pairs):
    """B2BUA calls (no media) at --b2b-rate calls/s in `pairs` of windows without and with an event client
    subscribed to every event: CPU-ms per call."""
    label = "combined-b2bua"
    rate, modes = args.b2b_rate, ("none", "events")
    far = Server(args, rundir, f"{label}-b", 1, "30000-31999",
                 config(args, rundir, f"{label}-b.toml", steps='["answer", "echo"]'))
    near_cfg = config(args, rundir, f"{label}-a.toml")
    api_port = b.alloc_ports(1)
    token = observed(args, near_cfg, api_port)
    near = Server(args, rundir, f"{label}-a", workers, "32000-33999", near_cfg,
                  ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    out = os.path.join(near.dir, "load.json")
    calls = int(rate * (5 + pairs * len(modes) * (window + SETTLE) + 5))
    lp = load(args, f"127.0.0.1:{near.port}", "2001", calls, rate, 0, "none", out, max_time=int(calls / rate + 60))
    time.sleep(5)
    scraper, events = Scraper(api_port, token), EventClient(args, api_port, token)
    b.log(f"B2BUA at {rate} calls/s, CPU-ms per call, without vs with an event client:")
    cpu, late, where = windows(near, scraper, events, window, pairs, rate, modes, lambda: late_frames(api_port, token),
                               {"load generator": lp.pid})
    scraper.stop = True
    lp.wait()
    near.stop()
    far.stop()
    rep = report_of(out)
    return {"load": f"B2BUA, {rate} calls/s offered", "unit": "CPU-ms per call", "cpu": cpu,
            "watched_ratio": pair_ratios(cpu, "none", "events"), "late_frames": late, "where": where,
            "event_clients_closed": events.closed, "completed": rep["completed"], "failed": rep["failed"]}


def stream(args, rundir, workers, window, pairs):
    """The event stream at --b2b-rate calls/s beside media: one server holds --stream-held echo calls and
    bridges B2BUA calls (INVITE ... BYE, no media) at --b2b-rate calls/s to a second one, in `pairs` of
    `window`-s windows without and with an event client subscribed to every event (its events written to
    a file and counted): per window the events carried, the calls that ended, the media frames the server
    sent late (strowger_media_late_frames_total, target 0), and its CPU-ms per second."""
    label, n, rate, modes = "combined-stream", args.stream_held, args.b2b_rate, ("none", "events")
    # Port pairs for the B2BUA calls up at once — two a call on the first server, a few seconds'
    # worth when a busy host slows their set-up (4,000 pairs were not enough at 1,000 calls/s) —
    # and for the held calls, within the file descriptors of a 20,000 `ulimit -n`.
    far = Server(args, rundir, f"{label}-b", 1, "30000-37999",
                 config(args, rundir, f"{label}-b.toml", steps='["answer", "echo"]'))
    cfg = config(args, rundir, f"{label}-a.toml")
    api_port = b.alloc_ports(1)
    token = observed(args, cfg, api_port)
    srv = Server(args, rundir, f"{label}-a", workers, f"10000-{min(29999, 22000 + 4 * n)}", cfg,
                 ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    target = f"127.0.0.1:{srv.port}"
    run_s = 5 + pairs * len(modes) * (window + SETTLE) + 5
    held_out = os.path.join(srv.dir, "held.json")
    hp = load(args, target, "44444", n, args.rate, n / args.rate + 5 + run_s + 5, "echo", held_out)
    time.sleep(n / args.rate + 5)
    out = os.path.join(srv.dir, "b2bua.json")
    lp = load(args, target, "2001", int(rate * run_s), rate, 0, "none", out, max_time=int(run_s + 60))
    time.sleep(5)
    scraper, events = Scraper(api_port, token), EventClient(args, api_port, token, record=srv.dir)

    def probe():
        m = scrape(api_port, token)
        if "media_late_frames_total" not in m:
            raise RuntimeError("no strowger_media_late_frames_total in /metrics")
        return {"late_frames": int(m["media_late_frames_total"]), "calls_ended": int(m.get("calls_total", 0)),
                "events": events.lines()}

    b.log(f"{n} held echo calls and B2BUA at {rate} calls/s, server CPU-ms per second, without vs with an "
          f"event client:")
    cpu, rise, where = windows(srv, scraper, events, window, pairs, 1, modes, probe,
                               {"held calls' generator": hp.pid, "B2BUA generator": lp.pid})
    scraper.stop = True
    lp.wait()
    hp.wait()
    srv.stop()
    far.stop()
    rep, held = report_of(out), report_of(held_out)
    carried = [r["events"] for r in rise["events"]]
    ended = sum(r["calls_ended"] for r in rise["events"])
    return {"load": f"{n} held echo calls + B2BUA, {rate} calls/s offered", "unit": "server CPU-ms per second",
            "cpu": cpu, "watched_ratio": pair_ratios(cpu, "none", "events"), "held_calls": n, "where": where,
            "late_frames": {m: [r["late_frames"] for r in rise[m]] for m in modes},
            "calls_ended": {m: [r["calls_ended"] for r in rise[m]] for m in modes},
            "events": carried, "events_per_s": round(sum(carried) / (window * len(carried))),
            "events_per_call": round(sum(carried) / max(1, ended), 2),
            "event_clients_closed": events.closed, "completed": rep["completed"], "failed": rep["failed"],
            "held_failed": held["failed"], "held_rtp_received": held["rtp"]["received"],
            "held_late_arrivals": held["rtp"].get("late_arrivals", 0),
            "server_cmd": b.fmt_cmd(srv.cmd), "held_cmd": hp.cmd, "b2bua_cmd": lp.cmd}


def user_cpu(pid):
    """User-mode CPU seconds of a process (/proc/PID/stat utime, at the 10 ms tick): the part of
    its time not spent in the kernel."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[11]) / os.sysconf("SC_CLK_TCK")


FLOOR_MODES = {"per-call": ([], "a socket per call"), "one": (["--one-socket"], "one socket"),
               "address": (["--address-per-call"], "one socket, an address per call")}


def floor_once(args, rundir, label, calls, mode, window):
    """strowger-load floor with `calls` calls' packets (`mode`: a socket per call, one socket, or one
    socket with an address per call) against strowger-load floor-echo: the CPU-ms per call-second of
    each over `window` s. The echo is the bare recvmmsg/sendmmsg echo of ../shared/peers.md; with an
    address per call it serves the packets a server with shared ports serves."""
    d = os.path.join(rundir, label)
    os.makedirs(d, exist_ok=True)
    port = b.alloc_ports(1)
    seconds = window + 8
    echo_cmd = [args.load_bin, "floor-echo", "--listen", f"127.0.0.1:{port}", "--seconds", str(seconds + 2)]
    echo = b.spawn(echo_cmd, d, open(os.path.join(d, "echo.json"), "w"), open(os.path.join(d, "echo.err"), "w"))
    b.raise_priority(echo.pid)
    time.sleep(0.3)
    cmd = [args.load_bin, "floor", "--peer", f"127.0.0.1:{port}", "--calls", str(calls), "--seconds", str(seconds),
           *FLOOR_MODES[mode][0]]
    out = os.path.join(d, "floor.json")
    p = b.spawn(cmd, d, open(out, "w"), open(out + ".err", "w"))
    b.raise_priority(p.pid)
    time.sleep(4)
    c0, e0, t0 = b.proc_cpu(p.pid), b.proc_cpu(echo.pid), time.time()
    time.sleep(window)
    c1, e1, t1 = b.proc_cpu(p.pid), b.proc_cpu(echo.pid), time.time()
    p.wait(seconds + 30)
    echo.wait(30)
    rep = report_of(out)
    ms = round((c1 - c0) * 1000 / (t1 - t0) / calls, 4)
    echo_ms = round((e1 - e0) * 1000 / (t1 - t0) / calls, 4)
    b.log(f"floor, {calls} calls, {FLOOR_MODES[mode][1]}: {ms} CPU-ms per call-s, its echo {echo_ms} "
          f"(sent {rep['sent']}, echoes read {rep['received']})")
    return {"calls": calls, "mode": mode, "cpu_ms_per_call_s": ms, "echo_cpu_ms_per_call_s": echo_ms,
            "sent": rep["sent"], "received": rep["received"], "cmd": b.fmt_cmd(cmd), "echo_cmd": b.fmt_cmd(echo_cmd)}


def floor(args, rundir):
    rows = []
    for i in range(args.repeat):
        for n in args.levels:
            b.quiet_check(set())
            s = held_calls(args, rundir, f"floor-strowger-{n}-{i}", args.workers[0], n, args.rate, args.hold, 20)
            sh = held_calls(args, rundir, f"floor-shared-{n}-{i}", args.workers[0], n, args.rate, args.hold, 20,
                            shared_ports=True, far_ends="address")
            per_call = floor_once(args, rundir, f"floor-{n}-{i}", n, "per-call", 20)
            one = floor_once(args, rundir, f"floor-one-{n}-{i}", n, "one", 20)
            addr = floor_once(args, rundir, f"floor-address-{n}-{i}", n, "address", 20)
            fc, fo = per_call["cpu_ms_per_call_s"], one["cpu_ms_per_call_s"]
            ea = addr["echo_cpu_ms_per_call_s"]
            ss, ps = sh["cpu_ms_per_call_s"], s["cpu_ms_per_call_s"]
            row = {"calls": n, "round": i, "strowger": ps, "strowger_failed": s["failed"],
                   "strowger_late_pct": s["late_pct"], "strowger_user": s["user_ms_per_call_s"],
                   "strowger_shared": ss, "strowger_shared_failed": sh["failed"],
                   "strowger_shared_late_pct": sh["late_pct"], "strowger_shared_user": sh["user_ms_per_call_s"],
                   "floor": fc, "floor_one_socket": fo, "echo_one_peer": one["echo_cpu_ms_per_call_s"],
                   "echo_address_per_call": ea,
                   "ratio": round(ps / fc, 3), "ratio_one_socket": round(ps / fo, 3),
                   "ratio_shared": round(ss / fc, 3), "ratio_shared_one_socket": round(ss / fo, 3),
                   "ratio_shared_echo": round(ss / ea, 3),
                   "server_cmd": s["server_cmd"], "load_cmd": s["load_cmd"], "shared_server_cmd": sh["server_cmd"],
                   "shared_load_cmd": sh["load_cmd"], "floor_cmd": per_call["cmd"], "floor_one_socket_cmd": one["cmd"],
                   "floor_address_cmd": addr["cmd"], "echo_cmd": addr["echo_cmd"]}
            b.log(f"{n} calls: strowger {ps} (a pair per call) / {ss} (shared ports), floor {fc} (a socket per call) / "
                  f"{fo} (one socket), echo {row['echo_one_peer']} (one peer) / {ea} (an address per call): "
                  f"pair per call {row['ratio']}× / {row['ratio_one_socket']}×, shared {row['ratio_shared']}× / "
                  f"{row['ratio_shared_one_socket']}× / {row['ratio_shared_echo']}× the echo of the same packets")
            rows.append(row)
    save("floor", {"rows": rows, "machine": b.machine_info(args)})


def shared(args, rundir):
    rows = []
    for i in range(args.repeat):
        for n in args.levels:
            row = {"calls": n, "round": i}
            for key, shared_ports, far_ends in (("own", False, None), ("own_per_call_far_ends", False, "address"),
                                                ("shared_per_call_far_ends", True, "address")):
                b.quiet_check(set())
                r = held_calls(args, rundir, f"shared-{key}-{n}-{i}", args.workers[0], n, args.rate, args.hold, 20,
                               shared_ports=shared_ports, far_ends=far_ends)
                row[key] = r
            own, shared_ = row["own_per_call_far_ends"]["cpu_ms_per_call_s"], row["shared_per_call_far_ends"]["cpu_ms_per_call_s"]
            row["ratio"] = round(shared_ / own, 3)
            b.log(f"{n} calls: a port pair per call {own}, shared ports {shared_} CPU-ms per call-s "
                  f"(both with an address per call at the far end): {row['ratio']}×; "
                  f"per-call ports with one far-end address {row['own']['cpu_ms_per_call_s']}")
            rows.append(row)
    save("shared", {"rows": rows, "machine": b.machine_info(args)})


def b2bua_once(args, rundir, label, workers):
    far_cfg = config(args, rundir, f"{label}-b.toml", steps='["answer", "echo"]')
    far = Server(args, rundir, f"{label}-b", 1, "30000-31999", far_cfg)
    near_cfg = config(args, rundir, f"{label}-a.toml")
    near = Server(args, rundir, f"{label}-a", workers, "32000-33999", near_cfg,
                  ("--var", f"bridge_target=127.0.0.1:{far.port}"))
    out = os.path.join(near.dir, "load.json")
    a0, f0, m0, t0 = near.cpu(), far.cpu(), b.machine_cpu(), time.time()
    lp = load(args, f"127.0.0.1:{near.port}", "2001", args.calls, args.rate, 0, "none", out,
              max_time=int(args.calls / args.rate + 60))
    lp.wait()
    a1, f1, m1, t1 = near.cpu(), far.cpu(), b.machine_cpu(), time.time()
    near.stop()
    far.stop()
    rep = report_of(out)
    done = max(1, rep["completed"])
    ms = (a1 - a0) * 1000 / done
    row = {"workers": workers, "calls": args.calls, "rate": args.rate, "completed": rep["completed"],
           "failed": rep["failed"], "failed_reasons": rep["failed_reasons"],
           "cpu_ms_per_call": round(ms, 4), "calls_per_s_per_core": round(1000 / ms),
           "far_end_cpu_ms_per_call": round((f1 - f0) * 1000 / done, 4),
           "setup_p50_us": rep["setup_us"]["p50"], "setup_p99_us": rep["setup_us"]["p99"],
           # The load generator's CPU from its report: it has exited by now.
           **b.quiet_fields(m0, m1, (a1 - a0) + (f1 - f0) + rep.get("cpu_s", 0), t1 - t0),
           "server_cmd": b.fmt_cmd(near.cmd), "load_cmd": lp.cmd}
    b.log(f"B2BUA, {workers} worker(s): {row['cpu_ms_per_call']} CPU-ms per call "
          f"({row['calls_per_s_per_core']} calls/s per core), failed {row['failed']}")
    return row


def interleaved(args, run):
    """Runs `run(workers, i)` for every worker count, round-robin, --repeat times."""
    rows = []
    for i in range(args.repeat):
        for w in args.workers:
            b.quiet_check(set())
            rows.append(run(w, i))
    return rows


def summary(rows, key):
    """Per worker count: the median, min and max of `key` over the runs without a failed call,
    how many runs that is (`runs`), and how many runs had failed calls (`failed_runs`: left out
    of the figure, never dropped silently). A worker count whose every run failed has no
    median."""
    out = {}
    for w in sorted({r["workers"] for r in rows}):
        mine = [r for r in rows if r["workers"] == w]
        vals = [r[key] for r in mine if r["failed"] == 0]
        s = {"runs": len(vals), "failed_runs": len(mine) - len(vals),
             "not_quiet_runs": sum(1 for r in mine if r.get("quiet") is False)}
        if vals:
            s.update(median=round(statistics.median(vals), 4), min=min(vals), max=max(vals))
        out[str(w)] = s
    base = out.get("1", {}).get("median")
    for w, s in out.items():
        if base and "median" in s:
            s["speedup"] = round(int(w) * base / s["median"], 3)
    return out


def print_summary(name, summ):
    """One line per worker count; a failed run is named, never hidden."""
    for w, s in summ.items():
        failed = f", {s['failed_runs']} run(s) with failed calls left out" if s["failed_runs"] else ""
        if "median" not in s:
            print(f"{name} {w} worker(s): no run without failed calls{failed}", flush=True)
            continue
        speed = f", speed-up x{s['speedup']}" if "speedup" in s else ""
        if s.get("not_quiet_runs"):
            speed += (f"; {s['not_quiet_runs']} run(s) taken while other processes used over a "
                      f"quarter of a core (quiet: false)")
        print(f"{name} {w} worker(s): median {s['median']} (min {s['min']}, max {s['max']}) over "
              f"{s['runs']} run(s){failed}{speed}", flush=True)


def b2bua(args, rundir):
    rows = interleaved(args, lambda w, i: b2bua_once(args, rundir, f"b2b-w{w}-{i}", w))
    summ = summary(rows, "cpu_ms_per_call")
    print_summary("b2bua CPU ms per call", summ)
    save("b2bua", {"rows": rows, "summary": summ, "machine": b.machine_info(args)})


def pair_speedups(rows, key):
    """Per worker count W past the first (W0), each round's speed-up over W0 in the same round,
    (W / W0) x cost(W0) / cost(W) with `key` the cost, and their median, min and max. A round where
    either run had a failed call gives none and is counted in `failed_pairs`, never dropped silently."""
    counts = sorted({r["workers"] for r in rows})
    out = {}
    for w in counts[1:]:
        base, ours, failed = [], [], 0
        for i in sorted({r["round"] for r in rows}):
            pair = [next((r for r in rows if r["round"] == i and r["workers"] == n), None) for n in (counts[0], w)]
            if None in pair:
                continue
            if pair[0]["failed"] or pair[1]["failed"]:
                failed += 1
                continue
            base.append(pair[0][key])
            ours.append(pair[1][key])
        p = b.paired(base, ours)
        speedups = [round(w / counts[0] * x, 3) for x in p["ratios"]]
        out[str(w)] = {"speedups": speedups, "pairs": len(speedups), "failed_pairs": failed}
        if speedups:
            out[str(w)].update(median=round(statistics.median(speedups), 3), min=min(speedups), max=max(speedups))
    return out


SPEEDUP_WINDOW = 20  # s of steady state measured per run


def speedup(args, rundir):
    # The calls end a few seconds after the window: a run lasts about 2 x ramp + window + 10 s.
    hold = args.calls / args.rate + SPEEDUP_WINDOW + 8
    rows = []
    for i in range(args.repeat + 1):
        for w in args.workers if i % 2 == 0 else args.workers[::-1]:
            b.quiet_check(set())
            row = held_calls(args, rundir, f"sp-w{w}-{i}", w, args.calls, args.rate, hold, SPEEDUP_WINDOW)
            rows.append({**row, "round": i, "warm_up": i == 0})
        if i:
            got = pair_speedups([r for r in rows if r["round"] == i], "cpu_ms_per_call_s")
            b.log(f"pair {i}: " + ", ".join(f"{w} workers x{g['median']}" if g["pairs"] else f"{w} workers: failed calls"
                                             for w, g in got.items()))
    measured = [r for r in rows if not r["warm_up"]]
    summ = summary(measured, "cpu_ms_per_call_s")
    pairs = pair_speedups(measured, "cpu_ms_per_call_s")
    for w, p in pairs.items():
        # The figure is the pairs' median, not the ratio of the cost medians.
        summ[w].pop("speedup", None)
        if p["pairs"]:
            summ[w]["speedup"] = p["median"]
    print_summary("held-call CPU ms per call-second", summ)
    for w, p in pairs.items():
        failed = f"; {p['failed_pairs']} pair(s) with failed calls left out" if p["failed_pairs"] else ""
        print(f"speed-up {args.workers[0]} -> {w} workers: " +
              (f"median x{p['median']} over {p['pairs']} pairs (min {p['min']}, max {p['max']}; each pair "
               f"{', '.join(map(str, p['speedups']))}){failed}" if p["pairs"] else f"no pair without failed calls{failed}"),
              flush=True)
    save("speedup", {"rows": rows, "summary": summ, "pairs": pairs, "hold_s": hold, "window_s": SPEEDUP_WINDOW,
                     "machine": b.machine_info(args)})


def overload(args, rundir):
    runs = {}
    for flood in (False, True):
        label = "ov-flood" if flood else "ov-base"
        b.quiet_check(set())
        # One worker alone on core 0, every load generator on core 1: what the held calls suffer
        # is strowger's doing, not the flood's generator taking the server's core.
        srv = Server(args, rundir, label, 1, "10000-29999", config(args, rundir, f"{label}.toml"), cpus="0")
        held = os.path.join(srv.dir, "held.json")
        lp = load(args, f"127.0.0.1:{srv.port}", "44444", args.calls, args.rate, args.hold, "echo", held,
                  cpus="1")
        time.sleep(args.calls / args.rate + 3)
        fl = None
        if flood:
            fout = os.path.join(srv.dir, "flood.json")
            fl = load(args, f"127.0.0.1:{srv.port}", "9196", args.flood * 20, args.flood, 0, "none", fout,
                      threads=2, max_time=25, cpus="1")
        c0 = srv.cpu()
        time.sleep(20)
        c1 = srv.cpu()
        if fl:
            fl.wait()
        lp.wait()
        log_text = open(os.path.join(srv.dir, "strowger.log")).read()
        srv.stop()
        rep = report_of(held)
        row = {"flood_calls_per_s": args.flood if flood else 0, "held_calls": args.calls,
               "realtime_priority": args.realtime,
               "held_completed": rep["completed"], "held_failed": rep["failed"],
               "held_rtp_received": rep["rtp"]["received"], "held_rtp_lost": rep["rtp"]["lost"],
               "held_late_arrivals": rep["rtp"].get("late_arrivals", 0),
               "held_late_pct": round(100 * rep["rtp"].get("late_arrivals", 0) / max(1, rep["rtp"]["received"]), 4),
               "held_jitter_mean_us": rep["rtp"]["jitter_mean_us"], "held_jitter_max_us": rep["rtp"]["jitter_max_us"],
               "server_cpu_pct": round((c1 - c0) / 20 * 100, 1),
               "past_capacity_logged": "past capacity" in log_text,
               "server_cmd": b.fmt_cmd(srv.cmd), "held_cmd": lp.cmd}
        if fl:
            f = report_of(os.path.join(srv.dir, "flood.json"))
            row.update({"flood_attempted": f["attempted"], "flood_rate_achieved": f["calls_per_s"],
                        "flood_answered": f["answered"], "flood_refused_503": f["failed_reasons"].get("503", 0),
                        "flood_failed_reasons": f["failed_reasons"], "flood_cmd": fl.cmd})
        b.log(f"overload {'with' if flood else 'without'} flood: held calls failed {row['held_failed']}, "
              f"late {row['held_late_pct']} %, lost {row['held_rtp_lost']}"
              + (f"; flood {row['flood_attempted']} attempted at {row['flood_rate_achieved']}/s, "
                 f"{row['flood_answered']} answered, {row['flood_refused_503']} refused 503" if flood else ""))
        runs["flood" if flood else "base"] = row
    save("overload", {**runs, "machine": b.machine_info(args)})


def flood(args, rundir):
    cfg = config(args, rundir, "flood.toml")
    text = open(cfg).read()
    # Loopback is whitelisted by default; the flood comes from 127.2.x.y, so only the trusted
    # load generator (127.0.0.1, config()) is spared here.
    text, w = re.subn(r'(?m)^whitelist = .*$', "whitelist = []", text)
    if w != 1:
        b.log("flood: this build has no [security] section (no trust, no bans): measuring it as it is")
    text += '\n[[users]]\nuser = "1001"\npassword = "flood-bench-secret"\n'
    open(cfg, "w").write(text)
    srv = Server(args, rundir, "flood", 2, "10000-29999", cfg)
    target = f"127.0.0.1:{srv.port}"
    window = 15
    held = os.path.join(srv.dir, "held.json")
    # Held until just after the last window: strowger-load writes its report when its calls end.
    hp = load(args, target, "44444", args.calls, args.rate, 3 * window + 25, "echo", held)
    time.sleep(args.calls / args.rate + 3)
    real_s = 3 * window + 10
    real = os.path.join(srv.dir, "real.json")
    rp = load(args, target, "9196", int(args.real_rate * real_s), args.real_rate, 1, "echo", real)
    time.sleep(2)

    def window_cpu(gen_cmd):
        g = None
        if gen_cmd:
            g = b.spawn(gen_cmd, srv.dir, open(os.path.join(srv.dir, "gen.json"), "w"),
                        open(os.path.join(srv.dir, "gen.err"), "a"))
        c0, u0 = srv.cpu(), user_cpu(srv.proc.pid)
        time.sleep(window)
        c1, u1 = srv.cpu(), user_cpu(srv.proc.pid)
        out = None
        if g:
            g.wait(30)
            out = json.loads(open(os.path.join(srv.dir, "gen.json")).read())
        return c1 - c0, u1 - u0, out

    flood_cmd = [args.load_bin, "flood", "--target", target]
    base_cpu, base_user, _ = window_cpu(None)
    fl_cmd = flood_cmd + ["--seconds", str(window), "--invites", str(args.flood_invites),
                          "--digests", str(args.flood_digests)]
    fl_cpu, fl_user, fl = window_cpu(fl_cmd)
    # One address cracks a password until it is banned, then floods from the banned address.
    ban_cmd = flood_cmd + ["--seconds", "3", "--sources", "1", "--invites", "0", "--digests", "100"]
    subprocess.run(ban_cmd, capture_output=True, timeout=30)
    bn_cmd = flood_cmd + ["--seconds", str(window), "--from", "127.2.0.1", "--invites", str(args.flood_invites)]
    bn_cpu, bn_user, bn = window_cpu(bn_cmd)
    rp.wait()
    hp.wait()
    srv.stop()
    hrep, rrep = report_of(held), report_of(real)
    fl_n = sum(fl["sent"].values())
    bn_n = bn["sent"].get("invite", 0)
    row = {"held_calls": args.calls, "real_calls_per_s": args.real_rate,
           "real_attempted": rrep["attempted"], "real_completed": rrep["completed"], "real_failed": rrep["failed"],
           "real_failed_reasons": rrep["failed_reasons"],
           "held_failed": hrep["failed"], "held_late_arrivals": hrep["rtp"].get("late_arrivals", 0),
           "held_late_pct": round(100 * hrep["rtp"].get("late_arrivals", 0) / max(1, hrep["rtp"]["received"]), 4),
           "held_rtp_lost": hrep["rtp"]["lost"],
           "base_cpu_pct": round(base_cpu / window * 100, 1), "flood_cpu_pct": round(fl_cpu / window * 100, 1),
           "banned_cpu_pct": round(bn_cpu / window * 100, 1),
           "flood": fl, "flood_requests": fl_n,
           "flood_us_per_request": round((fl_cpu - base_cpu) * 1e6 / max(1, fl_n), 2),
           "flood_user_us_per_request": round((fl_user - base_user) * 1e6 / max(1, fl_n), 2),
           "banned": bn, "banned_datagrams": bn_n,
           "banned_us_per_datagram": round((bn_cpu - base_cpu) * 1e6 / max(1, bn_n), 3),
           "banned_user_us_per_datagram": round((bn_user - base_user) * 1e6 / max(1, bn_n), 3),
           "server_cmd": b.fmt_cmd(srv.cmd), "held_cmd": hp.cmd, "real_cmd": rp.cmd,
           "flood_cmd": b.fmt_cmd(fl_cmd), "banned_cmd": b.fmt_cmd(bn_cmd)}
    b.log(f"flood: real calls {row['real_completed']}/{row['real_attempted']} completed, "
          f"{row['real_failed']} failed; held late {row['held_late_pct']} %; "
          f"{fl_n} flood requests, {row['flood_us_per_request']} µs each "
          f"({row['flood_user_us_per_request']} µs user); banned datagram {row['banned_us_per_datagram']} µs "
          f"({row['banned_user_us_per_datagram']} µs user); answers {fl['statuses']} / banned {bn['statuses']}")
    save(os.environ.get("FLOOD_SECTION", "flood"), {"rows": [row], "machine": b.machine_info(args)})


def table(title, header, rows):
    """A markdown table under a heading: `header` names the columns, `rows` holds lists of cells."""
    return [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows), ""]


def report(args, _rundir):
    res = json.load(open(RESULTS))
    lines = []
    for sec, how in (("capacity", "a port pair per call"),
                     ("capacity_shared", "rtp.shared_ports, strowger-load --address-per-call")):
        if sec not in res:
            continue
        lines += table(f"Capacity: held playback+echo calls (strowger-load --rtp echo), {how}",
                       ["calls", "workers", "real-time priority", "server CPU %", "CPU-ms per call-second", "KiB per call", "failed",
                        "SIP retransmissions", "late frames %", "RTP lost", "load generator CPU %"],
                       [[r["calls"], r["workers"], r.get("realtime_priority") or "-", r["server_cpu_pct"], r["cpu_ms_per_call_s"], r["rss_kib_per_call"],
                         r["failed"], r.get("retransmissions", "-"), r["late_pct"], r["rtp_lost"], r["load_cpu_pct"]]
                        for r in res[sec]["rows"]])
    if "shared" in res:
        lines += table("rtp.shared_ports against a port pair per call, alternated (CPU-ms per call-second; late frames %)",
                       ["calls", "round", "per-call ports, one far-end address", "per-call ports, an address per far end",
                        "shared ports, an address per far end", "shared ÷ per-call"],
                       [[r["calls"], r["round"]] + [f"{r[k]['cpu_ms_per_call_s']} ({r[k]['late_pct']} %)"
                                                    for k in ("own", "own_per_call_far_ends", "shared_per_call_far_ends")]
                        + [r["ratio"]] for r in res["shared"]["rows"]])
    if "floor" in res:
        lines += table("Against the kernel's own cost for the same packets (strowger-load floor), alternated",
                       ["calls", "round", "strowger CPU-ms per call-s: a pair per call / shared ports",
                        "floor: a socket per call", "floor: one socket", "echo: one peer / an address per call",
                        "pair per call ÷ floor (per call / one socket)",
                        "shared ports ÷ floor (per call / one socket / echo of an address per call)"],
                       [[r["calls"], r["round"], f"{r['strowger']} / {r.get('strowger_shared', '-')}", r["floor"],
                         r["floor_one_socket"], f"{r.get('echo_one_peer', '-')} / {r.get('echo_address_per_call', '-')}",
                         f"{r['ratio']} / {r['ratio_one_socket']}",
                         f"{r.get('ratio_shared', '-')} / {r.get('ratio_shared_one_socket', '-')} / "
                         f"{r.get('ratio_shared_echo', '-')}"]
                        for r in res["floor"]["rows"]])
    for sec, what in (("b2bua", "CPU-ms per B2BUA call"),
                      ("speedup", "CPU-ms per call-second (held echo calls)")):
        if sec in res:
            lines += table(f"{sec}: {what}, median of interleaved runs",
                           ["workers", "median", "min", "max", "runs", "implied speed-up (W × cost₁ / cost_W)"],
                           [[w, x["median"], x["min"], x["max"], x["runs"], x.get("speedup", "")]
                            for w, x in res[sec]["summary"].items()])
    if "overload" in res:
        o = res["overload"]
        lines += ["### Overload: held calls while new calls flood in", "",
                  "| run | held calls failed | late frames % | RTP lost | jitter mean µs | flood attempted | "
                  "flood calls/s | answered | refused 503 |", "|---|---|---|---|---|---|---|---|---|"]
        for k in ("base", "flood"):
            r = o[k]
            lines.append(f"| {k} | {r['held_failed']} | {r['held_late_pct']} | {r['held_rtp_lost']} | "
                         f"{r['held_jitter_mean_us']} | {r.get('flood_attempted', '-')} | "
                         f"{r.get('flood_rate_achieved', '-')} | {r.get('flood_answered', '-')} | "
                         f"{r.get('flood_refused_503', '-')} |")
        lines.append("")
    md = os.path.join(b.RESULTS, "scale.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    b.log(f"wrote {os.path.relpath(md, b.ROOT)}")
    plot(res)
    b.summary(args, "scale: the tables of bench/results/scale.json", "\n".join(lines))


def plot(res):
    """CPU and late frames against calls, and speed-up against workers, in one PNG (gnuplot)."""
    if "capacity" not in res:
        return
    # One line per capacity run and scheduler, named by port mode, priority and date (runs from
    # different days may come from different hosts).
    d = os.path.join(b.RESULTS, "scale.dat")
    cpu, late = [], []
    with open(d, "w") as f:
        for sec, how in (("capacity", "a pair per call"), ("capacity_shared", "shared ports")):
            rows = res.get(sec, {}).get("rows", [])
            date = res.get(sec, {}).get("machine", {}).get("date", "")[:10]
            for rt in sorted({r.get("realtime_priority") or 0 for r in rows}):
                group = [r for r in rows if (r.get("realtime_priority") or 0) == rt]
                f.write(f"# {sec} {rt}\n")
                for r in group:
                    f.write(f"{r['calls']} {r['cpu_ms_per_call_s']} {r['late_pct']} {r['server_cpu_pct']}\n")
                f.write("\n\n")
                title = f"{how}{', real-time' if rt else ''} ({date})"
                idx = len(cpu)
                cpu.append(f'"{d}" index {idx} using 1:2 with linespoints lw 2 title "{title}"')
                late.append(f'"{d}" index {idx} using 1:3 with linespoints lw 2 title "{title}"')
    # The floor run's medians (bars: min to max over its rounds), drawn beside the curves: strowger
    # and the bare echo of the same packets, measured minutes apart on one host.
    fl = os.path.join(b.RESULTS, "floor.dat")
    floor_rows = res.get("floor", {}).get("rows", [])
    fdate = res.get("floor", {}).get("machine", {}).get("date", "")[:10]
    with open(fl, "w") as f:
        for key, title in (("strowger_shared", "shared ports, floor run"),
                           ("echo_address_per_call", "bare echo of the same packets"),
                           ("echo_one_peer", "bare echo, one far end")):
            vals = {}
            for r in floor_rows:
                if key in r:
                    vals.setdefault(r["calls"], []).append(r[key])
            if not vals:
                continue
            f.write(f"# {key}\n")
            for n, v in sorted(vals.items()):
                f.write(f"{n} {statistics.median(v)} {min(v)} {max(v)}\n")
            f.write("\n\n")
            idx = sum(1 for c in cpu if str(fl) in c)
            cpu.append(f'"{fl}" index {idx} using 1:2:3:4 with yerrorbars pt 7 ps 1.2 title "{title} ({fdate})"')
    sp = os.path.join(b.RESULTS, "speedup.dat")
    with open(sp, "w") as f:
        for sec in ("speedup", "b2bua"):
            for w, s in res.get(sec, {}).get("summary", {}).items():
                f.write(f"{w} {s.get('speedup', 1)} {sec}\n")
    png = os.path.join(b.RESULTS, "scale.png")
    script = f"""
set terminal pngcairo size 1500,600 font ",10"
set output "{png}"
set multiplot layout 1,3
set title "Server CPU per call-second (playback + echo)"
set xlabel "concurrent calls"; set ylabel "CPU-ms per call-second"; set yrange [0:0.6]; set grid
set key below maxcols 1
plot {", ".join(cpu)}, 0.20 with lines dt 2 title "kernel floor (peers.md's host)", 1/0 with lines dt 3 title "Asterisk, 400 calls (peers.md): 2.18, off the scale"
set key default
set title "Late frames (> 20 ms behind) at the caller"
set ylabel "% of frames received"; set yrange [0:*]
plot {", ".join(late)}, 0.1 with lines dt 2 title "0.1 % limit"
set title "Speed-up against workers"
set xlabel "workers"; set ylabel "speed-up"; set xrange [0.5:2.5]; set yrange [0:2.2]; set xtics 1
plot x with lines dt 2 title "ideal", "< grep speedup {sp}" using 1:2 with linespoints lw 2 title "media (held calls)", "< grep b2bua {sp}" using 1:2 with linespoints lw 2 title "B2BUA signalling"
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    b.log(f"wrote {os.path.relpath(png, b.ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="+", choices=["capacity", "floor", "shared", "b2bua", "speedup", "overload", "flood",
                                                  "metrics", "combined", "report"])
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--levels", type=int, nargs="+", default=[1000, 2000, 3000, 4000, 5000])
    ap.add_argument("--workers", type=int, nargs="+", default=None,
                    help="worker counts (default: 1 2 for speedup and b2bua, 2 for the others)")
    ap.add_argument("--calls", type=int, default=None,
                    help="calls per run (default: per test, see CALLS; speedup 2,000, the others 20,000)")
    ap.add_argument("--rate", type=float, default=None, help="new calls per second (default 200; speedup 400)")
    ap.add_argument("--b2b-rate", type=int, default=1000, help="metrics, combined: B2BUA calls/s offered")
    ap.add_argument("--parts", default="held,b2bua,stream",
                    help="combined: which parts, comma-separated, of held, b2bua, stream")
    ap.add_argument("--scrape-interval", type=float, default=1.0,
                    help="combined: seconds between /metrics scrapes in the held part's watched windows (0: back "
                         "to back, to measure what one scrape costs)")
    ap.add_argument("--stream-held", type=int, default=1000,
                    help="combined: held echo calls beside the B2BUA calls while the event stream is measured")
    ap.add_argument("--hold", type=float, default=60)
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds of interleaved runs (default 3; speedup 6 pairs after its warm-up pair)")
    ap.add_argument("--flood", type=int, default=15000, help="overload: new calls/s offered")
    ap.add_argument("--real-rate", type=float, default=100, help="flood: real calls/s beside the attack")
    ap.add_argument("--flood-invites", type=int, default=20000, help="flood: unauthenticated INVITEs/s")
    ap.add_argument("--flood-digests", type=int, default=5000, help="flood: wrong digest REGISTERs/s")
    ap.add_argument("--shared", action="store_true",
                    help="capacity: rtp.shared_ports on the server, --address-per-call on the generator")
    ap.add_argument("--realtime", type=int, default=0,
                    help="general.realtime_priority of the server's workers (SCHED_FIFO; 0: the normal scheduler)")
    b.add_record_flag(ap)
    args = ap.parse_args()
    args.server = "strowger"
    args.sipp_rcvbuf = None
    signal_setup()
    rundir = os.path.join(b.OUT, "scale-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(rundir, exist_ok=True)
    b.log(f"run directory {os.path.relpath(rundir, b.ROOT)}")
    given = (args.calls, args.workers, args.rate, args.repeat)
    try:
        for t in args.tests:
            # Each test's own defaults where none were given: a bare `scale.py speedup` compares
            # 1 and 2 workers with 2,000 held calls per run, not 20,000.
            args.calls = given[0] or CALLS.get(t, 20000)
            args.workers = given[1] or WORKERS.get(t, [2])
            args.rate = given[2] or RATE.get(t, 200)
            args.repeat = given[3] or REPEAT.get(t, 3)
            globals()[t](args, rundir)
    finally:
        b.kill_children()


CALLS = {"speedup": 2000}  # calls per run where a test's default is not 20,000
WORKERS = {"speedup": [1, 2], "b2bua": [1, 2]}  # worker counts where a test's default is not [2]
# speedup: 2,000 calls up in 5 s, and 6 measured pairs (each about 80 s) keep a run under 10 minutes.
RATE = {"speedup": 400}  # new calls per second where a test's default is not 200
REPEAT = {"speedup": 6}  # rounds where a test's default is not 3


def signal_setup():
    import signal
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, b._on_signal)


if __name__ == "__main__":
    main()
