//! A leg's SRTP (RFC 3711): the two contexts that protect what it sends and unprotect what it
//! receives, made from the keys its SDP agreed. A plain-RTP leg has none, and pays one branch
//! per packet for the option.

use sdp::{CryptoSuite, SrtpKeys};
use srtp::{Context, Direction, Suite};

pub(crate) struct LegSrtp {
    /// What the contexts were made from: a re-INVITE keeps each direction whose key is the
    /// same (and its replay window and rollover counter).
    keys: SrtpKeys,
    pub(crate) tx: Context,
    pub(crate) rx: Context,
}

impl LegSrtp {
    pub(crate) fn new(keys: &SrtpKeys) -> Result<LegSrtp, srtp::Error> {
        Ok(LegSrtp {
            keys: keys.clone(),
            tx: context(keys, Direction::Outbound)?,
            rx: context(keys, Direction::Inbound)?,
        })
    }

    /// New keys from a re-INVITE: a direction whose suite and key did not change keeps its
    /// context, so its rollover counter stays in step with the far end past 65,536 packets.
    /// Err leaves both as they were.
    pub(crate) fn rekey(&mut self, keys: &SrtpKeys) -> Result<(), srtp::Error> {
        let suite = keys.suite == self.keys.suite;
        let tx = (!suite || keys.local != self.keys.local)
            .then(|| context(keys, Direction::Outbound))
            .transpose()?;
        let rx = (!suite || keys.remote != self.keys.remote)
            .then(|| context(keys, Direction::Inbound))
            .transpose()?;
        if let Some(tx) = tx {
            self.tx = tx;
        }
        if let Some(rx) = rx {
            self.rx = rx;
        }
        self.keys = keys.clone();
        Ok(())
    }
}

/// The context of one direction: ours protect with our key, the far end's unprotect with its.
fn context(keys: &SrtpKeys, direction: Direction) -> Result<Context, srtp::Error> {
    let suite = match keys.suite {
        CryptoSuite::AesCm128HmacSha1_80 => Suite::AesCm128HmacSha1_80,
        CryptoSuite::AesCm128HmacSha1_32 => Suite::AesCm128HmacSha1_32,
        CryptoSuite::AeadAes128Gcm => Suite::AeadAes128Gcm,
    };
    let key = match direction {
        Direction::Outbound => &keys.local,
        Direction::Inbound => &keys.remote,
    };
    Context::new(suite, key, direction)
}
