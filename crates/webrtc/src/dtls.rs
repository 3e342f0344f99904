//! DTLS-SRTP (RFC 5763/5764): the DTLS 1.2 handshake that keys a WebRTC leg's SRTP, run by
//! OpenSSL and driven sans-IO. The `SslStream` reads and writes an in-memory queue of
//! datagrams that the media engine fills and drains; time is the caller's, so retransmission
//! works in virtual time: the datagrams of our last flight are kept and sent again when the
//! caller's clock passes the deadline (1 s, doubling, RFC 6347 §4.2.4.1) — OpenSSL's own timer
//! reads the wall clock, so it is not used for that (docs/architecture.md).

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::srtp::SrtpProfileId;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream, SslVerifyMode,
    SslVersion,
};
use openssl::x509::{X509Name, X509};
use sdp::{CryptoSuite, SrtpKeys};

/// What DTLS-SRTP offers, preferred first (RFC 7714's GCM, then RFC 5764's default).
const SRTP_PROFILES: &str = "SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_80";
/// ECDHE with the ECDSA certificate every side uses in WebRTC.
const CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
                       ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA";
/// Datagrams stay under the smallest MTU a path is likely to have, with room for IP and UDP.
const MTU: u32 = 1200;
const FIRST_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// A handshake whose flight went unanswered this many times (about a minute) has failed.
const MAX_RETRANSMITS: u32 = 6;
const EXPORTER_LABEL: &str = "EXTRACTOR-dtls_srtp";
/// The record content type of a handshake message.
const HANDSHAKE: u8 = 22;

/// A self-signed ECDSA P-256 certificate and the DTLS context that presents it. WebRTC trusts
/// a certificate by the fingerprint the SDP carries, so one serves every call of a worker
/// ([`Certificate::of_worker`]).
pub struct Certificate {
    ctx: SslContext,
    fingerprint: Fingerprint,
}

/// Shown by its fingerprint (a worker's settings carry one).
impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Certificate({})", self.fingerprint)
    }
}

impl Certificate {
    /// A new key and certificate, valid for 30 days from an hour ago.
    pub fn generate() -> Result<Certificate, openssl::error::ErrorStack> {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
        let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
        let mut name = X509Name::builder()?;
        name.append_entry_by_nid(Nid::COMMONNAME, "strowger")?;
        let name = name.build();
        let mut serial = BigNum::new()?;
        serial.rand(64, MsbOption::MAYBE_ZERO, false)?;
        let mut x = X509::builder()?;
        x.set_version(2)?;
        let serial = serial.to_asn1_integer()?;
        x.set_serial_number(&serial)?;
        x.set_subject_name(&name)?;
        x.set_issuer_name(&name)?;
        x.set_pubkey(&key)?;
        let unix = |d: Duration| d.as_secs() as i64;
        let now = unix(std::time::UNIX_EPOCH.elapsed().unwrap_or_default());
        let (from, until) = (
            Asn1Time::from_unix(now - 3600)?,
            Asn1Time::from_unix(now + 30 * 86400)?,
        );
        x.set_not_before(&from)?;
        x.set_not_after(&until)?;
        x.sign(&key, MessageDigest::sha256())?;
        let cert = x.build();
        let fingerprint = Fingerprint {
            algorithm: "sha-256".to_owned(),
            digest: cert.digest(MessageDigest::sha256())?.to_vec(),
        };
        Ok(Certificate {
            ctx: context(&cert, &key)?,
            fingerprint,
        })
    }

    /// The process's certificate, made on first use.
    pub fn process() -> Arc<Certificate> {
        static CERT: OnceLock<Arc<Certificate>> = OnceLock::new();
        CERT.get_or_init(|| {
            Arc::new(Certificate::generate().expect("OpenSSL made no ECDSA P-256 certificate"))
        })
        .clone()
    }

    /// Worker `w`'s certificate, made on first use (worker 0's is the process's). Each worker
    /// presents its own, so a leg moved to another worker re-offers another fingerprint, and
    /// the browser starts a new DTLS association with that worker (RFC 8842 §4) instead of
    /// keeping the one whose keys stayed behind.
    pub fn of_worker(w: usize) -> Arc<Certificate> {
        static OTHERS: Mutex<Vec<Arc<Certificate>>> = Mutex::new(Vec::new());
        if w == 0 {
            return Certificate::process();
        }
        let mut others = OTHERS.lock().unwrap_or_else(|e| e.into_inner());
        while others.len() < w {
            let c = Certificate::generate().expect("OpenSSL made no ECDSA P-256 certificate");
            others.push(Arc::new(c));
        }
        others[w - 1].clone()
    }

    /// Its SHA-256 fingerprint, for `a=fingerprint`.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
}

fn context(cert: &X509, key: &PKey<Private>) -> Result<SslContext, openssl::error::ErrorStack> {
    let mut b = SslContextBuilder::new(SslMethod::dtls())?;
    b.set_min_proto_version(Some(SslVersion::DTLS1_2))?;
    b.set_cipher_list(CIPHERS)?;
    b.set_tlsext_use_srtp(SRTP_PROFILES)?;
    b.set_certificate(cert)?;
    b.set_private_key(key)?;
    b.check_private_key()?;
    // Self-signed on both sides: the peer's certificate is checked against its SDP fingerprint
    // once the handshake is done, not against a CA.
    b.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        |_, _| true,
    );
    b.set_options(SslOptions::NO_QUERY_MTU | SslOptions::SINGLE_ECDH_USE);
    Ok(b.build())
}

/// A certificate fingerprint as `a=fingerprint` gives it (RFC 8122).
#[derive(Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Hash function name as SDP spells it: `sha-256`.
    pub algorithm: String,
    pub digest: Vec<u8>,
}

impl Fingerprint {
    /// `sha-256 AB:CD:…`; None for a malformed value.
    pub fn parse(value: &str) -> Option<Fingerprint> {
        let (algorithm, hex) = value.trim().split_once(' ')?;
        let digest = hex
            .trim()
            .split(':')
            .map(|b| u8::from_str_radix(b, 16).ok().filter(|_| b.len() == 2))
            .collect::<Option<Vec<u8>>>()?;
        Some(Fingerprint {
            algorithm: algorithm.to_ascii_lowercase(),
            digest,
        })
    }

    /// Whether `cert` has this fingerprint (false for a hash OpenSSL does not know).
    fn matches(&self, cert: &X509) -> bool {
        let name = self.algorithm.replace('-', "");
        MessageDigest::from_name(&name)
            .and_then(|md| cert.digest(md).ok())
            .is_some_and(|d| *d == self.digest[..])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.algorithm)?;
        for (i, b) in self.digest.iter().enumerate() {
            write!(f, "{}{b:02X}", if i == 0 { ' ' } else { ':' })?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Which end of the handshake we are (`a=setup`: active is the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Why a DTLS-SRTP handshake failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtlsError {
    /// OpenSSL refused the handshake (its reason).
    Handshake(String),
    /// The peer's certificate is not the one its SDP's `a=fingerprint` named.
    Fingerprint,
    /// No SRTP profile agreed (use_srtp missing from the peer's hello).
    NoSrtpProfile,
    /// Our flight went unanswered through every retransmission.
    Timeout,
}

impl fmt::Display for DtlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtlsError::Handshake(why) => write!(f, "DTLS handshake failed: {why}"),
            DtlsError::Fingerprint => {
                f.write_str("the DTLS certificate does not match the SDP's a=fingerprint")
            }
            DtlsError::NoSrtpProfile => f.write_str("DTLS agreed no SRTP profile (use_srtp)"),
            DtlsError::Timeout => f.write_str("DTLS handshake timed out"),
        }
    }
}

/// Where a handshake stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtlsState {
    Handshaking,
    /// Done: the SRTP keys it exported (ours protect what we send).
    Connected(SrtpKeys),
    Failed(DtlsError),
}

/// The datagrams between OpenSSL and the network: each read takes one received datagram, each
/// write is one to send.
#[derive(Default)]
struct Datagrams {
    incoming: VecDeque<Vec<u8>>,
    outgoing: Vec<Vec<u8>>,
}

impl Read for Datagrams {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(d) = self.incoming.pop_front() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let n = d.len().min(buf.len());
        buf[..n].copy_from_slice(&d[..n]);
        Ok(n)
    }
}

impl Write for Datagrams {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outgoing.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One DTLS-SRTP endpoint: feed it the DTLS datagrams of its 5-tuple ([`Dtls::handle`]) and
/// the time ([`Dtls::handle_timeout`]), send what [`Dtls::poll_transmit`] gives.
pub struct Dtls {
    stream: SslStream<Datagrams>,
    role: Role,
    remote: Fingerprint,
    state: DtlsState,
    /// Our last flight, sent again when it goes unanswered.
    flight: Vec<Vec<u8>>,
    /// To send now.
    transmit: VecDeque<Vec<u8>>,
    retransmit_at: Option<Instant>,
    rto: Duration,
    retransmits: u32,
}

impl Dtls {
    /// A handshake with a peer whose certificate has fingerprint `remote`. A client sends its
    /// hello at once.
    pub fn new(
        cert: &Certificate,
        role: Role,
        remote: Fingerprint,
        now: Instant,
    ) -> Result<Dtls, openssl::error::ErrorStack> {
        let mut ssl = Ssl::new(&cert.ctx)?;
        ssl.set_mtu(MTU)?;
        match role {
            Role::Client => ssl.set_connect_state(),
            Role::Server => ssl.set_accept_state(),
        }
        let mut d = Dtls {
            stream: SslStream::new(ssl, Datagrams::default())?,
            role,
            remote,
            state: DtlsState::Handshaking,
            flight: Vec::new(),
            transmit: VecDeque::new(),
            retransmit_at: None,
            rto: FIRST_TIMEOUT,
            retransmits: 0,
        };
        if role == Role::Client {
            d.drive(now);
        }
        Ok(d)
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn state(&self) -> &DtlsState {
        &self.state
    }

    /// A DTLS datagram from the peer (RFC 7983: first byte 20-63).
    pub fn handle(&mut self, datagram: &[u8], now: Instant) {
        self.stream.get_mut().incoming.push_back(datagram.to_vec());
        match self.state {
            DtlsState::Handshaking => self.drive(now),
            DtlsState::Connected(_) => {
                // Reads alerts; no application data is carried.
                let mut buf = [0u8; 1500];
                while self.stream.ssl_read(&mut buf).is_ok() {}
                self.stream.get_mut().incoming.clear();
                // The peer repeats its flight: ours (the last of the handshake) was lost.
                if datagram.first() == Some(&HANDSHAKE) && self.stream.get_ref().outgoing.is_empty()
                {
                    self.transmit.extend(self.flight.iter().cloned());
                }
                let out = std::mem::take(&mut self.stream.get_mut().outgoing);
                self.transmit.extend(out);
            }
            DtlsState::Failed(_) => self.stream.get_mut().incoming.clear(),
        }
    }

    /// When [`Dtls::handle_timeout`] is next due.
    pub fn timeout(&self) -> Option<Instant> {
        self.retransmit_at
    }

    /// Sends our last flight again if it went unanswered past its deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(at) = self.retransmit_at else {
            return;
        };
        if now < at || self.state != DtlsState::Handshaking {
            return;
        }
        if self.retransmits >= MAX_RETRANSMITS {
            self.retransmit_at = None;
            self.state = DtlsState::Failed(DtlsError::Timeout);
            return;
        }
        self.retransmits += 1;
        self.rto = (self.rto * 2).min(MAX_TIMEOUT);
        self.retransmit_at = Some(now + self.rto);
        self.transmit.extend(self.flight.iter().cloned());
    }

    /// The next datagram to send to the peer.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// Runs the handshake on what arrived; a new flight replaces the one kept for resending.
    fn drive(&mut self, now: Instant) {
        let result = self.stream.do_handshake();
        self.stream.get_mut().incoming.clear();
        let out = std::mem::take(&mut self.stream.get_mut().outgoing);
        if !out.is_empty() {
            self.transmit.extend(out.iter().cloned());
            self.flight = out;
            self.rto = FIRST_TIMEOUT;
            self.retransmits = 0;
            self.retransmit_at = Some(now + self.rto);
        }
        match result {
            Ok(()) => {
                self.retransmit_at = None;
                self.state = match self.keys() {
                    Ok(keys) => DtlsState::Connected(keys),
                    Err(e) => DtlsState::Failed(e),
                };
            }
            Err(e) if matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) => {}
            Err(e) => {
                self.retransmit_at = None;
                let why = e
                    .ssl_error()
                    .map_or_else(|| e.to_string(), |s| s.to_string());
                self.state = DtlsState::Failed(DtlsError::Handshake(why));
            }
        }
    }

    /// The peer checked against its fingerprint, and the SRTP keys exported (RFC 5764 §4.2).
    fn keys(&self) -> Result<SrtpKeys, DtlsError> {
        let ssl = self.stream.ssl();
        let cert = ssl.peer_certificate().ok_or(DtlsError::Fingerprint)?;
        if !self.remote.matches(&cert) {
            return Err(DtlsError::Fingerprint);
        }
        let profile = ssl
            .selected_srtp_profile()
            .ok_or(DtlsError::NoSrtpProfile)?;
        let (suite, key_len, salt_len) = match profile.id() {
            SrtpProfileId::SRTP_AEAD_AES_128_GCM => (CryptoSuite::AeadAes128Gcm, 16, 12),
            SrtpProfileId::SRTP_AES128_CM_SHA1_80 => (CryptoSuite::AesCm128HmacSha1_80, 16, 14),
            _ => return Err(DtlsError::NoSrtpProfile),
        };
        // client key, server key, client salt, server salt.
        let mut m = vec![0u8; 2 * (key_len + salt_len)];
        ssl.export_keying_material(&mut m, EXPORTER_LABEL, None)
            .map_err(|e| DtlsError::Handshake(e.to_string()))?;
        let (keys, salts) = m.split_at(2 * key_len);
        let client = [&keys[..key_len], &salts[..salt_len]].concat();
        let server = [&keys[key_len..], &salts[salt_len..]].concat();
        let (local, remote) = match self.role {
            Role::Client => (client, server),
            Role::Server => (server, client),
        };
        Ok(SrtpKeys {
            suite,
            local,
            remote,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carries every datagram of `from` to `to`, `drop` of them lost on the way.
    fn carry(from: &mut Dtls, to: &mut Dtls, now: Instant, drop: bool) -> usize {
        let mut n = 0;
        while let Some(d) = from.poll_transmit() {
            n += 1;
            if !drop {
                to.handle(&d, now);
            }
        }
        n
    }

    fn pair(now: Instant) -> (Dtls, Dtls, Certificate, Certificate) {
        let (a, b) = (
            Certificate::generate().unwrap(),
            Certificate::generate().unwrap(),
        );
        let client = Dtls::new(&a, Role::Client, b.fingerprint().clone(), now).unwrap();
        let server = Dtls::new(&b, Role::Server, a.fingerprint().clone(), now).unwrap();
        (client, server, a, b)
    }

    fn connected(d: &Dtls) -> SrtpKeys {
        match d.state() {
            DtlsState::Connected(k) => k.clone(),
            other => panic!("not connected: {other:?}"),
        }
    }

    #[test]
    fn handshake_exports_mirrored_srtp_keys() {
        let now = Instant::now();
        let (mut c, mut s, _, _) = pair(now);
        for _ in 0..4 {
            carry(&mut c, &mut s, now, false);
            carry(&mut s, &mut c, now, false);
        }
        let (ck, sk) = (connected(&c), connected(&s));
        assert_eq!(ck.suite, CryptoSuite::AeadAes128Gcm, "GCM is preferred");
        assert_eq!(ck.local.len(), 28);
        assert_eq!((&ck.local, &ck.remote), (&sk.remote, &sk.local));
        assert_ne!(ck.local, ck.remote);
        assert_eq!(c.timeout(), None);
        assert_eq!(s.timeout(), None);
    }

    #[test]
    fn a_lost_flight_is_sent_again_on_the_virtual_clock() {
        let t0 = Instant::now();
        let (mut c, mut s, _, _) = pair(t0);
        carry(&mut c, &mut s, t0, false);
        // The server's first flight is lost.
        assert!(carry(&mut s, &mut c, t0, true) > 0);
        assert_eq!(s.timeout(), Some(t0 + FIRST_TIMEOUT));
        s.handle_timeout(t0 + Duration::from_millis(999));
        assert!(s.poll_transmit().is_none(), "not before its deadline");
        let t1 = t0 + FIRST_TIMEOUT;
        s.handle_timeout(t1);
        c.handle_timeout(t1);
        assert_eq!(s.timeout(), Some(t1 + 2 * FIRST_TIMEOUT), "doubled");
        for _ in 0..4 {
            carry(&mut s, &mut c, t1, false);
            carry(&mut c, &mut s, t1, false);
        }
        assert_eq!(connected(&c).local, connected(&s).remote);
    }

    #[test]
    fn the_servers_lost_last_flight_is_repeated_when_the_client_repeats_its_own() {
        let t0 = Instant::now();
        let (mut c, mut s, _, _) = pair(t0);
        carry(&mut c, &mut s, t0, false);
        carry(&mut s, &mut c, t0, false);
        carry(&mut c, &mut s, t0, false);
        assert!(matches!(s.state(), DtlsState::Connected(_)));
        carry(&mut s, &mut c, t0, true);
        assert_eq!(c.state(), &DtlsState::Handshaking);
        let t1 = t0 + FIRST_TIMEOUT;
        c.handle_timeout(t1);
        carry(&mut c, &mut s, t1, false);
        carry(&mut s, &mut c, t1, false);
        assert_eq!(connected(&c).local, connected(&s).remote);
    }

    #[test]
    fn a_certificate_other_than_the_fingerprint_fails() {
        let now = Instant::now();
        let (a, b) = (
            Certificate::generate().unwrap(),
            Certificate::generate().unwrap(),
        );
        let stranger = Certificate::generate().unwrap();
        let mut c = Dtls::new(&a, Role::Client, b.fingerprint().clone(), now).unwrap();
        let mut s = Dtls::new(&b, Role::Server, stranger.fingerprint().clone(), now).unwrap();
        for _ in 0..4 {
            carry(&mut c, &mut s, now, false);
            carry(&mut s, &mut c, now, false);
        }
        assert_eq!(s.state(), &DtlsState::Failed(DtlsError::Fingerprint));
    }

    #[test]
    fn an_unanswered_handshake_times_out() {
        let mut now = Instant::now();
        let (mut c, _, _, _) = pair(now);
        while let Some(at) = c.timeout() {
            now = at;
            c.handle_timeout(now);
            assert!(c.poll_transmit().is_some() || c.timeout().is_none());
            while c.poll_transmit().is_some() {}
        }
        assert_eq!(c.state(), &DtlsState::Failed(DtlsError::Timeout));
    }

    #[test]
    fn fingerprints_parse_and_print_as_sdp_writes_them() {
        let cert = Certificate::generate().unwrap();
        let text = cert.fingerprint().to_string();
        assert!(text.starts_with("sha-256 "), "{text}");
        assert_eq!(text.len(), 8 + 32 * 3 - 1);
        assert_eq!(Fingerprint::parse(&text).as_ref(), Some(cert.fingerprint()));
        assert_eq!(Fingerprint::parse("sha-256 AB:C"), None);
    }
}
