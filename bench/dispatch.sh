#!/usr/bin/env bash
# Calls and REGISTERs through an edge (`proxy.dispatch`) to one, two and three strowger nodes, and
# straight to one node for comparison: completed and failed at each rate, the edge's CPU-ms per
# dispatched call and the nodes' CPU-ms per call (INVITE/100/180/200/ACK/BYE/200, the edge
# record-routing) or per digest REGISTER.
# Usage: bench/dispatch.sh [--rates 200 400] [--register-rates 200] [--seconds 10]
#        [--setups direct edge-1 edge-2 edge-3] [--redis-cluster]
# Builds target/release/strowger; writes bench/results/dispatch.json, keeps logs in bench/out/.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/dispatch.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -q -p strowger
exec python3 bench/lib/dispatch.py "$@"
