#!/usr/bin/env bash
# Installs what the integration tests need (Debian packages only). Idempotent and quiet:
# `apt-get update` runs once, and only when something is missing.
set -euo pipefail

# package -> a file it provides, so an installed package is detected without dpkg queries.
declare -A want=(
  [sip-tester]=/usr/bin/sipp
  [baresip-core]=/usr/lib/baresip/modules/aufile.so
  [sox]=/usr/bin/sox
  [espeak-ng]=/usr/bin/espeak-ng
  [iproute2]=/sbin/ip
  [util-linux]=/usr/bin/unshare
)
missing=()
for pkg in "${!want[@]}"; do
  [[ -e ${want[$pkg]} ]] || missing+=("$pkg")
done
command -v python3 >/dev/null || missing+=(python3)

if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
