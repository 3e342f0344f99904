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

    /// The MAC of a dialog between hosts `a` and `b` (in either order).
    pub(crate) fn sign(&self, call_id: &str, tag: &str, a: IpAddr, b: IpAddr) -> String {
        let (a, b) = (a.to_canonical(), b.to_canonical());
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut mac = self.keyed.clone();
        for part in [call_id, tag, &lo.to_string(), &hi.to_string()] {
            // Length-prefixed, so that no two different inputs run together alike.
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part.as_bytes());
        }
        let d = mac.finalize().into_bytes();
        d[..MAC_BYTES].iter().map(|b| format!("{b:02x}")).collect()
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
        tags.iter().any(|t| {
            let want = self.sign(call_id, t, a, b);
            bool::from(want.as_bytes().ct_eq(sig.as_bytes()))
        })
    }
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
