//! strowger is no relay, checked on the real process: hand-made requests that try to make it send
//! to a third address (127.0.0.9:5099) — the preloaded Route INVITE of the security report, an
//! in-dialog BYE and re-INVITE with a forged Route, a REGISTER with a Path, an 11th contact and
//! 2,000 more — get the right refusals, and a listener on the third address receives nothing.
//!
//! The requests are forged, so the whole check runs inside a fresh network namespace with only
//! loopback: the outer test re-runs this binary's `relay_inside_netns` under `unshare -n`, and
//! that test refuses to run anywhere else (as tests/torture.rs does).

use crate::common;

use common::netns::{assert_isolated, in_private_netns};
use common::sip::Msg;
use common::switch::{config_path, Opts};
use common::{Strowger, TempDir};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const INNER: &str = "relay_inside_netns";
const VICTIM: &str = "127.0.0.9:5099";

#[test]
fn relay_attempts_in_private_netns() {
    in_private_netns(INNER);
}

/// tests/configs/registrar.toml (users 1001 and 1002, digest authentication) proxying
/// `proxy.test` with `proxy.authenticate`.
fn start() -> (Strowger, TempDir) {
    let dir = TempDir::new("relay");
    let store = format!("local:{}", dir.path().join("store.snap").display());
    let text = std::fs::read_to_string(config_path("registrar.toml"))
        .unwrap()
        .replace(
            "store = \"local:strowger-data/store.snap\"",
            &format!("store = \"{store}\""),
        )
        // The attacker is on loopback too: nobody is trusted here.
        .replace("trusted = [\"127.0.0.1\"]", "trusted = []")
        + "\n[proxy]\ndomains = [\"proxy.test\"]\nauthenticate = true\n";
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, text).unwrap();
    let s = Strowger::with(
        "relay",
        Opts {
            config_file: Some(path),
            workers: Some(2),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// A socket that sends hand-made requests and reads what comes back.
struct Client {
    sock: UdpSocket,
    server: SocketAddr,
    n: u32,
}

impl Client {
    fn new(server: SocketAddr) -> Client {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Client { sock, server, n: 0 }
    }

    fn local(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    /// Sends `head` (request line and the headers particular to it, CSeq among them) with Via,
    /// Max-Forwards, Call-ID and Content-Length added; returns its final response (INVITEs'
    /// final responses are never ACKed here: their retransmissions are skipped).
    fn request(&mut self, head: &str, call_id: &str) -> Msg {
        self.n += 1;
        let text = format!(
            "{head}\r\nVia: SIP/2.0/UDP {};branch=z9hG4bK-relay{};rport\r\nMax-Forwards: 70\r\n\
             Call-ID: {call_id}\r\nContent-Length: 0\r\n\r\n",
            self.local(),
            self.n
        );
        self.sock.send_to(text.as_bytes(), self.server).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let mut buf = vec![0u8; 65_536];
        while Instant::now() < until {
            let Ok(n) = self.sock.recv(&mut buf) else {
                continue;
            };
            let ours = |m: &Msg| {
                m.status() >= Some(200)
                    && m.header("call-id") == Some(call_id)
                    && m.header("cseq")
                        .is_some_and(|c| head.contains(&format!("CSeq: {c}")))
            };
            if let Some(m) = Msg::parse(&buf[..n]).filter(ours) {
                return m;
            }
        }
        panic!("no final response to {head}");
    }

    /// A REGISTER of 1001 with `contact` and `extra` headers, answering the challenge.
    fn register(&mut self, call_id: &str, contact: &str, extra: &str) -> Msg {
        let head = |cseq: u32, auth: &str| {
            format!(
                "REGISTER sip:strowger SIP/2.0\r\nFrom: <sip:1001@strowger>;tag=r{cseq}\r\n\
                 To: <sip:1001@strowger>\r\nCSeq: {cseq} REGISTER\r\nContact: {contact}\r\n\
                 Expires: 600\r\n{extra}{auth}"
            )
            .trim_end()
            .to_string()
        };
        let challenge = self.request(&head(1, ""), call_id);
        assert_eq!(challenge.status(), Some(401), "{challenge:?}");
        let c = sip::auth::Challenge::parse(challenge.header("www-authenticate").unwrap()).unwrap();
        let answer = sip::auth::Authorization::build(
            &c,
            "1001",
            "secret-1001",
            "REGISTER",
            "sip:strowger",
            1,
            "relay",
        );
        self.request(&head(2, &format!("Authorization: {answer}\r\n")), call_id)
    }
}

fn assert_refused(m: &Msg, status: u16, warning: &str) {
    assert_eq!(m.status(), Some(status), "{m:?}");
    let w = m.header("warning").unwrap_or("");
    assert!(w.contains(warning), "Warning {w:?} should name {warning}");
}

#[test]
#[ignore = "runs only inside the private network namespace set up by relay_attempts_in_private_netns"]
fn relay_inside_netns() {
    assert_isolated();

    let victim = UdpSocket::bind(VICTIM).unwrap();
    victim.set_nonblocking(true).unwrap();
    let (mut s, _dir) = start();
    let ours = s.sip;
    let mut c = Client::new(ours);
    let me = c.local();

    // The report's INVITE: a number at the third address, routed through strowger to it, by
    // strowger's address or by its name.
    for route in [
        format!("<sip:{ours};lr>, <sip:{VICTIM};lr>"),
        format!("<sip:strowger;lr>, <sip:{VICTIM};lr>"),
    ] {
        let head = format!(
            "INVITE sip:+15551234@{VICTIM} SIP/2.0\r\nRoute: {route}\r\n\
             From: <sip:anon@{me}>;tag=a1\r\nTo: <sip:+15551234@{VICTIM}>\r\nCSeq: 1 INVITE\r\n\
             Contact: <sip:anon@{me}>"
        );
        let r = c.request(&head, &format!("relay-invite-{}@x", c.n));
        assert_refused(&r, 403, "security.trusted");
    }
    // The same dialog's BYE and re-INVITE, with tags and a Route that strowger never signed.
    for method in ["BYE", "INVITE"] {
        let head = format!(
            "{method} sip:+15551234@{VICTIM} SIP/2.0\r\n\
             Route: <sip:{ours};lr;rr=0123456789abcdef01234567>\r\n\
             From: <sip:anon@{me}>;tag=a1\r\nTo: <sip:+15551234@{VICTIM}>;tag=forged\r\n\
             CSeq: 2 {method}\r\nContact: <sip:anon@{me}>"
        );
        let r = c.request(&head, "relay-dialog@x");
        assert_refused(&r, 403, "record-routed");
    }
    // A Path to the third address from a phone, not a trusted edge.
    let r = c.register(
        "relay-path@x",
        &format!("<sip:1001@{me}>"),
        &format!("Path: <sip:{VICTIM};lr>\r\n"),
    );
    assert_refused(&r, 403, "security.trusted");
    // Ten contacts, then the 11th, then 1,990 more in 199 REGISTERs of ten, and one REGISTER of
    // eleven: only the first ten are ever stored.
    let contact = |k: usize| format!("<sip:1001@127.0.0.2:{}>", 10_000 + k);
    let ten: Vec<String> = (0..10).map(contact).collect();
    let r = c.register("relay-ten@x", &ten.join(", "), "");
    assert_eq!(r.status(), Some(200), "{r:?}");
    assert_eq!(r.headers("contact").len(), 10, "{r:?}");
    let r = c.register("relay-eleven@x", &contact(10), "");
    assert_refused(&r, 403, "registrar.max_contacts (10)");
    for batch in 1..200 {
        let more: Vec<String> = (batch * 10..batch * 10 + 10).map(contact).collect();
        let r = c.register(&format!("relay-more-{batch}@x"), &more.join(", "), "");
        assert_refused(&r, 403, "registrar.max_contacts (10)");
    }
    let eleven: Vec<String> = (2000..2011).map(contact).collect();
    let r = c.register("relay-one-eleven@x", &eleven.join(", "), "");
    assert_refused(&r, 403, "11 contacts in one REGISTER");
    let r = c.register("relay-refresh@x", &ten[0], "");
    assert_eq!(r.headers("contact").len(), 10, "{r:?}");
    assert!(
        r.headers("contact")
            .iter()
            .all(|h| ten.iter().any(|t| h.starts_with(t.as_str()))),
        "{r:?}"
    );

    std::thread::sleep(Duration::from_secs(1));
    let mut buf = [0u8; 65_536];
    match victim.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        got => panic!(
            "the third address received {:?}",
            got.map(|(n, from)| (from, String::from_utf8_lossy(&buf[..n]).into_owned()))
        ),
    }
    s.assert_alive();
}
