//! `[sip]` TLS keys: the certificate strowger presents, whom it asks for client certificates,
//! which authorities it trusts for trunks, and how long a handshake may take.

use super::raw::RawSip;
use super::{bounded, Diagnostics};
use std::path::PathBuf;
use std::time::Duration;

/// TLS settings (the shell's `sip_io::tls` builds rustls configurations from them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// PEM certificate chain and private key; None: a self-signed pair generated into
    /// `general.data_dir` on first start.
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// PEM authorities that must have signed a client's certificate; None: none is asked for.
    pub client_ca: Option<PathBuf>,
    /// PEM authorities trusted for trunks' certificates, besides the system's.
    pub ca: Option<PathBuf>,
    /// A connection whose handshake has not finished this long after it opened is closed.
    pub handshake: Duration,
}

pub(crate) fn tls(raw: &RawSip, d: &mut Diagnostics) -> Tls {
    let path = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).map(PathBuf::from);
    let cert_key = match (path(&raw.tls_cert), path(&raw.tls_key)) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => {
            d.error(
                "sip.tls_key",
                "must be set with sip.tls_cert (the certificate's private key, PEM)",
            );
            None
        }
        (None, Some(_)) => {
            d.error(
                "sip.tls_cert",
                "must be set with sip.tls_key (the key's certificate chain, PEM)",
            );
            None
        }
    };
    let handshake = bounded(d, "sip.tls_handshake_s", raw.tls_handshake_s, 1, 300);
    Tls {
        cert_key,
        client_ca: path(&raw.tls_client_ca),
        ca: path(&raw.tls_ca),
        handshake: Duration::from_secs(handshake),
    }
}
