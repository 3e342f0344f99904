//! HTTP Digest authentication for SIP (RFC 3261 §22, RFC 8760 for SHA-256): challenges and
//! credentials as header values, response computation, and server nonces.
//!
//! Nonces are stateless to issue: `hex(time) . hex(counter) . HMAC-SHA-256(secret, time.counter)`,
//! so only this process (holding `secret`) can have issued one, and its age is read from it; an old
//! nonce is answered `stale=true`. Replays are refused with a bounded table of the highest
//! nonce-count seen per nonce (RFC 7616 §3.3).

use hmac::{Hmac, KeyInit, Mac};
use md5::Md5;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use std::fmt::Write;
use subtle::ConstantTimeEq;

/// HMAC-SHA-256 (RFC 2104), which signs the nonces.
type HmacSha256 = Hmac<Sha256>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Md5,
    Sha256,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA-256",
        }
    }

    /// From the `algorithm` parameter (absent means MD5); `-sess` variants are not offered.
    pub fn parse(s: Option<&str>) -> Option<Algorithm> {
        match s {
            None => Some(Algorithm::Md5),
            Some(a) if a.eq_ignore_ascii_case("MD5") => Some(Algorithm::Md5),
            Some(a) if a.eq_ignore_ascii_case("SHA-256") => Some(Algorithm::Sha256),
            _ => None,
        }
    }

    /// Lowercase hex digest of `data`.
    pub fn hash(self, data: &[u8]) -> String {
        self.hash_parts(&[data])
    }

    /// The hex digest of `parts` joined with ':' (how every digest input is built), hashed as
    /// they come instead of formatted into one string first.
    pub fn hash_parts(self, parts: &[&[u8]]) -> String {
        fn joined<D: Digest>(parts: &[&[u8]]) -> String {
            let mut d = D::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    d.update(b":");
                }
                d.update(p);
            }
            hex(&d.finalize())
        }
        match self {
            Algorithm::Md5 => joined::<Md5>(parts),
            Algorithm::Sha256 => joined::<Sha256>(parts),
        }
    }
}

/// Lower-case hex, by table: a digest check writes some 130 digits, and `{:02x}` per byte
/// costs more than the hashing.
fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(b.len() * 2);
    for x in b {
        out.push(DIGITS[usize::from(x >> 4)]);
        out.push(DIGITS[usize::from(x & 15)]);
    }
    String::from_utf8(out).unwrap_or_default()
}

/// HA1 = H(username:realm:password), what a credential store keeps instead of the password.
pub fn ha1(alg: Algorithm, user: &str, realm: &str, password: &str) -> String {
    alg.hash_parts(&[user.as_bytes(), realm.as_bytes(), password.as_bytes()])
}

/// The expected `response` (RFC 7616 §3.4.1, qop=auth or no qop).
#[allow(clippy::too_many_arguments)]
pub fn response(
    alg: Algorithm,
    ha1: &str,
    method: &str,
    uri: &str,
    nonce: &str,
    qop: Option<(&str, &str)>,
) -> String {
    let ha2 = alg.hash_parts(&[method.as_bytes(), uri.as_bytes()]);
    let (ha1, nonce, ha2) = (ha1.as_bytes(), nonce.as_bytes(), ha2.as_bytes());
    match qop {
        Some((nc, cnonce)) => {
            alg.hash_parts(&[ha1, nonce, nc.as_bytes(), cnonce.as_bytes(), b"auth", ha2])
        }
        None => alg.hash_parts(&[ha1, nonce, ha2]),
    }
}

/// A `WWW-Authenticate` / `Proxy-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub realm: String,
    pub nonce: String,
    pub opaque: Option<String>,
    pub algorithm: Algorithm,
    pub qop_auth: bool,
    pub stale: bool,
}

impl Challenge {
    pub fn to_header(&self) -> String {
        let mut s = format!(
            "Digest realm=\"{}\", nonce=\"{}\", algorithm={}",
            self.realm,
            self.nonce,
            self.algorithm.name()
        );
        if self.qop_auth {
            s.push_str(", qop=\"auth\"");
        }
        if let Some(o) = &self.opaque {
            let _ = write!(s, ", opaque=\"{o}\"");
        }
        if self.stale {
            s.push_str(", stale=true");
        }
        s
    }

    pub fn parse(v: &str) -> Result<Challenge, &'static str> {
        let p = params(v)?;
        Ok(Challenge {
            realm: p.get("realm").ok_or("no realm")?.to_string(),
            nonce: p.get("nonce").ok_or("no nonce")?.to_string(),
            opaque: p.get("opaque").map(|s| s.to_string()),
            algorithm: Algorithm::parse(p.get("algorithm")).ok_or("unknown algorithm")?,
            qop_auth: p
                .get("qop")
                .is_some_and(|q| q.split(',').any(|t| t.trim().eq_ignore_ascii_case("auth"))),
            stale: p
                .get("stale")
                .is_some_and(|s| s.eq_ignore_ascii_case("true")),
        })
    }
}

/// The `Authorization` / `Proxy-Authorization` header's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    pub username: String,
    pub realm: String,
    pub nonce: String,
    pub uri: String,
    pub response: String,
    pub algorithm: Algorithm,
    pub cnonce: Option<String>,
    pub nc: Option<String>,
    /// Only `auth` is accepted (`auth-int` is refused at parse time).
    pub qop_auth: bool,
    pub opaque: Option<String>,
}

impl Authorization {
    pub fn parse(v: &str) -> Result<Authorization, &'static str> {
        let p = params(v)?;
        let get = |k: &str| p.get(k).map(|s| s.to_string());
        let qop_auth = match p.get("qop") {
            None => false,
            Some(q) if q.eq_ignore_ascii_case("auth") => true,
            Some(_) => return Err("only qop=auth is supported"),
        };
        let a = Authorization {
            username: get("username").ok_or("no username")?,
            realm: get("realm").ok_or("no realm")?,
            nonce: get("nonce").ok_or("no nonce")?,
            uri: get("uri").ok_or("no uri")?,
            response: get("response").ok_or("no response")?.to_ascii_lowercase(),
            algorithm: Algorithm::parse(p.get("algorithm")).ok_or("unknown algorithm")?,
            cnonce: get("cnonce"),
            nc: get("nc"),
            qop_auth,
            opaque: get("opaque"),
        };
        if a.qop_auth && (a.cnonce.is_none() || a.nc.is_none()) {
            return Err("qop=auth without cnonce or nc");
        }
        Ok(a)
    }

    /// The header value a client sends (used by tests and outbound registration).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        c: &Challenge,
        user: &str,
        password: &str,
        method: &str,
        uri: &str,
        nc: u32,
        cnonce: &str,
    ) -> String {
        let h1 = ha1(c.algorithm, user, &c.realm, password);
        let ncs = format!("{nc:08x}");
        let qop = c.qop_auth.then_some((ncs.as_str(), cnonce));
        let r = response(c.algorithm, &h1, method, uri, &c.nonce, qop);
        let mut s = format!(
            "Digest username=\"{user}\", realm=\"{}\", nonce=\"{}\", uri=\"{uri}\", response=\"{r}\", algorithm={}",
            c.realm,
            c.nonce,
            c.algorithm.name()
        );
        if c.qop_auth {
            let _ = write!(s, ", qop=auth, nc={ncs}, cnonce=\"{cnonce}\"");
        }
        if let Some(o) = &c.opaque {
            let _ = write!(s, ", opaque=\"{o}\"");
        }
        s
    }

    /// Checks `response` against HA1 for `method` (the digest-uri is the one the client hashed).
    pub fn verify(&self, ha1: &str, method: &str) -> bool {
        let qop = if self.qop_auth {
            Some((
                self.nc.as_deref().unwrap_or(""),
                self.cnonce.as_deref().unwrap_or(""),
            ))
        } else {
            None
        };
        let want = response(self.algorithm, ha1, method, &self.uri, &self.nonce, qop);
        // Without an early exit: the time taken does not tell where the first difference is.
        bool::from(want.as_bytes().ct_eq(self.response.as_bytes()))
    }
}

/// A digest header's parameters, in order (a handful: a list beats a hash map).
struct DigestParams<'a>(Vec<(&'a str, &'a str)>);

impl<'a> DigestParams<'a> {
    /// The value of `key` (a lower-case name; names match case-insensitively).
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|&(_, v)| v)
    }
}

/// `Digest k=v, k="v", …` into its parameters.
fn params(v: &str) -> Result<DigestParams<'_>, &'static str> {
    let v = v.trim_start();
    if v.len() < 6 || !v[..6].eq_ignore_ascii_case("digest") {
        return Err("not a Digest header");
    }
    let mut rest = &v[6..];
    let mut out = DigestParams(Vec::with_capacity(10));
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',', '\r', '\n']);
        if rest.is_empty() {
            return Ok(out);
        }
        let eq = rest.find('=').ok_or("parameter without =")?;
        let key = rest[..eq].trim();
        rest = rest[eq + 1..].trim_start();
        let value;
        if let Some(r) = rest.strip_prefix('"') {
            // Quoted string (backslash escapes are rare in digest values; kept as is).
            let mut end = None;
            let bytes = r.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        end = Some(i);
                        break;
                    }
                    _ => i += 1,
                }
            }
            let end = end.ok_or("unterminated quoted string")?;
            value = &r[..end];
            rest = &r[end + 1..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim();
            rest = &rest[end..];
        }
        if out.get(key).is_some() {
            return Err("duplicate parameter");
        }
        out.0.push((key, value));
    }
}

/// What a presented nonce is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceCheck {
    Valid,
    /// Ours but too old, or its nonce-count was already used: challenge again with stale=true.
    Stale,
    /// Not issued by this process.
    Invalid,
}

/// Issues and checks nonces for one process.
pub struct Nonces {
    /// HMAC-SHA-256 keyed with this process's secret, cloned for each MAC (the key's two
    /// blocks are hashed once, here).
    keyed: HmacSha256,
    lifetime_s: u64,
    counter: u64,
    /// A used nonce's counter (unique to it, from its issuer) → its issue time and the highest
    /// nonce-count used. Keyed by the counter, not the nonce, so an entry allocates nothing.
    /// A fast hash is safe: only nonces whose MAC checked out are entered.
    seen: FxHashMap<u64, (u64, u32)>,
    capacity: usize,
    /// Nonces issued at or before this time were evicted from `seen`: they are stale.
    floor: u64,
    /// When `seen` next drops the nonces past their lifetime ([`Nonces::sweep`]).
    next_sweep: u64,
}

impl Nonces {
    pub fn new(secret: [u8; 32], lifetime_s: u64, capacity: usize) -> Nonces {
        Nonces {
            keyed: <HmacSha256 as KeyInit>::new_from_slice(&secret)
                .expect("HMAC takes any key length"),
            lifetime_s,
            counter: 0,
            seen: FxHashMap::default(),
            capacity: capacity.max(1),
            floor: 0,
            next_sweep: 0,
        }
    }

    fn mac(&self, body: &str, bind: &[u8]) -> String {
        let mut mac = self.keyed.clone();
        mac.update(body.as_bytes());
        mac.update(bind);
        hex(&mac.finalize().into_bytes()[..16])
    }

    /// Nonces that carry `issuer` (a worker's index), so a request answering one can be handed
    /// to the worker whose table counts its uses ([`Nonces::issuer`]).
    pub fn with_issuer(mut self, issuer: u8) -> Nonces {
        self.counter = u64::from(issuer) << 56;
        self
    }

    /// The issuer a nonce names, unchecked (for routing only: its issuer checks the MAC).
    pub fn issuer(nonce: &str) -> Option<u8> {
        u8::from_str_radix(nonce.get(16..18)?, 16).ok()
    }

    /// A fresh nonce at unix time `now`, bound to `bind` (the client's address): its MAC covers
    /// it, so the nonce is good only when answered with the same `bind` — from the address it
    /// was sent to. One client cannot spend a challenge sent to another, and an answer that
    /// fails proves the round trip from its source (a failure counted against an address was
    /// sent from it, not forged in its name).
    pub fn issue(&mut self, now: u64, bind: &[u8]) -> String {
        self.counter += 1;
        let mut body = hex(&now.to_be_bytes());
        body.push_str(&hex(&self.counter.to_be_bytes()));
        let mac = self.mac(&body, bind);
        body.push_str(&mac);
        body
    }

    /// A nonce's issue time and counter, if its MAC is ours for `bind`.
    fn issued(&self, nonce: &str, bind: &[u8]) -> Option<(u64, u64)> {
        if nonce.len() != 64 || !nonce.is_ascii() {
            return None;
        }
        let (body, mac) = nonce.split_at(32);
        if !bool::from(self.mac(body, bind).as_bytes().ct_eq(mac.as_bytes())) {
            return None;
        }
        let field = |r: std::ops::Range<usize>| u64::from_str_radix(&body[r], 16).ok();
        Some((field(0..16)?, field(16..32)?))
    }

    /// What [`Nonces::check`] would answer, recording nothing: to refuse a stale or foreign nonce
    /// before the password is looked up, and count its use only once the password is right.
    pub fn peek(&self, nonce: &str, nc: Option<&str>, now: u64, bind: &[u8]) -> NonceCheck {
        match self.judge(nonce, nc, now, bind) {
            Ok(_) => NonceCheck::Valid,
            Err(c) => c,
        }
    }

    /// A nonce's counter, issue time and the nonce-count asked for, if it is ours, fresh and
    /// unused.
    fn judge(
        &self,
        nonce: &str,
        nc: Option<&str>,
        now: u64,
        bind: &[u8],
    ) -> Result<(u64, u64, u32), NonceCheck> {
        let Some((t, counter)) = self.issued(nonce, bind) else {
            return Err(NonceCheck::Invalid);
        };
        if t > now + 5 || now.saturating_sub(t) > self.lifetime_s || t <= self.floor {
            return Err(NonceCheck::Stale);
        }
        let nc = match nc {
            None => 1,
            Some(s) => match u32::from_str_radix(s, 16) {
                Ok(n) if n > 0 => n,
                _ => return Err(NonceCheck::Invalid),
            },
        };
        match self.seen.get(&counter) {
            Some((_, last)) if nc <= *last => Err(NonceCheck::Stale),
            _ => Ok((counter, t, nc)),
        }
    }

    /// Checks a nonce answered with `bind` and, when valid, records the nonce-count (`nc` hex;
    /// None when the client used no qop, which allows one use of the nonce).
    pub fn check(&mut self, nonce: &str, nc: Option<&str>, now: u64, bind: &[u8]) -> NonceCheck {
        let (counter, t, nc) = match self.judge(nonce, nc, now, bind) {
            Ok(v) => v,
            Err(c) => return c,
        };
        if let Some((_, last)) = self.seen.get_mut(&counter) {
            *last = nc;
            return NonceCheck::Valid;
        }
        if now >= self.next_sweep || self.seen.len() >= self.capacity {
            self.sweep(now);
        }
        if self.seen.len() >= self.capacity {
            // Still full: forget the older half; nonces that old become stale.
            let mut times: Vec<u64> = self.seen.values().map(|(t, _)| *t).collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.floor = self.floor.max(cut);
            self.seen.retain(|_, (t, _)| *t > cut);
            if t <= self.floor {
                return NonceCheck::Stale;
            }
        }
        self.seen.insert(counter, (t, nc));
        NonceCheck::Valid
    }

    /// Drops the nonces past their lifetime (judged stale by their time alone), every quarter
    /// lifetime: kept until the table filled, they grew a worker's memory for hours under a
    /// steady load of phones refreshing their registrations (bench/RESULTS.md). The table's
    /// capacity follows what it holds.
    fn sweep(&mut self, now: u64) {
        let lifetime = self.lifetime_s;
        self.seen
            .retain(|_, (t, _)| now.saturating_sub(*t) <= lifetime);
        if self.seen.capacity() > 64 && self.seen.len() < self.seen.capacity() / 4 {
            self.seen.shrink_to(self.seen.len() * 2);
        }
        self.next_sweep = now + (lifetime / 4).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2617_md5_vector() {
        // RFC 2617 §3.5.
        let h1 = ha1(
            Algorithm::Md5,
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
        );
        let r = response(
            Algorithm::Md5,
            &h1,
            "GET",
            "/dir/index.html",
            "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            Some(("00000001", "0a4f113b")),
        );
        assert_eq!(r, "6629fae49393a05397450978507c4ef1");
    }

    #[test]
    fn rfc7616_sha256_and_md5_vectors() {
        // RFC 7616 §3.9.1.
        let nonce = "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v";
        let cnonce = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ";
        for (alg, want) in [
            (
                Algorithm::Sha256,
                "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
            ),
            (Algorithm::Md5, "8ca523f5e9506fed4657c9700eebdbec"),
        ] {
            let h1 = ha1(alg, "Mufasa", "http-auth@example.org", "Circle of Life");
            let r = response(
                alg,
                &h1,
                "GET",
                "/dir/index.html",
                nonce,
                Some(("00000001", cnonce)),
            );
            assert_eq!(r, want, "{alg:?}");
        }
    }

    #[test]
    fn rfc4231_hmac_vectors() {
        // RFC 4231 §4.2, §4.3, §4.4 and §4.7 (a key longer than the block).
        let hmac = |key: &[u8], data: &[u8]| {
            let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).unwrap();
            m.update(data);
            hex(&m.finalize().into_bytes())
        };
        for (key, data, want) in [
            (
                &[0x0b; 20][..],
                &b"Hi There"[..],
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 20],
                &[0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ] {
            assert_eq!(hmac(key, data), want);
        }
        // A nonce is hex(time) . hex(counter) . the first half of HMAC-SHA-256(secret, both).
        let mut n = Nonces::new([7; 32], 300, 4);
        assert_eq!(
            n.issue(1000, b""),
            "00000000000003e8000000000000000183c2a0ca99ff592bdad5438c7e0d3365"
        );
    }

    #[test]
    fn challenge_round_trip_and_client_response_verifies() {
        let c = Challenge {
            realm: "example.com".into(),
            nonce: "abc".into(),
            opaque: None,
            algorithm: Algorithm::Sha256,
            qop_auth: true,
            stale: true,
        };
        assert_eq!(Challenge::parse(&c.to_header()), Ok(c.clone()));
        let v = Authorization::build(
            &c,
            "alice",
            "s3cret",
            "REGISTER",
            "sip:example.com",
            1,
            "xyz",
        );
        let a = Authorization::parse(&v).unwrap();
        assert_eq!(a.username, "alice");
        assert_eq!(a.nc.as_deref(), Some("00000001"));
        let h1 = ha1(Algorithm::Sha256, "alice", "example.com", "s3cret");
        assert!(a.verify(&h1, "REGISTER"));
        assert!(!a.verify(&h1, "INVITE"));
        let wrong = ha1(Algorithm::Sha256, "alice", "example.com", "guess");
        assert!(!a.verify(&wrong, "REGISTER"));
    }

    #[test]
    fn parses_what_phones_send() {
        let v = "Digest username=\"1001\",realm=\"pbx\",nonce=\"n\",uri=\"sip:pbx\",\
                 response=\"ABCDEF\",algorithm=MD5,cnonce=\"c\",qop=auth,nc=00000002";
        let a = Authorization::parse(v).unwrap();
        assert_eq!(a.response, "abcdef");
        assert!(a.qop_auth);
        assert_eq!(
            Authorization::parse("Basic abc").unwrap_err(),
            "not a Digest header"
        );
        assert!(Authorization::parse("Digest username=\"a\", qop=auth-int").is_err());
        assert!(Authorization::parse("Digest username=\"a").is_err());
    }

    #[test]
    fn a_nonce_names_its_issuer_and_peeking_records_nothing() {
        let mut n = Nonces::new([7; 32], 300, 4).with_issuer(3);
        // Bound to the address it was sent to: from another, it is not ours.
        let to_a = n.issue(1000, b"192.0.2.1");
        assert_eq!(n.peek(&to_a, None, 1001, b"192.0.2.1"), NonceCheck::Valid);
        assert_eq!(n.peek(&to_a, None, 1001, b"192.0.2.2"), NonceCheck::Invalid);
        assert_eq!(
            n.check(&to_a, None, 1001, b"192.0.2.2"),
            NonceCheck::Invalid
        );
        let nonce = n.issue(1000, b"");
        assert_eq!(Nonces::issuer(&nonce), Some(3));
        assert_eq!(Nonces::issuer("short"), None);
        assert_eq!(
            n.peek(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Valid
        );
        assert_eq!(
            n.peek(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Valid
        );
        assert_eq!(
            n.check(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Valid
        );
        assert_eq!(
            n.peek(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Stale
        );
        assert_eq!(
            n.peek(&nonce, Some("00000002"), 1001, b""),
            NonceCheck::Valid
        );
        let mut other = Nonces::new([7; 32], 300, 4).with_issuer(4);
        assert_eq!(
            other.check(&nonce, Some("00000002"), 1001, b""),
            NonceCheck::Valid,
            "another worker with the secret verifies it (its counts are not shared)"
        );
    }

    #[test]
    fn nonces_are_ours_expire_and_refuse_replays() {
        let mut n = Nonces::new([7; 32], 300, 4);
        let nonce = n.issue(1000, b"");
        assert_eq!(
            n.check(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Valid
        );
        assert_eq!(
            n.check(&nonce, Some("00000001"), 1001, b""),
            NonceCheck::Stale,
            "replay"
        );
        assert_eq!(
            n.check(&nonce, Some("00000002"), 1002, b""),
            NonceCheck::Valid
        );
        assert_eq!(
            n.check(&nonce, Some("00000002"), 1300, b""),
            NonceCheck::Stale,
            "replay"
        );
        assert_eq!(
            n.check(&nonce, Some("00000003"), 1301, b""),
            NonceCheck::Stale,
            "expired"
        );
        // Another process (another secret) did not issue it; a forged MAC is refused.
        let mut other = Nonces::new([8; 32], 300, 4);
        assert_eq!(
            other.check(&nonce, Some("00000009"), 1001, b""),
            NonceCheck::Invalid
        );
        let mut forged = nonce.clone();
        forged.replace_range(0..1, "1");
        assert_eq!(n.check(&forged, None, 1001, b""), NonceCheck::Invalid);
        // Without qop a nonce is good once.
        let once = n.issue(1000, b"");
        assert_eq!(n.check(&once, None, 1000, b""), NonceCheck::Valid);
        assert_eq!(n.check(&once, None, 1000, b""), NonceCheck::Stale);
    }

    #[test]
    fn used_nonces_leave_the_table_once_past_their_lifetime() {
        let mut n = Nonces::new([1; 32], 300, 10_000);
        for i in 0..1000 {
            let t = 1000 + i / 10;
            let nonce = n.issue(t, b"");
            assert_eq!(n.check(&nonce, Some("1"), t, b""), NonceCheck::Valid);
        }
        assert_eq!(n.seen.len(), 1000);
        let full = n.seen.capacity();
        let late = n.issue(1395, b"");
        assert_eq!(n.check(&late, Some("1"), 1395, b""), NonceCheck::Valid);
        assert_eq!(
            n.seen.len(),
            51,
            "those issued more than 300 s before went, the rest stayed"
        );
        assert!(n.seen.capacity() < full / 4, "the table gave back its room");
    }

    #[test]
    fn nc_table_is_bounded_and_eviction_stays_safe() {
        let mut n = Nonces::new([1; 32], 300, 4);
        let old: Vec<String> = (0..4).map(|i| n.issue(1000 + i, b"")).collect();
        for o in &old {
            assert_eq!(n.check(o, Some("1"), 1010, b""), NonceCheck::Valid);
        }
        let new = n.issue(1005, b"");
        assert_eq!(n.check(&new, Some("1"), 1010, b""), NonceCheck::Valid);
        assert!(n.seen.len() <= 4);
        // The evicted ones cannot be replayed: they are stale now.
        assert_eq!(n.check(&old[0], Some("2"), 1010, b""), NonceCheck::Stale);
        assert_eq!(n.check(&new, Some("1"), 1010, b""), NonceCheck::Stale);
    }
}
