#!/usr/bin/env bash
# `make bench`: builds strowger (release), installs SIPp and gnuplot if missing, runs Test A (200 and
# 400 held playback+echo calls), Test B (calls at the first retransmission / failure, at most 150 s) and
# Test C (signalling only, 100..3200 calls/s while clean), then writes bench/results/latest.{json,md}
# and bench/results/cpu_vs_calls.{png,svg}. About 12 minutes; FULL=1 (more levels and rates) about 25.
#
# Knobs (environment): FULL=1, TESTS="a b c", LEVELS="200 400", RATES="100 200 ...", WORKERS=N,
# SERVER=sipp-uas (a SIPp UAS as a stand-in server, to try the rig), NO_BUILD=1, STROWGER_BIN=path.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/bench.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ ${SERVER:-strowger} == strowger && -z ${NO_BUILD:-} ]]; then
  echo "[bench] cargo build --release -p strowger"
  cargo build --release -p strowger
fi
tests=(${TESTS:-a b c})
args=()
if [[ -n ${FULL:-} ]]; then
  args+=(--levels ${LEVELS:-100 200 400 800 1200 1600} --rates ${RATES:-100 200 400 800 1600 3200 6400})
else
  args+=(--levels ${LEVELS:-200 400} --rates ${RATES:-100 200 400 800 1600 3200})
fi
# bench.py runs every child in its own session, kills them when it ends (signal handlers and
# PR_SET_PDEATHSIG), and bounds every run in calls and time.
exec python3 bench/lib/bench.py "${tests[@]}" report "${args[@]}"
