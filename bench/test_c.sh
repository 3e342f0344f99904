#!/usr/bin/env bash
# Test C: signalling only, R calls/s for 30 s; CPU-ms per call, highest rate with < 0.1 % failed calls.
# Usage: bench/test_c.sh [--rates 100 200 400 800] [--c-all] [--workers N] [--server sipp-uas]
# Expects target/release/strowger (cargo build --release -p strowger); updates bench/results/latest.json
# and regenerates bench/results/latest.md and the plot.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/bench.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
exec python3 bench/lib/bench.py c report "$@"
