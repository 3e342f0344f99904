#!/usr/bin/env bash
# `bash bench/scaling.sh`: the scaling model of docs/scaling.md (bench/lib/scaling.py): how many
# strowger nodes and Redis Cluster shards serve 1 M registered phones and 100,000 concurrent
# calls, from the per-unit figures in bench/lib/scaling_inputs.json (each names its section of
# bench/RESULTS.md), then the model's check against a real run: 10,000 phones registered at
# 1,000/s against strowger on a Redis store (loopback; about 15 s), Redis commands per REGISTER
# predicted against `INFO commandstats`.
#
# Knobs (environment): TESTS="model check", USERS=10000, RATE=1000, NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/scaling.py" "$@"
cd "$(dirname "$0")/.."
py=bench/lib/scaling.py
for t in ${TESTS:-model check}; do
  case $t in
    model) python3 $py model ;;
    check)
      bash bench/deps-registrar.sh
      [[ -n ${NO_BUILD:-} ]] || cargo build --release -p strowger -p strowger-load
      python3 $py check --users "${USERS:-10000}" --rate "${RATE:-1000}" ;;
  esac
done
