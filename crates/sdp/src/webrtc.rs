//! The SDP of a WebRTC stream (RFC 8829's JSEP as a browser speaks it): `UDP/TLS/RTP/SAVPF`,
//! ICE credentials and candidates (RFC 8839), the DTLS certificate's fingerprint and role
//! (RFC 8122, RFC 5763), rtcp-mux (RFC 5761) and a BUNDLE group of the one audio stream
//! (RFC 8843). `a=rtcp-fb`, `a=extmap`, `a=ssrc` and the like are kept verbatim and ignored.

use std::net::IpAddr;

use crate::model::{Attribute, Media, SessionDescription};

pub(crate) const UDP_TLS_RTP_SAVPF: &str = "UDP/TLS/RTP/SAVPF";
/// The `a=mid` of our offers.
const OUR_MID: &str = "0";
/// A host candidate's priority for component 1 (RFC 8445 §5.1.2.1: type preference 126,
/// local preference 65535).
const HOST_PRIORITY: u32 = 2_130_706_431;

/// Our side of WebRTC streams: what goes in our offers and answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebRtcLocal {
    pub ufrag: String,
    pub pwd: String,
    /// `a=fingerprint` value: `sha-256 AB:CD:…`.
    pub fingerprint: String,
    /// The host candidate's address (`rtp.webrtc_public_address`); `None` is the session's.
    pub candidate: Option<IpAddr>,
}

/// `a=setup` (RFC 4145 §4): who opens the DTLS association.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    Active,
    Passive,
    ActPass,
}

/// What the far end's SDP said of its WebRTC stream, and our DTLS role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebRtcRemote {
    pub ufrag: String,
    pub pwd: String,
    /// Its `a=fingerprint` value.
    pub fingerprint: String,
    /// We are the DTLS client (`a=setup:active` on our side).
    pub dtls_client: bool,
}

impl Media {
    /// A WebRTC stream (`UDP/TLS/RTP/SAVPF`).
    pub fn is_webrtc(&self) -> bool {
        self.proto == UDP_TLS_RTP_SAVPF
    }

    /// An `a=` value of this stream, falling back to the session level.
    fn value<'a>(&'a self, session: &'a SessionDescription, name: &str) -> Option<&'a str> {
        let find = |attrs: &'a [Attribute]| {
            attrs.iter().find_map(|a| match a {
                Attribute::Other { name: n, value } if n == name => value.as_deref(),
                _ => None,
            })
        };
        find(&self.attributes).or_else(|| find(&session.attributes))
    }

    fn has(&self, name: &str) -> bool {
        self.attributes
            .iter()
            .any(|a| matches!(a, Attribute::Other { name: n, .. } if n == name))
    }
}

/// The far end's WebRTC parameters of stream `m`; `None` when one is missing (or it does not
/// multiplex RTCP, which every browser does).
pub(crate) fn remote(
    sdp: &SessionDescription,
    m: &Media,
    we_offered: bool,
) -> Option<WebRtcRemote> {
    let setup = match m.value(sdp, "setup")? {
        "active" => Setup::Active,
        "passive" => Setup::Passive,
        "actpass" => Setup::ActPass,
        _ => return None,
    };
    // An offer's actpass lets us choose: we answer passive and the browser connects. To our
    // actpass, the answer chooses; an answer of actpass (not allowed) makes us the client.
    let dtls_client = match (we_offered, setup) {
        (_, Setup::Passive) => true,
        (_, Setup::Active) => false,
        (offered, Setup::ActPass) => offered,
    };
    if !m.has("rtcp-mux") {
        return None;
    }
    Some(WebRtcRemote {
        ufrag: m.value(sdp, "ice-ufrag")?.to_owned(),
        pwd: m.value(sdp, "ice-pwd")?.to_owned(),
        fingerprint: m
            .value(sdp, "fingerprint")
            .filter(|f| is_fingerprint(f))?
            .to_owned(),
        dtls_client,
    })
}

/// `hash-func SP hex:hex:…` (RFC 8122 §5).
fn is_fingerprint(value: &str) -> bool {
    value.split_once(' ').is_some_and(|(hash, hex)| {
        !hash.is_empty()
            && hex
                .split(':')
                .all(|b| b.len() == 2 && b.bytes().all(|c| c.is_ascii_hexdigit()))
    })
}

/// The `a=mid` of stream `m`.
pub(crate) fn mid(m: &Media) -> Option<&str> {
    m.attributes.iter().find_map(|a| match a {
        Attribute::Other { name, value } if name == "mid" => value.as_deref(),
        _ => None,
    })
}

impl WebRtcLocal {
    /// Our stream's attributes after its codecs: mid, rtcp-mux, ICE, DTLS and the candidate.
    pub(crate) fn attributes(
        &self,
        mid: &str,
        setup: Setup,
        addr: IpAddr,
        port: u16,
    ) -> Vec<Attribute> {
        let setup = match setup {
            Setup::Active => "active",
            Setup::Passive => "passive",
            Setup::ActPass => "actpass",
        };
        let addr = self.candidate.unwrap_or(addr);
        let candidate = format!("1 1 udp {HOST_PRIORITY} {addr} {port} typ host");
        vec![
            other("mid", Some(mid)),
            other("rtcp-mux", None),
            other("ice-ufrag", Some(&self.ufrag)),
            other("ice-pwd", Some(&self.pwd)),
            other("fingerprint", Some(&self.fingerprint)),
            other("setup", Some(setup)),
            other("candidate", Some(&candidate)),
            other("end-of-candidates", None),
        ]
    }

    /// The session-level attributes of an SDP whose stream `mid` is WebRTC.
    pub(crate) fn session_attributes(mid: &str) -> Vec<Attribute> {
        vec![
            other("ice-lite", None),
            other("group", Some(&format!("BUNDLE {mid}"))),
        ]
    }

    pub(crate) fn offer_mid() -> &'static str {
        OUR_MID
    }
}

fn other(name: &str, value: Option<&str>) -> Attribute {
    Attribute::Other {
        name: name.to_owned(),
        value: value.map(str::to_owned),
    }
}
