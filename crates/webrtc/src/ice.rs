//! ICE-lite (RFC 8445 §2.5): strowger has one host candidate per leg and only answers the
//! connectivity checks of the full agent on the other side (a browser). A check whose
//! MESSAGE-INTEGRITY holds with our ice-pwd and whose USERNAME names us proves the source
//! holds the SDP's credentials: only such a source may carry the leg's DTLS and SRTP.

use std::net::SocketAddr;

use crate::stun::{self, StunError};

/// ice-char (RFC 8839 §5.4): ALPHA / DIGIT / "+" / "/".
const ICE_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// An agent's `a=ice-ufrag` and `a=ice-pwd`.
#[derive(Clone, PartialEq, Eq)]
pub struct IceCredentials {
    pub ufrag: String,
    pub pwd: String,
}

impl IceCredentials {
    /// Fresh credentials from the operating system's CSPRNG: 8 ufrag characters, and 24 for
    /// the password (at least the 22 RFC 8839 asks, 128 bits).
    pub fn random() -> IceCredentials {
        IceCredentials {
            ufrag: random_chars(8),
            pwd: random_chars(24),
        }
    }
}

impl std::fmt::Debug for IceCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IceCredentials {{ ufrag: {}, pwd: <redacted> }}",
            self.ufrag
        )
    }
}

fn random_chars(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes
        .iter()
        .map(|b| ICE_CHARS[(*b & 63) as usize] as char)
        .collect()
}

/// The lite agent of one leg.
#[derive(Debug)]
pub struct IceLite {
    local: IceCredentials,
    /// The far end's ufrag; `None` while its answer is on the way (its checks may come first).
    remote_ufrag: Option<String>,
    /// Sources whose checks passed, oldest first.
    checked: Vec<SocketAddr>,
    nominated: Option<SocketAddr>,
}

/// How many checked sources a leg keeps (a browser checks one pair per local candidate).
const MAX_CHECKED: usize = 8;

impl IceLite {
    pub fn new(local: IceCredentials, remote_ufrag: Option<String>) -> IceLite {
        IceLite {
            local,
            remote_ufrag,
            checked: Vec::new(),
            nominated: None,
        }
    }

    pub fn set_remote_ufrag(&mut self, ufrag: String) {
        self.remote_ufrag = Some(ufrag);
    }

    /// A STUN datagram from `src`: the signed success response for a valid check, or why it
    /// is refused (a refused check gets no answer, so a prober learns nothing).
    pub fn on_stun(&mut self, data: &[u8], src: SocketAddr) -> Result<Vec<u8>, StunError> {
        let req = stun::parse_binding_request(data, &self.local.pwd)?;
        let (ours, theirs) = req.username.split_once(':').ok_or(StunError::Integrity)?;
        if ours != self.local.ufrag || self.remote_ufrag.as_deref().is_some_and(|r| r != theirs) {
            return Err(StunError::Integrity);
        }
        if !self.checked.contains(&src) {
            if self.checked.len() == MAX_CHECKED {
                self.checked.remove(0);
            }
            self.checked.push(src);
        }
        if req.use_candidate {
            self.nominated = Some(src);
        }
        Ok(stun::binding_success(
            &req.transaction,
            src,
            &self.local.pwd,
        ))
    }

    /// Whether `src` passed a check.
    pub fn checked(&self, src: SocketAddr) -> bool {
        self.checked.contains(&src)
    }

    /// Where media goes: the nominated pair, else the latest source that passed a check.
    pub fn selected(&self) -> Option<SocketAddr> {
        self.nominated.or(self.checked.last().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(ufrag: &str) -> IceCredentials {
        IceCredentials {
            ufrag: ufrag.into(),
            pwd: "a-password-of-22-chars".into(),
        }
    }

    #[test]
    fn a_check_with_our_credentials_is_answered_and_nominates() {
        let mut ice = IceLite::new(creds("ours"), Some("theirs".into()));
        let src: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let pwd = "a-password-of-22-chars";
        let check = stun::binding_request(&[1; 12], "ours:theirs", false, pwd);
        let reply = ice.on_stun(&check, src).unwrap();
        assert_eq!(stun::parse_binding_success(&reply, pwd), Ok(src));
        assert!(ice.checked(src));
        assert_eq!(ice.selected(), Some(src));
        let other: SocketAddr = "192.0.2.8:5000".parse().unwrap();
        let nominate = stun::binding_request(&[2; 12], "ours:theirs", true, pwd);
        ice.on_stun(&nominate, other).unwrap();
        let late = stun::binding_request(&[3; 12], "ours:theirs", false, pwd);
        ice.on_stun(&late, "192.0.2.9:5000".parse().unwrap())
            .unwrap();
        assert_eq!(ice.selected(), Some(other), "the nominated pair stays");
    }

    #[test]
    fn checks_naming_others_or_signed_otherwise_are_refused() {
        let mut ice = IceLite::new(creds("ours"), Some("theirs".into()));
        let src: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let pwd = "a-password-of-22-chars";
        for (user, key) in [
            ("other:theirs", pwd),
            ("ours:stranger", pwd),
            ("ours:theirs", "another-password-here!"),
        ] {
            let check = stun::binding_request(&[1; 12], user, true, key);
            assert!(ice.on_stun(&check, src).is_err(), "{user}");
        }
        assert!(!ice.checked(src));
        assert_eq!(ice.selected(), None);
        // Before the far end's ufrag is known, our own part is what is checked.
        let mut early = IceLite::new(creds("ours"), None);
        let check = stun::binding_request(&[1; 12], "ours:anyone", false, pwd);
        assert!(early.on_stun(&check, src).is_ok());
    }
}
