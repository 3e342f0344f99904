#!/usr/bin/env bash
# Runs every test of the workspace and ends with one line that totals them, so the result of the
# whole suite is read in one place (cargo prints a line per test binary, the last often doc-tests).
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The benchmark rig's own arithmetic (no servers) first: a figure is only as good as its summary.
python3 bench/lib/test_scale.py || bench_status=1
python3 bench/lib/test_scaling.py || bench_status=1
python3 bench/lib/test_bench.py || bench_status=1
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
((status == 0)) && status=${bench_status:-0}
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i; if ($(i+1) ~ /^ignored;/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
