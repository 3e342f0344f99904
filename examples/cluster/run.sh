#!/usr/bin/env bash
# A strowger cluster on this machine, on loopback addresses only: a Redis Cluster of three masters
# and three replicas, three strowger nodes on 127.0.0.2, 127.0.0.3 and 127.0.0.4 sharing it as
# their location and credential store (redis+cluster://), and an edge on 127.0.0.1 that
# dispatches calls and REGISTERs to them (proxy.dispatch). Every port is a free one, everything
# lives in a temporary directory, and everything stops on Ctrl-C or after --seconds.
#
#   examples/cluster/run.sh                 # run for up to an hour; prints how to register and call
#   examples/cluster/run.sh --seconds 120   # a shorter bound
#   examples/cluster/run.sh --check         # start, register a phone and call through the edge with SIPp, stop
#
# Needs redis-server and redis-cli (scripts/setup.sh installs them) and a strowger binary:
# $STROWGER, else target/release/strowger, else target/debug/strowger (cargo build --release).
set -euo pipefail

seconds=3600
check=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --check) check=1; seconds=120; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${STROWGER:-}"
for b in "$root/target/release/strowger" "$root/target/debug/strowger"; do
    [ -n "$bin" ] || { [ -x "$b" ] && bin="$b"; } || true
done
[ -n "$bin" ] || { echo "no strowger binary: run cargo build --release (or set STROWGER=path)" >&2; exit 1; }
for tool in redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/setup.sh" >&2; exit 1; }
done

dir="$(mktemp -d /tmp/strowger-cluster.XXXXXX)"
pids=()
stop() {
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo "stopped; logs and configuration kept in $dir"
}
trap stop EXIT INT TERM

# Free ports from the kernel: `ports N` prints N free TCP+UDP ports on 127.0.0.1; `rtp_range N`
# the first of N consecutive free UDP ports (even), below the ephemeral range.
ports() {
    python3 - "$1" <<'EOF'
import socket, sys
out, held = [], []
while len(out) < int(sys.argv[1]):
    t = socket.socket(); t.bind(("127.0.0.1", 0)); p = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", p)); out.append(p)
    except OSError:
        pass
    held += [t, u]
print(" ".join(map(str, out)))
EOF
}
rtp_range() {
    python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(2000):
    lo = random.randrange(10000, 32000 - n) & ~1
    socks = []
    try:
        for p in range(lo, lo + n):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", p)); socks.append(s)
        print(lo); sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks: s.close()
sys.exit("no free RTP range")
EOF
}

# The Redis Cluster: six nodes (client port and bus port each), a node missing 2 s is failed.
read -r -a rp <<<"$(ports 12)"
addrs=()
for i in 0 1 2 3 4 5; do
    port=${rp[$i]} bus=${rp[$((i + 6))]}
    mkdir -p "$dir/redis-$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-port "$bus" \
        --cluster-config-file nodes.conf --cluster-node-timeout 2000 --save "" --appendonly no \
        --dir "$dir/redis-$port" >"$dir/redis-$port/log" 2>&1 &
    pids+=($!)
    addrs+=("127.0.0.1:$port")
done
for a in "${addrs[@]}"; do
    for _ in $(seq 50); do redis-cli -p "${a#*:}" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/cluster-create.log"
for _ in $(seq 100); do
    redis-cli -p "${rp[0]}" cluster info | grep -q cluster_state:ok && break
    sleep 0.2
done
store="redis+cluster://$(IFS=,; echo "${addrs[*]}")"

# The nodes: users 1001-1003, the echo 9196, the users' extensions; they trust the edge.
cat >"$dir/node.toml" <<EOF
[security]
trusted = ["127.0.0.1"]

[registrar]
domain = "strowger"
store = "$store"

[[users]]
user = "1001"
password = "secret-1001"
[[users]]
user = "1002"
password = "secret-1002"
[[users]]
user = "1003"
password = "secret-1003"

[dialplan]
default_context = "default"
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = ["answer", "echo"]
[[dialplan.contexts.default.rules]]
regex = "^1[0-9]{3}$"
steps = ["bridge user/\${EXTEN} timeout=20"]
EOF

read -r -a sp <<<"$(ports 8)"
started() {  # waits for strowger's startup line in log $1
    for _ in $(seq 300); do grep -q "worker(s)" "$1" && return 0; sleep 0.1; done
    echo "strowger did not start; see $1" >&2
    exit 1
}
nodes=()
for n in 0 1 2; do
    ip="127.0.0.$((n + 2))" rtp=$(rtp_range 400)
    "$bin" --config "$dir/node.toml" --sip-listen "$ip:${sp[$n]}" --rtp-ports "$rtp-$((rtp + 399))" \
        --data-dir "$dir/node$n" --api-listen "127.0.0.1:${sp[$((n + 4))]}" \
        >"$dir/node$n.out" 2>"$dir/node$n.log" &
    pids+=($!)
    started "$dir/node$n.log"
    nodes+=("\"sip:$ip:${sp[$n]}\"")
done

edge="127.0.0.1:${sp[3]}"
cat >"$dir/edge.toml" <<EOF
[security]
trusted = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

[proxy]
domains = ["strowger"]
dispatch = "nodes"

[[dispatch]]
name = "nodes"
nodes = [$(IFS=,; echo "${nodes[*]}")]
probe_interval_s = 1
probe_failures = 2
timeout_ms = 1000

# Calls to the edge itself rather than to the domain (a configuration needs a dialplan).
[[dialplan.contexts.default.rules]]
exten = "9196"
steps = ["answer", "echo"]
EOF
rtp=$(rtp_range 100)
"$bin" --config "$dir/edge.toml" --sip-listen "$edge" --rtp-ports "$rtp-$((rtp + 99))" \
    --data-dir "$dir/edge" --api-listen "127.0.0.1:${sp[7]}" >"$dir/edge.out" 2>"$dir/edge.log" &
pids+=($!)
started "$dir/edge.log"

cat <<EOF

strowger cluster up ($dir):
  Redis Cluster  $store (3 masters, 3 replicas)
  nodes          ${nodes[*]}
  edge           sip:$edge   (logs: $dir/edge.log, $dir/node0.log ...)

Register a phone through the edge: server/outbound proxy $edge (UDP or TCP), domain strowger,
user 1001, 1002 or 1003, password secret-USER. Then dial 9196 (echo) or another registered user.
With SIPp, from the repository:
  sipp -sf tests/sipp/register.xml -s 1001 -au 1001 -ap secret-1001 -m 1 -i 127.0.0.1 $edge
  sipp -sf tests/sipp/proxy_uac.xml -s 9196 -key domain strowger -d 2000 -m 10 -r 5 -i 127.0.0.1 $edge
Try: kill -9 a node (its PID: pgrep -f $dir/node1) or a Redis master
(redis-cli -p ${rp[0]} cluster nodes), and place calls again.
Stops on Ctrl-C or after $seconds s.
EOF

if [ "$check" = 1 ]; then
    cd "$dir"
    sipp -sf "$root/tests/sipp/register.xml" -s 1001 -au 1001 -ap secret-1001 -m 1 -i 127.0.0.1 \
        -p "$(ports 1)" -timeout 20s -timeout_error -nostdin "$edge" >/dev/null 2>&1 \
        && echo "check: 1001 registered through the edge" \
        || { echo "check: REGISTER through the edge failed (see $dir)" >&2; exit 1; }
    sipp -sf "$root/tests/sipp/proxy_uac.xml" -s 9196 -key domain strowger -d 500 -m 10 -r 5 \
        -i 127.0.0.1 -p "$(ports 1)" -timeout 30s -timeout_error -nostdin "$edge" >/dev/null 2>&1 \
        && echo "check: 10 calls through the edge connected" \
        || { echo "check: calls through the edge failed (see $dir)" >&2; exit 1; }
    exit 0
fi
sleep "$seconds" &
pids+=($!)
wait $!
