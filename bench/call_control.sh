#!/usr/bin/env bash
# Call control's figures (bench/RESULTS.md): callers waiting in a queue against playback and music
# calls (bench/queue.sh), blind transfers against B2BUA calls (bench/lib/transfer.py), and the soak of
# 10,000 transfer, park and queue cycles with the memory and call tables after it (bench/lib/soak.py).
# About 20 minutes; every run is bounded in calls and time, on loopback only.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/transfer.py" "$@"
cd "$(dirname "$0")/.."
bash bench/deps.sh
bash scripts/setup.sh build  # the music-on-hold files and the queue and parking prompts
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --release -p strowger -p strowger-load
fi
NO_BUILD=1 bash bench/queue.sh
python3 bench/lib/transfer.py
python3 bench/lib/soak.py
