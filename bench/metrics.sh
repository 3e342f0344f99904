#!/usr/bin/env bash
# The cost of /metrics on the core (issue "Operate it"): 2,000 held playback+echo calls on 2 workers,
# 15 s windows alternated without and with a client scraping /metrics every second, in one run;
# prints CPU-ms per call-second of each and the ratio (target: at most x1.02).
# Usage: bench/metrics.sh [CALLS]   (about 2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -p strowger -p strowger-load
python3 bench/lib/scale.py metrics --workers 2 --levels "${1:-2000}" --rate 250
