#!/usr/bin/env bash
# Conference rooms (bench/lib/conference.py): 100 strowger-load callers in rooms of 5 and of 50, each
# sending a tone, against 100 echo calls (9196) in the same run: server CPU per participant-second and its
# ratio to the echo call's; then one room of 100, 200 and 400 callers: whether one worker mixes it with no
# frame more than a frame late. About 5 minutes; every run is bounded in calls and time.
# Knobs: PARTICIPANTS=100, LARGEST="100 200 400", NO_BUILD=1, OLD_BIN=PATH (an older build run beside this one, same run).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/conference.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/conference.py --participants "${PARTICIPANTS:-100}" --largest ${LARGEST:-100 200 400} ${OLD_BIN:+--old-bin "$OLD_BIN"} "$@"
