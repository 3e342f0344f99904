#!/usr/bin/env bash
# In-band DTMF detection against a playback call: what listening for tones costs a leg per
# call-second (cargo bench -p media --bench dtmf: bridged G.711 calls of speech through the media
# engine, the caller's leg with and without a detector), set beside strowger's whole CPU per
# call-second for playback calls (CALLS calls to 44444 held HOLD s, strowger-load sending no RTP,
# so no leg is listened to). About 2 minutes; every run is bounded in calls and time. Knobs:
# CALLS=200 HOLD=20 RATE=50, NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
CALLS=${CALLS:-200} HOLD=${HOLD:-20} RATE=${RATE:-50}
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
table=$(cargo bench -p media --bench dtmf 2>/dev/null)
echo "$table"
detect=$(awk -F'|' '/detection alone/ {gsub(/ /, "", $3); print $3}' <<<"$table")

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/strowger --sip-listen "127.0.0.1:$port" --rtp-ports 61000-62999 --data-dir "$dir/data" \
  --workers 1 >"$dir/strowger.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
sleep 2
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
before=$(ticks)
load=$(timeout $((HOLD + CALLS / RATE + 60)) target/release/strowger-load call --target "127.0.0.1:$port" \
  --ext 44444 --calls "$CALLS" --rate "$RATE" --hold "$HOLD" --rtp none --quiet --max-time $((HOLD + CALLS / RATE + 30)))
after=$(ticks)
echo "$load" | tail -5
completed=$(grep -o 'completed [0-9]*' <<<"$load" | awk '{print $2}')
python3 - "$before" "$after" "$hz" "$completed" "$HOLD" "$detect" <<'PY'
import sys
before, after, hz, calls, hold, detect = map(float, sys.argv[1:])
playback_ns = (after - before) / hz * 1e9 / (calls * hold)
print(f"playback call: {playback_ns / 1000:.1f} µs CPU per call-second ({calls:.0f} calls completed, held {hold:.0f} s, one worker)")
print(f"in-band detection: {detect / 1000:.1f} µs per call-second = {100 * detect / playback_ns:.1f} % of a playback call's")
PY
