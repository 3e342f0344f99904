#!/usr/bin/env bash
# SIP over TLS (issue 22): 10,000 phones registered over TLS with keep-alives, against UDP, in one run.
#  - CPU per REGISTER: strowger's CPU per REGISTER over UDP, over one TLS connection and over one plain
#    WebSocket (registrar.authenticate off, so every REGISTER is stored and answered 200; one client, one
#    request in flight), in interleaved rounds (UDP, TLS, WS, UDP, TLS, WS ...); the ratios to UDP are
#    the medians of the rounds'.
#  - Phones: CONNECTIONS TLS connections (200 opening at once, non-blocking), each registering its own
#    AOR (sip:phoneN@127.0.0.1) and reading its 200, then sending CRLF CRLF every 10 s for 30 s
#    (RFC 5626 §3.5.1): RSS before and after (KiB per registered phone connection, target 64), the CRLF
#    pongs counted, connections closed, and strowger's CPU over the hold per phone.
#  - Memory per idle WebSocket connection (1,000, the phones still open).
# security.tcp_max (4096 by default) would refuse the phones: the bench's configuration raises it to
# CONNECTIONS + 2000; loopback is whitelisted by default, so tcp_max_per_source does not apply. The
# descriptor limit is raised to the hard limit (strowger and the client each hold every connection).
# Ports are picked free on 127.0.0.1. Bounded: REGISTERs and connections are counted; the hold is 30 s.
# Figures: tls.json under bench/out/; --record (or RECORD=1) also copies it to bench/results/ and
# appends the summary to bench/RESULTS.md. Options after the three positional ones go to bench/lib/tls.py
# (--keepalive S, --hold S, --rounds N, --batch N, --ws-conns N).
# Usage: bench/tls.sh [--record] [BIN] [REGISTERS] [CONNECTIONS] [TLS.PY OPTIONS]
#        (default target/release/strowger 20000 10000)
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/tls.py" "$@"
cd "$(dirname "$0")/.."
export TLS_SH_COMMAND="bash bench/tls.sh $*"  # said in the recorded summary (tls.py gets temporary paths)
record=()
if [[ ${1:-} == --record ]]; then
  record=(--record)
  shift
fi
bin=$(realpath "${1:-target/release/strowger}")
regs=${2:-20000}
conns=${3:-10000}
shift $(($# < 3 ? $# : 3))
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
hard=$(ulimit -Hn)
need=$((conns + 3000))
if [[ $hard != unlimited && $hard -lt $need ]]; then
  echo "tls.sh: $conns connections need about $need file descriptors, the hard limit is $hard:" \
    "raise it (ulimit -Hn, /etc/security/limits.conf) or give fewer CONNECTIONS" >&2
  exit 1
fi
ulimit -n "$hard"
# The registrar's store goes in the run's directory (the default, local:strowger-data/..., is relative to
# the working directory and would keep one run's contacts for the next).
"$bin" default-config | awk -v tcp_max=$((conns + 2000)) -v store="local:$dir/store.snap" '
  /^\[/ { r = /^\[registrar\]/ }
  r && /^store = / { $0 = "store = \"" store "\"" }
  r && /^authenticate = true/ { $0 = "authenticate = false" }
  /^tcp_max = / { $0 = "tcp_max = " tcp_max }
  { print }' >"$dir/tls.toml"
for line in "tcp_max = $((conns + 2000))" "store = \"local:$dir/store.snap\"" "authenticate = false"; do
  grep -qxF "$line" "$dir/tls.toml" || { echo "tls.sh: could not set '$line' in the default configuration" >&2; exit 1; }
done
# SIP (UDP), TLS and WebSocket on three consecutive free ports, and 100 RTP ports.
read -r port rtp < <(PYTHONPATH=bench/lib python3 -c 'import bench as b; print(b.alloc_ports(3, 1), b.alloc_ports(100))')
"$bin" --config "$dir/tls.toml" --sip-listen "127.0.0.1:$port" --tls-listen "127.0.0.1:$((port + 1))" \
  --ws-listen "127.0.0.1:$((port + 2))" --rtp-ports "$rtp-$((rtp + 99))" --data-dir "$dir/data" --api-listen "" \
  2>"$dir/strowger.log" &
pid=$!
for _ in $(seq 50); do grep -q 'worker(s)' "$dir/strowger.log" && break; sleep 0.2; done
python3 bench/lib/tls.py "${record[@]}" "$@" "$pid" 127.0.0.1 "$port" "$((port + 1))" "$dir/data/tls/cert.pem" \
  "$regs" "$conns" "$((port + 2))"
