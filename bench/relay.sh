#!/usr/bin/env bash
# A bridged call's media relayed by strowger against rtpengine (bench/lib/relay.py): held bridged
# calls, 20 ms PCMU both ways, relayed by strowger, then by rtpengine (userspace forwarding,
# driven over its ng protocol by Kamailio), in --pairs interleaved turns: the CPU of each relay
# per relayed call-second and the per-pair ratio. About 1 minute per turn at 2,000 calls (≈ 7 min
# with the default 3 pairs); every run is bounded in calls and time.
# Knobs: LEVELS="2000", NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/relay.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
python3 bench/lib/relay.py --levels ${LEVELS:-2000} "$@"
