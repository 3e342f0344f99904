#!/usr/bin/env bash
# Transcoding cost per 20 ms frame: strowger's translator (`strowger codec transcode`, the code a
# bridge runs) against the same libraries called directly from C (bench/lib/rawcodec.c, gcc -O2),
# on the same file, interleaved ROUNDS times (default 5; the best of each is kept, since a busy
# machine only ever adds time). Then the translation matrix (`strowger show translation`).
# The input is assets/demo.wav four times over (3 minutes), GSM-encoded by sox.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
bin=${STROWGER_BIN:-target/release/strowger}
[[ -n ${NO_BUILD:-} ]] || cargo build --release -p strowger
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/rawcodec" bench/lib/rawcodec.c -lgsm -lspeex
sox assets/demo.wav assets/demo.wav assets/demo.wav assets/demo.wav -r 8000 -c 1 -b 16 "$work/long.wav"
sox "$work/long.wav" "$work/long.gsm"
# Raw Speex frames (strowger reads raw frames as well as Ogg Speex).
"$work/rawcodec" gsm-speex "$work/long.gsm" "$work/long.spx" >/dev/null
per_frame() { sed -n 's/.* \([0-9.]*\) u\?s per 20 ms.*/\1/p; s/.* \([0-9.]*\) µs per 20 ms.*/\1/p' | head -1; }
best() { sort -g | head -1; }
declare -A ours raw
for ((r = 0; r < ${ROUNDS:-5}; r++)); do
  for pair in gsm-speex speex-gsm; do
    from=${pair%-*} to=${pair#*-}
    in=$work/long.${from/speex/spx}
    ours[$pair]+="$("$bin" codec transcode --codec "$from" --to "$to" "$in" "$work/out" 2>&1 | per_frame) "
    raw[$pair]+="$("$work/rawcodec" "$pair" "$in" | per_frame) "
  done
done
echo "transcoding cost per 20 ms frame, best of ${ROUNDS:-5} (µs of thread CPU)"
for pair in gsm-speex speex-gsm; do
  o=$(tr ' ' '\n' <<<"${ours[$pair]}" | grep . | best)
  w=$(tr ' ' '\n' <<<"${raw[$pair]}" | grep . | best)
  echo "$pair: strowger translator $o, libraries called directly $w, ratio $(awk "BEGIN{printf \"%.3f\", $o/$w}")"
done
echo
"$bin" show translation
