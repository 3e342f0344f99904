//! Stateless call tokens (the CALLTOKEN handshake chan_iax2 added against spoofed-source call
//! number exhaustion and traffic amplification). A token is the issue time in seconds since the
//! endpoint started and a truncated HMAC of (peer address, port, time) under a per-process
//! secret, as 24 hex characters. Nothing is stored per token: checking recomputes the MAC.

use crate::md5::{hex, hmac_md5};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Length of an issued token in octets.
pub const TOKEN_LEN: usize = 24;

pub struct TokenIssuer {
    secret: [u8; 16],
    epoch: Instant,
    lifetime: Duration,
}

impl TokenIssuer {
    pub fn new(secret: [u8; 16], epoch: Instant, lifetime: Duration) -> TokenIssuer {
        TokenIssuer {
            secret,
            epoch,
            lifetime,
        }
    }

    fn secs(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_secs() as u32
    }

    fn mac(&self, peer: SocketAddr, secs: u32) -> String {
        let ip = match peer.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let m = hmac_md5(
            &self.secret,
            &[&ip, &peer.port().to_be_bytes(), &secs.to_be_bytes()],
        );
        hex(&m[..8])
    }

    /// A token for `peer`, valid for the lifetime from now.
    pub fn issue(&self, peer: SocketAddr, now: Instant) -> String {
        let secs = self.secs(now);
        format!("{secs:08x}{}", self.mac(peer, secs))
    }

    /// Whether `token` was issued by this endpoint to `peer` within the lifetime.
    pub fn check(&self, peer: SocketAddr, token: &[u8], now: Instant) -> bool {
        if token.len() != TOKEN_LEN {
            return false;
        }
        let Ok(ts_hex) = std::str::from_utf8(&token[..8]) else {
            return false;
        };
        let Ok(secs) = u32::from_str_radix(ts_hex, 16) else {
            return false;
        };
        let now_secs = self.secs(now);
        if secs > now_secs || u64::from(now_secs - secs) > self.lifetime.as_secs() {
            return false;
        }
        bool::from(self.mac(peer, secs).as_bytes().ct_eq(&token[8..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_bind_address_and_expire() {
        let t0 = Instant::now();
        let iss = TokenIssuer::new([7; 16], t0, Duration::from_secs(10));
        let a: SocketAddr = "192.0.2.1:4569".parse().unwrap();
        let b: SocketAddr = "192.0.2.1:4570".parse().unwrap();
        let tok = iss.issue(a, t0 + Duration::from_secs(3));
        assert_eq!(tok.len(), TOKEN_LEN);
        assert!(iss.check(a, tok.as_bytes(), t0 + Duration::from_secs(3)));
        assert!(iss.check(a, tok.as_bytes(), t0 + Duration::from_secs(13)));
        assert!(!iss.check(a, tok.as_bytes(), t0 + Duration::from_secs(14)));
        assert!(!iss.check(b, tok.as_bytes(), t0 + Duration::from_secs(3)));
        // Issued "in the future" or by another secret: refused.
        assert!(!iss.check(a, tok.as_bytes(), t0));
        let other = TokenIssuer::new([8; 16], t0, Duration::from_secs(10));
        assert!(!other.check(a, tok.as_bytes(), t0 + Duration::from_secs(3)));
        let mut forged = tok.clone().into_bytes();
        forged[20] ^= 1;
        assert!(!iss.check(a, &forged, t0 + Duration::from_secs(3)));
        assert!(!iss.check(a, b"", t0));
        assert!(!iss.check(a, "\u{e9}".repeat(12).as_bytes(), t0));
    }
}
