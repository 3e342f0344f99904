#!/usr/bin/env bash
# `make bench-srtp`: CPU per call-second of held SDES-SRTP calls against the same calls in plain RTP, in one
# run (bench/lib/srtp.py): 2,000 echo calls of each kind, both signalled over TLS, 3 rounds alternating the
# order, each against a fresh strowger; the SRTP / plain ratio by round, its median and spread (target ≤ 1.3).
# Results go to a run directory under bench/out; --record appends the summary to bench/RESULTS.md. About
# 5 minutes; every run is bounded in calls and time.
# Knobs: CALLS=2000, PAIRS=3, NO_BUILD=1 (use the release binaries as they are).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/srtp.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
python3 bench/lib/srtp.py --calls "${CALLS:-2000}" --pairs "${PAIRS:-3}" "$@"
