#!/usr/bin/env bash
# `bash bench/scaling.sh`: the scaling model of docs/scaling.md (bench/lib/scaling.py): how many
# strowger nodes and Redis Cluster shards serve 1 M registered phones and 100,000 concurrent
# calls, from the per-unit figures in bench/lib/scaling_inputs.json (each names its section of
# bench/RESULTS.md), then the model's checks against real runs (loopback, bounded):
#   check    10,000 phones registered at 1,000/s against strowger on a Redis store (about 15 s),
#            Redis commands per REGISTER predicted against `INFO commandstats`;
#   cluster  the three-node cluster (3+3 Redis Cluster, three nodes, an edge): 3,000 phones
#            registered through the edge at 300/s, then 20 calls/s for 20 s to them (about 90 s);
#            Redis commands per REGISTER and per call over the shards, their spread, memory per
#            binding, CPU of the nodes, the edge and the masters; fails when a count is > 10 % off.
#
# Knobs (environment): TESTS="model check cluster", USERS=10000, RATE=1000, CLUSTER_USERS=3000,
# CLUSTER_RATE=300, CALL_RATE=20, CALL_SECONDS=20, NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/scaling.py" "$@"
cd "$(dirname "$0")/.."
py=bench/lib/scaling.py
for t in ${TESTS:-model check cluster}; do
  case $t in
    model) python3 $py model ;;
    check|cluster)
      bash bench/deps-registrar.sh
      [[ -n ${NO_BUILD:-} ]] || cargo build --release -p strowger -p strowger-load ;;&
    check) python3 $py check --users "${USERS:-10000}" --rate "${RATE:-1000}" ;;
    cluster)
      python3 $py check-cluster --users "${CLUSTER_USERS:-3000}" --rate "${CLUSTER_RATE:-300}" \
        --call-rate "${CALL_RATE:-20}" --call-seconds "${CALL_SECONDS:-20}" ;;
  esac
done
