#!/usr/bin/env bash
# `make bench-record`: music-on-hold calls recorded whole (record-call, mixed mono WAV) against the same
# calls unrecorded, in the same run (bench/lib/record.py), at 400, 800 and 1,600 concurrent calls: server
# CPU per call-second and the recorded / unrecorded ratio, disk MB/s, late frames, every recording
# complete and as long as its CDR says. Recordings go to the run directory under bench/out and are
# deleted after each run. About 5 minutes; every run is bounded in calls and time.
# Knobs: LEVELS="400 800 1600", NO_BUILD=1, OLD_BIN=PATH (an older build run beside this one, same run).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/record.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/record.py --levels ${LEVELS:-400 800 1600} ${OLD_BIN:+--old-bin "$OLD_BIN"} "$@"
