#!/usr/bin/env bash
# The registrar benchmark (bench/lib/registrar.py): REGISTER with and without digest auth at rising
# rates on each store backend (local, memcached, redis) and Kamailio as registrar on the same
# workload, the two taking turns --rounds times (3) at every step, then INVITE to registered users
# at 1000 calls/s and up. Results in bench/results/registrar.json; roughly 15 minutes (--rounds 1:
# about 6). --record appends the summary to bench/RESULTS.md.
#
# Knobs (environment): BACKENDS=local,memcached,redis RATES=1000,2000,... NO_KAMAILIO=1 NO_BUILD=1
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/registrar.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps-registrar.sh
if [[ -z ${NO_BUILD:-} ]]; then
  echo "[bench] cargo build --release -p strowger -p strowger-load"
  cargo build --release -p strowger -p strowger-load
fi
args=(--backends "${BACKENDS:-local,memcached,redis}")
[[ -n ${RATES:-} ]] && args+=(--rates "$RATES")
[[ -n ${NO_KAMAILIO:-} ]] && args+=(--no-kamailio)
exec python3 bench/lib/registrar.py "${args[@]}" "$@"
