//! strowger-load against a real strowger process (target/<profile>/strowger, built by
//! `cargo build --workspace --all-targets`, which `make test` and CI run before the tests).

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn load_bin() -> &'static str {
    env!("CARGO_BIN_EXE_strowger-load")
}

/// strowger sits beside strowger-load in the same target directory.
fn strowger_bin() -> PathBuf {
    let p = Path::new(load_bin()).with_file_name("strowger");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-targets)",
        p.display()
    );
    p
}

fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn free_port() -> u16 {
    loop {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `len` consecutive free UDP ports, even-aligned, below the ephemeral range.
fn free_range(len: u16) -> u16 {
    // Ranges handed out here never overlap one another: the tests run in parallel, and a range
    // that is free now may be bound later by the strowger or generator another test gave it.
    // One base for the whole process: a base drawn per call would let two calls' ranges overlap.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    static BASE: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| (20000 + (random() % 2000) as u16) & !1);
    for _ in 0..200 {
        let offset = NEXT.fetch_add(len.next_multiple_of(2), Ordering::Relaxed) % 10_000;
        let lo = base + offset;
        let socks: Vec<_> = (lo..lo + len)
            .map_while(|p| UdpSocket::bind(("127.0.0.1", p)).ok())
            .collect();
        if socks.len() == len as usize {
            return lo;
        }
    }
    panic!("no {len} free consecutive UDP ports");
}

struct Server {
    child: Child,
    port: u16,
    /// Its `tls:` listener, if started with one ([`Server::with_tls`]).
    tls_port: Option<u16>,
    /// The first of its 200 RTP ports.
    rtp_lo: u16,
    dir: PathBuf,
}

impl Server {
    fn start(label: &str) -> Server {
        Server::with_config(label, None)
    }

    /// strowger with a `tls:` listener too, on its self-signed certificate.
    fn with_tls(label: &str) -> Server {
        Server::launch(label, None, true)
    }

    /// The certificate strowger generated for its TLS listener (the load generator's CA).
    fn tls_cert(&self) -> PathBuf {
        self.dir.join("data/tls/cert.pem")
    }

    /// strowger with `config` (TOML text) written to its directory, run from there.
    fn with_config(label: &str, config: Option<&str>) -> Server {
        Server::launch(label, config, false)
    }

    fn launch(label: &str, config: Option<&str>, tls: bool) -> Server {
        let dir =
            std::env::temp_dir().join(format!("strowger-load-test-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let tls_port = tls.then(free_port);
        let lo = free_range(200);
        let log = dir.join("strowger.log");
        let mut cmd = Command::new(strowger_bin());
        if let Some(text) = config {
            std::fs::write(dir.join("strowger.toml"), text).unwrap();
            cmd.arg("--config").arg(dir.join("strowger.toml"));
        }
        if let Some(p) = tls_port {
            cmd.arg("--tls-listen").arg(format!("127.0.0.1:{p}"));
        }
        // Relative paths of the config (the default store) land in the test's own directory.
        let child = cmd
            .current_dir(&dir)
            .arg("--sip-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--rtp-ports")
            .arg(format!("{lo}-{}", lo + 199))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn strowger");
        // A debug build on a loaded host has taken 19 s to start.
        let end = Instant::now() + Duration::from_secs(40);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("worker(s)")
        {
            assert!(Instant::now() < end, "strowger did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server {
            child,
            port,
            tls_port,
            rtp_lo: lo,
            dir,
        }
    }

    /// Runs `strowger-load register --target … --json` with `args`; returns the report.
    fn register(&self, args: &[&str]) -> serde_json::Value {
        let out = Command::new(load_bin())
            .args(["register", "--target", &format!("127.0.0.1:{}", self.port)])
            .args(["--json", "--max-time", "60"])
            .args(args)
            .output()
            .expect("run strowger-load");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "strowger-load failed: {out:?}");
        println!("strowger-load register {args:?}: {stdout}");
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("report is not one JSON object ({e}): {stdout}"))
    }

    /// Runs strowger-load with `args` after `call --target … --json`; returns the report and stderr.
    fn load(&self, args: &[&str]) -> (serde_json::Value, String) {
        self.load_with_ports(100, args)
    }

    /// [`Server::load`] with `ports` RTP ports for the load generator.
    fn load_with_ports(&self, ports: u16, args: &[&str]) -> (serde_json::Value, String) {
        self.load_to(self.port, ports, args)
    }

    /// [`Server::load`] to its TLS listener, trusting its certificate.
    fn load_over_tls(&self, args: &[&str]) -> (serde_json::Value, String) {
        let ca = self.tls_cert();
        let mut all = vec!["--tls-ca", ca.to_str().unwrap()];
        all.extend_from_slice(args);
        self.load_to(self.tls_port.expect("a TLS listener"), 100, &all)
    }

    fn load_to(&self, port: u16, ports: u16, args: &[&str]) -> (serde_json::Value, String) {
        let lo = free_range(ports);
        let out = Command::new(load_bin())
            .args(["call", "--target", &format!("127.0.0.1:{port}")])
            .args(["--json", "--rtp-ports", &format!("{lo}-{}", lo + ports - 1)])
            .args(["--max-time", "60"])
            .args(args)
            .output()
            .expect("run strowger-load");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "strowger-load failed: {stderr}");
        let report = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("report is not one JSON object ({e}): {stdout}"));
        println!("strowger-load {args:?}: {stdout}");
        (report, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[test]
fn twenty_echo_calls_to_the_announcement_complete_with_rtp() {
    let s = Server::start("echo");
    let (r, stderr) = s.load(&[
        "--ext", "44444", "--calls", "20", "--rate", "20", "--hold", "2", "--rtp", "echo",
    ]);
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["attempted"], 20);
    assert_eq!(r["completed"], 20);
    assert_eq!(r["setup_us"]["n"], 20);
    assert!(r["setup_us"]["p50"].as_u64().unwrap() > 0);
    // 20 calls × ~2 s × 50 packets/s ≈ 2,000 from the announcement; echoed back one for one.
    let rx = r["rtp"]["received"].as_u64().unwrap();
    let tx = r["rtp"]["sent"].as_u64().unwrap();
    assert!(rx > 1000, "RTP received: {r}");
    // Echoes leave one per 20 ms visit; at most a few per call are still queued at the BYE.
    assert!(
        tx <= rx && tx + 20 * 4 >= rx,
        "echo sends back what arrives: {r}"
    );
    assert!(
        stderr.contains("calls: attempted"),
        "progress line: {stderr}"
    );
}

#[test]
fn sent_rtp_comes_back_from_the_echo_extension() {
    let s = Server::start("send");
    let (r, _) = s.load(&[
        "--ext", "9196", "--calls", "5", "--rate", "10", "--hold", "1.5", "--rtp", "send",
    ]);
    assert_eq!(r["failed"], 0, "{r}");
    let tx = r["rtp"]["sent"].as_u64().unwrap();
    let rx = r["rtp"]["received"].as_u64().unwrap();
    // 5 calls × 1.5 s × 50/s = 375 sent; the echo returns them (the last few may cross the BYE).
    assert!((360..=400).contains(&tx), "{r}");
    assert!(rx * 10 >= tx * 8, "echoed back: {r}");
    assert_eq!(r["rtp"]["lost"], 0, "{r}");
}

#[test]
fn srtp_calls_over_tls_come_back_from_the_echo_decrypted_and_intact() {
    let s = Server::with_tls("srtp");
    // Two threads: two TLS connections, each carrying its calls.
    let (r, _) = s.load_over_tls(&[
        "--ext",
        "9196",
        "--calls",
        "6",
        "--rate",
        "10",
        "--hold",
        "1.5",
        "--rtp",
        "send",
        "--srtp",
        "--threads",
        "2",
    ]);
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["completed"], 6, "{r}");
    let rtp = &r["rtp"];
    assert_eq!(
        rtp["srtp_unkeyed_calls"], 0,
        "every answer carried a key: {r}"
    );
    assert_eq!(rtp["srtp_rejected"], 0, "every packet authenticated: {r}");
    let tx = rtp["sent"].as_u64().unwrap();
    let rx = rtp["received"].as_u64().unwrap();
    // 6 calls × 1.5 s × 50/s = 450 sent and protected; the echo sends each back under
    // strowger's key, and each decrypts to a packet of the tone that was sent.
    assert!((430..=480).contains(&tx), "{r}");
    assert!(rx * 10 >= tx * 8, "echoed back: {r}");
    assert_eq!(
        rtp["tone_echoed"], rx,
        "decrypted echoes are the tone's packets: {r}"
    );
}

/// The embedded configuration (demo dialplan) with rtp.shared_ports set to `on`.
fn default_config_with_shared_ports(on: bool) -> String {
    let out = Command::new(strowger_bin())
        .arg("default-config")
        .output()
        .expect("strowger default-config");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\nshared_ports = true\n"),
        "on by default: {text}"
    );
    text.replace(
        "\nshared_ports = true\n",
        &format!("\nshared_ports = {on}\n"),
    )
}

/// Sends a voice frame (RTP, PCMU) to every even port of `ports` each 20 ms from a socket of its
/// own until `stop`; returns how many.
fn spray_rtp(ports: std::ops::Range<u16>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut frame = [0xffu8; 172];
        frame[..2].copy_from_slice(&[0x80, 0]);
        let mut sent = 0u64;
        for seq in 0u16.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            frame[2..4].copy_from_slice(&seq.to_be_bytes());
            for port in ports.clone().step_by(2) {
                sent += u64::from(sock.send_to(&frame, ("127.0.0.1", port)).is_ok());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        sent
    })
}

impl Server {
    /// [`Server::load_with_ports`] (400 ports) while RTP from an address no call announced hits
    /// every RTP port of the server ([`spray_rtp`]); the report and how many stray frames went.
    fn load_while_spraying(&self, args: &[&str]) -> (serde_json::Value, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let spray = spray_rtp(self.rtp_lo..self.rtp_lo + 200, stop.clone());
        let (r, _) = self.load_with_ports(400, args);
        stop.store(true, Ordering::Relaxed);
        (r, spray.join().unwrap())
    }
}

/// 150 calls to the echo with an address per call at the far end, against a server with 100 RTP
/// port pairs: with rtp.shared_ports every call completes and gets its own stream back (a packet
/// filed under the wrong call would show as loss and jitter), whether each call has a socket of its
/// own or the generator's threads each answer for their calls' loopback addresses on one socket;
/// calls from one far-end address get pairs of their own; RTP sprayed from an address no call
/// announced takes no call's audio; with a pair per call the range runs out and some calls are
/// refused.
#[test]
fn shared_ports_carry_more_calls_than_the_range_has_pairs_each_to_its_own_far_end() {
    let args = |far_ends: &'static [&'static str]| {
        let mut a = vec![
            "--ext", "9196", "--calls", "150", "--rate", "100", "--hold", "2", "--rtp", "send",
        ];
        a.extend_from_slice(far_ends);
        a
    };
    let s = Server::with_config(
        "shared-ports",
        Some(&default_config_with_shared_ports(true)),
    );
    for far_ends in [
        &["--socket-per-call"][..],
        &["--address-per-call", "--threads", "2"][..],
    ] {
        // Meanwhile RTP from an address no call announced hits every port of the server's range:
        // on a shared port it must reach no call.
        let (r, sprayed) = s.load_while_spraying(&args(far_ends));
        assert!(sprayed > 1_000, "the stray RTP was sent");
        assert_eq!(
            (r["failed"].as_u64(), r["completed"].as_u64()),
            (Some(0), Some(150)),
            "{far_ends:?}: {r}"
        );
        let tx = r["rtp"]["sent"].as_u64().unwrap();
        let rx = r["rtp"]["received"].as_u64().unwrap();
        // 150 calls × 2 s × 50/s = 15,000 sent; the echo returns them (the last few cross the BYE).
        assert!((14_500..=15_500).contains(&tx), "{far_ends:?}: {r}");
        assert!(rx * 10 >= tx * 9, "{far_ends:?}: echoed back: {r}");
        assert_eq!(r["rtp"]["lost"], 0, "{far_ends:?}: {r}");
        assert!(
            r["rtp"]["jitter_max_us"].as_u64().unwrap() < 20_000,
            "{far_ends:?}: {r}"
        );
    }
    // One address for all calls (SIPp's echo does the same): the calls cannot be told apart by
    // address, so the first shares a port and the others get pairs of their own, and every call
    // still gets its own stream — while the spray reaches those pairs too, and may latch a new
    // call's pair before its far end does ("RTP bleed"; the announced address takes it back).
    let one_address = [
        "--ext", "9196", "--calls", "60", "--rate", "100", "--hold", "2", "--rtp", "send",
    ];
    let (r, sprayed) = s.load_while_spraying(&one_address);
    assert!(sprayed > 1_000, "the stray RTP was sent");
    assert_eq!(
        (r["failed"].as_u64(), r["completed"].as_u64()),
        (Some(0), Some(60)),
        "one far-end address: {r}"
    );
    let tx = r["rtp"]["sent"].as_u64().unwrap();
    assert!(r["rtp"]["received"].as_u64().unwrap() * 10 >= tx * 9, "{r}");
    assert_eq!(r["rtp"]["lost"], 0, "one far-end address: {r}");
    drop(s);

    let s = Server::with_config("own-ports", Some(&default_config_with_shared_ports(false)));
    let (r, _) = s.load_with_ports(400, &args(&["--socket-per-call"]));
    assert!(
        r["failed"].as_u64().unwrap() > 0,
        "100 pairs for 150 calls: {r}"
    );
}

/// From a trusted address (as a trunk calls) an unknown extension is a 404; a stranger gets the
/// same 401 for it as for every extension outside the public context, counted by its status too.
#[test]
fn an_unknown_extension_fails_with_404() {
    let text = default_config_with_shared_ports(false);
    assert!(text.contains("\ntrusted = []\n"), "{text}");
    let trusting = text.replace("\ntrusted = []\n", "\ntrusted = [\"127.0.0.1\"]\n");
    let s = Server::with_config("404", Some(&trusting));
    let (r, _) = s.load(&["--ext", "7777777", "--calls", "3", "--rate", "10"]);
    assert_eq!(r["attempted"], 3);
    assert_eq!(r["failed"], 3, "{r}");
    assert_eq!(r["failed_reasons"]["404"], 3, "{r}");
    assert_eq!(r["completed"], 0);
    drop(s);
    let s = Server::start("401");
    let (r, _) = s.load(&["--ext", "7777777", "--calls", "3", "--rate", "10"]);
    assert_eq!(r["failed_reasons"]["401"], 3, "{r}");
}

/// A registrar with users 100000-100049 (password "pw"), digest authentication on or off.
fn registrar_config(authenticate: bool) -> String {
    let mut c = format!(
        "[registrar]\ndomain = \"strowger\"\nauthenticate = {authenticate}\n\
         store = \"local:store.snap\"\n\
         [dialplan]\ndefault_context = \"default\"\n\
         [[dialplan.contexts.default.rules]]\nprefix = \"\"\nsteps = [\"hangup\"]\n"
    );
    for u in 100_000..100_050 {
        c.push_str(&format!("[[users]]\nuser = \"{u}\"\npassword = \"pw\"\n"));
    }
    c
}

#[test]
fn registers_with_digest_and_counts_a_wrong_password_as_403() {
    let s = Server::with_config("register-auth", Some(&registrar_config(true)));
    let r = s.register(&["--users", "50", "--rate", "500", "--auth", "pw"]);
    assert_eq!(
        (r["attempted"].as_u64(), r["registered"].as_u64()),
        (Some(50), Some(50)),
        "{r}"
    );
    assert_eq!(r["challenges"], 50, "{r}");
    assert_eq!(r["latency_us"]["n"], 50, "{r}");
    assert!(r["latency_us"]["p99"].as_u64().unwrap() > 0, "{r}");
    let r = s.register(&["--users", "5", "--rate", "500", "--auth", "wrong"]);
    assert_eq!(r["failed_reasons"]["403"], 5, "{r}");
    let r = s.register(&["--users", "5", "--rate", "500"]);
    assert_eq!(r["failed_reasons"]["challenge"], 5, "no password: {r}");
}

#[test]
fn registers_without_auth_when_the_registrar_does_not_ask() {
    let s = Server::with_config("register-open", Some(&registrar_config(false)));
    let r = s.register(&["--users", "200", "--rate", "1000", "--first", "300000"]);
    assert_eq!(r["registered"], 200, "{r}");
    assert_eq!(
        (r["challenges"].as_u64(), r["failed"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
}
