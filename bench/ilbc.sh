#!/usr/bin/env bash
# strowger's iLBC (crates/codec/src/ilbc/) against an older build of itself: µs of thread CPU per
# second of audio to decode (every 50th packet lost, so concealment counts) and to encode 60 s of
# speech (Debian's asterisk-core-sounds-en-wav), in 30 and 20 ms modes, one pass of each build in
# turn, ROUNDS times (default 9; the best of each kept, since a busy machine only ever adds time),
# and the ratio new ÷ old. OLD and NEW are codec_speed example binaries
# (`cargo build --release -p codec --examples`, target/release/examples/codec_speed, copied away
# before checking out the other side); NEW defaults to this checkout's.
#   bench/ilbc.sh OLD [NEW]
# Needs a quiet machine: the figures are CPU time. Instruction counts need none:
#   ONCE=ilbc-decode valgrind --tool=callgrind --toggle-collect='*once_*' BIN
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ilbc.sh OLD_codec_speed [NEW_codec_speed]}
new=${2:-target/release/examples/codec_speed}
per_second() { sed -n 's/.*, \([0-9.]*\) µs thread CPU per second of audio/\1/p'; }
echo "iLBC, µs of thread CPU per second of audio, best of ${ROUNDS:-9} (old: $old, new: $new)"
for what in ilbc-decode ilbc-decode-20 ilbc-encode ilbc-encode-20; do
  o=() n=()
  for ((r = 0; r < ${ROUNDS:-9}; r++)); do
    # Alternate which build goes first.
    if ((r % 2 == 0)); then
      o+=("$(ONCE=$what "$old" | per_second)")
      n+=("$(ONCE=$what "$new" | per_second)")
    else
      n+=("$(ONCE=$what "$new" | per_second)")
      o+=("$(ONCE=$what "$old" | per_second)")
    fi
  done
  bo=$(printf '%s\n' "${o[@]}" | sort -g | head -1)
  bn=$(printf '%s\n' "${n[@]}" | sort -g | head -1)
  printf '%-16s old %7.1f  new %7.1f  new/old %.3f\n' "$what" "$bo" "$bn" "$(awk "BEGIN{print $bn/$bo}")"
done
