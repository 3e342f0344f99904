#!/usr/bin/env bash
# Held IPv6 echo calls beside IPv4 ones (bench/lib/ipv6.py): strowger's CPU per call-second for SIPp
# -rtp_echo calls to 44444 over [::1] and over 127.0.0.1, alternating, each against a fresh
# dual-stack strowger. About 1 minute per run at 200 calls; every run is bounded in calls and time.
# Knobs: LEVELS="200", NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/ipv6.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger
fi
python3 bench/lib/ipv6.py --levels ${LEVELS:-200} "$@"
