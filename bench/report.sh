#!/usr/bin/env bash
# Regenerates bench/results/latest.md (a section for bench/RESULTS.md) and bench/results/cpu_vs_calls.{png,svg}
# from bench/results/latest.json.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/bench.py" "$@"
cd "$(dirname "$0")/.."
exec python3 bench/lib/bench.py report "$@"
