//! A leg's SRTP (RFC 3711): the two contexts that protect what it sends and unprotect what it
//! receives, made from the keys its SDP agreed. A plain-RTP leg has none, and pays one branch
//! per packet for the option.

use sdp::{CryptoSuite, SrtpKeys};
use srtp::{Context, Direction, Suite};

pub(crate) struct LegSrtp {
    /// What the contexts were made from: a re-INVITE with the same keys keeps them (and their
    /// replay windows and rollover counters).
    keys: SrtpKeys,
    pub(crate) tx: Context,
    pub(crate) rx: Context,
}

impl LegSrtp {
    pub(crate) fn new(keys: &SrtpKeys) -> Result<LegSrtp, srtp::Error> {
        let suite = match keys.suite {
            CryptoSuite::AesCm128HmacSha1_80 => Suite::AesCm128HmacSha1_80,
            CryptoSuite::AesCm128HmacSha1_32 => Suite::AesCm128HmacSha1_32,
            CryptoSuite::AeadAes128Gcm => Suite::AeadAes128Gcm,
        };
        Ok(LegSrtp {
            keys: keys.clone(),
            tx: Context::new(suite, &keys.local, Direction::Outbound)?,
            rx: Context::new(suite, &keys.remote, Direction::Inbound)?,
        })
    }

    pub(crate) fn keyed_with(&self, keys: &SrtpKeys) -> bool {
        self.keys == *keys
    }
}
