#!/usr/bin/env bash
# Call queues (bench/lib/queue.py): N SIP callers (strowger-load) waiting in a queue with no agent
# logged in, hearing its music and announcements, against N calls hearing the same music (9199) and N
# playback calls (44444) in the same run, for N = 500 and 2000: server CPU per waiting call-second and
# its ratios to the other two. About 5 minutes; every run is bounded in calls and time.
# Knobs: LEVELS="500 2000", NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/queue.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
sounds=/usr/share/asterisk/sounds/en_US_f_Allison/queue-thereare.wav
[[ -e $sounds ]] || { echo "bench/queue.sh: $sounds is missing: run scripts/setup.sh (asterisk-core-sounds-en-wav)"; exit 1; }
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/queue.py --levels ${LEVELS:-500 2000} "$@"
