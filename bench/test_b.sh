#!/usr/bin/env bash
# Test B: 3000 calls at 20/s held 600 s, at most 150 s; calls at the first retransmission and first failure.
# Usage: bench/test_b.sh [--b-calls 3000] [--b-seconds 150] [--workers N] [--server sipp-uas]
# Expects target/release/strowger (cargo build --release -p strowger); updates bench/results/latest.json
# and regenerates bench/results/latest.md and the plot.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/bench.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
exec python3 bench/lib/bench.py b report "$@"
