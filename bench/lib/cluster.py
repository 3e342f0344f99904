"""The reference cluster of examples/cluster/run.sh, for the benches (dispatch.py, cluster_kill.py,
scaling.py check-cluster): a Redis Cluster of three masters and three replicas, strowger nodes on
127.0.0.2, .3 and .4 sharing it as their store, and an edge on 127.0.0.1 dispatching calls and
REGISTERs to them (`proxy.dispatch`). One node template and one edge template, so every bench
runs the same cluster; each process in its own session (bench.spawn), every port a free one.
"""

import os
import subprocess
import time

import bench as b

# Steps of extension 9196: echo what arrives, or hold silently until the caller's BYE.
ECHO, HOLD = '"answer", "echo"', '"answer", "wait 30"'

NODE = """[general]
max_calls = 100000
[security]
trusted = ["127.0.0.1"]
[registrar]
domain = "strowger"
store = "{store}"
{registrar}[[users]]
user = "1001"
password = "secret-1001"
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = [{answer}]
[[dialplan.contexts.default.rules]]
regex = "^[0-9]{{6}}$"
steps = ["bridge user/${{EXTEN}} timeout=20"]
"""


def node_config(store, answer=ECHO, registrar="", users=()):
    """A node on `store` that trusts the edge (127.0.0.1): user 1001 (password secret-1001) and
    `users` (password secret-NAME each), extension 9196 with steps `answer`, and six-digit
    extensions bridged to the registered user of that name. `registrar`: more `[registrar]`
    lines ("key = value\\n" each)."""
    more = "".join(f'[[users]]\nuser = "{u}"\npassword = "secret-{u}"\n' for u in users)
    return NODE.format(store=store, answer=answer, registrar=registrar) + more


def edge_config(nodes):
    """The edge over `nodes` ((ip, port) each), trusting them (it follows their Route to a phone)."""
    uris = ", ".join(f'"sip:{ip}:{p}"' for ip, p in nodes)
    ips = ", ".join(f'"{ip}"' for ip, _ in nodes)
    return (f'[security]\ntrusted = [{ips}]\n'
            f'[proxy]\ndomains = ["edge.test", "strowger"]\ndispatch = "nodes"\n'
            f'[[dialplan.contexts.default.rules]]\nexten = "9196"\nsteps = ["answer"]\n'
            f'[[dispatch]]\nname = "nodes"\nnodes = [{uris}]\n')


def start(binary, rundir, name, text, ip="127.0.0.1", port=None, rtp_ports=400, extra=()):
    """strowger `binary` with configuration `text` (written to rundir/`name`.toml), SIP on
    `ip`:`port` (a free port if None), `rtp_ports` RTP ports of its own, data in
    rundir/`name`-data, log appended to rundir/`name`.log (a restart keeps the first run's);
    `extra`: more arguments. Returns (process, port)."""
    path = os.path.join(rundir, f"{name}.toml")
    with open(path, "w") as f:
        f.write(text)
    port = port or b.alloc_ports(1)
    rtp = b.alloc_ports(rtp_ports)
    cmd = [binary, "--config", path, "--sip-listen", f"{ip}:{port}", "--rtp-ports",
           f"{rtp}-{rtp + rtp_ports - 1}", "--data-dir", os.path.join(rundir, f"{name}-data"),
           "--api-listen", f"127.0.0.1:{b.alloc_ports(1)}", *extra]
    log = open(os.path.join(rundir, f"{name}.log"), "a")
    p = b.spawn(cmd, rundir, log, log)
    b.raise_priority(p.pid)
    return p, port


def wait_until(ok, seconds):
    """Polls `ok` every 0.1 s for up to `seconds`; raises if it never holds."""
    deadline = time.time() + seconds
    while not ok():
        if time.time() > deadline:
            raise RuntimeError(f"not ready within {seconds} s")
        time.sleep(0.1)


def redis_cluster(rundir):
    """Three Redis masters and three replicas on free ports (stopped with the other children);
    returns the redis+cluster:// URL and {port: process} of the six."""
    procs = {}
    for i in range(6):
        port, bus = b.alloc_ports(1), b.alloc_ports(1)
        d = os.path.join(rundir, f"redis-{port}")
        os.makedirs(d)
        procs[port] = b.spawn(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-port", str(bus), "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--dir", d],
            d, subprocess.DEVNULL, subprocess.DEVNULL)
    addrs = [f"127.0.0.1:{p}" for p in procs]
    for p in procs:
        wait_until(lambda: subprocess.run(["redis-cli", "-p", str(p), "ping"],
                                            capture_output=True).returncode == 0, 10)
    subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1",
                    "--cluster-yes"], check=True, capture_output=True, timeout=60)
    first = str(next(iter(procs)))
    wait_until(lambda: b"cluster_state:ok" in subprocess.run(
        ["redis-cli", "-p", first, "cluster", "info"], capture_output=True).stdout, 30)
    # The replicas' first full copy comes after the cluster is up: until it is in, a change's
    # WAIT finds no replica (and the master's replication backlog is still to be made).
    wait_until(lambda: all(replica_ready(p) for p in procs), 30)
    return "redis+cluster://" + ",".join(addrs), procs


def replica_ready(port):
    """Whether the Redis on `port` is a master or a replica holding its master's copy."""
    text = subprocess.run(["redis-cli", "-p", str(port), "info", "replication"],
                          capture_output=True, text=True).stdout
    return "role:master" in text or ("master_link_status:up" in text
                                     and "master_sync_in_progress:0" in text)


def started(rundir, name, seconds=30):
    """Waits for strowger's start-up line in rundir/`name`.log."""
    path = os.path.join(rundir, f"{name}.log")
    wait_until(lambda: "worker(s)" in open(path).read(), seconds)
