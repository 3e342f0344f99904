#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS (default 60), one after another, each as one process:
# `make fuzz` and, for a short run of each, `make test`. A crash, a failed assertion or a leak
# stops it with a failure; libFuzzer leaves the input in fuzz/artifacts/TARGET/ (replay it with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET fuzz/artifacts/TARGET/crash-…`).
# libFuzzer needs the unstable sanitizer flags, which RUSTC_BOOTSTRAP enables on the stable
# toolchain. The codec targets link the system codec libraries (scripts/setup.sh build).
set -euo pipefail
seconds=${1:-60}
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# Seeds: the SIP torture messages (when the shared conformance corpus is there) and real encodes
# for the codec targets (examples/seeds.rs).
mkdir -p corpus/sip_message
torture=../../shared/conformance/sip-torture
cp "$torture"/rfc4475/*.dat "$torture"/rfc5118/*.dat corpus/sip_message/ 2>/dev/null || true
cargo run --quiet --example seeds
export RUSTC_BOOTSTRAP=1
cargo fuzz build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in $(cargo fuzz list); do
  # A codec target's input is a stream of packets: room for five 1,500-byte datagrams' payloads.
  case $t in codec_*) max_len=8192 ;; *) max_len=4096 ;; esac
  if ! cargo fuzz run "$t" -- -max_total_time="$seconds" -max_len="$max_len" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED (input in fuzz/artifacts/$t/)"
    exit 1
  fi
  # libFuzzer's last status line: runs, coverage, corpus, speed.
  echo "fuzz: $t ok: $(grep -E '^#[0-9]+' "$log" | tail -n 1)"
done
