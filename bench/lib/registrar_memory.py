#!/usr/bin/env python3
"""bench/registrar_memory.sh: strowger's memory per registration on each store backend. strowger
(registrar.authenticate = false) starts idle; strowger-load registers N unique AORs at a bounded
rate with a short Expires; strowger's RSS (VmRSS) is read idle, once the N are registered, once
their REGISTER transactions have ended and strowger's periodic sweep has run since (the bindings
alone), and again after every binding has expired (and the store has had time to sweep them).
Prints one line per backend and writes registrar-memory.json to a run directory under bench/out/;
--record also copies it to bench/results/ and appends the table to bench/RESULTS.md. With --base,
another build runs the same steps right before each backend's run of --strowger (A/B, minutes
apart), and the table gives both.

Loopback only; every run is bounded in operations and time. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402
import registrar as reg  # noqa: E402


SWEEP_S = 30  # store::EXPIRE_EVERY_S


def rss_kib(pid, field="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def steady_rss(pid, seconds=3):
    """RSS once it stops changing (a few reads a second apart), KiB."""
    last = rss_kib(pid)
    for _ in range(seconds * 5):
        time.sleep(1)
        now = rss_kib(pid)
        if abs(now - last) < 256:
            return now
        last = now
    return last


def run(kind, users, rate, expires, wait, rundir, binary, load, build=""):
    label = f"mem-{kind}{'-' + build if build else ''}"
    # A local store per run: with --base the second build would otherwise start from the first's
    # (its journal of every REGISTER) and count it as idle memory.
    backend, url = (None, f"local:{rundir}/{label}-store.snap")
    if kind != "local":
        backend, url = reg.start_backend(kind, rundir)
    server, port = reg.start_strowger(label, url, False, 0, rundir, binary)
    pid = server.p.pid
    try:
        time.sleep(2)
        idle = steady_rss(pid)
        # The anonymous part (heaps, stacks) apart from the binary's and libraries' pages, which
        # grow by the code a load first runs and are shared with every other process of the binary.
        anon_idle = rss_kib(pid, "RssAnon")
        cmd = [load, "register", "--target", f"127.0.0.1:{port}",
               "--users", str(users), "--rate", str(rate), "--expires", str(expires), "--json",
               "--max-time", str(users / rate * 3 + 30)]
        t0 = time.time()
        out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                        timeout=users / rate * 3 + 60).stdout)
        if out["failed"]:
            # A figure per binding over bindings that were refused would mean nothing.
            raise RuntimeError(f"{kind}: {out['failed']} of {users} REGISTERs failed "
                               f"({out['failed_reasons']}); with a 423 raise --expires to at least "
                               f"the config's registrar.min_expires (60 s by default)")
        loaded = steady_rss(pid)
        # The REGISTER transactions linger for timer J (64 x T1 = 32 s over UDP) after the last
        # one; read again once they have ended, strowger's periodic sweep (every 30 s, which
        # hands the allocator's free pages back) has run once since, and before the first binding
        # lapses: the bindings' own cost apart from theirs (only when --expires leaves room).
        settled = t0 + out["wall_s"] + 34 + SWEEP_S
        bindings = None
        if settled + 5 < t0 + expires:
            time.sleep(max(0, settled - time.time()))
            bindings = steady_rss(pid)
        # Every binding has lapsed `expires` after the last was made; then the sweep's period.
        time.sleep(max(0, t0 + out["wall_s"] + expires + wait - time.time()))
        after = steady_rss(pid)
        anon_after = rss_kib(pid, "RssAnon")
        registered = out["registered"]
        return {
            "store": kind, "users": users, "rate": rate, "expires_s": expires,
            "registered": registered, "rss_idle_kib": idle, "rss_loaded_kib": loaded,
            "rss_expired_kib": after,
            "bytes_per_binding": round((loaded - idle) * 1024 / max(1, registered)),
            "rss_bindings_kib": bindings,
            "bytes_per_binding_alone": None if bindings is None
            else round((bindings - idle) * 1024 / max(1, registered)),
            "expired_vs_idle": round(after / idle, 3),
            "rss_anon_idle_kib": anon_idle, "rss_anon_expired_kib": anon_after,
            "command": " ".join(["strowger-load"] + cmd[1:]),
        }
    finally:
        server.stop()
        if backend:
            backend.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="local,memcached,redis")
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=5_000)
    ap.add_argument("--expires", type=int, default=60,
                    help="Expires asked for, s; at least registrar.min_expires (60 by default); the "
                         "bindings-alone reading needs it 70 s longer than the registering takes")
    ap.add_argument("--wait", type=int, default=20, help="seconds after the last expiry before the last read")
    ap.add_argument("--strowger", default=reg.STROWGER)
    ap.add_argument("--base", help="another strowger binary, run right before --strowger on each backend")
    ap.add_argument("--load", default=os.path.join(reg.RELEASE, "strowger-load"))
    b.add_record_flag(ap)
    args = ap.parse_args()
    rundir = b.run_dir("registrar-memory")
    builds = ([("base", args.base)] if args.base else []) + [("new" if args.base else "", args.strowger)]
    rows = []
    for kind in args.backends.split(","):
        for build, binary in builds:
            r = {**run(kind, args.users, args.rate, args.expires, args.wait, rundir, binary, args.load, build),
                 "build": build, "binary": binary}
            rows.append(r)
            print(f"{kind}{' ' + build if build else ''}: {r['registered']} bindings; RSS idle "
                  f"{r['rss_idle_kib'] / 1024:.1f} MiB, loaded {r['rss_loaded_kib'] / 1024:.1f} MiB "
                  f"({r['bytes_per_binding']} B per binding), "
                  + (f"bindings alone {r['rss_bindings_kib'] / 1024:.1f} MiB ({r['bytes_per_binding_alone']} B "
                     "each, REGISTER transactions ended), " if r["rss_bindings_kib"] else "") +
                  f"after expiry {r['rss_expired_kib'] / 1024:.1f} MiB (x{r['expired_vs_idle']} of idle; anonymous "
                  f"{r['rss_anon_idle_kib'] / 1024:.1f} -> {r['rss_anon_expired_kib'] / 1024:.1f} MiB)", flush=True)
    b.keep(args, rundir, "registrar-memory.json", rows)
    mib = lambda kib: f"{kib / 1024:.1f} MiB" if kib else "–"  # noqa: E731
    b.summary(args, "memory per registration and after expiry (bench/lib/registrar_memory.py)", "\n".join(
        ["| store | build | bindings | RSS idle | loaded | bindings alone | B per binding (alone) | after expiry "
         "| surplus after expiry | after ÷ idle | anonymous idle → after |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        + [f"| {r['store']} | {r['build'] or '–'} | {r['registered']} | {mib(r['rss_idle_kib'])} | "
           f"{mib(r['rss_loaded_kib'])} | {mib(r['rss_bindings_kib'])} | {r['bytes_per_binding']} "
           f"({r['bytes_per_binding_alone'] or '–'}) | {mib(r['rss_expired_kib'])} | "
           f"{(r['rss_expired_kib'] - r['rss_idle_kib']) / 1024:.2f} MiB | ×{r['expired_vs_idle']} | "
           f"{mib(r['rss_anon_idle_kib'])} → {mib(r['rss_anon_expired_kib'])} |" for r in rows]))


if __name__ == "__main__":
    main()
