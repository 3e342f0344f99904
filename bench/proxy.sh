#!/usr/bin/env bash
# Proxied calls through strowger's [proxy] role and through Kamailio (bench/kamailio/proxy.cfg) in one
# run: CPU-ms per proxied call (INVITE/100/180/200/ACK/BYE/200 with Record-Route, SIPp caller and
# registered SIPp phone) and failed calls at each rate, and the ratio strowger ÷ Kamailio; beside them
# the floor, the kernel's own cost of the same datagrams (`strowger-load floor-relay` in the proxy's place).
# Usage: bench/proxy.sh [--rates 500 1000 2000] [--seconds 15] [--pairs 3] [--kamailio-workers 4]
#                       [--servers strowger kamailio floor]
# The two servers take turns --pairs times (A B A B …); the ratio is taken within each pair and
# its median and min–max are reported. A step's CPU window is fixed: its --seconds + 2 s.
# Builds target/release/strowger and strowger-load; writes bench/results/proxy.json, keeps logs in bench/out/proxy/.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/proxy.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -q -p strowger -p strowger-load
exec python3 bench/lib/proxy.py "$@"
