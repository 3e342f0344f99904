//! The registrar's SIP behaviour against real SIPp phones (tests/configs/registrar.toml with
//! settings added per test, local store): digest (stale nonces and replays on every store
//! backend, SHA-256), 423, several contacts with q-values, removal, RFC 5626 instance ids, Path
//! (RFC 3327) and phones behind NAT (received/rport, keep-alives).

use crate::common;

use common::net::free_port;
use common::servers::Server;
use common::sip::{coreutils_hash, param, sdp, uri_of, Msg, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::{config_path, Opts};
use common::{Strowger, TempDir};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// tests/configs/registrar.toml on `store` (None: a local store in `dir`), with `registrar`
/// lines added to its [registrar] table.
fn config(dir: &Path, store: Option<&str>, registrar: &str) -> PathBuf {
    let store = store.map_or_else(
        || format!("local:{}", dir.join("store.snap").display()),
        str::to_string,
    );
    let text = std::fs::read_to_string(config_path("registrar.toml"))
        .unwrap()
        .replace(
            "store = \"local:strowger-data/store.snap\"",
            &format!("store = \"{store}\"\n{registrar}"),
        );
    let path = dir.join("registrar.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(label: &str, registrar: &str) -> (Strowger, TempDir) {
    start_on(label, None, registrar)
}

fn start_on(label: &str, store: Option<&str>, registrar: &str) -> (Strowger, TempDir) {
    let dir = TempDir::new(label);
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(config(dir.path(), store, registrar)),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// tests/sipp/register_with.xml as 1001 (password secret-1001) from `port`.
fn register_with(s: &Strowger, port: u16, contact: &str, expires: u32, extra: &str) -> SippResult {
    Sipp::new(Scenario::File("register_with.xml"))
        .service("1001")
        .port(port)
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .args(&["-key", "contact", contact])
        .args(&["-key", "expires", &expires.to_string()])
        .args(&["-key", "extra", extra])
        .run(s.sip, s.dir.path())
}

/// The final response to the authenticated REGISTER (CSeq 2) of a run.
fn final_of(r: &SippResult) -> Msg {
    let f: Vec<Msg> = r
        .received()
        .into_iter()
        .filter(|m| m.status().is_some_and(|s| s >= 200))
        .filter(|m| m.header("cseq").is_some_and(|c| c.starts_with("2 ")))
        .collect();
    assert_eq!(f.len(), 1, "one final response\n{}", r.evidence());
    f[0].clone()
}

/// The contacts of a 200, as (URI, parameters after the URI).
fn contacts(m: &Msg) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = m
        .headers("contact")
        .iter()
        .flat_map(|v| v.split(", <"))
        .map(|c| {
            let c = format!("<{}", c.trim_start_matches('<'));
            let params = c.split_once('>').map_or("", |(_, p)| p);
            (uri_of(&c), round_expires(params))
        })
        .collect();
    v.sort();
    v
}

/// `expires=N` with N a few seconds under 600 (time passed since the REGISTER) as 600.
fn round_expires(params: &str) -> String {
    params
        .split(';')
        .map(|p| {
            match p
                .strip_prefix("expires=")
                .and_then(|n| n.parse::<u32>().ok())
            {
                Some(n) if (590..600).contains(&n) => "expires=600".to_string(),
                _ => p.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

fn status_and_contacts(r: &SippResult) -> (u16, Vec<(String, String)>) {
    let f = final_of(r);
    (f.status().unwrap(), contacts(&f))
}

const NO_EXTRA: &str = "Subject: registrar test";

/// The Authorization value answering `challenge` as 1001 (password secret-1001), digests by
/// coreutils `tool` (md5sum / sha256sum) named `alg`, nonce-count `nc`.
fn answer(challenge: &str, tool: &str, alg: &str, nc: &str) -> String {
    let (realm, nonce) = (
        param(challenge, "realm").unwrap(),
        param(challenge, "nonce").unwrap(),
    );
    let h = |d: &str| coreutils_hash(tool, d);
    let uri = "sip:strowger";
    let ha1 = h(&format!("1001:{realm}:secret-1001"));
    let ha2 = h(&format!("REGISTER:{uri}"));
    let response = h(&format!("{ha1}:{nonce}:{nc}:c0ffee:auth:{ha2}"));
    format!(
        "Digest username=\"1001\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", \
         response=\"{response}\", algorithm={alg}, qop=auth, nc={nc}, cnonce=\"c0ffee\""
    )
}

/// A REGISTER for 1001 sent from `sock`, with an Authorization header line if given.
fn send_register(sock: &UdpSocket, s: &Strowger, cseq: u32, auth: Option<&str>) {
    let local = sock.local_addr().unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let msg = format!(
        "REGISTER sip:strowger SIP/2.0\r\n\
         Via: SIP/2.0/UDP {local};branch=z9hG4bK-t{cseq}-{}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:1001@strowger>;tag=t1\r\n\
         To: <sip:1001@strowger>\r\n\
         Call-ID: sha256-{}@test\r\n\
         CSeq: {cseq} REGISTER\r\n\
         Contact: <sip:1001@{local}>\r\n\
         {auth}Expires: 600\r\n\
         Content-Length: 0\r\n\r\n",
        local.port(),
        local.port()
    );
    sock.send_to(msg.as_bytes(), s.sip).unwrap();
}

fn recv(sock: &UdpSocket) -> Msg {
    let mut buf = [0u8; 65536];
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (n, _) = sock.recv_from(&mut buf).expect("a response from strowger");
    Msg::parse(&buf[..n]).unwrap()
}

/// A nonce used after `nonce_lifetime_s` gets 401 stale=true and the retry succeeds (SIPp
/// checks both, tests/sipp/register_stale.xml); a REGISTER replayed byte for byte with the
/// same nonce and nonce-count is challenged again, never 200; MD5 and SHA-256 are offered in
/// the configured order. On `store` (None: local); the credentials come from it.
fn stale_nonce_and_replay(label: &str, store: Option<&str>) {
    let (s, _dir) = start_on(
        label,
        store,
        "nonce_lifetime_s = 2\nalgorithms = [\"MD5\", \"SHA-256\"]",
    );
    let port = free_port();
    Sipp::new(Scenario::File("register_stale.xml"))
        .service("1001")
        .port(port)
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .run(s.sip, s.dir.path())
        .assert_ok(1);

    let r = Sipp::new(Scenario::File("register.xml"))
        .service("1001")
        .port(free_port())
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .run(s.sip, s.dir.path());
    r.assert_ok(1);
    let challenge = &r.received()[0];
    let algs: Vec<Option<&str>> = challenge
        .headers("www-authenticate")
        .iter()
        .map(|c| {
            c.split("algorithm=")
                .nth(1)
                .map(|a| a.split(',').next().unwrap())
        })
        .collect();
    assert_eq!(algs, [Some("MD5"), Some("SHA-256")], "{challenge:?}");

    // The authenticated REGISTER SIPp sent, replayed as a new request (new branch and CSeq):
    // same nonce, same nc, same response.
    let sent = r.sent();
    let authed = sent
        .iter()
        .find(|m| m.contains("Authorization:"))
        .expect("SIPp sent credentials");
    let head = authed.split("\r\n\r\n").next().unwrap();
    let replay: String = head
        .lines()
        .map(|l| {
            if l.starts_with("Via:") {
                l.replace("branch=", "branch=z9hG4bK-replay")
            } else if l.starts_with("CSeq:") {
                "CSeq: 3 REGISTER".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
        + "\r\n\r\n";
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.send_to(replay.as_bytes(), s.sip).unwrap();
    let answer = recv(&sock);
    assert_eq!(
        answer.status(),
        Some(401),
        "a replay is refused: {answer:?}"
    );
    assert!(
        answer
            .headers("www-authenticate")
            .iter()
            .all(|c| c.contains("stale=true")),
        "a used nonce-count is answered stale=true: {answer:?}"
    );
}

#[test]
fn stale_nonce_and_replayed_nonce_count() {
    stale_nonce_and_replay("reg-digest", None);
}

#[test]
fn stale_nonce_and_replayed_nonce_count_redis() {
    let redis = Server::redis();
    stale_nonce_and_replay("reg-digest-redis", Some(&redis.url));
}

#[test]
fn stale_nonce_and_replayed_nonce_count_memcached() {
    let mc = Server::memcached();
    stale_nonce_and_replay("reg-digest-memcached", Some(&mc.url));
}

/// With `algorithms = ["SHA-256"]` the challenge offers SHA-256 alone; a response computed
/// with SHA-256 (RFC 8760, by sha256sum) registers, one computed with MD5 is challenged again.
#[test]
fn sha256_only_when_configured() {
    let (s, _dir) = start("reg-sha256", "algorithms = [\"SHA-256\"]");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    send_register(&sock, &s, 1, None);
    let r401 = recv(&sock);
    assert_eq!(r401.status(), Some(401), "{r401:?}");
    let challenges = r401.headers("www-authenticate");
    assert_eq!(challenges.len(), 1, "{r401:?}");
    let c = challenges[0];
    assert!(c.contains("algorithm=SHA-256"), "{c}");
    let authorization = |tool: &str, alg: &str, nc: &str| answer(c, tool, alg, nc);
    send_register(
        &sock,
        &s,
        2,
        Some(&authorization("md5sum", "MD5", "00000001")),
    );
    let md5 = recv(&sock);
    assert_eq!(md5.status(), Some(401), "MD5 is not offered: {md5:?}");
    send_register(
        &sock,
        &s,
        3,
        Some(&authorization("sha256sum", "SHA-256", "00000002")),
    );
    let ok = recv(&sock);
    assert_eq!(ok.status(), Some(200), "SHA-256 digest accepted: {ok:?}");
}

/// A REGISTER without credentials is challenged statelessly: its retransmission (same branch)
/// gets a challenge of its own with a fresh nonce, and an answer to either registers.
#[test]
fn a_retransmitted_register_gets_a_fresh_challenge_and_either_nonce_registers() {
    let (s, _dir) = start("reg-stateless-401", "");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    send_register(&sock, &s, 1, None);
    let first = recv(&sock);
    send_register(&sock, &s, 1, None);
    let again = recv(&sock);
    let challenge = |m: &Msg| {
        assert_eq!(m.status(), Some(401), "{m:?}");
        m.headers("www-authenticate")[0].to_string()
    };
    let (c1, c2) = (challenge(&first), challenge(&again));
    assert_ne!(param(&c1, "nonce"), param(&c2, "nonce"), "{c1} / {c2}");
    send_register(
        &sock,
        &s,
        2,
        Some(&answer(&c2, "md5sum", "MD5", "00000001")),
    );
    let ok = recv(&sock);
    assert_eq!(ok.status(), Some(200), "the second nonce registers: {ok:?}");
    send_register(
        &sock,
        &s,
        3,
        Some(&answer(&c1, "md5sum", "MD5", "00000001")),
    );
    let ok = recv(&sock);
    assert_eq!(ok.status(), Some(200), "and so does the first: {ok:?}");
}

/// 423 with Min-Expires; two contacts with q-values in one REGISTER; one removed with
/// `;expires=0`; an RFC 5626 instance replaces its old contact and is listed with its reg-id;
/// `Contact: *` with Expires: 0 removes them all.
#[test]
fn bindings_q_values_removal_and_instances() {
    let (s, _dir) = start("reg-bindings", "");
    let port = free_port();
    let c = |p: u16| format!("sip:1001@127.0.0.1:{p}");
    let (a, b) = (free_port(), free_port());

    let r = register_with(&s, port, &format!("<{}>", c(port)), 10, NO_EXTRA);
    let f = final_of(&r);
    assert_eq!(f.status(), Some(423), "{f:?}");
    assert_eq!(f.header("min-expires"), Some("60"), "{f:?}");

    let r = register_with(
        &s,
        port,
        &format!("<{}>;q=0.5, <{}>;q=0.9", c(a), c(b)),
        600,
        NO_EXTRA,
    );
    let (status, got) = status_and_contacts(&r);
    assert_eq!(status, 200, "{}", r.evidence());
    assert_eq!(
        got,
        sorted(vec![
            (c(a), ";expires=600;q=0.5".into()),
            (c(b), ";expires=600;q=0.9".into())
        ]),
        "{}",
        r.evidence()
    );

    let r = register_with(&s, port, &format!("<{}>;expires=0", c(a)), 600, NO_EXTRA);
    let (status, got) = status_and_contacts(&r);
    assert_eq!(
        (status, got),
        (200, vec![(c(b), ";expires=600;q=0.9".into())])
    );

    let instance = "\"<urn:uuid:00000000-0000-1000-8000-000A95A0E128>\"";
    let (x, y) = (free_port(), free_port());
    for p in [x, y] {
        let r = register_with(
            &s,
            port,
            &format!("<{}>;+sip.instance={instance};reg-id=1", c(p)),
            600,
            NO_EXTRA,
        );
        let (status, got) = status_and_contacts(&r);
        assert_eq!(status, 200, "{}", r.evidence());
        assert_eq!(
            got,
            sorted(vec![
                (c(b), ";expires=600;q=0.9".into()),
                (
                    c(p),
                    format!(";expires=600;+sip.instance={instance};reg-id=1")
                ),
            ]),
            "the instance's new contact replaces its old one\n{}",
            r.evidence()
        );
    }

    let r = register_with(&s, port, "*", 0, NO_EXTRA);
    let (status, got) = status_and_contacts(&r);
    assert_eq!((status, got), (200, vec![]), "{}", r.evidence());
    let r = register_with(&s, port, "*", 600, NO_EXTRA);
    assert_eq!(final_of(&r).status(), Some(400), "* needs Expires: 0");
}

/// A REGISTER that came through an edge proxy (Path, RFC 3327; the edge in `security.trusted`):
/// a call to the user is sent to the Path's address with the Path as its Route, and the
/// Request-URI is the contact.
#[test]
fn path_is_the_route_to_the_contact() {
    // tests/configs/registrar.toml trusts 127.0.0.1, where the edge is.
    let (s, _dir) = start("reg-path", "");
    let (edge, unreachable) = (free_port(), free_port());
    let contact = format!("sip:1001@127.0.0.1:{unreachable}");
    let path = format!("<sip:127.0.0.1:{edge};lr>");
    let r = register_with(
        &s,
        free_port(),
        &format!("<{contact}>"),
        600,
        &format!("Path: {path}"),
    );
    assert_eq!(final_of(&r).status(), Some(200), "{}", r.evidence());

    let r = call_answered_on(&s, edge, "1001");
    let invite = r
        .received()
        .into_iter()
        .find(|m| m.method() == Some("INVITE"))
        .unwrap();
    assert_eq!(invite.start, format!("INVITE {contact} SIP/2.0"));
    assert_eq!(invite.headers("route"), [path.as_str()], "{invite:?}");
}

/// A phone behind NAT: its Contact names a private address (here a port nothing listens on)
/// while its REGISTER comes from another. The 200's Via carries received/rport, a call to the
/// user goes to the address the REGISTER came from, and that address gets OPTIONS keep-alives
/// every `keepalive_s` seconds.
#[test]
fn nat_contact_is_reached_at_its_source_and_kept_alive() {
    let (s, _dir) = start("reg-nat", "keepalive_s = 4");
    let (source, private) = (free_port(), free_port());
    let contact = format!("sip:1001@127.0.0.1:{private}");
    let r = register_with(&s, source, &format!("<{contact}>"), 600, NO_EXTRA);
    let ok = final_of(&r);
    assert_eq!(ok.status(), Some(200), "{}", r.evidence());
    let via = ok.header("via").unwrap();
    assert!(
        via.contains(&format!("rport={source}")) && via.contains("received=127.0.0.1"),
        "{via}"
    );

    call_answered_on(&s, source, "1001");

    let ping = Sipp::new(Scenario::File("uas_options.xml"))
        .port(source)
        .spawn(None, s.dir.path())
        .finish();
    ping.assert_ok(1);
    let options = &ping.received()[0];
    assert_eq!(options.start, format!("OPTIONS {contact} SIP/2.0"));
}

/// `bridge user/USER@DOMAIN` in the dialplan: 81001 rings 1001@strowger where it registered;
/// 91001 asks for 1001@elsewhere.invalid, a user that does not exist: 404.
#[test]
fn dialplan_user_at_domain() {
    let (s, _dir) = start("reg-aor", "");
    let port = free_port();
    let r = register_with(
        &s,
        port,
        &format!("<sip:1001@127.0.0.1:{port}>"),
        600,
        NO_EXTRA,
    );
    assert_eq!(final_of(&r).status(), Some(200), "{}", r.evidence());
    call_answered_on(&s, port, "81001");
    let cdrs = s.wait_cdrs(1);
    assert_eq!(
        cdrs[0].str("bridged_to"),
        format!("sip:1001@127.0.0.1:{port}"),
        "{cdrs:?}"
    );

    let rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, "91001");
    let status = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv")).status();
    assert_eq!(status, Some(404), "no such user in that domain");
}

/// One call to `service` through strowger, answered by a SIPp UAS on `port` (where the user
/// registered); both ends must complete it. Returns what the UAS saw.
fn call_answered_on(s: &Strowger, port: u16, service: &str) -> SippResult {
    let uas = Sipp::new(Scenario::Builtin("uas"))
        .port(port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300));
    Sipp::new(Scenario::Builtin("uac"))
        .service(service)
        .duration_ms(300)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let r = uas.finish();
    r.assert_ok(1);
    r
}
