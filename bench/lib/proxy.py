#!/usr/bin/env python3
"""Proxied calls, strowger against Kamailio in one run (bench/proxy.sh).

A SIPp phone registers as 1001 and answers (tests/sipp/uas_proxied.xml); a SIPp caller sends
INVITE sip:1001@proxy.test to the server at each --rates R for --seconds S (tests/sipp/proxy_uac.xml,
-d 0): INVITE/100/180/200 through the proxy, then ACK and BYE/200 along the Record-Route set.
The servers: strowger with `[proxy] domains = ["proxy.test"]` (local store, the phone registered with
digest), and Kamailio as registrar + stateful proxy (bench/kamailio/proxy.cfg, usrloc in memory,
--kamailio-workers UDP workers). With --auth both challenge every initial INVITE (407) and the caller
answers with the credentials of user 1001 (tests/sipp/proxy_uac_auth.xml): strowger's
`proxy.authenticate`, Kamailio's pv_proxy_check (-A WITH_AUTH). The floor (`floor`): the kernel's own
cost of the call's datagrams, `strowger-load floor-relay` in the server's place, which passes each
datagram on unread with strowger's recvmmsg/sendmmsg batching (no 100 Trying, no registration: it
knows the phone's address; 12 datagrams a call against the proxies' 13). Each server runs in its own session with its autogroup
priority raised; its CPU is the run time of every process of that session (/proc/PID/task/*/schedstat), sampled every
0.5 s from the caller's start to the first sample after its last call ended, divided by the calls the
caller completed.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (the rig's process, /proc and port helpers)

SIPP = os.path.join(b.ROOT, "tests", "sipp")
OUT = os.path.join(b.ROOT, "bench", "out", "proxy")
SERVERS = ("strowger", "kamailio", "floor")


def sipp(args, name, rundir, timeout_s):
    """Starts SIPp (own session, raised priority) with stats in rundir/name.csv."""
    mp, cp = b.alloc_ports(4), b.alloc_ports(1)
    cmd = ["sipp", *args, "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", str(mp), "-cp", str(cp),
           "-nostdin", "-timeout", f"{timeout_s}s", "-timeout_error",
           "-trace_stat", "-stf", f"{name}.csv", "-fd", "1", "-trace_err", "-error_file", f"{name}.err"]
    log = open(os.path.join(rundir, f"{name}.log"), "w")
    p = b.spawn(cmd, rundir, log, log)
    b.raise_priority(p.pid)
    return p


def sipp_rows(rundir, name):
    """SIPp's -trace_stat rows (one a second) as dicts."""
    rows = [l.rstrip("\n").split(";") for l in open(os.path.join(rundir, f"{name}.csv")) if l.strip()]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def sipp_counts(rundir, name):
    """(successful, failed) calls from the last row of SIPp's -trace_stat file."""
    last = sipp_rows(rundir, name)[-1]
    return int(last["SuccessfulCall(C)"]), int(last["FailedCall(C)"])


def settled_at(rundir, name):
    """Unix time of the first stats row with the final successful and failed counts: when the
    last call ended (calls that never end would otherwise add SIPp's timeout to the window)."""
    rows = sipp_rows(rundir, name)
    final = (rows[-1]["SuccessfulCall(C)"], rows[-1]["FailedCall(C)"])
    row = next(r for r in rows if (r["SuccessfulCall(C)"], r["FailedCall(C)"]) == final)
    return float(row["CurrentTime"].split("\t")[-1])


def strowger_config(args, rundir, port):
    text = subprocess.run([args.bin, "default-config"], capture_output=True, text=True, timeout=10,
                          check=True).stdout
    for key, value in (("log_level", '"info"'), ("max_calls", "100000"),
                       # The registrar's store; another section has a `store` key of its own.
                       ('store = "local:strowger-data/store.snap"', f'store = "local:{rundir}/store.snap"'),
                       ("domains", '["proxy.test"]'), ("keepalive_s", "0"),
                       ("authenticate = false", f"authenticate = {str(args.auth).lower()}")):
        pattern = rf"(?m)^{key}$" if "=" in key else rf"(?m)^{key}\s*=.*$"
        text, n = re.subn(pattern, value if "=" in key else f"{key} = {value}", text)
        if n != 1:
            sys.exit(f"bench: cannot set {key} in the default configuration")
    text += '\n[[users]]\nuser = "1001"\npassword = "bench-secret-1001"\n'
    path = os.path.join(rundir, "strowger.toml")
    open(path, "w").write(text)
    rtp = b.alloc_ports(100)  # proxied calls carry no media through strowger; a small range
    return [args.bin, "--config", path, "--sip-listen", f"127.0.0.1:{port}",
            "--rtp-ports", f"{rtp}-{rtp + 99}", "--data-dir", os.path.join(rundir, "data")]


def start_server(args, which, rundir, port, phone_port):
    if which == "strowger":
        cmd = strowger_config(args, rundir, port)
    elif which == "floor":
        # Up for every rate's calls and their wind-down; stopped after the last.
        life = sum(args.seconds + 10 for _ in args.rates) + 30
        cmd = [args.load_bin, "floor-relay", "--listen", f"127.0.0.1:{port}", "--to", f"127.0.0.1:{phone_port}",
               "--seconds", str(life)]
    else:
        cmd = ["kamailio", "-f", os.path.join(b.ROOT, "bench", "kamailio", "proxy.cfg"), "-DD", "-E",
               "-l", f"udp:127.0.0.1:{port}", "-n", str(args.kamailio_workers), "-m", "1024",
               "-Y", rundir, "-w", rundir] + (["-A", "WITH_AUTH"] if args.auth else [])
    log = open(os.path.join(rundir, f"{which}.log"), "w")
    p = b.spawn(cmd, rundir, log, log)
    b.raise_priority(p.pid)
    time.sleep(1.5)
    if p.poll() is not None:
        sys.exit(f"bench: {which} exited at start; see {rundir}/{which}.log")
    return p


def register(which, rundir, port, phone_port):
    """The phone's REGISTER (strowger: with digest), from the port it then answers on."""
    scenario = "register.xml"
    extra = ["-au", "1001", "-ap", "bench-secret-1001"]
    if which == "kamailio":
        scenario, extra = os.path.join(b.BENCH, "sipp", "register_plain.xml"), []
    else:
        scenario = os.path.join(SIPP, scenario)
    p = sipp([f"127.0.0.1:{port}", "-sf", scenario, "-s", "1001", "-p", str(phone_port), "-m", "1",
              *extra], f"register-{which}", rundir, 10)
    p.wait(20)
    ok, failed = sipp_counts(rundir, f"register-{which}")
    if ok != 1:
        sys.exit(f"bench: the phone did not register with {which}; see {rundir}/register-{which}.log")


def run_rate(which, rundir, port, phone_port, rate, seconds, server, auth):
    calls = rate * seconds
    tag = f"{which}-{rate}"
    uas = sipp(["-sf", os.path.join(SIPP, "uas_proxied.xml"), "-p", str(phone_port), "-m", str(calls)],
               f"uas-{tag}", rundir, seconds + 40)
    time.sleep(0.5)
    samples = [(time.time(), b.session_cpu(server.pid))]
    scenario, creds = "proxy_uac.xml", []
    if auth:
        scenario, creds = "proxy_uac_auth.xml", ["-au", "1001", "-ap", "bench-secret-1001"]
    uac = sipp([f"127.0.0.1:{port}", "-sf", os.path.join(SIPP, scenario), "-s", "1001", *creds,
                "-key", "domain", "proxy.test", "-d", "0", "-r", str(rate), "-m", str(calls),
                "-l", str(rate * 4), "-p", str(b.alloc_ports(1))], f"uac-{tag}", rundir, seconds + 30)
    # A fixed CPU window: the calls' span plus 2 s to finish. Calls still unfinished then have
    # failed; SIPp is stopped rather than waited for (its -timeout is 30 s past the span), so a
    # step with failures neither stretches the window nor the run.
    deadline = samples[0][0] + seconds + 2
    while uac.poll() is None and time.time() < deadline:
        time.sleep(0.5)
        samples.append((time.time(), b.session_cpu(server.pid)))
    if uac.poll() is None:
        time.sleep(max(0, deadline - time.time()))
        samples.append((time.time(), b.session_cpu(server.pid)))
        time.sleep(1.1)  # one more -trace_stat row, then SIPp goes
        os.killpg(uac.pid, signal.SIGTERM)
        uac.wait()
    # The window ends at the first sample after the last call ended, or at the deadline.
    end = min(settled_at(rundir, f"uac-{tag}"), deadline)
    (t0, cpu0) = samples[0]
    (t1, cpu1) = next((s for s in samples if s[0] >= end), samples[-1])
    try:
        uas.wait(2)
    except subprocess.TimeoutExpired:
        os.killpg(uas.pid, signal.SIGTERM)
        uas.wait()
    ok, failed = sipp_counts(rundir, f"uac-{tag}")
    failed = max(failed, calls - ok)  # calls unfinished at the deadline failed too
    r = {"server": which, "auth": auth, "rate": rate, "calls": calls, "completed": ok, "failed": failed,
         "wall_s": round(t1 - t0, 1), "cpu_s": round(cpu1 - cpu0, 3),
         "cpu_ms_per_call": round((cpu1 - cpu0) * 1000 / ok, 4) if ok else None}
    b.log(f"{which} {rate} calls/s: {r['cpu_ms_per_call']} CPU-ms per call over {r['wall_s']} s, "
          f"completed {ok}, failed {failed}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--kamailio-workers", type=int, default=4)
    ap.add_argument("--pairs", "--repeat", dest="pairs", type=int, default=3,
                    help="strowger-then-Kamailio pairs, interleaved (default 3)")
    ap.add_argument("--auth", action="store_true",
                    help="challenge every initial INVITE (407) and answer it with digest credentials")
    ap.add_argument("--bin", default=os.path.join(b.ROOT, "target", "release", "strowger"))
    ap.add_argument("--load-bin", default=os.path.join(b.ROOT, "target", "release", "strowger-load"))
    ap.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS),
                    help="which of strowger, Kamailio and the kernel's floor take turns (default all three)")
    b.add_record_flag(ap)
    args = ap.parse_args()
    if args.auth and "floor" in args.servers:
        # The relay answers no challenge: its call would not be the same call.
        args.servers.remove("floor")
        b.log("the floor is not run with --auth (the relay answers no 407)")
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, b._on_signal)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    try:
        # The machine is shared and noisy: the two servers take turns, --pairs times (A B A B
        # ...), and the ratio is taken within each pair, so a slow spell weighs on both sides.
        for rep in range(args.pairs):
            for which in args.servers:
                rundir = os.path.join(OUT, f"{stamp}-{rep}-{which}")
                os.makedirs(rundir, exist_ok=True)
                port, phone_port = b.alloc_ports(1), b.alloc_ports(1)
                server = start_server(args, which, rundir, port, phone_port)
                if which != "floor":
                    register(which, rundir, port, phone_port)
                for rate in args.rates:
                    results.append(run_rate(which, rundir, port, phone_port, rate, args.seconds, server,
                                            args.auth))
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(10)
    finally:
        b.kill_children()
    def figures(runs):
        return [None if r["failed"] else r["cpu_ms_per_call"] for r in runs]

    table = []
    table.append("| rate (calls/s) | server | completed / failed (all runs) | CPU-ms per proxied call (each run) "
                 "| median | ÷ Kamailio per pair: median (min–max, pairs) |")
    table.append("| --- | --- | --- | --- | --- | --- |")
    for rate in args.rates:
        runs = {w: [r for r in results if r["rate"] == rate and r["server"] == w] for w in args.servers}
        for which in args.servers:
            per = [r["cpu_ms_per_call"] for r in runs[which] if r["cpu_ms_per_call"] and not r["failed"]]
            med = statistics.median(per) if per else None
            done = sum(r["completed"] for r in runs[which])
            failed = sum(r["failed"] for r in runs[which])
            each = ", ".join(f"{r['cpu_ms_per_call']}" for r in runs[which])
            ratio = ""
            if which != "kamailio" and "kamailio" in runs:
                # A pair with a failed call on either side gives no ratio; it is counted, not hidden.
                ratios = b.paired(figures(runs[which]), figures(runs["kamailio"]))
                n = len(runs[which])
                ratio = (f"{ratios['median']:.2f}× ({ratios['min']:.2f}–{ratios['max']:.2f}, "
                         f"{len(ratios['ratios'])} of {n} pairs)" if ratios["ratios"] else f"– (0 of {n} pairs)")
            m = f"{med:.3f}" if med else "–"
            table.append(f"| {rate} | {which} | {done} / {failed} | {each} | {m} | {ratio} |")
    title = "proxied calls through " + ", ".join(args.servers) + ", taking turns"
    b.summary(args, title + (" (digest auth)" if args.auth else ""), "\n".join(table))
    os.makedirs(b.RESULTS, exist_ok=True)
    with open(os.path.join(b.RESULTS, "proxy-auth.json" if args.auth else "proxy.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
