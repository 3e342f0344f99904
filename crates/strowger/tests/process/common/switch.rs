//! The strowger process under test: started on free loopback ports with its own data dir,
//! stopped with SIGINT, killed on drop. Its stderr goes to a file that panics quote.

use super::json::Json;
use super::net::{free_port, free_port_range, release_port_range};
use super::sip::{sdp, sdp_audio, Msg, Rtp, Uac};
use super::{read_text, tail, tests_dir, wait_for, TempDir};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// RTP ports per strowger instance: 50 pairs, split across 2 workers, for up to 10 bridged
/// calls (two streams each) at once.
const RTP_PORTS: u16 = 100;
/// How long a starting strowger may take to log its startup line.
const STARTUP: Duration = Duration::from_secs(40);

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_strowger")
}

#[derive(Default)]
pub struct Opts {
    /// A config file under tests/configs/ (None: the embedded default dialplan).
    pub config: Option<&'static str>,
    /// A config file anywhere (e.g. written by the test); wins over `config`.
    pub config_file: Option<PathBuf>,
    /// `--var NAME=VALUE` overrides.
    pub vars: Vec<(String, String)>,
    /// `--workers N` (None: one per core).
    pub workers: Option<usize>,
    /// How many RTP ports (None: 100).
    pub rtp_ports: Option<u16>,
    /// The first of them, from a range the test took with `net::free_port_range` (None: a free
    /// range is found here).
    pub rtp_lo: Option<u16>,
    /// The directory strowger starts in (relative paths in its config, such as the default
    /// `local:strowger-data/store.snap`, are under it); None: the test's own temporary directory,
    /// so no two strowgers share a store file.
    pub cwd: Option<PathBuf>,
    /// `--log-level LEVEL`.
    pub log_level: Option<&'static str>,
    /// `--store URL`.
    pub store: Option<String>,
    /// Environment variables strowger starts with (e.g. NOTIFY_SOCKET).
    pub env: Vec<(String, String)>,
    /// The control API's address (None: a free port).
    pub api: Option<SocketAddr>,
    /// strowger logs nothing on start (logging at error or warn only): it is taken as started
    /// once it answers an OPTIONS, not on its startup line.
    pub quiet: bool,
    /// Listen on [::1] too, at the same port (`Strowger::sip6`): a dual-stack strowger.
    pub ipv6: bool,
    /// Listen for SIP over TLS too, on a free port (`--tls-listen`; [`Strowger::tls`]).
    pub tls: bool,
    /// Listen for SIP over WebSocket and secure WebSocket too, on free ports (`--ws-listen`,
    /// `--wss-listen`; [`Strowger::ws`]).
    pub ws: bool,
    /// The SIP address (None: 127.0.0.1 on a free port), e.g. a restarted node's old one.
    pub sip: Option<SocketAddr>,
    /// The data directory (None: data/ in its own temp dir), e.g. a restarted node's old one.
    pub data_dir: Option<PathBuf>,
}

pub struct Strowger {
    child: Option<Child>,
    pub sip: SocketAddr,
    /// Its IPv6 address when started with `Opts::ipv6`.
    pub sip6: Option<SocketAddr>,
    /// Its TLS listener ([`Opts::tls`]).
    pub tls: Option<SocketAddr>,
    /// Its `ws:` and `wss:` listeners ([`Opts::ws`]).
    pub ws: Option<(SocketAddr, SocketAddr)>,
    /// The control API's address (every instance gets its own, so tests run side by side).
    pub api: SocketAddr,
    pub rtp: (u16, u16),
    /// Holds data/ (strowger's data dir), strowger.log and the SIPp run dirs.
    pub dir: TempDir,
    data: PathBuf,
    log: PathBuf,
}

/// Times a new call is tried again when refused as overloaded.
pub const OVERLOAD_RETRIES: usize = 20;

impl Strowger {
    /// The embedded default configuration.
    pub fn start(label: &str) -> Strowger {
        Strowger::with(label, Opts::default())
    }

    /// With a test config from tests/configs/.
    pub fn with_config(label: &str, config: &'static str) -> Strowger {
        Strowger::with(
            label,
            Opts {
                config: Some(config),
                ..Opts::default()
            },
        )
    }

    pub fn with(label: &str, opts: Opts) -> Strowger {
        let dir = TempDir::new(label);
        let sip: SocketAddr = opts
            .sip
            .unwrap_or_else(|| format!("127.0.0.1:{}", free_port()).parse().unwrap());
        let api = opts
            .api
            .unwrap_or_else(|| format!("127.0.0.1:{}", free_port()).parse().unwrap());
        let ports = opts.rtp_ports.unwrap_or(RTP_PORTS);
        let lo = opts.rtp_lo.unwrap_or_else(|| free_port_range(ports));
        let rtp = (lo, lo + ports - 1);
        let log = dir.path().join("strowger.log");
        let data = opts.data_dir.unwrap_or_else(|| dir.path().join("data"));
        let mut cmd = Command::new(binary());
        if let Some(f) = &opts.config_file {
            cmd.arg("--config").arg(f);
        } else if let Some(c) = opts.config {
            cmd.arg("--config").arg(config_path(c));
        }
        let sip6 = opts
            .ipv6
            .then(|| SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), sip.port()));
        let listen: Vec<String> = [Some(sip), sip6]
            .iter()
            .flatten()
            .map(ToString::to_string)
            .collect();
        cmd.arg("--sip-listen")
            .arg(listen.join(","))
            .arg("--rtp-ports")
            .arg(format!("{}-{}", rtp.0, rtp.1))
            .arg("--data-dir")
            .arg(&data)
            .arg("--api-listen")
            .arg(api.to_string());
        let mut extra = |flag: &str| {
            let a: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            cmd.arg(flag).arg(a.to_string());
            a
        };
        let tls = opts.tls.then(|| extra("--tls-listen"));
        let ws = opts
            .ws
            .then(|| (extra("--ws-listen"), extra("--wss-listen")));
        if let Some(n) = opts.workers {
            cmd.arg("--workers").arg(n.to_string());
        }
        if let Some(l) = opts.log_level {
            cmd.arg("--log-level").arg(l);
        }
        if let Some(url) = &opts.store {
            cmd.arg("--store").arg(url);
        }
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        for (k, v) in &opts.vars {
            cmd.arg("--var").arg(format!("{k}={v}"));
        }
        cmd.current_dir(opts.cwd.as_deref().unwrap_or(dir.path()));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(File::create(dir.path().join("strowger.out")).unwrap())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn strowger");
        let mut s = Strowger {
            child: Some(child),
            sip,
            sip6,
            tls,
            ws,
            api,
            rtp,
            dir,
            data,
            log,
        };
        s.wait_started(opts.quiet);
        s
    }

    /// Waits up to STARTUP for the startup line (`… strowger VERSION: N worker(s) …`, after the timestamp and
    /// level), or when `quiet`, for an answer to an OPTIONS.
    fn wait_started(&mut self, quiet: bool) {
        // Generous: a debug build decoding the demo's music while the suite's other tests share
        // two cores has taken 19 s.
        let started = wait_for(STARTUP, || {
            let log = self.stderr();
            let logged = log
                .lines()
                .any(|l| l.contains("strowger ") && l.contains("worker(s)"));
            if logged || (quiet && answers_options(self.sip)) {
                return Some(true);
            }
            self.try_exit().map(|_| false)
        });
        match started {
            Some(true) => {}
            Some(false) => panic!(
                "strowger exited during startup ({:?}); stderr:\n{}",
                self.try_exit(),
                self.stderr()
            ),
            None => panic!(
                "no startup line from strowger within {STARTUP:?}; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// The process id (for /proc/PID/fd).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data.clone()
    }

    /// An INVITE offering `pts` to `exten` from a new hand-written client (a new Call-ID each
    /// try), tried again while refused with 503 (a debug build on a busy machine falls behind
    /// its media ticks now and then and refuses new calls meanwhile, as it should): the client
    /// and the final response.
    pub fn invite(&self, exten: &str, pts: &[(u8, &str)], rtp: &Rtp) -> (Uac, Msg) {
        for _ in 0..OVERLOAD_RETRIES {
            let mut uac = Uac::new(self.sip, exten);
            let resp = uac.invite(&sdp(rtp.port, pts, "sendrecv"));
            if resp.status() != Some(503) {
                return (uac, resp);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("INVITE to {exten}: refused as overloaded {OVERLOAD_RETRIES} times");
    }

    /// A call to `exten` offering `pts`, answered (200, or the test fails with the end of the
    /// log), ACKed, and `rtp` pointed at the answer.
    pub fn answered(&self, exten: &str, pts: &[(u8, &str)], rtp: &mut Rtp) -> Uac {
        let (mut uac, resp) = self.invite(exten, pts, rtp);
        assert_eq!(
            resp.status(),
            Some(200),
            "INVITE to {exten}: {resp:?}\n{}",
            tail(&self.stderr(), 30)
        );
        rtp.remote = Some(sdp_audio(&resp.body).0);
        uac.ack("");
        uac
    }

    /// Everything strowger wrote to stderr so far.
    pub fn stderr(&self) -> String {
        read_text(&self.log)
    }

    /// Panics (with the end of its log) if strowger has exited.
    pub fn assert_alive(&mut self) {
        if let Some(st) = self.try_exit() {
            panic!(
                "strowger died ({st}); stderr tail:\n{}",
                tail(&self.stderr(), 40)
            );
        }
    }

    /// The CDR lines written so far.
    pub fn cdrs(&self) -> Vec<Cdr> {
        read_text(&self.data_dir().join("cdr.jsonl"))
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(Cdr::parse)
            .collect()
    }

    /// Waits until `n` CDRs are written (calls end asynchronously), then a little longer to
    /// catch any unexpected extra one, and returns them all.
    pub fn wait_cdrs(&self, n: usize) -> Vec<Cdr> {
        let got = wait_for(Duration::from_secs(10), || {
            Some(self.cdrs()).filter(|c| c.len() >= n)
        });
        if got.is_none() {
            let have = self.cdrs();
            panic!(
                "expected {n} CDRs within 10 s, have {}: {have:#?}\nstrowger stderr tail:\n{}",
                have.len(),
                tail(&self.stderr(), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        self.cdrs()
    }

    /// SIGINT (stop at once: calls in progress get BYE, where SIGTERM would first drain them)
    /// and wait (bounded) for a clean exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.stop_with("-INT")
    }

    /// Sends `signal` (`-TERM`, `-INT`) and waits up to 10 s for the exit.
    pub fn stop_with(&mut self, signal: &str) -> ExitStatus {
        self.signal(signal);
        self.wait_exit(Duration::from_secs(10), signal)
    }

    /// Sends `signal` (`-HUP`, `-TERM`) to the running process.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("strowger already stopped");
        let _ = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status();
    }

    /// Waits up to `limit` for the process to exit (after `after`, for the panic message).
    pub fn wait_exit(&mut self, limit: Duration, after: &str) -> ExitStatus {
        let mut child = self.child.take().expect("strowger already stopped");
        match wait_for(limit, || child.try_wait().ok().flatten()) {
            Some(st) => st,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "strowger did not exit within {limit:?} of {after}; stderr tail:\n{}",
                    tail(&self.stderr(), 20)
                )
            }
        }
    }

    /// Waits up to 10 s for a log line containing `text` after the first `skip` such lines.
    pub fn wait_log(&self, text: &str, skip: usize) {
        let found = wait_for(Duration::from_secs(10), || {
            (self.stderr().matches(text).count() > skip).then_some(())
        });
        assert!(
            found.is_some(),
            "no log line with {text:?} within 10 s; stderr tail:\n{}",
            tail(&self.stderr(), 30)
        );
    }
}

impl Drop for Strowger {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        release_port_range(self.rtp.0, self.rtp.1 - self.rtp.0 + 1);
        if std::thread::panicking() {
            eprintln!(
                "--- strowger stderr (last 40 lines) ---\n{}",
                tail(&self.stderr(), 40)
            );
        }
    }
}

/// Whether a SIP server at `sip` answers an OPTIONS over UDP within 200 ms.
fn answers_options(sip: SocketAddr) -> bool {
    let Ok(sock) = std::net::UdpSocket::bind("127.0.0.1:0") else {
        return false;
    };
    let Ok(local) = sock.local_addr() else {
        return false;
    };
    let options = format!(
        "OPTIONS sip:probe@{sip} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-probe\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@{local}>;tag=probe\r\nTo: <sip:probe@{sip}>\r\n\
         Call-ID: probe-{}@{local}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        std::process::id()
    );
    let mut buf = [0u8; 4096];
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .is_ok()
        && sock.send_to(options.as_bytes(), sip).is_ok()
        && sock.recv(&mut buf).is_ok()
}

/// `text` (a configuration with the default `[security]` table) with 127.0.0.1 and ::1 trusted: the
/// test's phones call in the default context without credentials, as a trunk does.
pub fn trusting_loopback(text: &str) -> String {
    assert_eq!(
        text.matches("\ntrusted = []\n").count(),
        1,
        "no `trusted = []` line to replace"
    );
    text.replace("\ntrusted = []\n", "\ntrusted = [\"127.0.0.1\", \"::1\"]\n")
}

/// The embedded configuration trusting 127.0.0.1 (`trusting_loopback`), written to `dir`.
pub fn default_config_trusting_loopback(dir: &Path) -> PathBuf {
    let text = include_str!("../../../../switch/src/default.toml");
    let path = dir.join("trusting-loopback.toml");
    std::fs::write(&path, trusting_loopback(text)).unwrap();
    path
}

pub fn config_path(name: &str) -> PathBuf {
    tests_dir().join("configs").join(name)
}

/// Runs `strowger ARGS` to completion (check-config, default-config).
pub fn run_cli(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run strowger")
}

/// One CDR line.
#[derive(Clone)]
pub struct Cdr {
    pub line: String,
    json: Json,
}

impl std::fmt::Debug for Cdr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl Cdr {
    pub fn parse(line: &str) -> Cdr {
        let json = Json::parse(line).unwrap_or_else(|e| panic!("bad CDR line {line:?}: {e}"));
        Cdr {
            line: line.to_string(),
            json,
        }
    }

    pub fn str(&self, key: &str) -> &str {
        self.json
            .get(key)
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("CDR field {key} is not a string: {self:?}"))
    }

    pub fn num(&self, key: &str) -> f64 {
        self.json
            .get(key)
            .and_then(Json::as_f64)
            .unwrap_or_else(|| panic!("CDR field {key} is not a number: {self:?}"))
    }

    pub fn is_null(&self, key: &str) -> bool {
        matches!(self.json.get(key), Some(Json::Null))
    }

    /// An answered call to `exten` that ended normally with a 200.
    pub fn assert_answered(&self, exten: &str) {
        assert_eq!(self.str("exten"), exten, "exten in {self:?}");
        assert_eq!(self.num("sip_status"), 200.0, "sip_status in {self:?}");
        assert!(!self.is_null("answer"), "answer must be set: {self:?}");
        assert!(
            self.num("billable_s") > 0.0,
            "billable_s must be > 0: {self:?}"
        );
        assert!(
            self.num("duration_s") >= self.num("billable_s"),
            "duration_s < billable_s: {self:?}"
        );
    }
}

/// Exactly `n` CDRs, one per call (distinct Call-IDs), each answered on `exten`.
pub fn assert_answered_cdrs(cdrs: &[Cdr], n: usize, exten: &str) {
    assert_eq!(cdrs.len(), n, "want one CDR per call, got:\n{cdrs:#?}");
    let ids: std::collections::BTreeSet<&str> = cdrs.iter().map(|c| c.str("call_id")).collect();
    assert_eq!(ids.len(), n, "CDR call_ids not distinct:\n{cdrs:#?}");
    for c in cdrs {
        c.assert_answered(exten);
    }
}
