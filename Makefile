.PHONY: bench

# Load tests against SIPp (bench/README.md): FULL=1 for more levels; about 12 min (FULL=1: 25).
bench:
	bash bench/run.sh
