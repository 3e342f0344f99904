#!/usr/bin/env bash
# IAX2 beside SIP (bench/lib/iax2.py): for 200, 1000 and 2000 held echo calls, strowger's CPU per
# leg-second for SIP calls with RTP (strowger-load call), IAX2 calls with mini frames and IAX2
# calls in trunk mode (strowger-load iax2), one after the other in one run. About 6 minutes;
# every run is bounded in calls and time. Knobs: LEVELS="200 1000 2000", NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/iax2.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/iax2.py --levels ${LEVELS:-200 1000 2000} "$@"
