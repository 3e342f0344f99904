#!/usr/bin/env python3
"""bench/registrar.sh: the seed paper's registrar workloads (OpenSIPS with a local cache, Memcached or
Redis: store on REGISTER, fetch on INVITE) run against strowger on each store backend, and Kamailio as
registrar on the same REGISTER workload in the same run: usrloc in memory beside strowger's local store;
usrloc written through to Redis (db_redis, db_mode 1) beside strowger on Redis; and, beside strowger on
Memcached, Kamailio reading each user's HA1 from Memcached and writing each registration's contacts to it
(the memcached module, as the paper's OpenSIPS used its Memcached cache). Both servers run at once, each
with a backend of its own, and take turns at every step (--rounds, default 3: Kamailio, strowger,
Kamailio, strowger, ...), so the machine's drift weighs on both alike; each figure is a side's median
run and the ratio is also taken round by round, its spread reported.

  register  strowger-load register (unique AORs, with and without digest auth) at rising rates while
            fewer than 0.1 % fail: server CPU-us per REGISTER (run time of all threads, /proc/PID/task/*/schedstat; for
            Kamailio summed over its processes), the load generator's and the backend's CPU, latency
            p50/p99, the highest clean rate and which process limited it.
  invite    users registered by SIPp (no auth) from the port of a SIPp UAS, then strowger-load call to a
            registered user at 1000 calls/s and up: INVITE->200 p50/p99 (strowger-load's own clock;
            SIPp's is ~4 ms coarse here), strowger CPU-us per call.

With --compare BIN (and --repeat N) it instead runs this build and BIN side by side on the same
REGISTER workload, alternating between them, and prints their ratio of CPU per REGISTER (an A/B within
one run).

Every child runs in its own session with its autogroup priority raised, dies with this script, and
every run is bounded in operations and time. Loopback only. Standard library only.
"""

import argparse
import datetime
import hashlib
import json
import os
import signal
import statistics
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (spawn, kill_children, raise_priority, proc_cpu, alloc_ports, ...)

ROOT = b.ROOT
RELEASE = os.path.join(ROOT, "target", "release")
# The strowger binary under test (--strowger).
STROWGER = os.path.join(RELEASE, "strowger")
KAMAILIO_CFG = os.path.join(ROOT, "bench", "kamailio", "registrar.cfg")
REGISTER_XML = os.path.join(ROOT, "bench", "sipp", "register_users.xml")
PASSWORD = "pw"
# The registrar's domain (strowger's [registrar] domain; the digest realm of both servers).
DOMAIN = "strowger"
KAMAILIO_BACKENDS = {"local": "usrloc in memory", "redis": "redis (db_redis, db_mode 1)",
                     "memcached": "memcached (memcached module)"}
FIRST_USER = 100000
# Users registered from the SIPp UAS for the INVITE runs.
INVITE_USERS = 1000


def pss_mib(pids):
    """Proportional set size (shared pages split among the processes sharing them), MiB."""
    kib = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for ln in f:
                    if ln.startswith("Pss:"):
                        kib += int(ln.split()[1])
        except OSError:
            pass
    return round(kib / 1024, 1)


class Proc:
    """A server we started: its session leader and how to count its CPU."""

    def __init__(self, name, popen, log_path):
        self.name, self.p, self.log_path = name, popen, log_path
        b.raise_priority(popen.pid)

    def pids(self):
        return b.session_pids(self.p.pid)

    def cpu(self):
        return b.session_cpu(self.p.pid)

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def wait_log(proc, needle, seconds):
    """Until `needle` is in the log, or (an int) that TCP port on 127.0.0.1 accepts."""
    end = time.time() + seconds
    while time.time() < end:
        if proc.p.poll() is not None:
            break
        try:
            if isinstance(needle, int):
                socket.create_connection(("127.0.0.1", needle), 0.2).close()
                return
            if needle in open(proc.log_path).read():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{proc.name} did not start ({needle!r} not in {proc.log_path}):\n"
                     + open(proc.log_path).read()[-2000:])


def start(name, cmd, rundir, needle, seconds=120):
    log_path = os.path.join(rundir, f"{name}.log")
    with open(log_path, "w") as log:
        p = b.spawn(cmd, rundir, log, subprocess.STDOUT)
    proc = Proc(name, p, log_path)
    wait_log(proc, needle, seconds)
    return proc


def start_backend(kind, rundir):
    port = b.alloc_ports(1, 1)
    if kind == "redis":
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        return start("redis", cmd, rundir, port, 30), f"redis://127.0.0.1:{port}"
    cmd = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "1024"]
    if os.geteuid() == 0:
        cmd += ["-u", "root"]
    proc = start("memcached", cmd, rundir, port, 30)
    return proc, f"memcached://127.0.0.1:{port}"


def has_security(binary):
    """Whether `binary` knows the [security] table (builds before it trusted every caller)."""
    text = subprocess.run([binary, "default-config"], capture_output=True, text=True, timeout=10).stdout
    return "\n[security]\n" in text


def strowger_config(store, authenticate, users, binary=None):
    # strowger-load's calls to the users come from 127.0.0.1 without credentials.
    trust = ["[security]", 'trusted = ["127.0.0.1"]', ""] if has_security(binary or STROWGER) else []
    lines = [
        "[general]", 'log_level = "info"', "max_calls = 100000", "", *trust,
        "[registrar]", f'domain = "{DOMAIN}"', f"authenticate = {'true' if authenticate else 'false'}",
        f'store = "{store}"', "",
        "[dialplan]", 'default_context = "default"',
        "[[dialplan.contexts.default.rules]]", 'regex = "^[0-9]{6}$"',
        'steps = ["bridge user/${EXTEN} timeout=20"]', "",
    ]
    for u in range(FIRST_USER, FIRST_USER + users):
        lines += ["[[users]]", f'user = "{u}"', f'password = "{PASSWORD}"']
    return "\n".join(lines) + "\n"


def start_strowger(label, store, authenticate, users, rundir, binary=None):
    path = os.path.join(rundir, f"{label}.toml")
    with open(path, "w") as f:
        f.write(strowger_config(store, authenticate, users, binary))
    port = b.alloc_ports(1, 1)
    rtp = b.alloc_ports(500)  # calls are not held: a few hundred at once at most
    cmd = [binary or STROWGER, "--config", path, "--sip-listen", f"127.0.0.1:{port}",
           "--rtp-ports", f"{rtp}-{rtp + 499}", "--data-dir", os.path.join(rundir, f"{label}-data")]
    proc = start(label, cmd, rundir, "worker(s)", 600)
    return proc, port


def provision_ha1(url, users):
    """Writes HA1 = MD5(user:realm:password) of the bench users to Memcached as "ha1:USER", which
    Kamailio's WITH_MEMCACHED registrar reads (strowger provisions its own users from its config)."""
    host, port = url.removeprefix("memcached://").split(":")
    buf = bytearray()
    for u in range(FIRST_USER, FIRST_USER + users):
        ha1 = hashlib.md5(f"{u}:{DOMAIN}:{PASSWORD}".encode()).hexdigest()
        buf += f"set ha1:{u} 0 0 {len(ha1)} noreply\r\n{ha1}\r\n".encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(bytes(buf) + b"mn\r\n")
        reply = b""
        while not reply.endswith(b"MN\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError(f"memcached {url} closed the connection while provisioning")
            reply += chunk
    if reply != b"MN\r\n":
        raise RuntimeError(f"memcached {url} refused the HA1 provisioning: {reply[:200]!r}")


def start_kamailio(auth, rundir, redis=None, memcached=None):
    """Kamailio as registrar; with `redis` (a redis:// URL) usrloc writes through to it (db_redis);
    with `memcached` (a memcached:// URL) HA1s are read from it and contacts written to it."""
    port = b.alloc_ports(1, 1)
    cmd = ["kamailio", "-f", KAMAILIO_CFG, "-l", f"udp:127.0.0.1:{port}", "-n", "4", "-DD", "-E",
           "-m", "256", "-M", "32"] + (["-A", "WITH_AUTH"] if auth else [])
    if redis:
        # A database of its own per run: usrloc preloads the table at start, and tens of thousands of
        # bindings from the run before exhaust its private memory. db_redis refuses a table whose
        # version it cannot read.
        db = "1" if auth else "0"
        host, rport = redis.removeprefix("redis://").split(":")
        subprocess.run(["redis-cli", "-h", host, "-p", rport, "-n", db, "HSET", "version:entry::location",
                        "table_name", "location", "table_version", "9"], check=True, stdout=subprocess.DEVNULL)
        cmd += ["-A", "WITH_REDIS", "-A", f'REDIS_URL="{redis}/{db}"']
    if memcached:
        cmd += ["-A", "WITH_MEMCACHED", "-A", f'MEMCACHED_SERVER="{memcached.removeprefix("memcached://")}"']
    name = "kamailio" + ("-redis" if redis else "") + ("-memcached" if memcached else "") + ("-auth" if auth else "")
    proc = start(name, cmd, rundir, "Aliases:", 30)
    time.sleep(1)  # its workers fork after the banner
    return proc, port


def load_register(port, rate, users, first, auth, rundir):
    cmd = [os.path.join(RELEASE, "strowger-load"), "register", "--target", f"127.0.0.1:{port}",
           "--users", str(users), "--rate", str(rate), "--first", str(first), "--json",
           "--max-time", str(max(30, users / rate * 4))]
    if auth:
        cmd += ["--auth", PASSWORD]
    out_path = os.path.join(rundir, f"load-{port}-{rate}.json")
    with open(out_path, "w") as out:
        p = b.spawn(cmd, rundir, out, subprocess.DEVNULL)
        b.raise_priority(p.pid)
        p.wait()
    return cmd, json.load(open(out_path))


class Side:
    """One server of a REGISTER sweep: how to drive it and the rows it got."""

    def __init__(self, server, port, backend, cap, fresh_aors):
        self.server, self.port, self.backend = server, port, backend
        # A step registers at most `cap` users (the provisioned ones); `fresh_aors`: each run
        # registers AORs no run registered before (new bindings, not refreshes).
        self.cap, self.fresh_aors = cap, fresh_aors
        self.rows, self.runs, self.going = [], 0, True


def register_run(side, auth, rate, seconds, rundir):
    """One strowger-load register run against `side` at `rate`: its row."""
    n = int(rate * seconds)
    if side.cap:
        n = min(n, side.cap)
    first = 1_000_000 * (side.runs + 2) if side.fresh_aors else FIRST_USER
    side.runs += 1
    server, backend = side.server, side.backend
    c0, k0 = server.cpu(), backend.cpu() if backend else 0.0
    cmd, r = load_register(side.port, rate, n, first, auth, rundir)
    c1, k1 = server.cpu(), backend.cpu() if backend else 0.0
    ok = r["registered"]
    wall = max(r["wall_s"], 1e-3)
    row = {
        "rate": rate, "n": n, "registered": ok, "failed": r["failed"],
        "failure_pct": round(r["failure_pct"], 3), "achieved_per_s": r["registers_per_s"],
        "server_cpu_us_per_op": round((c1 - c0) / ok * 1e6, 1) if ok else None,
        "server_cpu_pct": round((c1 - c0) / wall * 100, 1),
        "load_cpu_pct": round(r["cpu_s"] / wall * 100, 1),
        "backend_cpu_us_per_op": round((k1 - k0) / ok * 1e6, 1) if (backend and ok) else None,
        "backend_cpu_pct": round((k1 - k0) / wall * 100, 1) if backend else None,
        "latency_p50_us": r["latency_us"]["p50"], "latency_p99_us": r["latency_us"]["p99"],
        "retransmissions": r["retransmissions"], "reasons": r["failed_reasons"],
        "command": " ".join(["strowger-load"] + cmd[1:]),
    }
    row["limited_by"] = limiter(row)
    b.log(f"{server.name} auth={auth} {rate}/s: {json.dumps(row)}")
    return row


def sweep(sides, auth, rates, seconds, rounds, rundir):
    """REGISTER at rising rates, each side while it stays clean. The machine is shared and noisy,
    so at each rate the sides take turns `rounds` times (Kamailio, strowger, Kamailio, strowger,
    ...): a slow spell weighs on both, and the ratio is taken within each round. A side's row at
    a rate is its median run (by CPU per REGISTER), with every run's figure in `rounds_us`."""
    for rate in rates:
        going = [s for s in sides if s.going]
        if not going:
            return
        runs = {id(s): [] for s in going}
        for _ in range(rounds):
            for s in going:
                runs[id(s)].append(register_run(s, auth, rate, seconds, rundir))
        for s in going:
            row = b.median_run(runs[id(s)], "server_cpu_us_per_op")
            s.rows.append(row)
            s.going = clean(row)


def compare(args, rates, rundir):
    """--compare BIN: strowger (--strowger) and BIN side by side, each with a backend of its own,
    strowger-load register alternating between them (this build first in even rounds, BIN first in
    odd ones) at each rate for --repeat rounds: the median CPU per REGISTER of each and their ratio,
    measured in one run so the machine's drift touches both alike."""
    rows = []
    for kind in args.backends.split(","):
        for auth in (False, True):
            servers, backends = {}, []
            for label, binary in (("new", STROWGER), ("old", os.path.abspath(args.compare))):
                if kind == "local":
                    store = f"local:{os.path.join(rundir, f'{label}-{kind}-{auth}', 'store.snap')}"
                else:
                    backend, store = start_backend(kind, rundir)
                    backends.append(backend)
                users = args.auth_users if auth else 1
                servers[label] = start_strowger(f"ab-{label}-{kind}-{'auth' if auth else 'open'}", store, auth,
                                                users, rundir, binary)
            cpu = {}
            for rnd in range(args.repeat):
                for i, rate in enumerate(rates):
                    n = int(rate * args.seconds)
                    if auth:
                        n, first = min(n, args.auth_users), FIRST_USER
                    else:
                        first = 1_000_000 * (2 + rnd * len(rates) + i)
                    for label in (("new", "old") if rnd % 2 == 0 else ("old", "new")):
                        s, port = servers[label]
                        c0 = s.cpu()
                        _, r = load_register(port, rate, n, first, auth, rundir)
                        us = (s.cpu() - c0) / max(r["registered"], 1) * 1e6
                        cpu.setdefault((rate, label), []).append(round(us, 1))
                        b.log(f"compare {kind} auth={auth} round {rnd} {rate}/s {label}: {us:.1f} µs per REGISTER, "
                              f"failed {r['failed']}, p50 {r['latency_us']['p50']} µs")
            for rate in rates:
                new, old = statistics.median(cpu[(rate, "new")]), statistics.median(cpu[(rate, "old")])
                rows.append({"backend": kind, "auth": auth, "rate": rate, "new_us": cpu[(rate, "new")],
                             "old_us": cpu[(rate, "old")], "new_median": new, "old_median": old,
                             "ratio": round(new / old, 3) if old else None})
            for s, _ in servers.values():
                s.stop()
            for k in backends:
                k.stop()
    return rows


def compare_report(res):
    out = [f"A/B ({res['date']}): `python3 bench/lib/registrar.py {' '.join(res.get('argv', []))}`; "
           f"this build {res['strowger_rev']} against `{res['args']['compare']}`; CPU-µs per REGISTER, "
           f"median of {res['args']['repeat']} alternated runs", "",
           "| store | auth | rate | this build (runs) | compared binary (runs) | ratio |",
           "| --- | --- | --- | --- | --- | --- |"]
    for r in res["compare"]:
        out.append(f"| {r['backend']} | {'digest' if r['auth'] else 'none'} | {fmt(r['rate'])} | "
                   f"{r['new_median']} ({', '.join(map(str, r['new_us']))}) | "
                   f"{r['old_median']} ({', '.join(map(str, r['old_us']))}) | **×{r['ratio']}** |")
    return "\n".join(out) + "\n"


def limiter(row):
    """The busiest process of the run (100 % = one core; two cores are shared by all of them)."""
    cands = {"server": row["server_cpu_pct"], "load generator": row["load_cpu_pct"]}
    if row["backend_cpu_pct"] is not None:
        cands["backend"] = row["backend_cpu_pct"]
    name = max(cands, key=cands.get)
    return f"{name} ({cands[name]:.0f} % of a core)"


def clean(row):
    """< 0.1 % failed, the offered rate kept up, and 99 % answered before a phone would retransmit
    (500 ms): a registrar that answers in seconds has not kept up, however few fail."""
    return (row["failure_pct"] < 0.1 and row["achieved_per_s"] >= 0.9 * row["rate"]
            and (row["latency_p99_us"] or 0) < 500_000)


def clean_rate(rows):
    return max((r["rate"] for r in rows if clean(r)), default=None)


def register_users_via_sipp(port, uas_port, users, rundir):
    csv = os.path.join(rundir, f"users-{uas_port}.csv")
    with open(csv, "w") as f:
        f.write("SEQUENTIAL\n")
        for u in range(FIRST_USER, FIRST_USER + users):
            f.write(f"{u};\n")
    cmd = ["sipp", "-sf", REGISTER_XML, "-inf", csv, "-i", "127.0.0.1", "-p", str(uas_port),
           "-m", str(users), "-r", "500", "-l", "200", "-timeout", "60",
           "-nostdin", "-trace_err", f"127.0.0.1:{port}"]
    p = b.spawn(cmd, rundir, subprocess.DEVNULL, subprocess.DEVNULL)
    rc = p.wait(120)
    if rc != 0:
        raise SystemExit(f"SIPp could not register {users} users (exit {rc}); see {rundir}")


def invite_runs(strowger, port, rates, seconds, rundir):
    """Calls to a registered user (the SIPp UAS answers): INVITE->200 and strowger's CPU per call."""
    uas_port = b.alloc_ports(1, 1)
    register_users_via_sipp(port, uas_port, INVITE_USERS, rundir)
    uas = b.spawn(["sipp", "-sn", "uas", "-i", "127.0.0.1", "-p", str(uas_port), "-nostdin",
                   "-timeout", str(len(rates) * seconds * 4 + 60)], rundir,
                  subprocess.DEVNULL, subprocess.DEVNULL)
    b.raise_priority(uas.pid)
    time.sleep(0.5)
    rows = []
    try:
        for rate in rates:
            calls = int(rate * seconds)
            rtp = b.alloc_ports(200)
            cmd = [os.path.join(RELEASE, "strowger-load"), "call", "--target", f"127.0.0.1:{port}",
                   "--ext", str(FIRST_USER), "--calls", str(calls), "--rate", str(rate), "--hold", "0",
                   "--rtp", "none", "--json", "--quiet", "--rtp-ports", f"{rtp}-{rtp + 199}",
                   "--max-time", str(seconds * 4 + 30)]
            out_path = os.path.join(rundir, f"calls-{port}-{rate}.json")
            c0 = strowger.cpu()
            with open(out_path, "w") as out:
                p = b.spawn(cmd, rundir, out, subprocess.DEVNULL)
                b.raise_priority(p.pid)
                p.wait()
            c1 = strowger.cpu()
            r = json.load(open(out_path))
            row = {
                "rate": rate, "calls": calls, "completed": r["completed"], "failed": r["failed"],
                "reasons": r["failed_reasons"],
                "setup_p50_us": r["setup_us"]["p50"], "setup_p99_us": r["setup_us"]["p99"],
                "server_cpu_us_per_call": round((c1 - c0) / max(r["completed"], 1) * 1e6, 1),
                "command": " ".join(["strowger-load"] + cmd[1:]),
            }
            rows.append(row)
            b.log(f"{strowger.name} INVITE {rate}/s: {json.dumps(row)}")
    finally:
        os.killpg(uas.pid, signal.SIGTERM)
        uas.wait()
    return rows


def runs(row):
    """Every run's figure of a row that is the median of several, as " (a, b, c)"."""
    each = row.get("rounds_us", [])
    return f" ({', '.join(fmt(x) for x in each)})" if len(each) > 1 else ""


def fmt(x, nd=1):
    return "-" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}")


TITLE = "registrar: REGISTER and INVITE to registered users per store, Kamailio alongside"


def report(res):
    """The RESULTS.md section for a run (markdown)."""
    return "\n".join([f"## {res['date']} — {TITLE} (strowger {res['strowger_rev']})", "",
                      f"Machine: {res['nproc']}-core {res['cpu_model']}. Command: `bench/registrar.sh` "
                      f"(`python3 bench/lib/registrar.py {' '.join(res.get('argv', []))}`).", "", tables(res)])


def tables(res):
    """A run's tables (markdown)."""
    out = ["### REGISTER (strowger-load register, unique AORs; server CPU = run time of all threads from /proc/PID/task/*/schedstat; "
            "Kamailio summed over its processes)", "",
            "| server | store | auth | rate offered | registered | failed % | server CPU-µs per REGISTER, median (each round) | server % | "
            "load gen % | backend CPU-µs per REGISTER | latency p50 / p99 µs | busiest |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in res["register"]:
        for r in e["rows"]:
            out.append(f"| {e['server']} | {e['backend']} | {'digest' if e['auth'] else 'none'} | {fmt(r['rate'])} | "
                       f"{fmt(r['registered'])} | {r['failure_pct']} | **{fmt(r['server_cpu_us_per_op'])}**{runs(r)} | "
                       f"{fmt(r['server_cpu_pct'])} | {fmt(r['load_cpu_pct'])} | {fmt(r['backend_cpu_us_per_op'])} | "
                       f"{fmt(r['latency_p50_us'])} / {fmt(r['latency_p99_us'])} | {r['limited_by']} |")
    out += ["", "| server | store | auth | highest clean rate (< 0.1 % failed, rate kept, p99 < 500 ms) | memory |",
            "| --- | --- | --- | --- | --- |"]
    for e in res["register"]:
        mem = (f"PSS {e['pss_mib']} MiB (all processes)" if "pss_mib" in e else
               f"RSS {e['rss_mib_start']} -> {e['rss_mib_end']} MiB"
               + (f"; backend RSS {e['backend_rss_mib']} MiB" if "backend_rss_mib" in e else ""))
        out.append(f"| {e['server']} | {e['backend']} | {'digest' if e['auth'] else 'none'} | "
                   f"{fmt(e['clean_rate'])}/s | {mem} |")
    # strowger on Redis against Kamailio on Redis when that ran; every other store against usrloc in memory.
    kam = {(e["backend"].split()[0], e["auth"]): e for e in res["register"] if e["server"] == "kamailio"}
    ratios = []
    for e in res["register"]:
        k = kam.get((e["backend"], e["auth"])) or kam.get(("usrloc", e["auth"]))
        if e["server"] != "strowger" or not k:
            continue
        for r in e["rows"]:
            kr = next((x for x in k["rows"] if x["rate"] == r["rate"]), None)
            if kr and r["server_cpu_us_per_op"] and kr["server_cpu_us_per_op"]:
                # Runs before the sides took turns have one figure each, and no rounds.
                rounds = b.paired(r.get("rounds_us", []), kr.get("rounds_us", []))
                spread = (f"{rounds['median']:.2f}× ({rounds['min']:.2f}–{rounds['max']:.2f}, "
                          f"{len(rounds['ratios'])} rounds)" if rounds["ratios"] else "-")
                ratios.append(f"| {e['backend']} | {'digest' if e['auth'] else 'none'} | {fmt(r['rate'])} | "
                              f"{fmt(r['server_cpu_us_per_op'])} | {k['backend']} | {fmt(kr['server_cpu_us_per_op'])} | "
                              f"**{r['server_cpu_us_per_op'] / kr['server_cpu_us_per_op']:.2f}×** | {spread} |")
    if ratios:
        out += ["", "Ratio of CPU per REGISTER, strowger ÷ Kamailio at the same offered rate (target ≤ 0.5×); "
                "µs are each side's median run, the two taking turns each round; the last column is the ratio "
                "within each round: median (min–max):", "",
                "| strowger store | auth | rate | strowger µs | Kamailio store | Kamailio µs | ratio | per round |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"] + ratios
    if res["invite"]:
        out += ["", "### INVITE to a registered user (strowger-load call --hold 0 --rtp none; a SIPp UAS answers; "
                "set-up = INVITE→200 on strowger-load's clock)", "",
                "| store | calls/s | completed | failed | INVITE→200 p50 / p99 µs | strowger CPU-µs per call |",
                "| --- | --- | --- | --- | --- | --- |"]
        for e in res["invite"]:
            for r in e["rows"]:
                out.append(f"| {e['backend']} | {fmt(r['rate'])} | {fmt(r['completed'])} | {fmt(r['failed'])} | "
                           f"{fmt(r['setup_p50_us'])} / {fmt(r['setup_p99_us'])} | {fmt(r['server_cpu_us_per_call'])} |")
    return "\n".join(out) + "\n"


def register_store(kind, args, rates, invite_rates, rundir, res):
    """Kamailio and strowger on store `kind` (each with a backend of its own), open and with
    digest: one interleaved sweep per auth setting (`sweep`); then INVITEs to users registered
    with the open strowger. Appends to res["register"] and res["invite"]."""
    def backend():
        return (None, None) if kind == "local" else start_backend(kind, rundir)
    kamailio = not args.no_kamailio
    kam_backend, kam_url = backend() if kamailio else (None, None)
    own_backend, store = backend()
    if kind == "local":
        store = f"local:{os.path.join(rundir, 'store-' + str(time.time_ns()), 'store.snap')}"
    for auth in (False, True):
        sides = []
        if kamailio:
            if kind == "memcached" and auth:
                provision_ha1(kam_url, args.auth_users)
            k, port = start_kamailio(auth, rundir, kam_url if kind == "redis" else None,
                                     kam_url if kind == "memcached" else None)
            # Reading HA1s from Memcached limits Kamailio to the provisioned users, as strowger.
            capped = kind == "memcached" and auth
            sides.append(Side(k, port, kam_backend, args.auth_users if capped else None, not capped))
        # The open registrar also serves the INVITE runs: its called users must exist.
        users = args.auth_users if auth else INVITE_USERS
        s, port = start_strowger(f"strowger-{kind}-{'auth' if auth else 'open'}", store, auth, users, rundir)
        rss0 = b.proc_status(s.p.pid, "VmRSS")
        ours = Side(s, port, own_backend, args.auth_users if auth else None, not auth)
        sweep(sides + [ours], auth, rates, args.seconds, args.repeat, rundir)
        for side in sides:
            entry = {"server": "kamailio", "backend": KAMAILIO_BACKENDS[kind], "auth": auth, "rows": side.rows,
                     "clean_rate": clean_rate(side.rows), "pss_mib": pss_mib(side.server.pids())}
            if kam_backend:
                entry["backend_rss_mib"] = round(b.proc_status(kam_backend.p.pid, "VmRSS") / 1024, 1)
            res["register"].append(entry)
            side.server.stop()
        entry = {"server": "strowger", "backend": kind, "auth": auth, "rows": ours.rows,
                 "clean_rate": clean_rate(ours.rows), "rss_mib_start": round(rss0 / 1024, 1),
                 "rss_mib_end": round(b.proc_status(s.p.pid, "VmRSS") / 1024, 1)}
        if own_backend:
            entry["backend_rss_mib"] = round(b.proc_status(own_backend.p.pid, "VmRSS") / 1024, 1)
        res["register"].append(entry)
        if not auth and invite_rates:
            res["invite"].append({"backend": kind, "rows": invite_runs(
                s, port, invite_rates, args.invite_seconds, rundir)})
        s.stop()
    for k in (kam_backend, own_backend):
        if k:
            k.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="local,memcached,redis")
    ap.add_argument("--rates", default="1000,2000,5000,10000,20000,30000,40000,60000,80000")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each REGISTER step")
    ap.add_argument("--auth-users", type=int, default=30000,
                    help="users provisioned for the digest runs (a step registers at most this many)")
    ap.add_argument("--invite-rates", default="1000,2000")
    ap.add_argument("--invite-seconds", type=float, default=5.0)
    ap.add_argument("--no-kamailio", action="store_true")
    ap.add_argument("--strowger", metavar="BIN", help="the strowger binary (default: target/release/strowger)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "registrar.json"))
    ap.add_argument("--report", metavar="JSON", help="only print the markdown section for an earlier run")
    ap.add_argument("--compare", metavar="BIN", help="A/B: this build against BIN, alternated (see compare())")
    ap.add_argument("--rounds", "--repeat", dest="repeat", type=int, default=3,
                    help="rounds per REGISTER step, Kamailio and strowger taking turns (or of the --compare A/B)")
    b.add_record_flag(ap)
    args = ap.parse_args()
    if args.report:
        res = json.load(open(args.report))
        print(compare_report(res) if "compare" in res else report(res))
        return
    if args.strowger:
        global STROWGER
        STROWGER = os.path.abspath(args.strowger)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, b._on_signal)
    rates = [int(x) for x in args.rates.split(",")]
    invite_rates = [int(x) for x in args.invite_rates.split(",") if x]
    rundir = os.path.join(b.OUT, "registrar-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(rundir, exist_ok=True)
    res = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "strowger_rev": b.git_rev(), "cpu_model": open("/proc/cpuinfo").read().split("model name")[1]
        .split(":", 1)[1].split("\n")[0].strip(), "nproc": os.cpu_count(),
        "args": vars(args), "argv": sys.argv[1:], "register": [], "invite": [],
    }
    if args.compare:
        out = args.out.removesuffix(".json") + "-compare.json" if args.out == ap.get_default("out") else args.out
        try:
            res["compare"] = compare(args, rates, rundir)
        finally:
            b.kill_children()
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
        b.summary(args, "registrar A/B: CPU per REGISTER of this build against another", compare_report(res))
        return
    try:
        for kind in args.backends.split(","):
            register_store(kind, args, rates, invite_rates, rundir, res)
    finally:
        b.kill_children()
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        with open(args.out.removesuffix(".json") + ".md", "w") as f:
            f.write(report(res))
        b.log(f"results in {args.out} and .md; logs in {rundir}")
    b.summary(args, TITLE, tables(res))


if __name__ == "__main__":
    main()
