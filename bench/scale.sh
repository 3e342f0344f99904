#!/usr/bin/env bash
# `make bench-scale`: the scale benchmarks with strowger-load (bench/lib/scale.py): held
# playback+echo calls at rising counts (2 workers; with a port pair per call, then with
# rtp.shared_ports against strowger-load --address-per-call), the same calls alternated with the
# kernel's own cost for their packets (strowger-load floor; 2 rounds), the same calls with
# rtp.shared_ports and with a port pair per call (2 rounds), B2BUA calls/s per core with 1 and 2 workers
# (interleaved, 3 rounds), the 1 -> 2 worker speed-up of media (6 pairs), and held calls under a flood of new calls. Writes
# bench/results/scale.{json,md,png}. About an hour; every run is bounded in calls and time.
#
# Knobs (environment): LEVELS="1000 2000 3000 4000 5000", TESTS="capacity capacity-shared floor shared b2bua speedup overload",
# NO_BUILD=1, REALTIME=P (the server's workers at SCHED_FIFO priority P: general.realtime_priority).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
py=bench/lib/scale.py
for t in ${TESTS:-capacity capacity-shared floor shared b2bua speedup overload}; do
  case $t in
    capacity) python3 $py capacity --realtime ${REALTIME:-0} --workers 2 --levels ${LEVELS:-1000 2000 3000 4000 5000} --rate 250 --hold 60 ;;
    capacity-shared) python3 $py capacity --shared --realtime ${REALTIME:-0} --workers 2 --levels ${LEVELS:-1000 2000 3000 4000 5000} --rate 250 --hold 60 ;;
    floor) python3 $py floor --workers 2 --levels 1000 2000 --rate 250 --hold 45 --repeat 2 ;;
    shared) python3 $py shared --workers 2 --levels 1000 2000 --rate 250 --hold 35 --repeat 2 ;;
    b2bua) python3 $py b2bua --workers 1 2 --calls 20000 --rate 3000 --repeat 3 ;;
    speedup) python3 $py speedup ;;  # 6 pairs of 2,000 held calls after a warm-up pair, about 9 minutes
    overload) python3 $py overload --realtime ${REALTIME:-0} --calls 1000 --rate 250 --hold 50 --flood ${FLOOD:-25000} ;;
  esac
done
python3 $py report
