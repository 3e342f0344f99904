#!/usr/bin/env bash
# A strowger node killed (SIGKILL) under calls through the edge, on the reference cluster (3+3
# Redis Cluster, three nodes on 127.0.0.2-4, an edge on 127.0.0.1): calls lost, new calls failed,
# how long the edge took to take the node out, and the CDRs the restarted node writes from its
# journal of calls in progress. Bounded: --seconds of calls (default 12 s at 200/s, held 2 s),
# every process stopped at the end.
# Usage: bench/cluster_kill.sh [--rate 200] [--seconds 12] [--hold-ms 2000] [--kill-after 5]
#        [--after-seconds 4] [--record]
# Builds target/release/strowger; keeps logs and cluster_kill.json in bench/out/.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/cluster_kill.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
cargo build --release -q -p strowger
exec python3 bench/lib/cluster_kill.py "$@"
