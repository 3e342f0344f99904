//! The signature on strowger's own Record-Route. A Route naming strowger is loose-routed only
//! for the dialog strowger record-routed itself: the `rr` parameter is a MAC, under a key of
//! this process, of the dialog's Call-ID, its caller's From tag and the two hosts the dialog runs
//! between (the IP address the INVITE came from, the one strowger sent it to). An in-dialog
//! request passes when one of its tags and the pair (its source, where it would go next) give
//! that MAC, so neither a Route copied from another dialog, nor forged tags, nor a dialog of
//! one's own pointed at a third host make strowger relay. Addresses, not ports: a caller over TCP
//! sends from another port than its Contact names, and requests towards it go to the Contact. Nothing is kept per dialog: any worker
//! checks any Route, and what a restart loses is only the key (dialogs in progress then get
//! 403 for their in-dialog requests, as their B2BUA calls would end).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::net::IpAddr;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of MAC kept in the parameter (hex, 24 digits): 96 bits are far beyond guessing by
/// sending requests.
const MAC_BYTES: usize = 12;

/// Signs and checks the `rr` parameter of strowger's Record-Route.
#[derive(Clone)]
pub(crate) struct RouteKey {
    keyed: HmacSha256,
}

impl RouteKey {
    /// A key of its own derived from the registrar's per-process secret (which every worker
    /// shares), so that no nonce MAC is ever a valid Route and the reverse.
    pub(crate) fn new(secret: &[u8; 32]) -> RouteKey {
        let mut derive =
            <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
        derive.update(b"strowger record-route key");
        let key = derive.finalize().into_bytes();
        RouteKey {
            keyed: <HmacSha256 as KeyInit>::new_from_slice(&key)
                .expect("HMAC takes any key length"),
        }
    }

    /// The MAC of a dialog between hosts `a` and `b` (in either order), in hex.
    pub(crate) fn sign(&self, call_id: &str, tag: &str, a: IpAddr, b: IpAddr) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(2 * MAC_BYTES);
        for b in self.mac(call_id, tag, a, b) {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
        out
    }

    /// Whether `sig` is the MAC of this dialog for one of `tags`.
    pub(crate) fn verify(
        &self,
        sig: &str,
        call_id: &str,
        tags: &[&str],
        a: IpAddr,
        b: IpAddr,
    ) -> bool {
        let Some(sig) = unhex(sig) else {
            return false;
        };
        tags.iter()
            .any(|t| bool::from(self.mac(call_id, t, a, b).ct_eq(&sig)))
    }

    /// The kept bytes of the MAC. Each part is length-prefixed, so that no two different inputs
    /// run together alike; the addresses go in as their octets (IPv4-mapped IPv6 as IPv4).
    fn mac(&self, call_id: &str, tag: &str, a: IpAddr, b: IpAddr) -> [u8; MAC_BYTES] {
        let ((a, a_len), (b, b_len)) = (octets(a), octets(b));
        let (a, b) = (&a[..a_len], &b[..b_len]);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut mac = self.keyed.clone();
        for part in [call_id.as_bytes(), tag.as_bytes(), lo, hi] {
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        let d = mac.finalize().into_bytes();
        let mut kept = [0; MAC_BYTES];
        kept.copy_from_slice(&d[..MAC_BYTES]);
        kept
    }
}

/// An address's octets and how many there are, IPv4-mapped IPv6 as IPv4.
fn octets(ip: IpAddr) -> ([u8; 16], usize) {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let mut o = [0; 16];
            o[..4].copy_from_slice(&v4.octets());
            (o, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 16),
    }
}

/// The MAC bytes of an `rr` parameter, or None if it is not MAC_BYTES in hex.
fn unhex(sig: &str) -> Option<[u8; MAC_BYTES]> {
    let s = sig.as_bytes();
    if s.len() != 2 * MAC_BYTES {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0; MAC_BYTES];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *o = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_signature_holds_for_its_dialog_and_endpoints_only() {
        let k = RouteKey::new(&[7; 32]);
        let (alice, bob, eve) = (addr("127.0.0.1"), addr("127.0.0.2"), addr("127.0.0.9"));
        let sig = k.sign("c1@x", "ftag", alice, bob);
        assert_eq!(sig.len(), 2 * MAC_BYTES);
        // Either direction, and the tag found among the request's.
        assert!(k.verify(&sig, "c1@x", &["ttag", "ftag"], bob, alice));
        assert!(k.verify(&sig, "c1@x", &["ftag", "x"], alice, bob));
        assert!(k.verify(&sig, "c1@x", &["ftag"], addr("::ffff:127.0.0.1"), bob));
        // Another dialog, forged tags, a third address, another process's key.
        assert!(!k.verify(&sig, "c2@x", &["ftag"], alice, bob));
        assert!(!k.verify(&sig, "c1@x", &["forged", "ttag"], alice, bob));
        assert!(!k.verify(&sig, "c1@x", &["ftag"], alice, eve));
        assert!(!RouteKey::new(&[8; 32]).verify(&sig, "c1@x", &["ftag"], alice, bob));
        assert!(!k.verify("", "c1@x", &["ftag"], alice, bob));
    }
}
