#!/usr/bin/env bash
# The core before/after in one run, as every change to the engine must show it (bench/README.md):
# this build against OLD, alternated round by round (ABBA), so the machine's drift touches both:
#   - held playback+echo calls: 2,000 on 2 workers, CPU-ms per call-second (scale.py capacity);
#   - B2BUA calls/s per core: 20,000 bridged calls at 2,500/s on 1 worker (scale.py b2bua),
#     below the rate where a busy 2-core host starts failing calls in either binary;
#   - REGISTER with digest auth and without, local store (registrar.py --compare).
# Prints each figure and the median ratios new/old; raw runs stay in the run directory.
# Usage: bench/core_ab.sh OLD_BIN [ROUNDS]   (ROUNDS default 2: about 15 minutes)
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "$(dirname "$0")/lib/scale.py" "$@"
cd "$(dirname "$0")/.."
old=$(realpath "$1")
rounds=${2:-2}
new=$(realpath target/release/strowger)
bash bench/deps.sh
out=bench/out/core-ab-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
echo "core A/B: new $new ($(git rev-parse --short HEAD)) against old $old; runs in $out"
for r in $(seq "$rounds"); do
  order=("new:$new" "old:$old")
  ((r % 2 == 0)) && order=("old:$old" "new:$new")
  for pair in "${order[@]}"; do
    label=${pair%%:*} bin=${pair#*:}
    SCALE_RESULTS=$out/$label-$r.json python3 bench/lib/scale.py capacity --workers 2 --levels 2000 \
      --rate 250 --hold 35 --bin "$bin"
    SCALE_RESULTS=$out/$label-$r.json python3 bench/lib/scale.py b2bua --workers 1 --calls 20000 \
      --rate 2500 --repeat 1 --bin "$bin"
  done
done
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
runs = {"new": [], "old": []}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    runs[os.path.basename(f).split("-")[0]].append(json.load(open(f)))
def fig(label, section, key):
    return [r[section]["rows"][0][key] for r in runs[label] if section in r]
for name, section, key in (("CPU-ms per call-second, 2,000 held calls", "capacity", "cpu_ms_per_call_s"),
                           ("KiB per held call", "capacity", "rss_kib_per_call"),
                           ("B2BUA CPU-ms per call, 1 worker", "b2bua", "cpu_ms_per_call"),
                           ("B2BUA calls/s per core", "b2bua", "calls_per_s_per_core")):
    new, old = fig("new", section, key), fig("old", section, key)
    ratio = statistics.median(new) / statistics.median(old) if new and old else float("nan")
    print(f"{name}: new {new}, old {old}, median ratio new/old x{ratio:.3f}")
PY
python3 bench/lib/registrar.py --compare "$old" --backends local --rates 2000,5000 --seconds 3 \
  --repeat 3 --no-kamailio --out "$out/registrar.json"
