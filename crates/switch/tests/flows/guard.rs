//! The flood and brute-force defence on the simulated network (tests/net), with virtual time:
//! a source guessing passwords is banned after `security.max_auth_failures` and then gets no
//! answer at all, on every worker, while another source still registers; a flood past the
//! request rate is banned; a scanner's User-Agent gets no answer.

use crate::net;

use net::*;
use sip::auth::{Authorization, Challenge};
use sip::{HeaderName, Message};
use std::net::SocketAddr;

/// A two-worker switch on `SW` with user 1001 (password "right"), nobody whitelisted.
fn guarded(n: &mut Net, security: &str) -> Id {
    let toml = config(&format!(
        "[registrar]\nkeepalive_s = 0\n[security]\nwhitelist = []\n{security}\n"
    ));
    let sw = n.switch(&toml, &[SW], 2);
    n.sw(sw).shared.store.add_user("1001", "strowger", "right");
    sw
}

/// A hand-driven phone: sends a request to the switch and reads what came back to it.
struct Client {
    addr: SocketAddr,
    n: u32,
}

impl Client {
    fn new(addr: &str) -> Client {
        Client {
            addr: addr.parse().unwrap(),
            n: 0,
        }
    }

    fn register_text(&mut self, user: &str, auth: Option<&str>, ua: &str) -> String {
        self.n += 1;
        let (me, n) = (self.addr, self.n);
        let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        format!(
            "REGISTER sip:strowger SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-g{n};rport\r\n\
             Max-Forwards: 70\r\nFrom: <sip:{user}@strowger>;tag=t{n}\r\nTo: <sip:{user}@strowger>\r\n\
             Call-ID: guard-{n}@{me}\r\nCSeq: {n} REGISTER\r\nContact: <sip:{user}@{me}>\r\n\
             User-Agent: {ua}\r\nExpires: 600\r\n{auth}Content-Length: 0\r\n\r\n"
        )
    }

    /// Sends `text` and returns the responses that came back at once (the local store answers
    /// without delay).
    fn ask(&self, n: &mut Net, sw: Id, text: &str) -> Vec<Message> {
        let now = n.now;
        let to = addr(SW);
        let s = n.sw(sw);
        s.deliver(Packet::sip(self.addr, to, text.as_bytes().to_vec()), now);
        s.drain()
            .into_iter()
            .filter(|p| p.to == self.addr)
            .filter_map(|p| Message::parse(&p.bytes, true).ok())
            .collect()
    }

    /// A REGISTER answered 401, then again with `password`: the final status, or None when a
    /// request went unanswered.
    fn register(&mut self, n: &mut Net, sw: Id, user: &str, password: &str) -> Option<u16> {
        self.register_as(n, sw, user, password, "test-phone/1.0")
    }

    fn register_as(
        &mut self,
        n: &mut Net,
        sw: Id,
        user: &str,
        password: &str,
        ua: &str,
    ) -> Option<u16> {
        let text = self.register_text(user, None, ua);
        let first = self.ask(n, sw, &text);
        let r = first.first()?;
        assert_eq!(r.status(), Some(401), "{r:?}");
        let c = Challenge::parse(r.header(HeaderName::WwwAuthenticate).unwrap()).unwrap();
        let auth = Authorization::build(&c, user, password, "REGISTER", "sip:strowger", 1, "cn");
        let text = self.register_text(user, Some(&auth), ua);
        n.run_for(ms(20));
        self.ask(n, sw, &text).first().and_then(Message::status)
    }

    /// An OPTIONS: whether it was answered.
    fn options(&mut self, n: &mut Net, sw: Id, ua: &str) -> bool {
        self.n += 1;
        let (me, k) = (self.addr, self.n);
        let text = format!(
            "OPTIONS sip:1001@strowger SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-o{k}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:x@{me}>;tag=o{k}\r\nTo: <sip:1001@strowger>\r\n\
             Call-ID: opt-{k}@{me}\r\nCSeq: 1 OPTIONS\r\nUser-Agent: {ua}\r\n\
             Content-Length: 0\r\n\r\n"
        );
        !self.ask(n, sw, &text).is_empty()
    }
}

fn security_lines(n: &mut Net, sw: Id) -> Vec<String> {
    n.sw(sw)
        .logs()
        .into_iter()
        .filter(|l| l.starts_with("security: "))
        .collect()
}

#[test]
fn a_password_guesser_is_banned_after_five_failures_and_another_source_still_registers() {
    let mut n = Net::new(1);
    let sw = guarded(
        &mut n,
        "max_auth_failures = 5\nauth_window_s = 600\nban_s = 600",
    );
    let mut attacker = Client::new("127.0.0.66:5070");
    let mut statuses = Vec::new();
    for guess in 0..300 {
        let st = attacker.register(&mut n, sw, "1001", &format!("wrong-{guess}"));
        statuses.push(st);
        if st.is_none() {
            break;
        }
    }
    assert_eq!(
        statuses,
        [Some(403), Some(403), Some(403), Some(403), Some(403), None],
        "five wrong passwords answered 403, then nothing"
    );
    // Banned on both workers: the right password gets no answer either, nor does an OPTIONS
    // (the kernel may hand the source to either worker).
    assert_eq!(attacker.register(&mut n, sw, "1001", "right"), None);
    assert!(!attacker.options(&mut n, sw, "test-phone/1.0"));
    for w in 0..2 {
        let from = addr("127.0.0.66:5071");
        let now = n.now;
        let s = n.sw(sw);
        let opt = format!(
            "OPTIONS sip:x@strowger SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-w{w}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:x@{from}>;tag=w\r\nTo: <sip:x@strowger>\r\n\
             Call-ID: w{w}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        s.workers[w].deliver_sip(opt.as_bytes(), from, addr(SW), false, now);
        assert!(
            s.workers[w].drain().is_empty(),
            "worker {w} answered a banned source"
        );
    }
    // Another source registers normally.
    let mut phone = Client::new("127.0.0.2:5060");
    assert_eq!(phone.register(&mut n, sw, "1001", "right"), Some(200));
    let lines = security_lines(&mut n, sw);
    let failed: Vec<&String> = lines.iter().filter(|l| l.contains("auth_failed")).collect();
    assert_eq!(failed.len(), 5, "{lines:#?}");
    assert!(failed
        .iter()
        .all(|l| l.contains("source=127.0.0.66 user=\"1001@strowger\"")));
    let banned: Vec<&String> = lines.iter().filter(|l| l.contains("banned")).collect();
    assert_eq!(
        banned,
        ["security: banned source=127.0.0.66 reason=\"authentication failures\" for=600s"],
        "{lines:#?}"
    );
    // After the ban, the source is heard again.
    n.run_for(secs(601));
    assert_eq!(attacker.register(&mut n, sw, "1001", "right"), Some(200));
}

/// A nonce is bound to the address it was sent to: an attacker who got one cannot spend it in a
/// forged datagram from a victim's address to have the victim banned (or logged for fail2ban).
#[test]
fn failures_forged_in_another_sources_name_are_not_counted() {
    let mut n = Net::new(7);
    let sw = guarded(&mut n, "max_auth_failures = 2");
    let mut attacker = Client::new("127.0.0.66:5070");
    let text = attacker.register_text("1001", None, "x");
    let r = attacker.ask(&mut n, sw, &text);
    let ch = Challenge::parse(r[0].header(HeaderName::WwwAuthenticate).unwrap()).unwrap();
    let mut victim = Client::new("127.0.0.2:5060");
    for i in 0..5 {
        let auth =
            Authorization::build(&ch, "1001", "wrong", "REGISTER", "sip:strowger", i + 1, "c");
        let text = victim.register_text("1001", Some(&auth), "x");
        // Sent "from" the victim: a fresh challenge, not a 403.
        let r = victim.ask(&mut n, sw, &text);
        assert_eq!(r[0].status(), Some(401), "{r:?}");
    }
    assert!(
        security_lines(&mut n, sw).is_empty(),
        "{:?}",
        security_lines(&mut n, sw)
    );
    assert_eq!(victim.register(&mut n, sw, "1001", "right"), Some(200));
}

#[test]
fn a_username_that_is_not_the_to_user_counts_as_a_failure() {
    let mut n = Net::new(2);
    let sw = guarded(&mut n, "max_auth_failures = 2");
    let mut c = Client::new("127.0.0.9:5060");
    for round in 0..3 {
        let text = c.register_text("1001", None, "x");
        let r = c.ask(&mut n, sw, &text);
        if round == 2 {
            assert!(r.is_empty(), "banned after two");
            break;
        }
        let ch = Challenge::parse(r[0].header(HeaderName::WwwAuthenticate).unwrap()).unwrap();
        // The digest names 1002 while To names 1001.
        let auth = Authorization::build(&ch, "1002", "x", "REGISTER", "sip:strowger", 1, "c");
        let text = c.register_text("1001", Some(&auth), "x");
        let r = c.ask(&mut n, sw, &text);
        assert_eq!(r[0].status(), Some(403));
    }
    let lines = security_lines(&mut n, sw);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("auth_failed") && l.contains("reason=\"username does not match\"")),
        "{lines:#?}"
    );
}

#[test]
fn a_flood_past_the_request_rate_is_banned_and_calls_from_elsewhere_go_on() {
    let mut n = Net::new(3);
    let sw = guarded(
        &mut n,
        "requests_per_s = 50\nrequest_burst = 100\nban_s = 60",
    );
    let mut flooder = Client::new("127.0.0.77:5060");
    let answered = (0..300)
        .filter(|_| flooder.options(&mut n, sw, "flood/1.0"))
        .count();
    assert_eq!(answered, 100, "the burst, then nothing");
    let lines = security_lines(&mut n, sw);
    assert!(
        lines
            .iter()
            .any(|l| l == "security: banned source=127.0.0.77 reason=\"request rate\" for=60s"),
        "{lines:#?}"
    );
    let mut phone = Client::new("127.0.0.2:5060");
    assert!(phone.options(&mut n, sw, "phone"));
    assert_eq!(phone.register(&mut n, sw, "1001", "right"), Some(200));
}

#[test]
fn scanners_get_no_answer_and_are_logged_once() {
    let mut n = Net::new(4);
    let sw = guarded(&mut n, "");
    let mut scanner = Client::new("127.0.0.88:5060");
    for _ in 0..5 {
        assert!(!scanner.options(&mut n, sw, "friendly-scanner"));
    }
    assert_eq!(
        scanner.register_as(&mut n, sw, "1001", "x", "friendly-scanner"),
        None
    );
    // The same source with another User-Agent is answered (drop does not ban).
    assert!(scanner.options(&mut n, sw, "phone"));
    // Once per worker that saw it (requests go to their Call-ID's worker).
    let lines = security_lines(&mut n, sw);
    assert!(
        (1..=2).contains(&lines.len())
            && lines
                .iter()
                .all(|l| l == "security: scanner source=127.0.0.88 user_agent=\"friendly-scanner\""),
        "{lines:#?}"
    );

    let mut n = Net::new(5);
    let sw = guarded(&mut n, "scanner_action = \"ban\"\nban_s = 60");
    let mut scanner = Client::new("127.0.0.88:5060");
    assert!(!scanner.options(&mut n, sw, "sipcli/v1.8"));
    assert!(!scanner.options(&mut n, sw, "phone"), "banned");
    assert_eq!(
        security_lines(&mut n, sw),
        ["security: banned source=127.0.0.88 reason=\"scanner\" for=60s"]
    );
}

#[test]
fn whitelisted_sources_are_never_banned() {
    let mut n = Net::new(6);
    let toml = config(
        "[registrar]\nkeepalive_s = 0\n[security]\nwhitelist = [\"127.0.0.0/24\"]\nmax_auth_failures = 2\nrequests_per_s = 10\nrequest_burst = 10\n",
    );
    let sw = n.switch(&toml, &[SW], 1);
    n.sw(sw).shared.store.add_user("1001", "strowger", "right");
    let mut c = Client::new("127.0.0.5:5060");
    for guess in 0..20 {
        assert_eq!(
            c.register(&mut n, sw, "1001", &format!("w{guess}")),
            Some(403)
        );
    }
    assert_eq!(c.register(&mut n, sw, "1001", "right"), Some(200));
    let lines = security_lines(&mut n, sw);
    assert_eq!(
        lines.iter().filter(|l| l.contains("auth_failed")).count(),
        20
    );
    assert!(!lines.iter().any(|l| l.contains("banned")), "{lines:#?}");
}
