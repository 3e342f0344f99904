#!/usr/bin/env bash
# Installs what the benchmark needs from Debian, only when missing: SIPp (sip-tester), gnuplot
# (gnuplot-nox, for the plots), Kamailio (the peer of bench/proxy.sh) and sox (the GSM prompt of
# the transcoding test). python3 is used with its standard library only.
set -euo pipefail
declare -A want=([sip-tester]=/usr/bin/sipp [gnuplot-nox]=/usr/bin/gnuplot [kamailio]=/usr/sbin/kamailio [sox]=/usr/bin/sox)
missing=()
for pkg in "${!want[@]}"; do
  [[ -e ${want[$pkg]} ]] || missing+=("$pkg")
done
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
  echo "bench/deps.sh: installing ${missing[*]}"
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
