.PHONY: bench test

# Load tests against SIPp (bench/README.md): FULL=1 for more levels; about 12 min (FULL=1: 25).
bench:
	bash bench/run.sh

# The whole suite (README's test command): installs the test tools (SIPp, baresip, sox,
# espeak-ng: scripts/setup.sh), checks formatting and lints, then builds and runs every test,
# including the black-box tests in crates/strowger/tests (about 3 minutes after the build).
test:
	bash scripts/setup.sh
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo build --workspace --all-targets
	bash scripts/run-tests.sh
