#!/usr/bin/env bash
# The cost of being watched (issue "Operate it"), in one run: 2,000 held playback+echo calls on 2
# workers, then B2BUA calls at 1,000 calls/s; in each, 10 s windows rotated between nobody listening,
# a /metrics scrape every second and an event client (`strowger ctl events --json`) subscribed to
# every event; prints the server's CPU of each and the ratios (target: at most x1.03 each). Then the
# issue's combined figure: held calls in at least 3 interleaved pairs of windows, nobody watching vs
# scrape + event client at once, and B2BUA calls without vs with the event client: each pair's
# ratio, the median and spread, and the media frames sent late in each window (target: 0).
# Usage: bench/metrics.sh [HELD_CALLS] [B2BUA_RATE]   (about 7 minutes)
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/scale.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -p strowger -p strowger-load
python3 bench/lib/scale.py metrics --workers 2 --levels "${1:-2000}" --rate 250 --b2b-rate "${2:-1000}"
python3 bench/lib/scale.py combined --workers 2 --levels "${1:-2000}" --rate 250 --b2b-rate "${2:-1000}" --repeat 3
