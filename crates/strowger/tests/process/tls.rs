//! SIP over TLS (RFC 3261 §26): baresip registers over TLS (trusting the self-signed
//! certificate strowger generated on its first start) and hears its echo; strowger calls
//! another strowger through a trunk with `transport = "tls"`, trusting its certificate through
//! `sip.tls_ca`, and fails with 503 when it trusts another one; a client that stops half way
//! through its handshake is cut after `sip.tls_handshake_s` while a call goes on; connections
//! past `security.tcp_max_per_source` are refused. (Debian's SIPp is built without TLS, so
//! baresip and strowger itself are the TLS peers.)

use crate::common;
use crate::softphone::{assert_heard, speech_wav};

use common::audio::{dominant_freq, read_wav, tone, ulaw_decode_all, ulaw_encode};
use common::baresip::{account, Baresip};
use common::sip::{call, sdp, Rtp, Uac, PCMU};
use common::switch::{assert_answered_cdrs, run_cli, Opts};
use common::{wait_for, Strowger, TempDir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

const DEFAULT: &str = include_str!("../../../switch/src/default.toml");

/// The embedded configuration with each `(from, to)` replaced (each must occur once) and
/// `extra` appended, written to `dir/name`.
pub(crate) fn config(dir: &Path, name: &str, edits: &[(&str, &str)], extra: &str) -> PathBuf {
    let mut text = DEFAULT.to_string();
    for (from, to) in edits {
        assert_eq!(text.matches(from).count(), 1, "{from:?} in default.toml");
        text = text.replace(from, to);
    }
    text.push_str(extra);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The certificate strowger generated into its data directory on first start.
pub(crate) fn self_signed(s: &Strowger) -> PathBuf {
    let cert = s.data_dir().join("tls/cert.pem");
    assert!(cert.exists(), "no {}:\n{}", cert.display(), s.stderr());
    assert!(
        s.stderr().contains("generated a self-signed certificate"),
        "{}",
        s.stderr()
    );
    cert
}

/// A strowger with a TLS listener and `users` added to its store: its files, itself, its TLS
/// address and the self-signed certificate it made (a phone's CA).
fn with_users(label: &str, users: &[(&str, &str)]) -> (TempDir, Strowger, SocketAddr, PathBuf) {
    with_users_config(label, users, None)
}

/// [`with_users`] with a configuration file instead of the embedded one.
pub(crate) fn with_users_config(
    label: &str,
    users: &[(&str, &str)],
    config_file: Option<PathBuf>,
) -> (TempDir, Strowger, SocketAddr, PathBuf) {
    let dir = TempDir::new(label);
    let home = dir.subdir("home");
    for (user, password) in users {
        let out = run_cli(&["user", "add", user, "--password", password], &home);
        assert!(out.status.success(), "strowger user add {user}: {out:?}");
    }
    let s = Strowger::with(
        label,
        Opts {
            cwd: Some(home),
            tls: true,
            config_file,
            ..Opts::default()
        },
    );
    let tls = s.tls.unwrap();
    let ca = self_signed(&s);
    (dir, s, tls, ca)
}

/// baresip registers as 1001 over TLS only (its account names the TLS port, where nothing
/// but TLS listens), with strowger's self-signed certificate as its CA, then calls 9196 over
/// that connection and hears its own speech back.
#[test]
fn baresip_registers_over_tls_and_hears_its_echo() {
    let (dir, s, tls, ca) = with_users("tls-baresip", &[("1001", "pw-tls-1001")]);
    let speech = speech_wav(dir.path());
    let phone = Baresip::spawn_with(
        "127.0.0.1",
        dir.path(),
        "1001",
        &format!(
            "<sip:1001@{tls};transport=tls>;auth_pass=pw-tls-1001;regint=600;audio_codecs=PCMU"
        ),
        &speech,
        &[],
        10,
        &format!("sip_cafile {}", ca.display()),
    );
    phone.wait_registered("1001 over TLS");
    phone.command(&format!("/dial sip:9196@{tls};transport=tls"));
    let heard = phone.finish("1001 calling 9196 over TLS");
    assert_heard(
        &heard,
        &read_wav(&speech).samples,
        "its speech (echo over TLS)",
    );
    let cdrs = s.wait_cdrs(1);
    assert_answered_cdrs(&cdrs, 1, "9196");
    assert!(cdrs[0].str("to").contains("transport=tls"), "{cdrs:?}");
}

/// 1001 registers over TLS and answers by itself; 1002, registered over UDP, calls it: strowger
/// reaches 1001 over the connection 1001 registered on (its baresip has no certificate to accept
/// a new TLS connection with), and each phone hears the other.
#[test]
fn a_phone_registered_over_tls_is_called_over_its_connection() {
    let (dir, s, tls, ca) = with_users(
        "tls-callee",
        &[("1001", "pw-tls-1001"), ("1002", "pw-udp-1002")],
    );
    let speech = speech_wav(dir.path());
    let demo = common::repo_root().join("assets/demo.wav");
    let callee = Baresip::spawn_with(
        "127.0.0.1",
        dir.path(),
        "1001",
        &format!(
            "<sip:1001@{tls};transport=tls>;auth_pass=pw-tls-1001;regint=600;audio_codecs=PCMU;\
             answermode=auto"
        ),
        &speech,
        &[],
        14,
        &format!("sip_cafile {}", ca.display()),
    );
    callee.wait_registered("1001 over TLS");
    let caller = Baresip::spawn(
        dir.path(),
        "1002",
        &account(s.sip, "1002", "pw-udp-1002", ""),
        &demo,
        &[&format!("/dial sip:1001@{}", s.sip)],
        8,
    );
    let heard_by_caller = caller.finish("1002 calling 1001");
    let heard_by_callee = callee.finish("1001 answering over TLS");
    assert_heard(
        &heard_by_caller,
        &read_wav(&speech).samples,
        "1001's speech over TLS",
    );
    assert_heard(
        &heard_by_callee,
        &read_wav(&demo).samples,
        "1002's demo.wav",
    );
    let cdrs = s.wait_cdrs(1);
    assert_answered_cdrs(&cdrs, 1, "1001");
    assert!(
        cdrs[0].str("bridged_to").starts_with("sip:1001-"),
        "{cdrs:?}"
    );
}

/// strowger A's public context sends 7NNNN to strowger B over a TLS trunk; B echoes. With B's
/// certificate as A's `sip.tls_ca`, a 1 kHz tone comes back through both; with another
/// certificate there, A refuses the call with 503 and its log names sip.tls_ca. (Everything is on
/// 127.0.0.1, and A recognises its trunk's calls by address: the test's calls enter A as B's,
/// so B's `did_context` is the public context that dials out.)
#[test]
fn a_tls_trunk_reaches_a_trusted_peer_and_refuses_an_untrusted_one() {
    let dir = TempDir::new("tls-trunk");
    let b = Strowger::with(
        "tls-trunk-b",
        Opts {
            tls: true,
            ..Opts::default()
        },
    );
    let b_tls = b.tls.unwrap();
    let a_config = |name: &str, ca: &Path| {
        let extra = format!(
            "\n[[trunks]]\nname = \"b\"\nhost = \"{b_tls}\"\ntransport = \"tls\"\n\
             did_context = \"public\"\n\n\
             [dialplan.contexts.public]\ntrunks = [\"b\"]\n\n\
             [[dialplan.contexts.public.rules]]\nregex = '^7(\\d+)$'\n\
             steps = [\"bridge trunk/b/${{1}} timeout=10\"]\n"
        );
        let ca_line = format!("tls_ca = \"{}\"", ca.display());
        let edits = [(
            "# tls_ca = \"/etc/strowger/trunks-ca.pem\"",
            ca_line.as_str(),
        )];
        config(dir.path(), name, &edits, &extra)
    };

    let a = Strowger::with(
        "tls-trunk-a",
        Opts {
            config_file: Some(a_config("a.toml", &self_signed(&b))),
            ..Opts::default()
        },
    );
    let mut rtp = Rtp::bind();
    // A loaded machine makes a fresh strowger refuse calls for a moment (503, "past capacity").
    let _ = wait_for(Duration::from_secs(5), || {
        let log = a.stderr();
        let busy = log.rfind("past capacity").unwrap_or(0);
        (busy == 0 || log.rfind("back under capacity").unwrap_or(0) > busy).then_some(())
    });
    let mut uac = call(&a, "79196", &mut rtp);
    let frames: Vec<Vec<u8>> = tone(1000.0, 8000 * 2, 8000.0)
        .chunks(160)
        .map(|f| f.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    let mut got = rtp.send_frames(&frames, Duration::from_millis(300));
    assert_eq!(uac.bye().status(), Some(200));
    got.sort_by_key(|p| p.at);
    let heard: Vec<i16> = got
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert!(
        heard.len() > 8000,
        "{} samples echoed through B",
        heard.len()
    );
    let f = dominant_freq(&heard[heard.len() / 2..]);
    assert!((f - 1000.0).abs() < 30.0, "echo through B at {f} Hz");
    assert_answered_cdrs(&b.wait_cdrs(1), 1, "9196");

    // Another authority: a certificate of its own, not B's.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let wrong = dir.path().join("other-ca.pem");
    std::fs::write(&wrong, other.cert.pem()).unwrap();
    let a2 = Strowger::with(
        "tls-trunk-a2",
        Opts {
            config_file: Some(a_config("a2.toml", &wrong)),
            ..Opts::default()
        },
    );
    let mut uac = Uac::new(a2.sip, "79196");
    let resp = uac.invite(&sdp(Rtp::bind().port, &[PCMU], "sendrecv"));
    assert_eq!(resp.status(), Some(503), "{resp:?}");
    let logged = wait_for(Duration::from_secs(5), || {
        a2.stderr().contains("sip.tls_ca").then_some(())
    });
    assert!(
        logged.is_some(),
        "no sip.tls_ca in the log:\n{}",
        a2.stderr()
    );
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `addr` trusting only `ca` (a PEM file), presenting `identity` (a
/// certificate chain and its PKCS#8 key) if given; Err if the handshake failed.
fn tls_client(
    addr: std::net::SocketAddr,
    ca: &Path,
    identity: Option<(Vec<rustls::pki_types::CertificateDer<'static>>, Vec<u8>)>,
) -> Result<TlsStream, std::io::Error> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivatePkcs8KeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, PrivatePkcs8KeyDer::from(key).into())
            .unwrap(),
    };
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, TcpStream::connect(addr).unwrap());
    s.sock
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Sends an OPTIONS over `s` and returns the status line of what comes back ("" if nothing).
fn options_over(s: &mut TlsStream) -> String {
    let local = s.sock.local_addr().unwrap();
    let req = format!(
        "OPTIONS sip:ping@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bK-ping\r\n\
         Max-Forwards: 70\r\nFrom: <sip:ping@{local}>;tag=p\r\nTo: <sip:ping@127.0.0.1>\r\n\
         Call-ID: ping-{local}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    let mut got = Vec::new();
    if s.write_all(req.as_bytes()).and_then(|_| s.flush()).is_ok() {
        let mut buf = [0u8; 4096];
        while !got.windows(2).any(|w| w == b"\r\n") {
            match s.read(&mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
    }
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// With `sip.tls_client_ca`, a client presenting a certificate that CA signed is served (its
/// OPTIONS answered 200) and one presenting none is not.
#[test]
fn a_client_ca_lets_in_only_clients_with_its_certificates() {
    let dir = TempDir::new("tls-client-ca");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let ca_file = dir.path().join("phones-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let phone_key = rcgen::KeyPair::generate().unwrap();
    let mut phone_params = rcgen::CertificateParams::new(vec!["phone".to_string()]).unwrap();
    phone_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let phone = phone_params.signed_by(&phone_key, &ca, &ca_key).unwrap();

    let line = format!("tls_client_ca = \"{}\"", ca_file.display());
    let edits = [(
        "# tls_client_ca = \"/etc/strowger/phones-ca.pem\"",
        line.as_str(),
    )];
    let s = Strowger::with(
        "tls-client-ca",
        Opts {
            config_file: Some(config(dir.path(), "client-ca.toml", &edits, "")),
            tls: true,
            ..Opts::default()
        },
    );
    let (tls, server_ca) = (s.tls.unwrap(), self_signed(&s));
    let identity = (vec![phone.der().clone()], phone_key.serialize_der());
    let mut with = tls_client(tls, &server_ca, Some(identity)).unwrap();
    assert_eq!(options_over(&mut with), "SIP/2.0 200 OK");
    // TLS 1.3: the client finishes before the server has checked it; the refusal follows.
    let refused = match tls_client(tls, &server_ca, None) {
        Err(_) => String::new(),
        Ok(mut without) => options_over(&mut without),
    };
    assert_eq!(refused, "", "a client without a certificate was answered");
    let logged = wait_for(Duration::from_secs(5), || {
        s.stderr().contains("sip.tls_client_ca").then_some(())
    });
    assert!(logged.is_some(), "{}", s.stderr());
}

/// Reads until the peer closes (Ok(0)) or resets: true if it did within `limit`.
pub(crate) fn closed_within(conn: &mut TcpStream, limit: Duration) -> bool {
    conn.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

/// Loopback not whitelisted (so its connections count), a 1 s handshake limit and at most 4
/// connections per source: a client that sends half a ClientHello is cut after the limit while
/// a call to 9196 echoes on unaffected, a finished TLS connection gets a CRLF pong to its
/// double-CRLF ping (RFC 5626 §4.4.1) and stays, and a fifth connection from 127.0.0.1 is
/// refused.
#[test]
fn a_stalled_handshake_is_cut_and_a_connection_flood_refused() {
    let dir = TempDir::new("tls-limits");
    let cfg = config(
        dir.path(),
        "limits.toml",
        &[
            (
                "\nwhitelist = [\"127.0.0.0/8\", \"::1\"]\n",
                "\nwhitelist = []\n",
            ),
            ("\ntls_handshake_s = 10\n", "\ntls_handshake_s = 1\n"),
            ("\ntcp_max_per_source = 32\n", "\ntcp_max_per_source = 4\n"),
        ],
        "",
    );
    let mut s = Strowger::with(
        "tls-limits",
        Opts {
            config_file: Some(cfg),
            tls: true,
            ..Opts::default()
        },
    );
    let tls = s.tls.unwrap();
    let mut rtp = Rtp::bind();
    let mut uac = call(&s, "9196", &mut rtp);

    // A TLS record header announcing 512 bytes of handshake, and nothing after it.
    let mut stalled = TcpStream::connect(tls).unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    let frames: Vec<Vec<u8>> = tone(600.0, 8000 * 2, 8000.0)
        .chunks(160)
        .map(|f| f.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    let got = rtp.send_frames(&frames, Duration::from_millis(300));
    assert!(
        closed_within(&mut stalled, Duration::from_secs(2)),
        "the stalled handshake was not cut"
    );
    let heard: Vec<i16> = got
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert!(heard.len() > 12000, "{} samples echoed", heard.len());
    let f = dominant_freq(&heard[heard.len() / 2..]);
    assert!((f - 600.0).abs() < 30.0, "echo at {f} Hz during the cut");
    assert_eq!(uac.bye().status(), Some(200));

    // A finished handshake is not cut; a ping over it gets its pong.
    let mut client = tls_client(tls, &self_signed(&s), None).unwrap();
    client.write_all(b"\r\n\r\n").unwrap();
    client.flush().unwrap();
    client
        .sock
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut pong = [0u8; 2];
    client.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"\r\n");

    // With that one, four connections are held; a fifth from the same source is closed at once.
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(tls).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    for c in &mut held {
        assert!(
            !closed_within(c, Duration::from_millis(100)),
            "a held connection closed"
        );
    }
    let mut fifth = TcpStream::connect(tls).unwrap();
    assert!(
        closed_within(&mut fifth, Duration::from_secs(2)),
        "a fifth connection from one source was kept"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(1500));
    client.sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let open =
        matches!(client.sock.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(open, "the finished TLS connection was cut");
    s.stop();
    let log = s.stderr();
    assert!(log.contains("security.tcp_max_per_source"), "{log}");
    let cut = log
        .split(" TLS handshakes cut)")
        .next()
        .and_then(|l| l.rsplit(", ").next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(cut.is_some_and(|n| n >= 1), "{log}");
}
