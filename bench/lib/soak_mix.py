#!/usr/bin/env python3
"""Soak: a steady mix of calls and registrations through one strowger, with faults, watched every 10 s.

The mix, at --rate calls/s in all (shares of the rate in brackets):
  - short echo calls to 9196 sending RTP (40 %), held 2 s; music-less playback calls to 44444 echoing it back
    (20 %), held 3 s; long echo calls (2 %), held 60 s — strowger-load;
  - bridges through 2001 to a SIPp UAS (20 %), held 2 s — strowger-load, the UAS a SIPp `uas`;
  - holds by re-INVITE on 9196 (tests/sipp/hold.xml), CANCELs while 5555 rings (tests/sipp/cancel.xml),
    callers that vanish after the ACK (bench/sipp/abandon.xml: strowger's media timeout ends them) — SIPp,
    6 % each;
  - --users phones registering with digest authentication every 60 s from one port (each round refreshes
    their contacts).
The load runs in rounds of 60 s, so each failure is placed in its minute. With --faults (the default) the store
(Redis, with an append-only file) is restarted twice, the SIPp UAS stops answering for 30 s (SIGSTOP), and a burst
of --burst-rate calls/s runs for 20 s; rounds that overlap a fault are marked, and their failures are reported but
allowed.

Every 10 s: strowger's RSS, open files, threads, and from /metrics the calls, call legs, media legs, SIP
transactions, call timers and registered bindings, into soak.csv and soak.png (gnuplot). After the load, a drain
(media timeout, hold timeout and transaction timers) and a last sample. The run fails if:
  - RSS grows after warm-up: the fitted slope over the run, or the last sample against the first after warm-up,
    more than --rss-growth (default 5 %);
  - open files grow after warm-up by more than 4;
  - after the drain, any call, leg, media leg or transaction is left;
  - a call failed outside a fault round;
  - the CDR file's lines differ from the calls strowger counted as ended, or a Call-ID appears twice in it;
  - after the last registration round, fewer bindings are registered than phones.

    python3 bench/lib/soak_mix.py [--rate 100] [--minutes 30] [--calls N] [--users 500] [--no-faults]

`--calls` bounds the calls of the whole mix, SIPp's too (the run ends at whichever of --calls and --minutes comes
first; without --minutes, --calls at --rate sets the time, so `--calls 1000000 --rate 100` is one command).
Results go to bench/out/soak-TIME/ (untracked); --record also copies soak.json and soak.png into bench/results/.
Loopback only; every process is bounded in calls and time.
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import scale as S  # noqa: E402

PASSWORD = "soak-secret"
FIRST_USER = 300000
ROUND_S = 60
# Short enough that the drain ends the held calls whose far end vanished (strowger's default is an hour).
HOLD_TIMEOUT_S = 30
SAMPLE_S = 10
GAUGES = ["calls_in_progress", "call_legs", "media_legs", "sip_transactions", "call_timers"]
CSV_FIELDS = ["t", "rss_kib", "open_files", "threads"] + GAUGES + ["calls_ended", "registered_users"]
SIPP_SCENARIOS = [  # (label, scenario, service, share of the rate)
    ("hold", os.path.join(b.ROOT, "tests", "sipp", "hold.xml"), "9196", 0.06),
    ("cancel", os.path.join(b.ROOT, "tests", "sipp", "cancel.xml"), "5555", 0.06),
    ("abandon", os.path.join(b.ROOT, "bench", "sipp", "abandon.xml"), "9196", 0.06),
]
LOAD_MIX = [  # (label, extension, share of the rate, hold s, RTP mode)
    ("echo", "9196", 0.40, 2, "send"),
    ("playback", "44444", 0.20, 3, "echo"),
    ("long", "9196", 0.02, 60, "send"),
    ("bridge", "2001", 0.20, 2, "send"),
]


def config(args, rundir):
    """The embedded configuration with the bench's settings (scale.config), a 10 s media timeout (the abandoned
    calls end by it) and a HOLD_TIMEOUT_S hold timeout (held calls whose far end vanished end by it), no OPTIONS keep-alives to the phones (strowger-load does not answer them, and after the
    drain no transaction may be left), 5555 ringing for the CANCELs (before the context's last rule, which
    refuses every other extension), and the phones as users."""
    path = S.config(args, rundir, "soak.toml")
    text = open(path).read()
    text = re.sub(r"(?m)^media_timeout_s = 0$", "media_timeout_s = 10", text)
    text, held = re.subn(r"(?m)^hold_timeout_s = \d+$", f"hold_timeout_s = {HOLD_TIMEOUT_S}", text)
    text, n = re.subn(r"(?m)^keepalive_s = \d+$", "keepalive_s = 0", text)
    rule = '[[dialplan.contexts.default.rules]]\nexten = "5555"\nsteps = ["ringing", "wait 30"]\n\n'
    at = text.find("[[dialplan.contexts.default.rules]]\nregex = \"^2(")
    if n != 1 or at < 0:
        sys.exit("soak: the embedded configuration has no registrar.keepalive_s or 2XXX rule to work from")
    if held != 1:
        sys.exit(f"soak: {args.bin} has no rtp.hold_timeout_s (held calls whose far end vanished would never "
                 "end): rebuild it (cargo build --release)")
    text = text[:at] + rule + text[at:]
    for u in range(FIRST_USER, FIRST_USER + args.users):
        text += f'\n[[users]]\nuser = "{u}"\npassword = "{PASSWORD}"\n'
    with open(path, "w") as f:
        f.write(text)
    return path


class Redis:
    """redis-server on a free port with an append-only file, so a restart keeps what was acknowledged."""

    def __init__(self, rundir):
        self.port = b.alloc_ports(1, 1)
        self.dir = os.path.join(rundir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.start()

    def start(self):
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
               "--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        self.proc = b.spawn(cmd, self.dir, open(os.path.join(self.dir, "redis.log"), "a"), subprocess.STDOUT)
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                              text=True).stdout.strip() == "PONG":
                return
            time.sleep(0.1)
        sys.exit(f"soak: redis-server did not start: see {self.dir}/redis.log")

    def restart(self):
        self.proc.terminate()
        self.proc.wait(20)
        time.sleep(2)
        self.start()

    def url(self):
        return f"redis://127.0.0.1:{self.port}"


def scrape(api_port, token):
    """The gauges of GAUGES from /metrics (None where the series is missing), and the calls ended."""
    metrics = S.scrape(api_port, token)
    out = {g: metrics.get(g) for g in GAUGES}
    out["calls_ended"] = metrics.get("calls_total", 0.0)
    return out


def registered(api_port, token):
    """Users with at least one contact, through the API's paginated registrations list."""
    users, after = 0, ""
    while True:
        url = f"http://127.0.0.1:{api_port}/api/v1/registrations?limit=500" + (f"&after={after}" if after else "")
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        page = json.load(urllib.request.urlopen(req, timeout=10))
        users += sum(1 for r in page["registrations"] if r["contacts"])
        after = page.get("next")
        if not after:
            return users


def transaction_kinds(api_port, token):
    """The SIP transactions left, by kind ("client INVITE Proceeding (no timer)": n), summed over the workers."""
    req = urllib.request.Request(f"http://127.0.0.1:{api_port}/api/v1/stats",
                                 headers={"Authorization": f"Bearer {token}"})
    kinds = {}
    for w in json.load(urllib.request.urlopen(req, timeout=10))["workers"]:
        for kind, n in w.get("transactions", {}).items():
            kinds[kind] = kinds.get(kind, 0) + n
    return kinds


class Sampler(threading.Thread):
    """Every SAMPLE_S seconds a row: time, RSS, open files, threads and the gauges."""

    def __init__(self, srv, api_port, token, path):
        super().__init__(daemon=True)
        self.srv, self.api_port, self.token = srv, api_port, token
        self.rows, self.stop, self.path = [], threading.Event(), path
        self.t0 = time.time()

    def sample(self):
        pid = self.srv.proc.pid
        row = {"t": round(time.time() - self.t0, 1), "rss_kib": b.proc_status(pid, "VmRSS"),
               "open_files": b.fd_count(pid), "threads": b.proc_status(pid, "Threads")}
        # A store restart makes the registrations list answer 503: the row keeps what it has and the
        # sampling goes on (the CSV's columns are fixed, so a partial row is written with gaps).
        try:
            row.update(scrape(self.api_port, self.token))
            row["registered_users"] = registered(self.api_port, self.token)
        except (OSError, ValueError, KeyError) as e:
            b.log(f"scrape failed: {e}")
        self.rows.append(row)
        with open(self.path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS, restval="")
            w.writeheader()
            w.writerows(self.rows)
        return row

    def run(self):
        while not self.stop.wait(SAMPLE_S):
            self.sample()


def slope(points):
    """Least-squares slope of (x, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def load_round(args, rundir, port, n, rate_scale=1.0, seconds=ROUND_S, label=""):
    """Starts one round's strowger-load processes; returns [(label, process, report path, calls)]."""
    procs = []
    for kind, ext, share, hold, rtp in LOAD_MIX:
        rate = max(1, round(args.rate * share * rate_scale))
        calls = rate * seconds
        out = os.path.join(rundir, f"load-{n:04d}-{label or kind}.json")
        cmd = [args.load_bin, "call", "--target", f"127.0.0.1:{port}", "--ext", ext, "--calls", str(calls),
               "--rate", str(rate), "--hold", str(hold), "--rtp", rtp, "--json", "--quiet",
               "--max-time", str(seconds + hold + 60)]
        procs.append((label or kind, spawn_load(cmd, rundir, out), out, calls))
    return procs


def spawn_load(cmd, rundir, out):
    """strowger-load on an RTP range free at this moment (its SIP socket takes a port of the kernel's). Ranges
    chosen once at the start were taken over a long run by other programs of a shared host, and whole rounds lost;
    a range may still be taken between the check and the bind ("Address already in use"): then once more, on
    another. strowger-load binds at start, before it places a call, so a retried round loses nothing."""
    for attempt in range(2):
        lo = b.alloc_ports(100)
        p, taken = spawn_bound(cmd + ["--rtp-ports", f"{lo}-{lo + 99}"], rundir, out)
        # Bound or failed by now: a port it holds is not free to the next alloc_ports, the others are.
        b.release_ports(lo, 100)
        if not taken or attempt:
            return p
        b.log(f"strowger-load found RTP ports {lo}-{lo + 99} taken: once more on others")
    return p


def spawn_bound(cmd, rundir, out):
    """Starts strowger-load (report to out, errors to out.err) and gives it half a second to bind its sockets;
    returns (process, whether it failed for a port another program holds)."""
    p = b.spawn(cmd, rundir, open(out, "w"), open(out + ".err", "w"))
    try:
        p.wait(0.5)
    except subprocess.TimeoutExpired:
        return p, False
    with open(out + ".err") as f:
        return p, "Address already in use" in f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rate", type=float, default=100, help="calls/s of the whole mix (default 100)")
    ap.add_argument("--minutes", type=float, default=0,
                    help="load time, minutes (default: --calls at --rate, else 30)")
    ap.add_argument("--calls", type=int, default=0, help="stop the load once the mix placed this many (0: none)")
    ap.add_argument("--users", type=int, default=500, help="phones registering every 60 s (default 500)")
    ap.add_argument("--warm", type=float, default=6,
                    help="warm-up, minutes, before growth is judged (default 6: registrations expire after 5)")
    ap.add_argument("--rss-growth", type=float, default=0.05, help="RSS growth allowed after warm-up (0.05)")
    ap.add_argument("--burst-rate", type=int, default=3000, help="the 20 s burst's calls/s (default 3000)")
    ap.add_argument("--rtp-ports", metavar="LO-HI",
                    help="strowger's RTP range (default: 20 ports per call/s found free at start); on a host whose "
                         "other programs take ports as they go, a range above the kernel's ephemeral ports")
    ap.add_argument("--no-faults", dest="faults", action="store_false", help="no store restarts, stall or burst")
    b.add_record_flag(ap)
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    args = ap.parse_args()
    args.minutes = args.minutes or (args.calls / args.rate / 60 if args.calls else 30)
    for tool in ("sipp", "redis-server", "redis-cli", "gnuplot"):
        if not shutil.which(tool):
            sys.exit(f"soak: {tool} is missing: run scripts/setup.sh (Debian packages sip-tester, redis-server, "
                     "gnuplot-nox)")
    S.signal_setup()
    rundir = os.path.join(b.ROOT, "bench", "out", time.strftime("soak-%Y%m%d-%H%M%S"))
    os.makedirs(rundir)
    b.log(f"soak: {args.rate:g} calls/s for {args.minutes:g} min"
          f"{f' or {args.calls} calls' if args.calls else ''}, {args.users} phones, faults "
          f"{'on' if args.faults else 'off'}; output in {os.path.relpath(rundir, b.ROOT)}")

    redis = Redis(rundir)
    uas = b.Sipp(rundir, "uas", ["-sn", "uas", "-i", "127.0.0.1", "-p", str(b.alloc_ports(1, 1)),
                                 "-m", "100000000"], args.minutes * 60 + 600)
    uas_port = int(uas.cmd[uas.cmd.index("-p") + 1])
    api_port = b.alloc_ports(1, 1)
    args.workers = 2
    cfg = config(args, rundir)
    # Some 4 calls up per call/s (2 RTP ports a leg, 1.1 legs a call), 5 times over: on a machine other tests
    # share, a smaller range is likelier to find its ports free.
    nrtp = max(2000, round(args.rate * 20))
    rtp = args.rtp_ports or f"{(lo := b.alloc_ports(nrtp))}-{lo + nrtp - 1}"
    srv = S.Server(args, rundir, "strowger", 2, rtp, cfg,
                   extra=("--store", redis.url(), "--api-listen", f"127.0.0.1:{api_port}",
                          "--var", f"bridge_target=127.0.0.1:{uas_port}"))
    token = open(os.path.join(srv.dir, "data", "api.token")).read().strip()
    sampler = Sampler(srv, api_port, token, os.path.join(rundir, "soak.csv"))
    sampler.sample()
    sampler.start()

    # The phones register from one port every round, so a round refreshes their contacts as a phone does;
    # from a new port each round every phone would gain a contact a minute until its first lapsed.
    reg_port = b.alloc_ports(1, 1)
    # Whole rounds, rounded up: `--calls N` places at least N (83 rounds of 12,000 fell 4,000 short of a million).
    rounds = max(1, math.ceil(args.minutes * 60 / ROUND_S))
    faults = {}
    if args.faults and rounds >= 4:
        faults = {int(rounds * 0.3): "store restart", int(rounds * 0.5): "UAS stalls 30 s",
                  int(rounds * 0.65): "store restart", int(rounds * 0.8): "burst"}
    running, sipps, placed, done, windows = [], [], 0, [], []
    t0 = time.time()
    for n in range(rounds):
        fault = faults.get(n)
        started = time.time()
        running += [(n, fault, *p) for p in load_round(args, rundir, srv.port, n)]
        placed += sum(r[5] for r in running[-len(LOAD_MIX):])
        for label, scenario, service, share in SIPP_SCENARIOS:
            rate = max(1, round(args.rate * share))
            sipps.append((n, fault, label, b.Sipp(rundir, f"sipp-{n:04d}-{label}", [
                "-sf", scenario, "-s", service, f"127.0.0.1:{srv.port}", "-i", "127.0.0.1",
                "-p", str(b.alloc_ports(1, 1)), "-mp", str(b.media_port()), "-m", str(rate * ROUND_S),
                "-r", str(rate), "-l", str(rate * 40)], ROUND_S + 90)))
            placed += rate * ROUND_S
        reg_cmd = [args.load_bin, "register", "--target", f"127.0.0.1:{srv.port}", "--users", str(args.users),
                   "--rate", str(min(args.users, 200)), "--auth", PASSWORD, "--first", str(FIRST_USER),
                   "--expires", "300", "--json", "--max-time", "50"]
        reg_out = os.path.join(rundir, f"register-{n:04d}.json")
        reg, taken = spawn_bound(reg_cmd + ["--port", str(reg_port)], rundir, reg_out)
        if taken:
            # Free between rounds, the port went to another program: the phones move to another (their contacts
            # at the old one lapse in 300 s).
            old, reg_port = reg_port, b.alloc_ports(1, 1)
            b.log(f"round {n}: the phones' port {old} is taken: they register from {reg_port} on")
            reg, _ = spawn_bound(reg_cmd + ["--port", str(reg_port)], rundir, reg_out)
        if fault == "store restart":
            time.sleep(15)
            b.log(f"round {n}: restarting the store")
            at = time.time() - sampler.t0
            redis.restart()
            windows.append((at, time.time() - sampler.t0))
        elif fault == "UAS stalls 30 s":
            time.sleep(10)
            b.log(f"round {n}: the SIPp UAS stops answering for 30 s")
            at = time.time() - sampler.t0
            os.kill(uas.pid, signal.SIGSTOP)
            time.sleep(30)
            os.kill(uas.pid, signal.SIGCONT)
            windows.append((at, at + 30))
        elif fault == "burst":
            time.sleep(20)
            b.log(f"round {n}: a burst of {args.burst_rate} calls/s for 20 s")
            burst = os.path.join(rundir, f"load-{n:04d}-burst.json")
            cmd = [args.load_bin, "call", "--target", f"127.0.0.1:{srv.port}", "--ext", "9196",
                   "--calls", str(args.burst_rate * 20), "--rate", str(args.burst_rate), "--hold", "0",
                   "--rtp", "none", "--json", "--quiet", "--threads", "2", "--max-time", "80"]
            running.append((n, fault, "burst", spawn_load(cmd, rundir, burst), burst, args.burst_rate * 20))
            at = time.time() - sampler.t0
            windows.append((at, at + 20))
        reg.wait(60)
        done += [r for r in running if r[3].poll() is not None]
        running = [r for r in running if r[3].poll() is None]
        time.sleep(max(0, started + ROUND_S - time.time()))
        row = sampler.rows[-1]
        b.log(f"round {n + 1}/{rounds}{f' [{fault}]' if fault else ''}: {placed} calls placed; RSS "
              f"{row['rss_kib']} KiB, {row['open_files']} files, {row.get('calls_in_progress')} calls up, "
              f"{row.get('registered_users')} users registered")
        if args.calls and placed >= args.calls:
            break
    load_s = time.time() - t0
    b.log("load done: waiting for the last calls, then the drain (media and hold timeouts, transaction timers)")
    for r in running:
        r[3].wait(200)
    done += running
    for _, _, _, s in sipps:
        s.wait(120)
    # The drain: a vanished caller's call ends by the media timeout (10 s), or by the hold timeout
    # (HOLD_TIMEOUT_S) if it held the call, and the BYE strowger sends it retransmits until Timer F (32 s), so the
    # call table can take a minute to empty: sample every 10 s until nothing is left, for at most a minute past
    # that, and judge the last sample.
    sampler.stop.set()
    sampler.join()
    deadline = time.time() + HOLD_TIMEOUT_S + 32 + 60
    time.sleep(45)
    final = sampler.sample()
    while time.time() < deadline and any(final.get(g) for g in ("calls_in_progress", "call_legs", "media_legs",
                                                                   "sip_transactions")):
        time.sleep(SAMPLE_S)
        final = sampler.sample()

    # Judge.
    problems, failed_outside, failed_in_faults, completed, attempted = [], 0, 0, 0, 0
    for n, fault, label, _, out, calls in done:
        try:
            rep = json.load(open(out))
        except (OSError, ValueError):
            problems.append(f"round {n} {label}: no report ({out})")
            continue
        attempted += rep["attempted"]
        completed += rep["completed"]
        if rep["failed"]:
            if fault:
                failed_in_faults += rep["failed"]
            else:
                failed_outside += rep["failed"]
                problems.append(f"round {n} {label}: {rep['failed']} calls failed {rep['failed_reasons']}")
    sipp_calls = {"successful": 0, "failed": 0}
    for n, fault, label, s in sipps:
        st = s.stat()
        sipp_calls["successful"] += st["SuccessfulCall(C)"]
        sipp_calls["failed"] += st["FailedCall(C)"]
        if st["FailedCall(C)"] and not fault:
            failed_outside += st["FailedCall(C)"]
            problems.append(f"round {n} SIPp {label}: {st['FailedCall(C)']} calls failed {s.failure_reasons()}")
    warm_t = args.warm * 60
    # Growth is judged on the samples after warm-up, leaving out each fault and the two minutes after it (the
    # sweep that gives a burst's memory back runs every 30 s); the last sample, after the drain, is judged too.
    after = [r for r in sampler.rows[:-1] if r["t"] >= warm_t
             and not any(a <= r["t"] <= e + 120 for a, e in windows)]
    rss_fit = rss_end = None
    if len(after) >= 3:
        first = after[0]["rss_kib"]
        s = slope([(r["t"], r["rss_kib"]) for r in after])
        rss_fit = s * (after[-1]["t"] - after[0]["t"]) / first
        rss_end = final["rss_kib"] / first - 1
        if rss_fit > args.rss_growth:
            problems.append(f"RSS grows after warm-up: fitted +{rss_fit:.1%} over the run")
        if rss_end > args.rss_growth:
            problems.append(f"RSS after the drain is +{rss_end:.1%} of the first after warm-up")
        if final["open_files"] > after[0]["open_files"] + 4:
            problems.append(f"open files grew: {after[0]['open_files']} → {final['open_files']}")
    else:
        problems.append("too short to judge growth: run longer than --warm plus 30 s")
    for g in ("calls_in_progress", "call_legs", "media_legs", "sip_transactions"):
        if final.get(g):
            problems.append(f"after the drain {final[g]:g} {g} are left")
    if final.get("sip_transactions"):
        problems.append(f"the transactions left, by kind: {transaction_kinds(api_port, token)}")
    cdr_path = os.path.join(srv.dir, "data", "cdr.jsonl")
    ids = [json.loads(line).get("call_id") for line in open(cdr_path) if line.strip()]
    if len(ids) != len(set(ids)):
        problems.append(f"{len(ids) - len(set(ids))} Call-IDs have two CDRs")
    if final.get("calls_ended") is not None and len(ids) != int(final["calls_ended"]):
        problems.append(f"{len(ids)} CDRs for {int(final['calls_ended'])} calls strowger ended")
    last_reg = sorted(f for f in os.listdir(rundir) if f.startswith("register-") and f.endswith(".json"))[-1]
    try:
        reg = json.load(open(os.path.join(rundir, last_reg)))
        if reg.get("failed"):
            problems.append(f"the last registration round had {reg['failed']} failures {reg.get('failed_reasons')}")
    except (OSError, ValueError):
        problems.append(f"no report of the last registration round ({last_reg})")
    if final.get("registered_users") != args.users:
        problems.append(f"{final.get('registered_users')} of {args.users} phones registered at the end")
    srv.stop()
    uas.kill()
    redis.proc.terminate()

    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rate": args.rate,
              "load_s": round(load_s), "faults": sorted(set(faults.values())), "users": args.users,
              "strowger_load": {"attempted": attempted, "completed": completed},
              "sipp": sipp_calls, "failed_outside_faults": failed_outside, "failed_in_faults": failed_in_faults,
              "cdrs": len(ids), "rss_kib": {"start": sampler.rows[0]["rss_kib"],
                                            "after_warm_up": after[0]["rss_kib"] if after else None,
                                            "end": final["rss_kib"]},
              "rss_growth_fitted": rss_fit, "rss_growth_end": rss_end,
              "open_files": {"after_warm_up": after[0]["open_files"] if after else None, "end": final["open_files"]},
              "left_after_drain": {g: final.get(g) for g in GAUGES}, "problems": problems,
              "command": " ".join(sys.argv)}
    b.keep(args, rundir, "soak.json", result)
    plot(rundir, warm_t)
    if os.path.exists(os.path.join(rundir, "soak.png")):
        b.keep(args, rundir, "soak.png")
    b.log(f"{attempted + sipp_calls['successful'] + sipp_calls['failed']} calls "
          f"({attempted} strowger-load, {sipp_calls['successful'] + sipp_calls['failed']} SIPp), "
          f"{failed_outside} failed outside faults, {failed_in_faults} in fault rounds; {len(ids)} CDRs; RSS "
          f"{result['rss_kib']['after_warm_up']} → {final['rss_kib']} KiB; plot {os.path.relpath(rundir, b.ROOT)}/soak.png")
    if problems:
        for p in problems:
            b.log(f"FAIL: {p}")
        sys.exit(1)
    b.log("PASS: nothing grew after warm-up, nothing was left, no call failed outside a fault, every CDR written")


def plot(rundir, warm_t):
    """soak.png: RSS and open files, and the call table's sizes, against time."""
    script = f"""
set terminal pngcairo size 1100,700 noenhanced
set output '{rundir}/soak.png'
set datafile separator ','
set key autotitle columnhead outside right
set multiplot layout 2,1 title 'strowger soak: every 10 s (the line: end of warm-up)'
set xlabel 's'
set arrow from {warm_t}, graph 0 to {warm_t}, graph 1 nohead dt 2
set ylabel 'KiB'
set y2label 'files'
set y2tics
plot '{rundir}/soak.csv' using 1:2 with lines title 'RSS', '' using 1:3 axes x1y2 with lines title 'open files'
unset y2tics
unset y2label
set ylabel 'count'
plot for [c in 'calls_in_progress call_legs media_legs sip_transactions call_timers registered_users'] \\
  '{rundir}/soak.csv' using 'xcol':c with lines title c
unset multiplot
""".replace("'xcol'", "1")
    subprocess.run(["gnuplot"], input=script, text=True, check=False)


if __name__ == "__main__":
    main()
