#!/usr/bin/env bash
# Test A: N held playback+echo calls (default 200 and 400); CPU over 30 s once all are up, RSS, SIPp CPU.
# Usage: bench/test_a.sh [--levels 200 400 800] [--window 30] [--workers N] [--server sipp-uas]
# Expects target/release/strowger (cargo build --release -p strowger); updates bench/results/latest.json
# and regenerates bench/results/latest.md and the plot.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/bench.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
exec python3 bench/lib/bench.py a report "$@"
