#!/usr/bin/env bash
# strowger's own G.722 and G.726 (crates/codec/src/g722.rs, g726.rs) against spandsp, and its
# GSM 06.10 (gsm.rs) against libgsm, the C libraries it linked for them before, called directly
# through the same FFI, on the same speech (60 s of Debian's asterisk-core-sounds-en-wav): µs
# of thread CPU per second of audio for encoding and decoding in 20 ms packets, each pair
# interleaved round by round, the best of ROUNDS (default 15) kept since a busy machine only
# adds time; the ratio is the figure to quote. Then strowger's resampler (crates/codec/src/resample.rs)
# against speexdsp's at quality 3 (what strowger used before) at each 8/16/48 kHz conversion.
# A PCMU <-> Opus transcoded call-second with Opus coded at 8 kHz (the translator's path) against
# resampled to and from 48 kHz (the path before), rounds alternating, median ratio and spread,
# with the PESQ (narrowband) of each path's L16 -> Opus -> L16 round trip against the source.
# Then the translation matrix with each format's implementation (`strowger show translation`).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
wavs=$(mktemp -d)
trap 'rm -rf "$wavs"' EXIT
OPUS_WAVS=$wavs ROUNDS=${ROUNDS:-15} cargo run --quiet --release -p codec --example codec_speed
echo "PESQ of 8 kHz speech through Opus and back:"
python3 crates/strowger/tests/pesq_score.py "$wavs/source.wav" "$wavs/at8k.wav" "$wavs/resampled.wav" |
  sed "s|$wavs/||"
if [[ -z ${NO_BUILD:-} ]]; then
  cargo build --quiet --release -p strowger
fi
if [[ -x ${STROWGER_BIN:-target/release/strowger} ]]; then
  echo
  "${STROWGER_BIN:-target/release/strowger}" show translation
fi
