//! The RFC 4475 / RFC 5118 torture corpus (../shared/conformance/sip-torture), one UDP datagram
//! per message, then three normal calls: strowger must answer as the table below says and stay up.
//!
//! The corpus names hosts in 192.0.2.0/24 (this machine's real network), example.com and
//! 255.255.255.255, and a UAS may send responses to Via/Contact addresses. So the whole check
//! runs inside a fresh network namespace with only loopback: the outer test re-runs this test
//! binary's `corpus_inside_netns` under `unshare -n`, and that test refuses to run anywhere else.

mod common;

use common::sip::Msg;
use common::sipp::{Scenario, Sipp};
use common::{shared_dir, Strowger};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const INNER: &str = "corpus_inside_netns";
const NETNS_ENV: &str = "STROWGER_TEST_IN_NETNS";

#[test]
fn torture_corpus_in_private_netns() {
    let out = Command::new("unshare")
        .args([
            "-n",
            "--",
            "sh",
            "-c",
            "ip link set lo up && exec \"$0\" \"$@\"",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            INNER,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NETNS_ENV, "1")
        .output()
        .expect("run unshare (util-linux; needs root)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(
        out.status.success(),
        "torture run inside the namespace failed ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "the inner test did not run:\n{text}"
    );
}

/// What strowger must do with one corpus message.
#[derive(Debug)]
enum Want {
    /// One of these final statuses.
    Status(&'static [u16]),
    /// No response at all (responses sent to a UAS are dropped).
    Nothing,
    /// Any final response below this (REGISTER until the registrar exists).
    FinalBelow(u16),
    /// Any response: valid INVITEs to users that do not exist here.
    Anything,
}

fn expectation(name: &str) -> Want {
    use Want::*;
    match name {
        "badinv01" | "clerr" | "ncl" | "scalar02" | "quotbal" | "ltgtruri" | "lwsruri"
        | "lwsstart" | "trws" | "escruri" | "regbadct" | "badaspec" | "baddn" | "mismatch01"
        | "badbranch" | "insuf" | "multi01" | "mcl01" | "ipv6-bad" => Status(&[400]),
        "badvers" => Status(&[505]),
        "mismatch02" | "intmeth" | "esc02" => Status(&[501]),
        "unkscm" | "novelsc" => Status(&[416]),
        "bext01" => Status(&[420]),
        "invut" => Status(&[415]),
        "sdp01" => Status(&[406]),
        "scalarlg" | "bigcode" | "unreason" | "noreason" | "bcast" => Nothing,
        // Valid OPTIONS: a UAS answers 200 (the three-colon IPv6 form may be refused).
        "zeromf"
        | "lwsdisp"
        | "semiuri"
        | "transports"
        | "ipv6-correct-abnf-2-colons"
        | "via-received-param-no-delim" => Status(&[200]),
        "ipv6-bug-abnf-3-colons" => Status(&[200, 400]),
        // BYE outside any dialog.
        "mult-ip-in-header" => Status(&[481]),
        "via-received-param-with-delim" => Status(&[481, 400]),
        "escnull" | "dblreq" | "cparam01" | "cparam02" | "regescrt" | "regaut01" | "unksm2"
        | "ipv6-good" | "port-ambiguous" | "port-unambiguous" => FinalBelow(500),
        // MESSAGE: not implemented or not allowed, but answered.
        "mpart01" => Status(&[200, 202, 405, 501]),
        _ => Anything,
    }
}

fn corpus() -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for set in ["rfc4475", "rfc5118"] {
        let dir = shared_dir().join("conformance/sip-torture").join(set);
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "dat") {
                files.push((p.file_stem().unwrap().to_string_lossy().into_owned(), p));
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 61, "49 RFC 4475 + 12 RFC 5118 messages");
    files
}

/// Call-ID and CSeq method of a corpus message, to tell its responses from retransmissions of
/// earlier ones (several RFC 5118 messages share a Call-ID). Parsed leniently: baddn has no
/// blank line after its headers.
fn txn_key(data: &[u8]) -> (Option<String>, Option<String>) {
    let m = Msg::parse(data).or_else(|| Msg::parse(&[data, b"\r\n\r\n"].concat()));
    let m = m.as_ref();
    (
        m.and_then(|m| m.header("call-id")).map(str::to_string),
        m.and_then(|m| m.cseq_method()).map(str::to_string),
    )
}

/// Where responses can arrive: a UAS answers to the source address (rport/symmetric) or to the
/// top Via's sent-by port at the received address (RFC 3261 §18.2.2). We send from 5060 (the
/// default sent-by port) and also listen on the few explicit sent-by ports in the corpus.
struct Listeners(Vec<UdpSocket>);

impl Listeners {
    fn new(sip_port: u16) -> Listeners {
        let socks = [5060u16, 5050, 5070, 6050, 19823]
            .into_iter()
            .filter(|&p| p != sip_port)
            .map(|p| {
                let s = UdpSocket::bind(("127.0.0.1", p)).expect("bind a corpus sent-by port");
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        Listeners(socks)
    }

    /// Statuses of the responses with this Call-ID and CSeq method arriving within `quiet` of the last one (longer
    /// after a provisional), at most 3 s.
    fn collect(&self, key: &(Option<String>, Option<String>), quiet: Duration) -> Vec<u16> {
        let start = Instant::now();
        let mut deadline = start + quiet;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while Instant::now() < deadline && start.elapsed() < Duration::from_secs(3) {
            let mut any = false;
            for s in &self.0 {
                while let Ok((n, _)) = s.recv_from(&mut buf) {
                    any = true;
                    let Some(m) = Msg::parse(&buf[..n]) else {
                        continue;
                    };
                    let same = m.header("call-id") == key.0.as_deref()
                        && m.cseq_method() == key.1.as_deref();
                    let (Some(st), true) = (m.status(), same) else {
                        continue;
                    };
                    got.push(st);
                    deadline = Instant::now()
                        + if st < 200 {
                            Duration::from_secs(2)
                        } else {
                            quiet
                        };
                }
            }
            if !any {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        got
    }
}

fn verdict(want: &Want, got: &[u16]) -> bool {
    let finals: Vec<u16> = got.iter().copied().filter(|&s| s >= 200).collect();
    let first = finals.first().copied();
    match want {
        Want::Status(ok) => first.is_some_and(|f| ok.contains(&f)),
        Want::Nothing => got.is_empty(),
        Want::FinalBelow(max) => first.is_some_and(|f| f < *max),
        Want::Anything => !got.is_empty(),
    }
}

#[test]
#[ignore = "runs only inside the private network namespace set up by torture_corpus_in_private_netns"]
fn corpus_inside_netns() {
    // Refuse to send the corpus anywhere but an isolated namespace: only `lo` may exist.
    assert_eq!(
        std::env::var(NETNS_ENV).as_deref(),
        Ok("1"),
        "run via torture_corpus_in_private_netns"
    );
    let devs = std::fs::read_to_string("/proc/self/net/dev").unwrap();
    let ifaces: Vec<&str> = devs
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "not an isolated network namespace");

    let mut s = Strowger::start("torture");
    let listeners = Listeners::new(s.sip.port());
    let sender = &listeners.0[0];
    let mut table = BTreeMap::new();
    let mut wrong = Vec::new();
    println!("message\texpected\tgot\tverdict");
    for (name, path) in corpus() {
        let data = std::fs::read(&path).unwrap();
        let key = txn_key(&data);
        sender.send_to(&data, s.sip).unwrap();
        let got = listeners.collect(&key, Duration::from_millis(300));
        let want = expectation(&name);
        let ok = verdict(&want, &got);
        println!(
            "{name}\t{want:?}\t{got:?}\t{}",
            if ok { "ok" } else { "WRONG" }
        );
        if !ok {
            wrong.push(format!("{name}: want {want:?}, got {got:?}"));
        }
        table.insert(name, got);
        s.assert_alive();
    }

    // Still a working switch: three normal calls to the demo.
    Sipp::new(Scenario::Builtin("uac"))
        .service("44444")
        .calls(3, 3, 3)
        .duration_ms(1000)
        .run(s.sip, s.dir.path())
        .assert_ok(3);
    s.assert_alive();
    let st = s.stop();
    assert!(
        wrong.is_empty(),
        "{} corpus responses differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(st.success(), "strowger exit status after SIGTERM: {st}");
}
