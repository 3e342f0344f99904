"""Exact instruction counts of this build against an older one (valgrind's callgrind), for figures
this host's noisy clocks cannot settle: per REGISTER (local store, with and without digest auth) and
per bridged B2BUA call (with --events: while an event-stream client is subscribed to every event, its
API on loopback), per proxied call (`proxy`: bench/proxy.sh's call, INVITE/100/180/200/ACK/BYE/200
through the proxy role to a SIPp phone registered with digest), and per call-second of held calls
(below). REGISTER, B2BUA and proxy figures are the difference between a long and a short run of one
worker under callgrind, divided by the requests or calls between them, so start-up cancels.

Windowed figures count only calls in their steady state, per call-second: WINDOW_CALLS calls held on one worker, the
counters zeroed (`callgrind_control -z`) once all are up and dumped WINDOW_S s later, so set-up, teardown and
start-up are left out: `echo` or `held` (echo calls, 44444), `shared` (the same on
shared RTP ports, every call from an address of its own; per call-second of the window's span, since its RTP leaves
many packets per sendmmsg(2)), `moh` (music on hold, 9199) and `recorded` (the same music,
recorded whole as mixed mono WAV, bench/lib/record.py's 9188). The load generator echoes what it hears, so every
call has a stream each way.

`watched` is the cost of being watched instead, per build: 100 echo calls held on 2 workers with the
API listening, counted in 20 s windows between `callgrind_control -z` and `--dump` (start-up and
set-up left out), nobody watching / a /metrics scrape every second and an event client subscribed to
every event / the same / nobody; the watched windows' instructions per call-second over the others'.

    python3 bench/lib/callgrind_ab.py OLD_BIN [--what register,digest,b2bua,proxy,held,echo,shared,moh,recorded,watched] [--new NEW_BIN] [--events]

About 15 minutes (valgrind runs strowger some 50 times slower); every run is bounded in requests and
time and stops by itself.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import proxy as P  # noqa: E402
import record as REC  # noqa: E402
import registrar as R  # noqa: E402
import scale as S  # noqa: E402

NEW = os.path.join(b.ROOT, "target", "release", "strowger")
LOAD = os.path.join(b.ROOT, "target", "release", "strowger-load")


def instructions(path):
    for line in open(path):
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def sends(path):
    """Calls to libc's send(2) in a callgrind file: the RTP packets the server sent (one call each)."""
    names, cfn, n = {}, None, 0
    for line in open(path):
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            kind, i, name = m.groups()
            if name:
                names[i] = name
            cfn = names.get(i) if kind == "cfn" else None
        elif line.startswith("calls=") and cfn == "send":
            n += int(line[6:].split()[0])
    return n


def under_callgrind(rundir, label, cmd):
    """Starts `cmd` under callgrind and waits for its start-up line; returns (process, its output)."""
    out = os.path.join(rundir, f"{label}.cg")
    log_path = os.path.join(rundir, f"{label}.log")
    # strowger re-executes itself once at start to set glibc's tunables (crates/strowger/src/allocator.rs):
    # valgrind follows it into the new image, whose instructions are the ones counted.
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}", *cmd],
                         stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while "worker(s)" not in open(log_path).read():
        if time.time() > deadline or p.poll() is not None:
            sys.exit(f"callgrind_ab: {label} did not start: see {log_path}")
        time.sleep(0.2)
    return p, out


def stop(p):
    p.send_signal(signal.SIGINT)
    p.wait(60)


def register(rundir, label, binary, n, auth):
    """`n` REGISTERs at 150/s; the server's instructions."""
    store = f"local:{rundir}/{label}-store.snap"
    path = os.path.join(rundir, f"{label}.toml")
    with open(path, "w") as f:
        f.write(R.strowger_config(store, auth, 2000, binary))
    port, rtp = b.alloc_ports(1, 1), b.alloc_ports(200)
    p, out = under_callgrind(rundir, label, [binary, "--config", path, "--sip-listen", f"127.0.0.1:{port}",
                                            "--rtp-ports", f"{rtp}-{rtp + 199}", "--data-dir",
                                            os.path.join(rundir, f"{label}-data"), "--workers", "1"])
    _, r = R.load_register(port, 150, n, R.FIRST_USER, auth, rundir)
    stop(p)
    return instructions(out), r["registered"]


def bridged(rundir, label, binary, n, events):
    """`n` calls at 8/s bridged to a second strowger that answers; the bridging server's instructions.
    With `events`, an event client subscribed to everything listens from before the first call."""
    args = types.SimpleNamespace(bin=binary, load_bin=LOAD, realtime=0)
    far = S.Server(args, rundir, f"{label}-far", 1, "30000-31999",
                   S.config(args, rundir, f"{label}-far.toml", steps='["answer", "echo"]'))
    port = b.alloc_ports(1)
    cfg = S.config(args, rundir, f"{label}.toml")
    if events:
        api_port = b.alloc_ports(1)
        client = S.EventClient(args, api_port, S.observed(args, cfg, api_port))
    p, out = under_callgrind(rundir, label, [binary, "--config", cfg,
                                            "--sip-listen", f"127.0.0.1:{port}", "--rtp-ports", "32000-33999",
                                            "--data-dir", os.path.join(rundir, f"{label}-data"), "--workers", "1",
                                            "--var", f"bridge_target=127.0.0.1:{far.port}"])
    if events:
        client.set(True)
        time.sleep(5)
    rep = os.path.join(rundir, f"{label}.json")
    S.load(args, f"127.0.0.1:{port}", "2001", n, 8, 0, "none", rep, max_time=int(n / 8 + 120)).wait()
    if events:
        client.set(False)
        if client.closed:
            sys.exit(f"callgrind_ab: {label}: the server closed the event client")
    stop(p)
    far.stop()
    return instructions(out), json.load(open(rep))["completed"]


def proxied(rundir, label, binary, n):
    """`n` calls at 20/s from a SIPp caller through the proxy role to a SIPp phone (bench/lib/proxy.py's
    scenarios, record-routed); the proxy's instructions and the calls completed."""
    d = os.path.join(rundir, label)
    os.makedirs(d)
    port, phone = b.alloc_ports(1), b.alloc_ports(1)
    cmd = P.strowger_config(types.SimpleNamespace(bin=binary, auth=False), d, port)
    p, out = under_callgrind(rundir, label, [*cmd, "--workers", "1"])
    P.register("strowger", d, port, phone)
    rate, span = 20, n // 20 + 60
    uas = P.sipp(["-sf", os.path.join(P.SIPP, "uas_proxied.xml"), "-p", str(phone), "-m", str(n)], "uas", d, span)
    time.sleep(0.5)
    uac = P.sipp([f"127.0.0.1:{port}", "-sf", os.path.join(P.SIPP, "proxy_uac.xml"), "-s", "1001",
                  "-key", "domain", "proxy.test", "-d", "0", "-r", str(rate), "-m", str(n), "-l", str(rate * 4),
                  "-p", str(b.alloc_ports(1))], "uac", d, span)
    uac.wait(span + 30)
    uas.wait(span + 30)
    stop(p)
    return instructions(out), P.sipp_counts(d, "uac")[0]


WINDOW_CALLS = 20
WINDOW_S = 20
# What each windowed figure calls, and whether over shared RTP ports (`shared`: rtp.shared_ports, every call
# from an address of its own, as scale.py floor's shared-ports run; the others a port pair per call).
WINDOWED = {"echo": ("44444", False), "held": ("44444", False), "shared": ("44444", True), "moh": ("9199", False),
            "recorded": ("9188", False)}


def windowed(rundir, label, binary, ext, shared=False):
    """WINDOW_CALLS calls to `ext` held on one worker; the server's instructions per call-second over WINDOW_S s
    once every call is up: per RTP packet it sent in the window, times 50 (a call sends 50 a second), so a window
    that ran a little longer or shorter under valgrind does not count. `shared`: on shared RTP ports."""
    args = types.SimpleNamespace(bin=binary, load_bin=LOAD, realtime=0)
    port = b.alloc_ports(1)
    cfg = REC.record_config(args, rundir, f"{label}.toml", shared_ports=shared)
    data = os.path.join(rundir, f"{label}-data")
    p, out = under_callgrind(rundir, label, [binary, "--config", cfg, "--sip-listen", f"127.0.0.1:{port}",
                                            "--rtp-ports", "32000-33999", "--data-dir", data, "--workers", "1"])
    rep = os.path.join(rundir, f"{label}.json")
    rate, settle = 2, 8
    hold = WINDOW_CALLS / rate + settle + WINDOW_S + 5
    lp = S.load(args, f"127.0.0.1:{port}", ext, WINDOW_CALLS, rate, hold, "echo", rep,
                max_time=int(hold + WINDOW_CALLS / rate + 120), far_ends="address" if shared else None)
    time.sleep(WINDOW_CALLS / rate + settle)
    subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
    t0 = time.time()
    time.sleep(WINDOW_S)
    span = time.time() - t0
    subprocess.run(["callgrind_control", "--dump", str(p.pid)], check=True, capture_output=True)
    lp.wait()
    stop(p)
    dumps = sorted(f for f in os.listdir(rundir) if f.startswith(f"{label}.cg.") and f[len(label) + 4:].isdigit())
    if not dumps:
        sys.exit(f"callgrind_ab: {label}: no dump of the window in {rundir}")
    window = os.path.join(rundir, dumps[0])
    completed = json.load(open(rep))["completed"]
    shutil.rmtree(os.path.join(data, "calls"), ignore_errors=True)
    if shared:
        # Shared ports send RTP many packets per sendmmsg(2), so it is not counted by its calls: per
        # call-second of the window's span instead (the window's edges are a callgrind_control call late).
        return instructions(window) / span / WINDOW_CALLS, completed, window
    return instructions(window) / max(1, sends(window)) * 50, completed, window

# watched: calls held, and the seconds of each counted window.
WATCHED_CALLS, WATCHED_WINDOW = 100, 20


def watched(rundir, label, binary, calls=WATCHED_CALLS, window=WATCHED_WINDOW):
    """`calls` echo calls held on 2 workers with the API listening; counters zeroed
    (`callgrind_control -z`) and dumped (`--dump`) around `window`-s windows in the order nobody
    watching, watched, watched, nobody (a /metrics scrape every second and an event client
    subscribed to every event): the instructions per call-second of each mode, start-up and the
    calls' set-up left out. Returns ({mode: [per window]}, calls completed)."""
    args = types.SimpleNamespace(bin=binary, load_bin=LOAD, realtime=0)
    port, api_port = b.alloc_ports(1), b.alloc_ports(1)
    cfg = S.config(args, rundir, f"{label}.toml")
    token = S.observed(args, cfg, api_port)
    p, out = under_callgrind(rundir, label, [binary, "--config", cfg,
                                            "--sip-listen", f"127.0.0.1:{port}", "--rtp-ports", "32000-33999",
                                            "--data-dir", os.path.join(rundir, f"{label}-data"), "--workers", "2"])
    modes = ("none", "all", "all", "none")
    rate = 10
    hold = calls / rate + 10 + len(modes) * (window + 4) + 10
    rep = os.path.join(rundir, f"{label}.json")
    lp = S.load(args, f"127.0.0.1:{port}", "44444", calls, rate, hold, "echo", rep, max_time=int(hold + 120))
    time.sleep(calls / rate + 10)
    scraper, events = S.Scraper(api_port, token), S.EventClient(args, api_port, token)
    per = {"none": [], "all": []}
    for i, mode in enumerate(modes):
        scraper.on = mode == "all"
        events.set(mode == "all")
        time.sleep(2)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True, check=True, timeout=60)
        t0 = time.time()
        time.sleep(window)
        subprocess.run(["callgrind_control", f"--dump={mode}-{i}", str(p.pid)], capture_output=True, check=True,
                       timeout=60)
        span = time.time() - t0
        dump = f"{out}.{i + 1}"
        per[mode].append(instructions(dump) / span / calls)
        b.log(f"{label} window {i} ({mode}): {per[mode][-1]:,.0f} instructions per call-second ({dump})")
    scraper.stop = True
    events.set(False)
    if events.closed:
        sys.exit(f"callgrind_ab: {label}: the server closed the event client")
    lp.wait()
    stop(p)
    return per, json.load(open(rep))["completed"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the strowger binary to compare this build against")
    ap.add_argument("--what", default="register,digest,b2bua")
    ap.add_argument("--new", default=NEW, help="the build to measure (default: this tree's release build)")
    ap.add_argument("--events", action="store_true", help="b2bua: with an event client subscribed to everything")
    args = ap.parse_args()
    rundir = tempfile.mkdtemp(prefix="callgrind-ab-", dir=b.OUT if os.path.isdir(b.OUT) else None)
    runs = {"register": lambda l, bin_, n: register(rundir, l, bin_, n * 5, False),
            "digest": lambda l, bin_, n: register(rundir, l, bin_, n * 5, True),
            "b2bua": lambda l, bin_, n: bridged(rundir, l, bin_, n, args.events),
            "proxy": lambda l, bin_, n: proxied(rundir, l, bin_, n)}
    for what in args.what.split(","):
        per = {}
        if what in WINDOWED:
            for label, binary in (("old", os.path.abspath(args.old)), ("new", os.path.abspath(args.new))):
                per[label], n, dump = windowed(rundir, f"{what}-{label}", binary, *WINDOWED[what])
                b.log(f"{what} {label}: {per[label]:,.0f} instructions per call-second ({n} of {WINDOW_CALLS} "
                      f"completed; callgrind_annotate {os.path.relpath(dump, b.ROOT)})")
            print(f"{what}: old {per['old']:,.0f}, new {per['new']:,.0f} instructions per call-second, "
                  f"new/old x{per['new'] / per['old']:.4f}")
            continue
        if what == "watched":
            for label, binary in (("old", os.path.abspath(args.old)), ("new", os.path.abspath(args.new))):
                w, done = watched(rundir, f"watched-{label}", binary)
                m = {k: sum(v) / len(v) for k, v in w.items()}
                per[label] = m["all"] / m["none"]
                print(f"watched {label}: {m['none']:,.0f} instructions per call-second unwatched, {m['all']:,.0f} "
                      f"watched: x{per[label]:.4f} ({done} of {WATCHED_CALLS} calls completed)")
            continue
        for label, binary in (("old", os.path.abspath(args.old)), ("new", os.path.abspath(args.new))):
            lo, n_lo = runs[what](f"{what}-{label}-short", binary, 100)
            hi, n_hi = runs[what](f"{what}-{label}-long", binary, 300)
            per[label] = (hi - lo) / max(1, n_hi - n_lo)
            b.log(f"{what} {label}: {per[label]:,.0f} instructions each ({n_lo} and {n_hi} completed)")
        print(f"{what}: old {per['old']:,.0f}, new {per['new']:,.0f} instructions each, "
              f"new/old x{per['new'] / per['old']:.4f}")


if __name__ == "__main__":
    main()
