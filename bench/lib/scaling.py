#!/usr/bin/env python3
"""How many strowger nodes and Redis Cluster shards a workload needs, from per-unit figures
measured here (docs/scaling.md).

  python3 bench/lib/scaling.py model [--inputs bench/lib/scaling_inputs.json]
      prints, per resource, the demand, one unit's capacity, the units needed and the headroom,
      and names the bottleneck.
  python3 bench/lib/scaling.py check [--users 10000 --rate 1000]
      registers phones with strowger-load against strowger on a Redis store (loopback, bounded)
      and prints the Redis commands per REGISTER the model predicts against `INFO commandstats`,
      and Redis memory per binding (`INFO memory`).
  python3 bench/lib/scaling.py check-cluster [--users 3000 --rate 300 --call-rate 20 --call-seconds 20]
      the same against the reference cluster (a Redis Cluster of three masters and three replicas,
      three strowger nodes on 127.0.0.2-.4, an edge on 127.0.0.1 with `proxy.dispatch`): phones
      registered through the edge with strowger-load from one port where a SIPp UAS then answers,
      and SIPp calls through the edge to them at a bounded rate (each call bridged by a node to the
      callee, looked up in the store). Prints what the model predicts against what each master's
      INFO and each process's /proc say: Redis commands per REGISTER and per call summed over the
      masters, their spread over the shards against the slots each owns, Redis memory per binding,
      CPU per REGISTER and per call of the nodes, the edge and the masters. Exits non-zero when a
      count (commands or keys per REGISTER or call) is off by more than 10 %.
"""

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "scaling_inputs.json")
# Commands a client or a replica sends for itself, not for a REGISTER or a call (INFO is ours).
ADMIN = {"info", "ping", "client", "hello", "cluster", "readonly", "command", "config", "select",
         "auth", "replconf", "psync"}
# used_memory that is not data: clients' buffers (a node's connections, opened as the load comes,
# are several KiB each) and the replication backlog (the last writes kept for a replica that
# reconnects, up to 1 MiB: it fills with the run's own writes).
NOT_DATA = ("mem_clients_normal", "mem_clients_slaves", "mem_replication_backlog")
# How far a count may be from the model's before check-cluster fails.
TOLERANCE = 0.10
SLOTS = 16384
# How long a node answers whether a user exists from its own copy (store::cache::USER_TTL_S).
USER_TTL_S = 30
# The shortest idle window check-cluster measures (seconds).
IDLE_S = 10


def values(inputs):
    """{section: {name: value}} from the inputs table (each figure carries unit and source)."""
    return {s: {k: f["value"] for k, f in t.items()} for s, t in inputs.items() if not s.startswith("_")}


def demand(v):
    """What the workload asks of the whole system, per resource."""
    w, u = v["workload"], v["per_unit"]
    legs = w["calls"] * w["legs_per_call"]
    reg_s = w["phones"] / w["reregister_s"]
    ka_s = w["phones"] * w["nat_fraction"] / w["keepalive_s"]
    calls_s = w["calls"] / w["hold_s"]
    lookups_s = calls_s * w["lookups_per_call"]
    return {
        "rates": {"register_s": reg_s, "keepalive_s": ka_s, "calls_s": calls_s, "lookups_s": lookups_s},
        "node_cores": {
            "register": reg_s * u["register_cpu_us"] / 1e6,
            "keepalive": ka_s * u["keepalive_cpu_us"] / 1e6,
            "call_setup": calls_s * u["call_setup_cpu_ms"] / 1e3,
            "media": legs * u["media_cpu_ms_per_leg_s"] / 1e3,
        },
        "node_memory_gib": legs * u["memory_kib_per_leg"] / 2**20,
        "rtp_ports": legs * u["ports_per_leg"],
        "pps": legs * u["packets_per_leg_s"],
        "redis_cores": reg_s * u["redis_cpu_us_per_register"] / 1e6 + lookups_s * u["redis_cpu_us_per_lookup"] / 1e6,
        "redis_memory_gib": w["phones"] * u["redis_bytes_per_binding"] / 2**30,
    }


def size(v):
    """Rows (tier, resource, demand, capacity per unit at target use, units) and the units of
    each tier: the largest need among its resources, the bottleneck being that resource."""
    d, n, s = demand(v), v["node"], v["shard"]
    cpu = sum(d["node_cores"].values())
    rows = [
        ("node", "CPU (cores)", cpu, n["cores"] * n["target_util"]),
        ("node", "memory (GiB)", d["node_memory_gib"], n["memory_gib"] * n["target_util"]),
        ("node", "RTP ports", d["rtp_ports"], n["rtp_ports"] * n["target_util"]),
        ("node", "packets/s", d["pps"], n["nic_pps"] * n["target_util"]),
        ("shard", "CPU (one core)", d["redis_cores"], s["target_util"]),
        ("shard", "memory (GiB)", d["redis_memory_gib"], s["memory_gib"] * s["target_util"]),
    ]
    rows = [(t, r, dem, cap, math.ceil(dem / cap - 1e-9)) for t, r, dem, cap in rows]
    tiers = {}
    for tier, floor in (("node", 1), ("shard", s["min_shards"])):
        mine = [r for r in rows if r[0] == tier]
        worst = max(mine, key=lambda r: r[2] / r[3])
        units = max(floor, worst[4])
        tiers[tier] = {"units": units, "bottleneck": worst[1],
                       "floor": floor if floor > worst[4] else None}
    out = []
    for tier, res, dem, cap, need in rows:
        units = tiers[tier]["units"]
        # Headroom: how much more of this resource the chosen units take at full use.
        full = cap / v[tier]["target_util"] * units
        out.append({"tier": tier, "resource": res, "demand": dem, "per_unit": cap, "needed": need,
                    "headroom": full / dem if dem else math.inf})
    return out, tiers, d


def fmt(x):
    if x == math.inf:
        return "∞"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def model(args):
    with open(args.inputs) as f:
        inputs = json.load(f)
    v = values(inputs)
    rows, tiers, d = size(v)
    print("| rate | per second |\n| --- | ---: |")
    for k, x in d["rates"].items():
        print(f"| {k} | {fmt(x)} |")
    print("\n| node CPU by work | cores |\n| --- | ---: |")
    for k, x in d["node_cores"].items():
        print(f"| {k} | {fmt(x)} |")
    print("\n| tier | resource | demand | one unit at target use | units needed | headroom at the chosen units |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['tier']} | {r['resource']} | {fmt(r['demand'])} | {fmt(r['per_unit'])} | {r['needed']} "
              f"| ×{fmt(r['headroom'])} |")
    for tier, t in tiers.items():
        why = f" (the floor of {t['floor']}; the busiest resource is {t['bottleneck']})" if t["floor"] else \
            f": {t['bottleneck']} saturates first"
        print(f"\n{tier}s: {t['units']}{why}")
    print("\nPer-unit figures and their sources:")
    for k, f in inputs["per_unit"].items():
        print(f"- {k} = {f['value']} {f['unit']} — {f['source']}")


def check(args):
    sys.path.insert(0, HERE)
    import bench as b
    import registrar as r
    with open(args.inputs) as f:
        v = values(json.load(f))
    predicted = v["per_unit"]["redis_commands_per_register"]
    rundir = tempfile.mkdtemp(prefix="scaling-check-")
    try:
        _, url = r.start_backend("redis", rundir)
        port = int(url.rsplit(":", 1)[1])
        _, sip = r.start_strowger("strowger", url, False, 0, rundir, args.strowger)
        i0 = info(port)
        cmd, res = r.load_register(sip, args.rate, args.users, r.FIRST_USER, False, rundir)
        i1 = info(port)
    finally:
        b.kill_children()
    ok = res["registered"]
    if not ok:
        raise SystemExit(f"no phone registered: {res.get('failed_reasons')}")
    diff = commands(i0, i1)
    mem0, mem1 = i0["memory"], i1["memory"]
    measured = sum(diff.values()) / ok
    print(f"command: {' '.join(['strowger-load'] + cmd[1:])}")
    print(f"registered {ok} of {args.users} ({res['failed']} failed) at {res['registers_per_s']:.0f}/s")
    print("| command | calls | per REGISTER |\n| --- | ---: | ---: |")
    for k, n in sorted(diff.items()):
        print(f"| {k} | {n:,} | {n / ok:.3f} |")
    print(f"Redis commands per REGISTER: predicted {predicted}, measured {measured:.3f}, "
          f"measured / predicted = ×{measured / predicted:.3f}")
    print(f"Redis used_memory per binding: {(mem1 - mem0) / ok:,.0f} B "
          f"({mem0:,} -> {mem1:,} B; model input {v['per_unit']['redis_bytes_per_binding']} B)")


def info(port):
    """{calls: {command: calls} from INFO commandstats, memory: used_memory, data: used_memory
    less NOT_DATA, keys: keys of db 0} of the Redis on 127.0.0.1:`port`."""
    s = socket.create_connection(("127.0.0.1", port), 5)
    out, mem = {"calls": {}, "keys": 0}, {}
    for section in ("commandstats", "memory", "keyspace"):
        s.sendall(f"INFO {section}\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n"):
            head += s.recv(1)
        n = int(head[1:-2])
        body = b""
        while len(body) < n + 2:
            body += s.recv(n + 2 - len(body))
        for line in body.decode().splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                out["calls"][name] = int(rest.split(",")[0].split("=")[1])
            elif line.split(":")[0] in ("used_memory", *NOT_DATA):
                name, value = line.split(":")
                mem[name] = int(value)
            elif line.startswith("db0:keys="):
                out["keys"] = int(line.split("=")[1].split(",")[0])
    s.close()
    out["memory"] = mem["used_memory"]
    out["data"] = mem["used_memory"] - sum(mem.get(k, 0) for k in NOT_DATA)
    return out


def process_cpu(pid):
    """CPU seconds of process `pid`, its ended threads included: utime + stime of /proc/PID/stat
    (10 ms ticks). The run time of live threads (bench.proc_cpu) drops when a thread ends, and a
    node's store threads end when idle."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commands(i0, i1):
    """{command: calls} between two `info`s of one Redis, without ADMIN ones (`cluster|slots` is
    `cluster`'s) and those not called."""
    diff = {k: n - i0["calls"].get(k, 0) for k, n in i1["calls"].items()}
    return {k: n for k, n in diff.items() if n and k.split("|")[0] not in ADMIN}


def slots(cluster_nodes):
    """{port: slots it serves} of the masters, from `CLUSTER NODES` text."""
    out = {}
    for line in cluster_nodes.splitlines():
        f = line.split()
        if len(f) < 8 or "master" not in f[2].split(","):
            continue
        port = int(f[1].split("@")[0].rsplit(":", 1)[1])
        n = 0
        for r in f[8:]:
            if r.startswith("["):  # a slot being migrated
                continue
            lo, _, hi = r.partition("-")
            n += int(hi or lo) - int(lo) + 1
        out[port] = n
    return out


def predict_cluster(v, owned):
    """What the model says a cluster run measures, per REGISTER and per call (one location lookup
    per call in the workload), and each master's share of keys and commands: the slots it owns
    (`owned`: {master: slots}) over all of them, keys being hashed evenly over the slots."""
    u, w = v["per_unit"], v["workload"]
    lookups = w["lookups_per_call"]
    return {
        "commands_per_register": u["redis_commands_per_register"] + u["redis_cluster_commands_per_change"],
        "commands_per_call": lookups * u["redis_commands_per_lookup"],
        "keys_per_register": 1,
        "share": {m: n / SLOTS for m, n in owned.items()},
        "bytes_per_binding": u["redis_bytes_per_binding"],
        "node_cpu_us_per_register": u["register_cpu_us"],
        "node_cpu_ms_per_call": u["call_setup_cpu_ms"],
        "redis_cpu_us_per_register": u["redis_cpu_us_per_register"],
        "redis_cpu_us_per_call": lookups * u["redis_cpu_us_per_lookup"],
    }


def phase(s0, s1, masters, done, idle=None):
    """What the masters and the processes did between snapshots `s0` and `s1` ({t: unix time,
    redis: {port: info}, cpu: {name: seconds}}) for `done` REGISTERs or calls: commands, keys and
    memory per one summed over `masters`, each master's share of the commands and keys, each
    process's CPU-µs per one, and, given `idle` (two snapshots with nothing asked between them),
    that CPU less what each process spends idle (probes, timers, the cluster bus) over as long."""
    cmds = {m: commands(s0["redis"][m], s1["redis"][m]) for m in masters}
    per_master = {m: sum(c.values()) for m, c in cmds.items()}
    keys = {m: s1["redis"][m]["keys"] - s0["redis"][m]["keys"] for m in masters}
    by_name = {}
    for c in cmds.values():
        for k, n in c.items():
            by_name[k] = by_name.get(k, 0) + n
    total, all_keys = sum(per_master.values()), sum(keys.values())

    def rate(n):
        """CPU-seconds a second process `n` spent idle."""
        i0, i1 = idle
        return (i1["cpu"][n] - i0["cpu"][n]) / (i1["t"] - i0["t"])

    return {
        "done": done,
        "by_command": {k: n / done for k, n in sorted(by_name.items())},
        "commands": total / done,
        "used_memory": sum(s1["redis"][m]["memory"] - s0["redis"][m]["memory"] for m in masters) / done,
        "keys": all_keys / done,
        "bytes": sum(s1["redis"][m]["data"] - s0["redis"][m]["data"] for m in masters) / done,
        "command_share": {m: n / total if total else 0 for m, n in per_master.items()},
        "key_share": {m: n / all_keys if all_keys else 0 for m, n in keys.items()},
        "cpu_us": {n: (s1["cpu"][n] - s0["cpu"][n]) * 1e6 / done for n in s1["cpu"]},
        "net_cpu_us": {n: (s1["cpu"][n] - s0["cpu"][n] - rate(n) * (s1["t"] - s0["t"])) * 1e6 / done
                       for n in s1["cpu"]} if idle else None,
    }


def verdict(rows, tolerance=TOLERANCE):
    """Rows (figure, predicted or None, measured, a count?) with measured ÷ predicted added, and
    the figures that fail: counts further than `tolerance` from the prediction."""
    out, failed = [], []
    for name, pred, meas, count in rows:
        ratio = meas / pred if pred else None
        out.append((name, pred, meas, ratio))
        if count and (ratio is None or abs(ratio - 1) > tolerance):
            failed.append(name)
    return out, failed


def check_cluster(args):
    sys.path.insert(0, HERE)
    import bench as b
    import cluster
    import proxy
    with open(args.inputs) as f:
        v = values(json.load(f))
    strowger = args.strowger or os.path.join(b.ROOT, "target", "release", "strowger")
    load = args.load or os.path.join(b.ROOT, "target", "release", "strowger-load")
    users = args.users
    calls_n = args.call_rate * args.call_seconds
    first = 100000
    rundir = b.run_dir("scaling-cluster")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, b._on_signal)
    started = time.strftime("%H:%M", time.gmtime())
    load0 = b.loadavg()
    try:
        url, redis = cluster.redis_cluster(rundir)
        # The phones are users (a call's lookup asks whether the callee exists); no digest (the
        # model's commands per REGISTER are without it) and no keep-alives (the phones are one
        # SIPp UAS; the model counts keep-alives apart).
        node_text = cluster.node_config(url, registrar="authenticate = false\nkeepalive_s = 0\n",
                                        users=range(first, first + users))
        nodes = []
        for n in range(3):
            ip = f"127.0.0.{n + 2}"
            p, port = cluster.start(strowger, rundir, f"node{n}", node_text, ip)
            cluster.started(rundir, f"node{n}", 120)
            nodes.append((p, ip, port))
        provisioned = time.time()
        edge, target = cluster.start(strowger, rundir, "edge",
                                     cluster.edge_config([(ip, port) for _, ip, port in nodes]))
        cluster.started(rundir, "edge")
        time.sleep(3)  # the edge's first probes answered
        text = subprocess.run(["redis-cli", "-p", str(next(iter(redis))), "cluster", "nodes"],
                              capture_output=True, text=True, check=True).stdout
        owned = slots(text)
        masters = sorted(owned)
        replicas = [p for p in redis if p not in owned]
        pids = {f"node{i}": p.pid for i, (p, _, _) in enumerate(nodes)}
        pids["edge"] = edge.pid
        pids.update({f"redis-{port}": p.pid for port, p in redis.items()})

        def cpu_of(name, pid):
            # Redis's threads live as long as it does: their exact run time (bench.proc_cpu).
            return b.proc_cpu(pid) if name.startswith("redis") else process_cpu(pid)

        def snapshot():
            return {"t": time.time(), "redis": {port: info(port) for port in redis},
                    "cpu": {n: cpu_of(n, pid) for n, pid in pids.items()}}

        phones = b.alloc_ports(1)
        reg_cmd = [load, "register", "--target", f"127.0.0.1:{target}", "--users", str(users),
                   "--rate", str(args.rate), "--first", str(first), "--port", str(phones), "--json",
                   "--max-time", str(max(30, users // args.rate * 4))]
        s0 = snapshot()
        with open(os.path.join(rundir, "register.json"), "w") as out:
            b.spawn(reg_cmd, rundir, out, subprocess.DEVNULL).wait()
        s1 = snapshot()
        reg = json.load(open(os.path.join(rundir, "register.json")))
        registered = reg["registered"]
        if not registered:
            raise SystemExit(f"no phone registered through the edge: {reg.get('failed_reasons')}; "
                             f"see {rundir}")
        # The phones' port now answers every call to them.
        uas = b.spawn(["sipp", "-sn", "uas", "-i", "127.0.0.1", "-p", str(phones), "-nostdin",
                       "-timeout", str(args.call_seconds * 4 + 60)], rundir,
                      subprocess.DEVNULL, subprocess.DEVNULL)
        b.raise_priority(uas.pid)
        csv = os.path.join(rundir, "callees.csv")
        with open(csv, "w") as f:
            f.write("SEQUENTIAL\n" + "".join(f"{first + i % registered};\n" for i in range(calls_n)))
        # A node answers whether a user exists from its copy for USER_TTL_S after it read (or, at
        # start, wrote) the user: calls begin once the copies from the start have lapsed, as a
        # callee's have in a day of calls. That wait, at least IDLE_S, is the idle window: what
        # each process spends with nothing asked.
        time.sleep(1)
        i0 = snapshot()
        time.sleep(max(IDLE_S, provisioned + USER_TTL_S + 1 - time.time()))
        s2 = i1 = snapshot()
        limit = args.call_seconds * 4 + 30
        scenario = os.path.join(b.BENCH, "sipp", "call_users.xml")
        caller = proxy.sipp([f"127.0.0.1:{target}", "-sf", scenario, "-inf", csv, "-d", "0", "-r",
                             str(args.call_rate), "-m", str(calls_n), "-l", str(args.call_rate * 4),
                             "-p", str(b.alloc_ports(1))], "calls", rundir, limit)
        caller.wait(limit + 10)
        s3 = snapshot()
        ok, failed = proxy.sipp_counts(rundir, "calls")
    finally:
        b.kill_children()
    if not ok:
        raise SystemExit(f"no call through the edge completed ({failed} failed); see {rundir}")
    print(f"\n{registered:,} of {users:,} phones registered through the edge at {args.rate}/s "
          f"({reg['failed']} failed); {ok:,} of {calls_n:,} calls completed at {args.call_rate}/s "
          f"({failed} failed). Load average {load0} at the start ({started} UTC), {b.loadavg()} at "
          f"the end. Run directory {os.path.relpath(rundir, b.ROOT)}.")
    report_cluster(v, owned, list(redis), list(pids), phase(s0, s1, masters, registered, (i0, i1)),
                   phase(s2, s3, masters, ok, (i0, i1)), phase(s0, s1, replicas, registered), (i0, i1))
    print(f"\ncommands: {' '.join(['strowger-load'] + reg_cmd[1:])}; "
          f"sipp -sf bench/sipp/call_users.xml -inf callees.csv -d 0 -r {args.call_rate} -m {calls_n} "
          f"(through the edge 127.0.0.1:{target})")


def report_cluster(v, owned, ports, names, r, c, replicas_r, idle):
    """Prints a cluster run's figures against the model's (`r`, `c`: the REGISTER and call
    `phase`s of the masters, `replicas_r`: the REGISTER phase of the replicas); exits non-zero
    when a count is more than TOLERANCE off."""
    pred = predict_cluster(v, owned)
    masters = sorted(owned)
    of = {"nodes": [n for n in names if n.startswith("node")],
          "masters": [f"redis-{m}" for m in masters],
          "replicas": [f"redis-{p}" for p in ports if p not in owned]}

    def cpu(ph, who):
        """CPU-µs per one of `who` together, less what they spend idle."""
        return sum(ph["net_cpu_us"][n] for n in of.get(who, [who]))

    rows, failed = verdict([
        ("Redis commands per REGISTER, summed over the masters", pred["commands_per_register"],
         r["commands"], True),
        ("Redis commands per call, summed over the masters", pred["commands_per_call"], c["commands"], True),
        ("Redis keys per registered phone", pred["keys_per_register"], r["keys"], True),
        ("Redis memory per binding, masters (B; used_memory less NOT_DATA)", pred["bytes_per_binding"],
         r["bytes"], False),
        ("node CPU-µs per REGISTER, summed over the nodes, less idle", pred["node_cpu_us_per_register"],
         cpu(r, "nodes"), False),
        ("edge CPU-µs per REGISTER, less idle", None, cpu(r, "edge"), False),
        ("masters' CPU-µs per REGISTER, less idle", pred["redis_cpu_us_per_register"], cpu(r, "masters"), False),
        ("replicas' CPU-µs per REGISTER, less idle", None, cpu(r, "replicas"), False),
        ("node CPU-ms per call, summed over the nodes, less idle", pred["node_cpu_ms_per_call"],
         cpu(c, "nodes") / 1e3, False),
        ("edge CPU-ms per call, less idle", None, cpu(c, "edge") / 1e3, False),
        ("masters' CPU-µs per call, less idle", pred["redis_cpu_us_per_call"], cpu(c, "masters"), False),
    ])
    print("\n| figure | predicted | measured | measured ÷ predicted |\n| --- | ---: | ---: | ---: |")
    for name, p, m, ratio in rows:
        print(f"| {name} | {'—' if p is None else f'{p:,.4g}'} | {m:,.4g} | "
              f"{'—' if ratio is None else f'×{ratio:.3f}'} |")
    print("\n| commands | per REGISTER | per call |\n| --- | ---: | ---: |")
    for k in sorted(set(r["by_command"]) | set(c["by_command"])):
        print(f"| {k} | {r['by_command'].get(k, 0):.3f} | {c['by_command'].get(k, 0):.3f} |")
    print("\n| master | slots (predicted share) | keys | REGISTER commands | call commands |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for m in masters:
        print(f"| 127.0.0.1:{m} | {owned[m]:,} ({pred['share'][m]:.1%}) | {r['key_share'][m]:.1%} | "
              f"{r['command_share'][m]:.1%} | {c['command_share'][m]:.1%} |")
    print(f"\nreplicas' memory per binding (the same measure): {replicas_r['bytes']:,.0f} B; "
          f"masters' used_memory as it is: {r['used_memory']:,.0f} B")
    i0, i1 = idle
    span = i1["t"] - i0["t"]
    print(f"\nCPU of each process (strowger's: utime + stime of /proc/PID/stat, 10 ms ticks; Redis's: "
          f"/proc/PID/task/*/schedstat): idle over {span:.0f} s with nothing asked, and CPU-µs per "
          "REGISTER and per call as measured and less idle:")
    print("| process | idle (% of a core) | per REGISTER | less idle | per call | less idle |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for n in names:
        pct = (i1["cpu"][n] - i0["cpu"][n]) / span * 100
        print(f"| {n}{' (master)' if n in of['masters'] else ''} | {pct:.2f} | {r['cpu_us'][n]:,.1f} | "
              f"{r['net_cpu_us'][n]:,.1f} | {c['cpu_us'][n]:,.1f} | {c['net_cpu_us'][n]:,.1f} |")
    if failed:
        raise SystemExit(f"FAILED: off the model by more than {TOLERANCE:.0%}: {', '.join(failed)}")
    print(f"\nEvery count within {TOLERANCE:.0%} of the model.")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["model", "check", "check-cluster"])
    p.add_argument("--inputs", default=INPUTS, help="the per-unit figures (JSON; default %(default)s)")
    p.add_argument("--users", type=int, default=None,
                   help="phones registered (default 10000; check-cluster: 3000)")
    p.add_argument("--rate", type=int, default=None,
                   help="REGISTERs per second (default 1000; check-cluster: 300)")
    p.add_argument("--call-rate", type=int, default=20, help="check-cluster: calls per second (default 20)")
    p.add_argument("--call-seconds", type=int, default=20,
                   help="check-cluster: seconds of calls (default 20)")
    p.add_argument("--strowger", default=None, help="the strowger binary (default target/release)")
    p.add_argument("--load", default=None, help="check-cluster: strowger-load (default target/release)")
    args = p.parse_args()
    cluster_run = args.what == "check-cluster"
    args.users = args.users or (3000 if cluster_run else 10000)
    args.rate = args.rate or (300 if cluster_run else 1000)
    {"model": model, "check": check, "check-cluster": check_cluster}[args.what](args)


if __name__ == "__main__":
    main()
