#!/usr/bin/env bash
# SIP over TLS and over WebSocket against UDP in one run: strowger's CPU per REGISTER
# (registrar.authenticate off, so every REGISTER is stored and answered 200; one client, one
# request in flight, the same count on UDP, then on one TLS connection, then on one plain
# WebSocket), and its memory per idle TLS and per idle WebSocket connection (RSS before and
# after 1,000 connections finish their handshakes or upgrades and stay open; loopback is
# whitelisted in the default configuration, so security.tcp_max_per_source does not apply).
# Bounded: REGISTERs and connections are counted, a run takes under a minute.
# Figures: tls.json under bench/out/; --record (or RECORD=1) also copies it to bench/results/ and
# appends the summary to bench/RESULTS.md.
# Usage: bench/tls.sh [--record] [BIN] [REGISTERS] [CONNECTIONS]   (default target/release/strowger 20000 1000)
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
record=()
if [[ ${1:-} == --record ]]; then
  record=(--record)
  shift
fi
bin=$(realpath "${1:-target/release/strowger}")
regs=${2:-20000}
conns=${3:-1000}
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
"$bin" default-config | awk '/^\[registrar\]/{r=1} r && /^authenticate = true/{$0="authenticate = false"; r=0} {print}' >"$dir/tls.toml"
ulimit -n 8192
"$bin" --config "$dir/tls.toml" --sip-listen 127.0.0.1:25070 --tls-listen 127.0.0.1:25071 \
  --ws-listen 127.0.0.1:25072 --rtp-ports 30000-30099 --data-dir "$dir/data" --api-listen "" 2>"$dir/strowger.log" &
pid=$!
for _ in $(seq 50); do grep -q 'worker(s)' "$dir/strowger.log" && break; sleep 0.2; done
python3 bench/lib/tls.py "${record[@]}" "$pid" 127.0.0.1 25070 25071 "$dir/data/tls/cert.pem" "$regs" "$conns" 25072
