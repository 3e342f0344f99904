#!/usr/bin/env bash
# Installs what the integration tests need, from Debian packages only. Idempotent and quiet:
# `apt-get update` runs once, and only when something is missing.
set -euo pipefail

# package -> a command (or file) it provides, so present packages cost no apt call.
declare -A want=(
  [sip-tester]=sipp
  [baresip-core]=/usr/lib/baresip/modules/aufile.so # aufile + sndfile: file audio in and out
  [sox]=sox
  [espeak-ng]=espeak-ng
  [iproute2]=ip
  [util-linux]=unshare
  [python3]=python3
  [redis-server]=redis-server # store backends (crates/store tests)
  [memcached]=memcached
  [libgsm1-dev]=/usr/include/gsm.h # codec crate: linked through hand-written FFI
  [libspandsp-dev]=/usr/include/spandsp/g722.h
  [libspeex-dev]=/usr/include/speex/speex.h
  [libspeexdsp-dev]=/usr/include/speex/speex_resampler.h
  [libopus-dev]=/usr/include/opus/opus.h
  [opus-tools]=opusdec # interop test: strowger's Opus decoded by opusdec
)
missing=()
for pkg in "${!want[@]}"; do
  have=${want[$pkg]}
  if [[ $have == /* ]]; then [[ -e $have ]] || missing+=("$pkg"); else command -v "$have" >/dev/null || missing+=("$pkg"); fi
done

if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
