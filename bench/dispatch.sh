#!/usr/bin/env bash
# Calls through an edge (`proxy.dispatch`) to one and to two strowger nodes, and straight to one
# node for comparison: completed and failed calls at each rate, the edge's CPU-ms per dispatched
# call and the nodes' CPU-ms per call (INVITE/100/180/200/ACK/BYE/200, the edge record-routing).
# Usage: bench/dispatch.sh [--rates 200 400] [--seconds 10]
# Builds target/release/strowger; writes bench/results/dispatch.json, keeps logs in bench/out/.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/dispatch.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -q -p strowger
exec python3 bench/lib/dispatch.py "$@"
