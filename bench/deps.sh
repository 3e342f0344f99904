#!/usr/bin/env bash
# Installs what the benchmark scripts need from Debian, only what is missing, and says first what
# and why (nothing is printed or installed when all is present):
#   sip-tester   SIPp, the load generator and far ends of Tests A, B, C and most scripts
#   gnuplot-nox  the plots (CPU against calls, recording, soak)
#   kamailio     the peer server of bench/proxy.sh and bench/registrar.sh
#   sox          the GSM prompt of bench/transcode.sh
#   rtpengine-daemon  the peer media relay of bench/relay.sh (run there on loopback, userspace
#                forwarding only; the system service the package ships is stopped and disabled)
#   python3      every bench/lib/*.py (standard library only)
# Usage: bench/deps.sh
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
source "$(dirname "$0")/lib/apt.sh"
need sip-tester /usr/bin/sipp "SIPp, the load generator and far ends"
need gnuplot-nox /usr/bin/gnuplot "the plots"
need kamailio /usr/sbin/kamailio "the peer server of proxy.sh and registrar.sh"
need sox /usr/bin/sox "the GSM prompt of transcode.sh"
need python3 python3 "the bench scripts (bench/lib/*.py)"
need rtpengine-daemon /usr/bin/rtpengine "the peer media relay of relay.sh"
fresh_rtpengine=0
[[ " ${missing[*]} " == *" rtpengine-daemon "* ]] && fresh_rtpengine=1
install_missing bench/deps.sh
# relay.sh starts its own rtpengine on free loopback ports: the packaged service would hold
# ports (and the kernel module's table) of its own.
if ((fresh_rtpengine)) && command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  $sudo systemctl disable --now rtpengine-daemon.service >/dev/null 2>&1 || true
fi
