#!/usr/bin/env bash
# Installs, from Debian packages only, what strowger needs: `setup.sh build` the C libraries the
# binary links (codecs) and the sounds of its default configuration, `setup.sh` (or
# `setup.sh test`) those plus every tool and server the tests use. Idempotent and quiet: `apt-get update` runs once, and only when something is missing.
set -euo pipefail

# package -> a command (or file) it provides, so present packages cost no apt call.
declare -A build=(
  [libgsm1-dev]=/usr/include/gsm.h # codec crate: the GSM reference of tests and benchmark, by hand-written FFI
  [libspandsp-dev]=/usr/include/spandsp/g722.h
  [libspeex-dev]=/usr/include/speex/speex.h
  [libspeexdsp-dev]=/usr/include/speex/speex_resampler.h
  [libopus-dev]=/usr/include/opus/opus.h
  [libsrtp2-dev]=/usr/include/srtp2/srtp.h # the SRTP tests' reference implementation (crates/srtp/src/reference.rs)
  [libssl-dev]=/usr/include/openssl/ssl.h # WebRTC legs: the DTLS-SRTP handshake (crates/webrtc, the openssl crate)
  [libsqlite3-dev]=/usr/include/sqlite3.h # the CDR database (rusqlite, linked to the system SQLite)
  # the default configuration's music on hold, and the prompts of its queue and parking lot
  # (also the PESQ quality test's human voice and music; CC-BY-SA 3.0)
  [asterisk-core-sounds-en-wav]=/usr/share/asterisk/sounds/en_US_f_Allison/demo-congrats.wav
  [asterisk-moh-opsound-wav]=/usr/share/asterisk/moh/macroform-cold_day.wav
  # the default configuration's spoken prompts (`tts:`, `say text`): run, never linked
  [espeak-ng]=espeak-ng
  [sox]=sox
  # the web console's JavaScript (uPlot) comes from npm when the binary is built (crates/strowger/build.rs)
  [npm]=npm
)
declare -A want=(
  [sip-tester]=sipp
  [baresip-core]=/usr/lib/baresip/modules/aufile.so # aufile + sndfile: file audio in and out
  [iproute2]=ip
  [util-linux]=unshare
  [python3]=python3
  [redis-server]=redis-server # store backends (crates/store tests)
  [memcached]=memcached
  [opus-tools]=opusdec # interop test: strowger's Opus decoded by opusdec
  [tshark]=tshark # IAX2 frames checked by Wireshark's dissector; its dumpcap captures the RTP
  # strowger sends SIPp (the SIPp media tests)
  [iaxmodem]=iaxmodem # a real IAX2 peer: registers to strowger and takes calls
  [ffmpeg]=ffmpeg # quality/interop tests: independent encoders and decoders (and an iLBC decoder)
  # trunk test: Kamailio as the provider (registrar, auth, tm, rr, usrloc are in the base package)
  # and dnsmasq serving its NAPTR/SRV/A records
  [kamailio]=/usr/sbin/kamailio
  [dnsmasq-base]=/usr/sbin/dnsmasq
  [chromium]=chromium # console test: the web console in a real headless browser, driven over WebDriver
  [chromium-driver]=chromedriver
  [firefox-esr]=firefox-esr # console test in Firefox too (its WebDriver server, geckodriver, below)
  [postgresql]=/usr/share/doc/postgresql/copyright # CDR database test: a private cluster (initdb, postgres)
  [fail2ban]=fail2ban-regex # security test: contrib/fail2ban's filter read by the real fail2ban-regex
  [systemd]=systemd-analyze # reload test: contrib/systemd/strowger.service checked by systemd-analyze verify
  [make]=make # reload test: `make install` into a DESTDIR
  [prometheus]=/usr/bin/prometheus # metrics test: a real Prometheus scrapes /metrics
  [stress-ng]=stress-ng # bench/overload.sh: both cores kept busy beside the calls
  [openssl]=openssl # API TLS test: the certificate strowger serves (openssl req)
)
for pkg in "${!build[@]}"; do want[$pkg]=${build[$pkg]}; done
if [[ ${1:-test} == build ]]; then
  unset want
  declare -A want
  for pkg in "${!build[@]}"; do want[$pkg]=${build[$pkg]}; done
fi
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

# Attack tools for the security test (crates/strowger/tests/process/security.rs): SIPVicious from PyPI.
if [[ ${1:-test} != build ]] && ! command -v sipvicious_svcrack >/dev/null; then
  echo "setup.sh: installing the sipvicious Python package"
  python3 -m pip --version >/dev/null 2>&1 || {
    sudo=""
    ((EUID == 0)) || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  }
  python3 -m pip install --quiet sipvicious 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages sipvicious
fi

# The console test's Firefox driver: Debian does not package geckodriver, so it is built from
# crates.io once (a few minutes) into /usr/local/bin.
if [[ ${1:-test} != build ]] && ! command -v geckodriver >/dev/null; then
  echo "setup.sh: building geckodriver (cargo install, once)"
  tmp=$(mktemp -d)
  cargo install --quiet --locked --root "$tmp" geckodriver
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  $sudo install -m 755 "$tmp/bin/geckodriver" /usr/local/bin/geckodriver
  rm -rf "$tmp"
fi

# PESQ scoring (crates/strowger/tests/process/quality.rs): the `pesq` package from PyPI.
if [[ ${1:-test} != build ]] && ! python3 -c 'import pesq, numpy' 2>/dev/null; then
  echo "setup.sh: installing the pesq Python package"
  python3 -m pip --version >/dev/null 2>&1 || {
    sudo=""
    ((EUID == 0)) || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip python3-dev build-essential >/dev/null
  }
  python3 -m pip install --quiet numpy pesq 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages numpy pesq
fi
