//! SDES `a=crypto:` lines (RFC 4568): the SRTP keys of one stream, offered and
//! answered in the SDP itself. They are only worth anything when the SDP travels
//! encrypted (SIP over TLS), which is the caller's policy, not the parser's.

use std::fmt::{self, Display, Formatter};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The crypto suites SRTP legs can use (RFC 4568 §6.2, RFC 7714 §14.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CryptoSuite {
    AesCm128HmacSha1_80,
    AesCm128HmacSha1_32,
    AeadAes128Gcm,
}

impl CryptoSuite {
    /// Preference order for offers and for picking one of several offered lines.
    pub const ALL: [CryptoSuite; 3] = [
        CryptoSuite::AesCm128HmacSha1_80,
        CryptoSuite::AesCm128HmacSha1_32,
        CryptoSuite::AeadAes128Gcm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CryptoSuite::AesCm128HmacSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            CryptoSuite::AesCm128HmacSha1_32 => "AES_CM_128_HMAC_SHA1_32",
            CryptoSuite::AeadAes128Gcm => "AEAD_AES_128_GCM",
        }
    }

    fn from_name(name: &str) -> Option<CryptoSuite> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Master key plus master salt, in bytes: 16 + 14 for AES-CM, 16 + 12 for GCM.
    pub fn key_len(self) -> usize {
        match self {
            CryptoSuite::AesCm128HmacSha1_80 | CryptoSuite::AesCm128HmacSha1_32 => 30,
            CryptoSuite::AeadAes128Gcm => 28,
        }
    }
}

/// One `a=crypto:` line with a single inline key. Lines with unknown suites,
/// several keys or a key of the wrong length stay `Attribute::Other`, so an
/// answer never picks a key it cannot use.
#[derive(Clone, PartialEq, Eq)]
pub struct Crypto {
    pub tag: u32,
    pub suite: CryptoSuite,
    /// Master key followed by master salt, `suite.key_len()` bytes.
    pub key: Vec<u8>,
    /// `|lifetime` and `|MKI:length`, kept verbatim for the SRTP layer.
    pub lifetime: Option<String>,
    pub mki: Option<String>,
    /// Session parameters (UNENCRYPTED_SRTP, KDR=…); kept so a caller can refuse them.
    pub params: Vec<String>,
}

impl Crypto {
    pub fn new(tag: u32, suite: CryptoSuite, key: Vec<u8>) -> Crypto {
        Crypto {
            tag,
            suite,
            key,
            lifetime: None,
            mki: None,
            params: Vec::new(),
        }
    }

    /// `<tag> <suite> inline:<key||salt>[|lifetime][|mki:len] [params]`.
    pub(crate) fn parse(arg: &str) -> Option<Crypto> {
        let mut f = arg.split_ascii_whitespace();
        let tag = f.next()?.parse().ok()?;
        let suite = CryptoSuite::from_name(f.next()?)?;
        let key_params = f.next()?;
        if key_params.contains(';') {
            return None;
        }
        let mut parts = key_params.strip_prefix("inline:")?.split('|');
        let key = STANDARD.decode(parts.next()?).ok()?;
        if key.len() != suite.key_len() {
            return None;
        }
        let (mut lifetime, mut mki) = (None, None);
        for part in parts {
            let slot = if part.contains(':') {
                &mut mki
            } else {
                &mut lifetime
            };
            if slot.replace(part.to_owned()).is_some() || part.is_empty() {
                return None;
            }
        }
        Some(Crypto {
            tag,
            suite,
            key,
            lifetime,
            mki,
            params: f.map(str::to_owned).collect(),
        })
    }
}

/// The keys one SDES exchange agreed for a stream: ours protect what we send, the far
/// end's unprotect what it sends.
#[derive(Clone, PartialEq, Eq)]
pub struct SrtpKeys {
    pub suite: CryptoSuite,
    pub local: Vec<u8>,
    pub remote: Vec<u8>,
}

impl fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "SrtpKeys({:?}, <redacted>)", self.suite)
    }
}

/// Keys never reach a log through `{:?}`.
impl fmt::Debug for Crypto {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crypto")
            .field("tag", &self.tag)
            .field("suite", &self.suite)
            .field("key", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .field("mki", &self.mki)
            .field("params", &self.params)
            .finish()
    }
}

impl Display for Crypto {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crypto:{} {} inline:{}",
            self.tag,
            self.suite.as_str(),
            STANDARD.encode(&self.key)
        )?;
        for part in self.lifetime.iter().chain(&self.mki) {
            write!(f, "|{part}")?;
        }
        self.params.iter().try_for_each(|p| write!(f, " {p}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attribute, SessionDescription};

    // RFC 4568 §4's example key (30 bytes: 16 key + 14 salt).
    const RFC_KEY: &str = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";

    fn sdp(media_attrs: &str) -> SessionDescription {
        let body = format!(
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
             m=audio 4000 RTP/SAVP 0\r\n{media_attrs}"
        );
        SessionDescription::parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn rfc_example_parses_and_round_trips() {
        let line = format!("1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:4");
        let c = Crypto::parse(&line).unwrap();
        assert_eq!(c.tag, 1);
        assert_eq!(c.suite, CryptoSuite::AesCm128HmacSha1_80);
        assert_eq!(c.key.len(), 30);
        assert_eq!(c.lifetime.as_deref(), Some("2^20"));
        assert_eq!(c.mki.as_deref(), Some("1:4"));
        assert_eq!(c.to_string(), format!("crypto:{line}"));
    }

    #[test]
    fn all_suites_are_typed_in_a_media_section() {
        let gcm = STANDARD.encode([7u8; 28]);
        let m = sdp(&format!(
            "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}\r\n\
             a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY} UNENCRYPTED_SRTCP\r\n\
             a=crypto:3 AEAD_AES_128_GCM inline:{gcm}\r\n"
        ));
        let media = &m.media[0];
        let suites: Vec<_> = media.crypto().map(|c| c.suite).collect();
        assert_eq!(suites, CryptoSuite::ALL);
        assert_eq!(media.crypto().nth(1).unwrap().params, ["UNENCRYPTED_SRTCP"]);
        assert!(media.is_secure());
        let reparsed = SessionDescription::parse(m.to_string().as_bytes()).unwrap();
        assert_eq!(reparsed, m);
    }

    #[test]
    fn unusable_lines_stay_verbatim() {
        let short = STANDARD.encode([1u8; 16]);
        for bad in [
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{short}"),
            format!("1 F8_128_HMAC_SHA1_80 inline:{RFC_KEY}"),
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY};inline:{RFC_KEY}"),
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|2^31"),
            "x AES_CM_128_HMAC_SHA1_80 inline:!!!".to_owned(),
            "1 AES_CM_128_HMAC_SHA1_80".to_owned(),
        ] {
            let m = sdp(&format!("a=crypto:{bad}\r\n"));
            assert_eq!(m.media[0].crypto().count(), 0, "{bad}");
            assert_eq!(
                m.media[0].attributes[0],
                Attribute::Other {
                    name: "crypto".into(),
                    value: Some(bad)
                }
            );
        }
    }

    #[test]
    fn debug_output_hides_the_key() {
        let c = Crypto::new(1, CryptoSuite::AeadAes128Gcm, vec![0xab; 28]);
        let shown = format!("{c:?}");
        assert!(
            shown.contains("redacted") && !shown.contains("171"),
            "{shown}"
        );
    }

    #[test]
    fn plain_profile_is_not_secure() {
        let body = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
        let m = SessionDescription::parse(body.as_bytes()).unwrap();
        assert!(!m.media[0].is_secure());
    }
}
