#!/usr/bin/env bash
# Would libspeex built another way encode Speex narrowband faster, with the same bytes? Builds
# libspeex 1.2.1 (Debian 12's version) from its source in SPEEX_SRC (a checkout of
# https://gitlab.xiph.org/xiph/speex at tag Speex-1.2.1) with several compiler settings, encodes
# the same speech with each and with Debian's libspeex (bench/lib/speexenc.c, quality QUALITY,
# default 3), checks that each output is byte-identical to Debian's, and times them interleaved
# ROUNDS times (default 9; the best kept, since a busy machine only adds time).
# Debian's build takes libspeex's SSE paths (configure enables _USE_SSE on any x86-64), so
# "debian-like" (-O2, _USE_SSE) must match it byte for byte and in speed.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
src=${SPEEX_SRC:?set SPEEX_SRC to a checkout of speex at tag Speex-1.2.1}
q=${QUALITY:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sox assets/demo.wav assets/demo.wav assets/demo.wav assets/demo.wav -r 8000 -c 1 -b 16 -t raw "$work/speech.raw"
mkdir -p "$work/include/speex"
cp "$src"/include/speex/*.h "$work/include/speex/"
printf '#include <stdint.h>\ntypedef int16_t spx_int16_t;\ntypedef uint16_t spx_uint16_t;\ntypedef int32_t spx_int32_t;\ntypedef uint32_t spx_uint32_t;\n' \
  >"$work/include/speex/speex_config_types.h"
# What configure defines on Debian 12 x86-64 (floating point, C99 arrays, SSE found).
printf '#define FLOATING_POINT\n#define USE_SMALLFT\n#define VAR_ARRAYS\n#define EXPORT __attribute__((visibility("default")))\n#define _USE_SSE\n' \
  >"$work/config.h"
# The library's sources (libspeex/Makefile.am), without the Vorbis psychoacoustics and FFTs that
# narrowband encoding never calls.
files="cb_search exc_10_32_table exc_8_128_table filters gain_table hexc_table high_lsp_tables lsp ltp
  speex stereo vbr vq bits exc_10_16_table exc_20_32_table exc_5_256_table exc_5_64_table gain_table_lbr
  hexc_10_32_table lpc lsp_tables_nb modes modes_wb nb_celp quant_lsp sb_celp speex_callbacks speex_header window"
declare -A flags=(
  [debian-like]="-O2"
  [O3]="-O3"
  [O3-avx2]="-O3 -march=x86-64-v3 -ffp-contract=off"
  [O3-avx512]="-O3 -march=x86-64-v4 -ffp-contract=off"
  [fast-math]="-O3 -march=x86-64-v3 -ffast-math"
)
gcc -O2 -o "$work/debian" bench/lib/speexenc.c -lspeex
for v in "${!flags[@]}"; do
  mkdir -p "$work/$v"
  for f in $files; do
    # shellcheck disable=SC2086
    gcc -c -DHAVE_CONFIG_H -I"$work" -I"$work/include" -I"$src/libspeex" ${flags[$v]} \
      -o "$work/$v/$f.o" "$src/libspeex/$f.c"
  done
  ar rcs "$work/$v/libspeex.a" "$work/$v"/*.o
  gcc -O2 -I"$work/include" -o "$work/$v/speexenc" bench/lib/speexenc.c "$work/$v/libspeex.a" -lm
done
"$work/debian" "$q" "$work/speech.raw" "$work/debian.spx" >/dev/null
declare -A best
for ((r = 0; r < ${ROUNDS:-9}; r++)); do
  for v in debian "${!flags[@]}"; do
    exe=$work/$v/speexenc
    [[ $v == debian ]] && exe=$work/debian
    us=$("$exe" "$q" "$work/speech.raw" "$work/$v.out" | sed 's/.*, \([0-9.]*\) us per.*/\1/')
    if [[ -z ${best[$v]:-} ]] || awk "BEGIN{exit !($us < ${best[$v]})}"; then best[$v]=$us; fi
  done
done
echo "Speex narrowband quality $q, µs of thread CPU per 20 ms frame, best of ${ROUNDS:-9} (load average $(cut -d' ' -f1-3 /proc/loadavg))"
for v in debian "${!flags[@]}"; do
  same=identical
  cmp -s "$work/$v.out" "$work/debian.spx" || same=DIFFERENT
  printf '%-12s %-45s %7.2f  x%.3f of Debian  bytes %s\n' "$v" "${flags[$v]:-Debian 12 libspeex1 1.2.1-2}" \
    "${best[$v]}" "$(awk "BEGIN{print ${best[$v]}/${best[debian]}}")" "$same"
done
