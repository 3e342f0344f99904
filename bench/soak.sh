#!/usr/bin/env bash
# `make soak`: a steady mix of calls and registrations through one strowger at RATE calls/s (default 100) for
# MINUTES (default: CALLS at RATE, else 30), with the store restarted twice, a stalled far end and a 20 s burst,
# sampling RSS, open files and the call table every 10 s into a CSV and a plot (bench/lib/soak_mix.py says
# what fails it).
# The million-call run: `make soak CALLS=1000000 RATE=100` (167 minutes of load, about three hours in all).
# Output: bench/out/soak-TIME/ (untracked); RECORD=1 copies soak.json and soak.png into bench/results/.
# `bash bench/soak.sh -h` prints the options without installing or building anything.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/soak_mix.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
command -v redis-server >/dev/null || bash scripts/setup.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/soak_mix.py --rate "${RATE:-100}" --minutes "${MINUTES:-0}" --calls "${CALLS:-0}" \
  ${RECORD:+--record} "$@"
