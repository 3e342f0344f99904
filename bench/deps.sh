#!/usr/bin/env bash
# Installs what the benchmark scripts need from Debian, only what is missing, and says first what
# and why (nothing is printed or installed when all is present):
#   sip-tester   SIPp, the load generator and far ends of Tests A, B, C and most scripts
#   gnuplot-nox  the plots (CPU against calls, recording, soak)
#   kamailio     the peer server of bench/proxy.sh and bench/registrar.sh
#   sox          the GSM prompt of bench/transcode.sh
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
install_missing bench/deps.sh
