//! The STUN (RFC 5389) an ICE-lite agent needs: reading a Binding request, checking its
//! MESSAGE-INTEGRITY and FINGERPRINT, and writing the success response. Written here rather
//! than taken from a crate because it is that one exchange — about 150 lines over the RustCrypto
//! HMAC the project already uses — while the STUN crates bring a whole client, TURN and an
//! async runtime (docs/architecture.md).

use std::net::{IpAddr, SocketAddr};

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;

const MAGIC_COOKIE: u32 = 0x2112_A442;
const HEADER_LEN: usize = 20;
const BINDING_REQUEST: u16 = 0x0001;
const BINDING_SUCCESS: u16 = 0x0101;

const USERNAME: u16 = 0x0006;
const MESSAGE_INTEGRITY: u16 = 0x0008;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;
const USE_CANDIDATE: u16 = 0x0025;
const FINGERPRINT: u16 = 0x8028;
const FINGERPRINT_XOR: u32 = 0x5354_554E;
const MI_LEN: usize = 20;

/// A Binding request whose MESSAGE-INTEGRITY held with the password it was checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingRequest<'a> {
    pub transaction: [u8; 12],
    /// `USERNAME`: "recipient's ufrag:sender's ufrag" in ICE.
    pub username: &'a str,
    /// The controlling agent nominates this pair (RFC 8445 §7.3.1.5).
    pub use_candidate: bool,
}

/// Why a datagram is not an acceptable Binding request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StunError {
    /// Not STUN, truncated, or not a Binding request.
    Malformed,
    /// FINGERPRINT missing or wrong.
    Fingerprint,
    /// MESSAGE-INTEGRITY missing or made with another password.
    Integrity,
}

/// The message type of a STUN datagram, if it has the header of one (RFC 7983: first byte 0-3).
pub fn message_type(data: &[u8]) -> Option<u16> {
    let header = data.get(..HEADER_LEN)?;
    let cookie = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let len = u16::from_be_bytes([header[2], header[3]]) as usize;
    (cookie == MAGIC_COOKIE && len % 4 == 0 && HEADER_LEN + len == data.len())
        .then(|| u16::from_be_bytes([header[0], header[1]]))
}

/// Reads a Binding request, checking its FINGERPRINT and its MESSAGE-INTEGRITY made with `pwd`
/// (the short-term credential: our ice-pwd).
pub fn parse_binding_request<'a>(
    data: &'a [u8],
    pwd: &str,
) -> Result<BindingRequest<'a>, StunError> {
    if message_type(data) != Some(BINDING_REQUEST) {
        return Err(StunError::Malformed);
    }
    let msg = verify(data, pwd)?;
    let mut username = None;
    let mut use_candidate = false;
    for (t, value) in attributes(&data[..msg.integrity_at]) {
        match t {
            USERNAME => username = std::str::from_utf8(value).ok(),
            USE_CANDIDATE => use_candidate = true,
            _ => {}
        }
    }
    let mut transaction = [0; 12];
    transaction.copy_from_slice(&data[8..HEADER_LEN]);
    Ok(BindingRequest {
        transaction,
        username: username.ok_or(StunError::Malformed)?,
        use_candidate,
    })
}

/// Offsets a checked message's MESSAGE-INTEGRITY and FINGERPRINT were found at.
struct Checked {
    integrity_at: usize,
}

/// Checks a message's FINGERPRINT (last) and MESSAGE-INTEGRITY (just before it) with `pwd`.
fn verify(data: &[u8], pwd: &str) -> Result<Checked, StunError> {
    let fp_at = data.len().checked_sub(8).ok_or(StunError::Fingerprint)?;
    if fp_at < HEADER_LEN || be16(data, fp_at) != FINGERPRINT || be16(data, fp_at + 2) != 4 {
        return Err(StunError::Fingerprint);
    }
    let fp = u32::from_be_bytes(data[fp_at + 4..].try_into().expect("4 bytes"));
    if crc32fast::hash(&data[..fp_at]) ^ FINGERPRINT_XOR != fp {
        return Err(StunError::Fingerprint);
    }
    let mi_at = fp_at.checked_sub(4 + MI_LEN).ok_or(StunError::Integrity)?;
    if mi_at < HEADER_LEN || be16(data, mi_at) != MESSAGE_INTEGRITY {
        return Err(StunError::Integrity);
    }
    if be16(data, mi_at + 2) as usize != MI_LEN {
        return Err(StunError::Integrity);
    }
    // The MAC covers the message up to the attribute, its length counting up to the MAC's end.
    let mut mac = hmac(pwd);
    let covered_len = (mi_at + 4 + MI_LEN - HEADER_LEN) as u16;
    mac.update(&data[..2]);
    mac.update(&covered_len.to_be_bytes());
    mac.update(&data[4..mi_at]);
    mac.verify_slice(&data[mi_at + 4..fp_at])
        .map_err(|_| StunError::Integrity)?;
    Ok(Checked {
        integrity_at: mi_at,
    })
}

/// The success response to a request with `transaction`, from a source at `mapped`:
/// XOR-MAPPED-ADDRESS, then MESSAGE-INTEGRITY with `pwd` and FINGERPRINT.
pub fn binding_success(transaction: &[u8; 12], mapped: SocketAddr, pwd: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + 24 + 24 + 8);
    m.extend_from_slice(&BINDING_SUCCESS.to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
    m.extend_from_slice(transaction);
    let xport = mapped.port() ^ (MAGIC_COOKIE >> 16) as u16;
    match mapped.ip() {
        IpAddr::V4(ip) => {
            put_header(&mut m, XOR_MAPPED_ADDRESS, 8);
            m.extend_from_slice(&[0, 1]);
            m.extend_from_slice(&xport.to_be_bytes());
            let x = u32::from(ip) ^ MAGIC_COOKIE;
            m.extend_from_slice(&x.to_be_bytes());
        }
        IpAddr::V6(ip) => {
            put_header(&mut m, XOR_MAPPED_ADDRESS, 20);
            m.extend_from_slice(&[0, 2]);
            m.extend_from_slice(&xport.to_be_bytes());
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
            key[4..].copy_from_slice(transaction);
            m.extend(ip.octets().iter().zip(key).map(|(a, k)| a ^ k));
        }
    }
    sign(&mut m, pwd);
    m
}

/// Appends MESSAGE-INTEGRITY with `pwd` and FINGERPRINT to message `m` (header and attributes).
pub fn sign(m: &mut Vec<u8>, pwd: &str) {
    let len = m.len() - HEADER_LEN + 4 + MI_LEN;
    set_len(m, len);
    let mut mac = hmac(pwd);
    mac.update(m);
    let tag = mac.finalize().into_bytes();
    put_header(m, MESSAGE_INTEGRITY, MI_LEN as u16);
    m.extend_from_slice(&tag);
    let len = m.len() - HEADER_LEN + 8;
    set_len(m, len);
    let fp = crc32fast::hash(m) ^ FINGERPRINT_XOR;
    put_header(m, FINGERPRINT, 4);
    m.extend_from_slice(&fp.to_be_bytes());
}

/// A Binding request as an ICE agent's connectivity check sends it (tests, benchmarks).
pub fn binding_request(
    transaction: &[u8; 12],
    username: &str,
    use_candidate: bool,
    pwd: &str,
) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&BINDING_REQUEST.to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
    m.extend_from_slice(transaction);
    put_header(&mut m, USERNAME, username.len() as u16);
    m.extend_from_slice(username.as_bytes());
    m.resize(m.len().next_multiple_of(4), 0);
    if use_candidate {
        put_header(&mut m, USE_CANDIDATE, 0);
    }
    sign(&mut m, pwd);
    m
}

/// The XOR-MAPPED-ADDRESS of a success response checked with `pwd`.
pub fn parse_binding_success(data: &[u8], pwd: &str) -> Result<SocketAddr, StunError> {
    if message_type(data) != Some(BINDING_SUCCESS) {
        return Err(StunError::Malformed);
    }
    let msg = verify(data, pwd)?;
    let (_, v) = attributes(&data[..msg.integrity_at])
        .find(|(t, _)| *t == XOR_MAPPED_ADDRESS)
        .ok_or(StunError::Malformed)?;
    let port = be16(v, 2) ^ (MAGIC_COOKIE >> 16) as u16;
    let ip = match (v.get(1), v.len()) {
        (Some(1), 8) => {
            let x = u32::from_be_bytes(v[4..8].try_into().expect("4 bytes"));
            IpAddr::from((x ^ MAGIC_COOKIE).to_be_bytes())
        }
        (Some(2), 20) => {
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
            key[4..].copy_from_slice(&data[8..HEADER_LEN]);
            let mut ip = [0u8; 16];
            for (o, (a, k)) in ip.iter_mut().zip(v[4..].iter().zip(key)) {
                *o = a ^ k;
            }
            IpAddr::from(ip)
        }
        _ => return Err(StunError::Malformed),
    };
    Ok(SocketAddr::new(ip, port))
}

fn hmac(pwd: &str) -> Hmac<Sha1> {
    <Hmac<Sha1> as KeyInit>::new_from_slice(pwd.as_bytes()).expect("HMAC takes any key length")
}

/// The attributes (type, value) of a message's body; stops at a truncated one.
fn attributes(data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = HEADER_LEN;
    std::iter::from_fn(move || {
        let t = be16(data, at);
        let len = be16(data, at + 2) as usize;
        let value = data.get(at + 4..at + 4 + len)?;
        at += 4 + len.next_multiple_of(4);
        Some((t, value))
    })
}

fn be16(data: &[u8], at: usize) -> u16 {
    match data.get(at..at + 2) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => 0,
    }
}

fn put_header(m: &mut Vec<u8>, t: u16, len: u16) {
    m.extend_from_slice(&t.to_be_bytes());
    m.extend_from_slice(&len.to_be_bytes());
}

fn set_len(m: &mut [u8], len: usize) {
    m[2..4].copy_from_slice(&(len as u16).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const PWD: &str = "VOkJxbRl1RmTxUk/WvJxBt";

    /// RFC 5769 §2.1: a Binding request with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME,
    /// MESSAGE-INTEGRITY and FINGERPRINT.
    const REQUEST: [u8; 108] = [
        0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6,
        0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x10, 0x53, 0x54, 0x55, 0x4e, 0x20, 0x74,
        0x65, 0x73, 0x74, 0x20, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x00, 0x24, 0x00, 0x04, 0x6e,
        0x00, 0x01, 0xff, 0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36,
        0x00, 0x06, 0x00, 0x09, 0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76, 0x59, 0x20, 0x20,
        0x20, 0x00, 0x08, 0x00, 0x14, 0x9a, 0xea, 0xa7, 0x0c, 0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e,
        0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49, 0xc1, 0xb5, 0x71, 0xa2, 0x80, 0x28, 0x00, 0x04, 0xe5,
        0x7a, 0x3b, 0xcf,
    ];

    /// RFC 5769 §2.2: the success response, XOR-MAPPED-ADDRESS 192.0.2.1:32853.
    const RESPONSE: [u8; 80] = [
        0x01, 0x01, 0x00, 0x3c, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6,
        0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x0b, 0x74, 0x65, 0x73, 0x74, 0x20, 0x76,
        0x65, 0x63, 0x74, 0x6f, 0x72, 0x20, 0x00, 0x20, 0x00, 0x08, 0x00, 0x01, 0xa1, 0x47, 0xe1,
        0x12, 0xa6, 0x43, 0x00, 0x08, 0x00, 0x14, 0x2b, 0x91, 0xf5, 0x99, 0xfd, 0x9e, 0x90, 0xc3,
        0x8c, 0x74, 0x89, 0xf9, 0x2a, 0xf9, 0xba, 0x53, 0xf0, 0x6b, 0xe7, 0xd7, 0x80, 0x28, 0x00,
        0x04, 0xc0, 0x7d, 0x4c, 0x96,
    ];

    #[test]
    fn rfc5769_request_checks_with_its_password_only() {
        let req = parse_binding_request(&REQUEST, PWD).unwrap();
        assert_eq!(req.username, "evtj:h6vY");
        assert!(!req.use_candidate);
        assert_eq!(req.transaction, REQUEST[8..20]);
        let wrong = parse_binding_request(&REQUEST, "another password");
        assert_eq!(wrong, Err(StunError::Integrity));
        let mut tampered = REQUEST;
        tampered[70] ^= 1; // in the USERNAME
        assert_eq!(
            parse_binding_request(&tampered, PWD),
            Err(StunError::Fingerprint)
        );
        // A forger who also fixes the FINGERPRINT still fails the MAC.
        let fp = crc32fast::hash(&tampered[..100]) ^ FINGERPRINT_XOR;
        tampered[104..].copy_from_slice(&fp.to_be_bytes());
        assert_eq!(
            parse_binding_request(&tampered, PWD),
            Err(StunError::Integrity)
        );
        assert_eq!(
            parse_binding_request(&REQUEST[..100], PWD),
            Err(StunError::Malformed)
        );
    }

    #[test]
    fn rfc5769_response_reads_and_ours_writes_the_same_address() {
        let mapped = parse_binding_success(&RESPONSE, PWD).unwrap();
        assert_eq!(mapped, "192.0.2.1:32853".parse().unwrap());
        let txid: [u8; 12] = RESPONSE[8..20].try_into().unwrap();
        let ours = binding_success(&txid, mapped, PWD);
        // The vector's XOR-MAPPED-ADDRESS attribute, byte for byte (it has SOFTWARE before it).
        assert_eq!(ours[20..32], RESPONSE[36..48]);
        assert_eq!(parse_binding_success(&ours, PWD), Ok(mapped));
        assert_eq!(parse_binding_success(&ours, "x"), Err(StunError::Integrity));
    }

    #[test]
    fn rfc5769_ipv6_mapped_address_round_trips() {
        // RFC 5769 §2.3's address; its XOR-MAPPED-ADDRESS value bytes.
        let addr: SocketAddr = "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
            .parse()
            .unwrap();
        let txid: [u8; 12] = RESPONSE[8..20].try_into().unwrap();
        let ours = binding_success(&txid, addr, PWD);
        let value = &ours[24..44];
        let expected = [
            0x00, 0x02, 0xa1, 0x47, 0x01, 0x13, 0xa9, 0xfa, 0xa5, 0xd3, 0xf1, 0x79, 0xbc, 0x25,
            0xf4, 0xb5, 0xbe, 0xd2, 0xb9, 0xd9,
        ];
        assert_eq!(value, expected);
        assert_eq!(parse_binding_success(&ours, PWD), Ok(addr));
    }

    #[test]
    fn our_request_round_trips_with_use_candidate() {
        let txid = [7u8; 12];
        let m = binding_request(&txid, "ours:theirs", true, "pwd-of-ours");
        let req = parse_binding_request(&m, "pwd-of-ours").unwrap();
        assert_eq!(
            req,
            BindingRequest {
                transaction: txid,
                username: "ours:theirs",
                use_candidate: true
            }
        );
        assert_eq!(message_type(&m[..m.len() - 1]), None);
    }
}
