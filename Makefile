.PHONY: bench bench-call-control bench-codecs bench-record bench-scale bench-srtp fuzz install run soak test

# Runs strowger with its embedded demo configuration (README's first command): installs the
# codec libraries it links (scripts/setup.sh build), then builds and starts it.
run:
	bash scripts/setup.sh build
	cargo run --release -p strowger

# A bounded cargo-fuzz run of every target (FUZZ_SECONDS each, one after another): the parsers
# (SIP, SDP, RTP/RTCP, IAX2) and every codec decoder a received payload reaches (fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/setup.sh build
	bash fuzz/run.sh $(FUZZ_SECONDS)

# Load tests against SIPp (bench/README.md): FULL=1 for more levels; about 12 min (FULL=1: 25).
bench:
	bash bench/run.sh

# Scale benchmarks with strowger-load (bench/lib/scale.py): capacity, B2BUA, speed-up, overload.
bench-scale:
	bash bench/scale.sh

# Call control (bench/call_control.sh): queued callers, blind transfers, a 10,000-cycle soak.
bench-call-control:
	bash bench/call_control.sh

# strowger's G.722/G.726 against spandsp and GSM against libgsm on speech, interleaved: µs per
# second of audio and the ratio (bench/codecs.sh), then `strowger show translation`.
bench-codecs:
	bash scripts/setup.sh build
	bash bench/codecs.sh

# Whole-call recording (bench/record.sh): music-on-hold calls recorded and not, up to 1,600 at once.
bench-record:
	bash bench/record.sh

# Held SDES-SRTP calls against plain RTP over TLS (bench/srtp.sh): 2,000 of each, 3 rounds ABBA.
bench-srtp:
	bash bench/srtp.sh

# The soak (bench/soak.sh, not part of `make test`): a steady mix of calls and registrations with
# faults at RATE calls/s (100) for MINUTES (default: CALLS at RATE, else 30); fails if anything grows.
soak:
	RATE="$(RATE)" MINUTES="$(MINUTES)" CALLS="$(CALLS)" RECORD="$(RECORD)" bash bench/soak.sh

# The whole suite (README's test command): installs the test tools (SIPp, baresip, sox,
# espeak-ng: scripts/setup.sh), checks formatting and lints, then builds and runs every test,
# fuzzes every target for FUZZ_TEST_SECONDS (a crash fails the suite), then runs every test,
# including the black-box tests in crates/strowger/tests; the tests' summary line comes last.
FUZZ_TEST_SECONDS ?= 10
test:
	bash scripts/setup.sh
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo build --workspace --all-targets
	bash fuzz/run.sh $(FUZZ_TEST_SECONDS)
	bash scripts/run-tests.sh

# Installs strowger as a systemd service (README "Run it as a service"): the release binary, the
# unit (contrib/systemd), the `strowger` user (sysusers.d), /var/lib/strowger (tmpfiles.d) and,
# if there is none yet, /etc/strowger/strowger.toml from the embedded configuration. DESTDIR
# stages it all under a directory (for a package) without creating the user; PREFIX (/usr/local)
# places the binary and the systemd files; BIN installs another binary without building.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
SYSCONFDIR ?= /etc
BIN ?= target/release/strowger
install:
ifeq ($(BIN),target/release/strowger)
	bash scripts/setup.sh build
	cargo build --release -p strowger
endif
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/strowger
	install -d $(DESTDIR)$(SYSTEMDDIR) $(DESTDIR)$(SYSCONFDIR)/strowger
	sed -e 's|/usr/local/bin/strowger|$(BINDIR)/strowger|g' -e 's|/etc/strowger/|$(SYSCONFDIR)/strowger/|g' \
		contrib/systemd/strowger.service > $(DESTDIR)$(SYSTEMDDIR)/strowger.service
	install -D -m 0644 contrib/systemd/strowger.sysusers $(DESTDIR)$(SYSUSERSDIR)/strowger.conf
	install -D -m 0644 contrib/systemd/strowger.tmpfiles $(DESTDIR)$(TMPFILESDIR)/strowger.conf
	install -d -m 0750 $(DESTDIR)/var/lib/strowger
	test -e $(DESTDIR)$(SYSCONFDIR)/strowger/strowger.toml || \
		{ $(BIN) default-config > $(DESTDIR)$(SYSCONFDIR)/strowger/strowger.toml && \
		chmod 0640 $(DESTDIR)$(SYSCONFDIR)/strowger/strowger.toml; }
ifeq ($(DESTDIR),)
	systemd-sysusers $(SYSUSERSDIR)/strowger.conf
	systemd-tmpfiles --create $(TMPFILESDIR)/strowger.conf
	chgrp strowger $(SYSCONFDIR)/strowger/strowger.toml
	systemctl daemon-reload
endif
