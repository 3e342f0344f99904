//! The RFC 4475 / RFC 5118 torture corpus (../shared/conformance/sip-torture), one UDP datagram
//! per message, then three normal calls: strowger must answer as the table below says and stay up.
//!
//! The corpus names hosts in 192.0.2.0/24 (this machine's real network), example.com and
//! 255.255.255.255, and a UAS may send responses to Via/Contact addresses. So the whole check
//! runs inside a fresh network namespace with only loopback: the outer test re-runs this test
//! binary's `corpus_inside_netns` under `unshare -n`, and that test refuses to run anywhere else.

use crate::common;

use common::netns::{assert_isolated, in_private_netns};
use common::sip::Msg;
use common::sipp::{Scenario, Sipp};
use common::{shared_dir, Strowger};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const INNER: &str = "corpus_inside_netns";

#[test]
fn torture_corpus_in_private_netns() {
    in_private_netns(INNER);
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

/// What identifies a message's transaction and its responses. Several corpus messages share a
/// Call-ID (RFC 5118), and a few repeat an earlier message's branch, sent-by and method, which
/// RFC 3261 §17.2.3 makes a retransmission of that earlier request: answering it with the
/// earlier transaction's response is then correct.
#[derive(Clone, Debug, Default, PartialEq)]
struct Key {
    call_id: Option<String>,
    cseq_method: Option<String>,
    /// (branch, sent-by, request method) of the top Via, when the branch is RFC 3261 style.
    txn: Option<(String, String, String)>,
}

/// The top Via's branch and sent-by.
fn top_via(m: &Msg) -> Option<(String, String)> {
    let via = m.header("via")?.split(',').next()?;
    let mut parts = via.split(';');
    let sent_by = parts.next()?.split_whitespace().last()?.to_string();
    let branch = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("branch")
            .then(|| v.trim().to_string())
    })?;
    Some((branch, sent_by))
}

impl Key {
    /// Parsed leniently: baddn has no blank line after its headers.
    fn of_request(data: &[u8]) -> Key {
        let m = Msg::parse(data).or_else(|| Msg::parse(&[data, b"\r\n\r\n"].concat()));
        let Some(m) = m else { return Key::default() };
        let txn = top_via(&m)
            .filter(|(b, _)| b.len() > 7 && b.starts_with("z9hG4bK"))
            .zip(m.method())
            .map(|((b, s), meth)| (b, s, meth.to_string()));
        Key {
            call_id: m.header("call-id").map(str::to_string),
            cseq_method: m.cseq_method().map(str::to_string),
            txn,
        }
    }

    /// A response to this request.
    fn answers(&self, r: &Msg) -> bool {
        r.header("call-id") == self.call_id.as_deref()
            && r.cseq_method() == self.cseq_method.as_deref()
    }

    /// A response of the earlier transaction this request retransmits.
    fn same_txn(&self, earlier: &Key, r: &Msg) -> bool {
        self.txn.is_some() && self.txn == earlier.txn && earlier.answers(r)
    }
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

    /// Every response arriving until `quiet` passes without one (2 s after a provisional),
    /// at most 3 s.
    fn collect(&self, quiet: Duration) -> Vec<Msg> {
        let start = Instant::now();
        let mut deadline = start + quiet;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while Instant::now() < deadline && start.elapsed() < Duration::from_secs(3) {
            let mut any = false;
            for s in &self.0 {
                while let Ok((n, _)) = s.recv_from(&mut buf) {
                    any = true;
                    let Some(st) = Msg::parse(&buf[..n]).filter(|m| m.status().is_some()) else {
                        continue;
                    };
                    let wait = if st.status() < Some(200) {
                        2000
                    } else {
                        quiet.as_millis() as u64
                    };
                    deadline = Instant::now() + Duration::from_millis(wait);
                    got.push(st);
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
    let first = got.iter().copied().find(|&s| s >= 200);
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
    assert_isolated();

    let mut s = Strowger::start("torture");
    let listeners = Listeners::new(s.sip.port());
    let sender = &listeners.0[0];
    let mut wrong = Vec::new();
    let mut sent: Vec<(String, Key)> = Vec::new();
    println!("message\texpected\tgot\tverdict\tnote");
    for (name, path) in corpus() {
        let data = std::fs::read(&path).unwrap();
        let key = Key::of_request(&data);
        sender.send_to(&data, s.sip).unwrap();
        let responses = listeners.collect(Duration::from_millis(300));
        let mut got: Vec<u16> = responses
            .iter()
            .filter(|r| key.answers(r))
            .filter_map(Msg::status)
            .collect();
        let mut note = String::new();
        if got.is_empty() {
            // Absorbed as a retransmission of an earlier message's transaction?
            if let Some((earlier, k)) = sent
                .iter()
                .find(|(_, k)| responses.iter().any(|r| key.same_txn(k, r)))
            {
                got = responses
                    .iter()
                    .filter(|r| key.same_txn(k, r))
                    .filter_map(Msg::status)
                    .collect();
                note =
                    format!("same branch/sent-by/method as {earlier}: its response retransmitted");
            }
        }
        let want = expectation(&name);
        let ok = verdict(&want, &got);
        println!(
            "{name}\t{want:?}\t{got:?}\t{}\t{note}",
            if ok { "ok" } else { "WRONG" }
        );
        if !ok {
            wrong.push(format!("{name}: want {want:?}, got {got:?}"));
        }
        sent.push((name, key));
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
    assert!(st.success(), "strowger exit status after SIGINT: {st}");
}
