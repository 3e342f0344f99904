#!/usr/bin/env bash
# The paper's transcoding-capacity test (bench/lib/transcode.py): a GSM file played in a loop to
# callers offering only iLBC, then only Speex, on one worker pinned to one core; the prompt encoded
# once and shared ("cached") and transcoded per call ("live"). Writes transcode.json under
# bench/out/ (--record: also bench/results/ and a section of bench/RESULTS.md).
# About 15 minutes; every run is bounded in calls and time. Options go to transcode.py (-h).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/transcode.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/transcode.py "$@"
