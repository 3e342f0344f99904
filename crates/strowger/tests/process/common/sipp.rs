//! SIPp runs: always in the foreground (no -bg), bounded in calls (-m) and time (-timeout plus a
//! watchdog here), on free ports, with stats, screen, errors and messages traced to files in a
//! per-run directory that failure messages quote.

use super::net::{free_port, free_port_range};
use super::pcap::Stream;
use super::sip::Msg;
use super::{read_text, tail, tests_dir, wait_for};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// SIPp's own global timeout; the watchdog allows a little more before killing it.
const SIPP_TIMEOUT_S: u64 = 60;

pub enum Scenario {
    /// One of SIPp's embedded scenarios (`-sn uac`, `-sn uas`).
    Builtin(&'static str),
    /// tests/sipp/<name>.
    File(&'static str),
}

impl Scenario {
    fn label(&self) -> &'static str {
        match self {
            Scenario::Builtin(n) | Scenario::File(n) => n.trim_end_matches(".xml"),
        }
    }
}

/// What to run; `Sipp::new(..)` then builder-style setters.
pub struct Sipp {
    scenario: Scenario,
    /// Request-URI user (`-s`), the dialled extension.
    service: Option<String>,
    calls: u32,
    rate: Option<u32>,
    limit: Option<u32>,
    duration_ms: Option<u32>,
    rtp_echo: bool,
    /// Local SIP port (`-p`); None: a free one.
    port: Option<u16>,
    /// The address SIPp sends SIP and media from (`-i`, `-mi`); default 127.0.0.1.
    ip: &'static str,
    extra: Vec<String>,
    /// Files written into the run's directory (SIPp's working directory) before it starts:
    /// what a scenario's `play_pcap_audio` plays.
    files: Vec<(&'static str, Vec<u8>)>,
}

impl Sipp {
    pub fn new(scenario: Scenario) -> Sipp {
        Sipp {
            scenario,
            service: None,
            calls: 1,
            rate: None,
            limit: None,
            duration_ms: None,
            rtp_echo: false,
            port: None,
            ip: "127.0.0.1",
            extra: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Send and listen from another loopback address than 127.0.0.1, e.g. ::1 (its ports are
    /// checked free on 127.0.0.1, which on loopback is as good).
    pub fn ip(mut self, ip: &'static str) -> Sipp {
        self.ip = ip;
        self
    }

    pub fn service(mut self, exten: &str) -> Sipp {
        self.service = Some(exten.into());
        self
    }

    /// `-m calls -r rate -l limit`.
    pub fn calls(mut self, calls: u32, rate: u32, limit: u32) -> Sipp {
        self.calls = calls;
        self.rate = Some(rate);
        self.limit = Some(limit);
        self
    }

    /// `-d ms`: how long the built-in uac/uas scenarios hold the call.
    pub fn duration_ms(mut self, ms: u32) -> Sipp {
        self.duration_ms = Some(ms);
        self
    }

    pub fn rtp_echo(mut self) -> Sipp {
        self.rtp_echo = true;
        self
    }

    /// Listen on this SIP port (e.g. the one a phone registered from); default: a free port.
    pub fn port(mut self, port: u16) -> Sipp {
        self.port = Some(port);
        self
    }

    pub fn arg(mut self, a: &str) -> Sipp {
        self.extra.push(a.into());
        self
    }

    pub fn args(mut self, a: &[&str]) -> Sipp {
        self.extra.extend(a.iter().map(|s| s.to_string()));
        self
    }

    /// A caller (tests/sipp/media_uac.xml) of `exten` whose media is `media` from the answer
    /// on, offering telephone-event if `events`; it hangs up `after` the answer.
    pub fn media_caller(exten: &str, media: &Stream, events: bool, after: Duration) -> Sipp {
        Sipp::new(Scenario::File("media_uac.xml"))
            .service(exten)
            .duration_ms(after.as_millis() as u32)
            .args(&["-key", "pts", if events { "0 101" } else { "0" }])
            .file("media.pcap", media.pcap())
    }

    /// A callee (tests/sipp/media_uas.xml) that answers the law of `media` (PCMU or PCMA) and
    /// sends `media` from the ACK on.
    pub fn media_callee(media: &Stream) -> Sipp {
        let (pt, name) = match media.law() {
            codec::G711::Pcmu => ("0", "PCMU"),
            codec::G711::Pcma => ("8", "PCMA"),
        };
        Sipp::new(Scenario::File("media_uas.xml"))
            .args(&["-key", "pts", pt, "-key", "codec", name])
            .file("media.pcap", media.pcap())
    }

    /// Writes `bytes` as `name` in the run's directory, where the scenario finds it.
    pub fn file(mut self, name: &'static str, bytes: Vec<u8>) -> Sipp {
        self.files.push((name, bytes));
        self
    }

    /// Starts SIPp (a client if `target` is set, else a server) with its files in a new
    /// subdirectory of `parent`.
    pub fn spawn(self, target: Option<SocketAddr>, parent: &Path) -> SippProcess {
        let dir = unique_dir(parent, self.scenario.label());
        for (name, bytes) in &self.files {
            std::fs::write(dir.join(name), bytes).expect("write a file for SIPp");
        }
        let port = self.port.unwrap_or_else(free_port);
        let mut cmd = Command::new("sipp");
        if let Some(t) = target {
            cmd.arg(t.to_string());
        }
        match self.scenario {
            Scenario::Builtin(n) => cmd.args(["-sn", n]),
            Scenario::File(f) => cmd.arg("-sf").arg(tests_dir().join("sipp").join(f)),
        };
        let num = |v: u32| v.to_string();
        cmd.args(["-i", self.ip, "-mi", self.ip])
            .args(["-p", &num(port.into())])
            // Media (-rtp_echo uses mp and mp+2) and control ports: defaults would collide.
            .args(["-mp", &num(free_port_range(4).into())])
            .args(["-cp", &num(free_port().into())])
            .args(["-m", &num(self.calls)])
            .args(["-timeout", &format!("{SIPP_TIMEOUT_S}s"), "-timeout_error"])
            .args(["-nostdin", "-trace_stat", "-stf", "stat.csv", "-fd", "1"])
            .args(["-trace_screen", "-screen_file", "screen.log"])
            .args(["-trace_err", "-error_file", "errors.log"])
            .args(["-trace_msg", "-message_file", "messages.log"]);
        if let Some(s) = &self.service {
            cmd.args(["-s", s]);
        }
        if let Some(r) = self.rate {
            cmd.args(["-r", &num(r)]);
        }
        if let Some(l) = self.limit {
            cmd.args(["-l", &num(l)]);
        }
        if let Some(d) = self.duration_ms {
            cmd.args(["-d", &num(d)]);
        }
        if self.rtp_echo {
            cmd.arg("-rtp_echo");
        }
        cmd.args(&self.extra);
        let child = cmd
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("stdout.log")).unwrap())
            .stderr(File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .expect("spawn sipp (run scripts/setup.sh)");
        SippProcess {
            child: Some(child),
            addr: SocketAddr::new(self.ip.parse().unwrap(), port),
            dir,
        }
    }

    /// Runs a client against `target` to completion.
    pub fn run(self, target: SocketAddr, parent: &Path) -> SippResult {
        self.spawn(Some(target), parent).finish()
    }
}

fn unique_dir(parent: &Path, label: &str) -> PathBuf {
    (0..)
        .map(|n| parent.join(format!("sipp-{label}-{n}")))
        .find(|d| std::fs::create_dir(d).is_ok())
        .unwrap()
}

/// A running SIPp, killed on drop.
pub struct SippProcess {
    child: Option<Child>,
    /// Where it listens for SIP.
    pub addr: SocketAddr,
    pub dir: PathBuf,
}

impl SippProcess {
    /// Waits for SIPp to exit by itself (bounded by its -timeout) and reads its results.
    pub fn finish(mut self) -> SippResult {
        let mut child = self.child.take().unwrap();
        let status = wait_for(Duration::from_secs(SIPP_TIMEOUT_S + 15), || {
            child.try_wait().ok().flatten()
        });
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        SippResult::read(&self.dir, status)
    }
}

impl Drop for SippProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[derive(Debug)]
pub struct SippResult {
    /// SIPp's exit code (0: every call succeeded; 1: some failed; 99: no call; 255/254: fatal);
    /// None if the watchdog had to kill it.
    pub code: Option<i32>,
    pub successful: u64,
    pub failed: u64,
    pub dir: PathBuf,
}

impl SippResult {
    fn read(dir: &Path, status: Option<ExitStatus>) -> SippResult {
        let (successful, failed) = final_counts(&read_text(&dir.join("stat.csv")));
        SippResult {
            code: status.and_then(|s| s.code()),
            successful,
            failed,
            dir: dir.to_path_buf(),
        }
    }

    /// SIPp exited 0 with exactly `calls` successful calls and none failed.
    pub fn assert_ok(&self, calls: u64) {
        assert!(
            self.code == Some(0) && self.successful == calls && self.failed == 0,
            "SIPp: exit {:?}, {} successful, {} failed (want exit 0, {calls} successful)\n{}",
            self.code,
            self.successful,
            self.failed,
            self.evidence()
        );
    }

    /// The interesting parts of SIPp's traces: errors, the end of the screen and messages.
    pub fn evidence(&self) -> String {
        let f = |name: &str, n: usize| {
            format!(
                "--- sipp {name} ({}) ---\n{}\n",
                self.dir.join(name).display(),
                tail(&read_text(&self.dir.join(name)), n)
            )
        };
        f("errors.log", 30) + &f("stderr.log", 10) + &f("screen.log", 45) + &f("messages.log", 60)
    }

    /// The SIP messages SIPp received, from its -trace_msg log (blocks that start with a line
    /// of dashes and a timestamp, then "UDP message received [N] bytes :", a blank line, the message).
    pub fn received(&self) -> Vec<Msg> {
        self.logged("message received")
            .iter()
            .filter_map(|m| Msg::parse(m.as_bytes()))
            .collect()
    }

    /// The SIP messages SIPp sent, as the bytes it sent (for replaying one).
    pub fn sent(&self) -> Vec<String> {
        self.logged("message sent")
    }

    fn logged(&self, direction: &str) -> Vec<String> {
        read_text(&self.dir.join("messages.log"))
            .split("-----------------------------------------------")
            .filter_map(|block| {
                let (head, msg) = block.split_once("\n\n")?;
                head.contains(direction).then(|| msg.to_string())
            })
            .collect()
    }
}

/// Cumulative successful/failed call counts from the last row of SIPp's -trace_stat CSV.
fn final_counts(csv: &str) -> (u64, u64) {
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return (0, 0);
    };
    let cols: Vec<&str> = header.split(';').collect();
    let Some(last) = lines.next_back() else {
        return (0, 0);
    };
    let vals: Vec<&str> = last.split(';').collect();
    let get = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .and_then(|i| vals.get(i))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("SuccessfulCall(C)"), get("FailedCall(C)"))
}
