#!/usr/bin/env bash
# strowger's memory per registration on each store (bench/lib/registrar_memory.py): RSS idle, with
# USERS bindings (strowger-load register at RATE/s, Expires EXPIRES s) and after they have all
# expired. About 2 + USERS/RATE + EXPIRES s per backend (twice with --base OLD_BIN: that build runs
# right before this one on each backend). Figures: registrar-memory.json under bench/out/; --record
# (or RECORD=1) also copies it to bench/results/ and appends the table to bench/RESULTS.md.
# Knobs: BACKENDS=local,memcached,redis USERS=100000 RATE=5000 EXPIRES=60 NO_BUILD=1
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/registrar_memory.py" "$@"
cd "$(dirname "$0")/.."
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
exec python3 bench/lib/registrar_memory.py --backends "${BACKENDS:-local,memcached,redis}" \
  --users "${USERS:-100000}" --rate "${RATE:-5000}" --expires "${EXPIRES:-60}" "$@"
