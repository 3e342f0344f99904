#!/usr/bin/env bash
# Overload that means overload: RATE calls/s of short echo calls (extension 9196, HOLD s each,
# strowger-load sending 50 RTP packets/s per call) for DURATION s while `stress-ng --cpu 2`
# keeps both cores busy. The host, not strowger, makes the media ticks late, so no call should be
# refused. Each binary given runs in turn (e.g. the previous release first, for a before/after in
# one run); for each: calls completed and failed with strowger-load's reasons, and the times the
# workers went past capacity. Every run is bounded in calls and time.
# Usage: bench/overload.sh [BINARY...] (default: target/release/strowger). Knobs: RATE=100
# DURATION=180 HOLD=2, LOAD=path of strowger-load, NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
RATE=${RATE:-100} DURATION=${DURATION:-180} HOLD=${HOLD:-2} LOAD=${LOAD:-target/release/strowger-load}
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
((${#@})) || set -- target/release/strowger
command -v stress-ng >/dev/null || { echo "stress-ng is missing: run scripts/setup.sh" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$dir"' EXIT
for bin in "$@"; do
  port=$(free_port) api=$(free_port)
  "$bin" --sip-listen "127.0.0.1:$port" --rtp-ports 61000-62999 --data-dir "$dir/data" \
    --api-listen "127.0.0.1:$api" >"$dir/strowger.log" 2>&1 &
  server=$!
  pids+=("$server")
  sleep 2
  stress-ng --cpu 2 --timeout $((DURATION + 20))s --quiet &
  stress=$!
  pids+=("$stress")
  sleep 2
  report=$(timeout $((DURATION + 90)) "$LOAD" call --target "127.0.0.1:$port" \
    --ext 9196 --calls $((RATE * DURATION)) --rate "$RATE" --hold "$HOLD" --rtp send --json --quiet \
    --max-time $((DURATION + 60)))
  # Refusals by reason, as the server counted them (a build without the metric: none listed).
  refused=$(curl -s -H "Authorization: Bearer $(cat "$dir/data/api.token")" "http://127.0.0.1:$api/metrics" |
    awk '/^strowger_calls_refused_total/ && $2 > 0 {printf "%s ", $0}')
  kill "$stress" "$server" 2>/dev/null || true
  wait "$stress" "$server" 2>/dev/null || true
  overloads=$(grep -c "past capacity" "$dir/strowger.log" || true)
  python3 - "$bin" "$overloads" "$report" "$refused" <<'PY'
import json, sys
bin, overloads, report, refused = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
print(f"{bin}: {report['attempted']} calls, {report['completed']} completed, {report['failed']} failed "
      f"{report['failed_reasons']}, {report['calls_per_s']} calls/s; workers past capacity {overloads} time(s); "
      f"setup p99 {report['setup_us']['p99']} µs; RTP lost {report['rtp']['lost']} of {report['rtp']['expected']}; "
      f"refused by reason: {refused or '-'}")
PY
  rm -rf "$dir/data" "$dir/strowger.log"
done
