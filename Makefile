.PHONY: bench bench-scale fuzz run test

# Runs strowger with its embedded demo configuration (README's first command): installs the
# codec libraries it links (scripts/setup.sh build), then builds and starts it.
run:
	bash scripts/setup.sh build
	cargo run --release -p strowger

# A bounded cargo-fuzz run of every parser (FUZZ_SECONDS per target; libFuzzer needs the
# unstable sanitizer flags, which RUSTC_BOOTSTRAP enables on the stable toolchain).
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/setup.sh build
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	mkdir -p fuzz/corpus/sip_message && cp ../shared/conformance/sip-torture/rfc4475/*.dat ../shared/conformance/sip-torture/rfc5118/*.dat fuzz/corpus/sip_message/ 2>/dev/null || true
	cd fuzz && for t in $$(cargo fuzz list); do RUSTC_BOOTSTRAP=1 cargo fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=4096 || exit 1; done

# Load tests against SIPp (bench/README.md): FULL=1 for more levels; about 12 min (FULL=1: 25).
bench:
	bash bench/run.sh

# Scale benchmarks with strowger-load (bench/lib/scale.py): capacity, B2BUA, speed-up, overload.
bench-scale:
	bash bench/scale.sh

# The whole suite (README's test command): installs the test tools (SIPp, baresip, sox,
# espeak-ng: scripts/setup.sh), checks formatting and lints, then builds and runs every test,
# including the black-box tests in crates/strowger/tests (about 3 minutes after the build).
test:
	bash scripts/setup.sh
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo build --workspace --all-targets
	bash scripts/run-tests.sh
