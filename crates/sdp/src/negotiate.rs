//! RFC 3264 offer/answer for one audio stream per call leg.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::codec::{Caps, Codec};
use crate::crypto::{Crypto, CryptoSuite, SrtpKeys};
use crate::model::{Attribute, Direction, Media, Origin, SessionDescription};
use crate::webrtc::{self, Setup, WebRtcLocal, WebRtcRemote, UDP_TLS_RTP_SAVPF};
use crate::write::addr_type;

/// Packetization used when the remote states no `a=ptime` (RFC 3551 default for G.711).
const DEFAULT_PTIME_MS: u32 = 20;
const TELEPHONE_EVENT: &str = "telephone-event";
/// DTMF 0-9 * # A-D and flash (RFC 4733 §3.2).
const DTMF_EVENTS: &str = "0-16";
const RTP_AVP: &str = "RTP/AVP";
const RTP_SAVP: &str = "RTP/SAVP";

/// What both sides agreed for the audio stream, from the local side's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Payload type to send the codec with (the offerer's number).
    pub pt: u8,
    pub codec: Codec,
    /// telephone-event payload type at the codec's clock, if both sides do RFC 4733.
    pub dtmf_pt: Option<u8>,
    /// Where to send RTP: the stream's (or session's) `c=` address and `m=` port.
    pub remote: SocketAddr,
    /// `a=rtcp` when present (RFC 3605), else the RTP port + 1.
    pub remote_rtcp: SocketAddr,
    /// Our direction: `RecvOnly` means receive but do not send.
    pub direction: Direction,
    /// Packetization the remote asked to receive, in milliseconds.
    pub ptime: u32,
    /// SRTP keys agreed by SDES; `None` for plain RTP.
    pub srtp: Option<SrtpKeys>,
    /// A WebRTC stream: the far end's ICE credentials and certificate, and our DTLS role. Its
    /// media goes where ICE checks come from, not to `remote`.
    pub webrtc: Option<WebRtcRemote>,
}

/// Why no audio stream could be set up; a UAS answers the INVITE with 488.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegotiationError {
    /// No RTP/AVP audio stream offers a codec in the local capabilities.
    NoCommonCodec,
    /// The chosen stream has neither a media- nor a session-level `c=`.
    NoConnectionAddress,
    /// A codec matched, but the stream's security did not: RTP/SAVP on a session without
    /// SDES, plain RTP where SRTP is required, no usable `a=crypto` key, or a WebRTC stream
    /// on a session that does not take WebRTC or without its ICE, DTLS and rtcp-mux lines.
    Srtp,
}

impl fmt::Display for NegotiationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NegotiationError::NoCommonCodec => "no common audio codec",
            NegotiationError::NoConnectionAddress => "audio stream without connection address",
            NegotiationError::Srtp => "no acceptable SRTP key exchange for the audio stream",
        })
    }
}

impl std::error::Error for NegotiationError {}

/// The local side of one SDP session: a stable `o=` session id and a version that
/// goes up by one whenever the SDP we send changes (RFC 3264 §8), and only then,
/// so a session-timer refresh re-sends an identical body.
#[derive(Clone, Debug)]
pub struct LocalSession {
    id: u64,
    version: u64,
    addr: IpAddr,
    last: Option<SessionDescription>,
    sdes: Option<Sdes>,
    webrtc: Option<WebRtcLocal>,
    /// SRTP or nothing: plain RTP offers and answers are refused, whichever way the session
    /// keys (SDES offers then say RTP/SAVP).
    require_srtp: bool,
}

/// SRTP keyed in the SDP (RFC 4568), for a session whose signalling is encrypted.
#[derive(Clone)]
struct Sdes {
    /// Our master key and salt, as long as the longest suite's; shorter suites take its prefix.
    key: Vec<u8>,
}

impl fmt::Debug for Sdes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sdes { key: <redacted> }")
    }
}

impl LocalSession {
    /// `id` should be unique per call (the caller picks it; no clock is read here).
    /// `addr` is both the `o=` and the `c=` address.
    pub fn new(id: u64, addr: IpAddr) -> LocalSession {
        LocalSession {
            id,
            version: id,
            addr,
            last: None,
            sdes: None,
            webrtc: None,
            require_srtp: false,
        }
    }

    /// Keys this session's streams with SDES: `key` (at least 30 bytes of master key and
    /// salt) goes in our offers and answers. Only for signalling that is encrypted: a key
    /// sent in clear text protects nothing. Offers say RTP/AVP, so a far end without SRTP
    /// still answers, unless the session [requires SRTP](LocalSession::requiring_srtp).
    pub fn with_sdes(mut self, key: &[u8]) -> LocalSession {
        self.sdes = Some(Sdes { key: key.to_vec() });
        self
    }

    /// Refuses plain RTP both ways: an offer without SRTP (or WebRTC, for a WebRTC session) is
    /// answered with an error, and so is an answer to our offer that takes neither.
    pub fn requiring_srtp(mut self) -> LocalSession {
        self.require_srtp = true;
        self
    }

    /// Makes this session's offers WebRTC (`UDP/TLS/RTP/SAVPF` with ICE-lite and DTLS-SRTP),
    /// and lets it answer WebRTC offers: for a far end that is a browser.
    pub fn with_webrtc(mut self, local: WebRtcLocal) -> LocalSession {
        self.webrtc = Some(local);
        self
    }

    /// Our WebRTC credentials, if this session speaks WebRTC.
    pub fn webrtc(&self) -> Option<&WebRtcLocal> {
        self.webrtc.as_ref()
    }

    /// Whether this session keys SRTP by SDES.
    pub fn sdes(&self) -> bool {
        self.sdes.is_some()
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// The address this side announces (`o=` and `c=`).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// An offer of all local codecs plus telephone-event, sendrecv.
    pub fn offer(&mut self, caps: &Caps, rtp_port: u16) -> SessionDescription {
        let caps = &*self.caps_for(caps);
        let mut attributes = Vec::new();
        let mut formats = Vec::new();
        let mut next_dynamic = 96u8;
        for codec in &caps.codecs {
            let pt = match codec.static_pt {
                Some(pt) => pt,
                None => {
                    // The next dynamic number not taken by telephone-event.
                    while Some(next_dynamic) == caps.dtmf_pt {
                        next_dynamic += 1;
                    }
                    if next_dynamic > 127 {
                        continue;
                    }
                    next_dynamic += 1;
                    next_dynamic - 1
                }
            };
            formats.push(pt);
            attributes.push(codec_rtpmap(pt, codec));
            if let Some(params) = codec.fmtp {
                attributes.push(Attribute::Fmtp {
                    pt,
                    params: params.to_owned(),
                });
            }
        }
        if let Some(pt) = caps.dtmf_pt {
            formats.push(pt);
            attributes.push(rtpmap(pt, TELEPHONE_EVENT, 8000));
            attributes.push(Attribute::Fmtp {
                pt,
                params: DTMF_EVENTS.to_owned(),
            });
        }
        // iLBC packets hold whole frames: offer its frame length when it leads.
        let ptime = caps.codecs.first().and_then(Codec::frame_ms);
        attributes.push(Attribute::Ptime(ptime.unwrap_or(DEFAULT_PTIME_MS)));
        attributes.push(Attribute::Direction(Direction::SendRecv));
        let mut proto = RTP_AVP;
        if let Some(sdes) = &self.sdes {
            proto = if self.require_srtp { RTP_SAVP } else { RTP_AVP };
            for (tag, suite) in (1..).zip(CryptoSuite::ALL) {
                let key = sdes.key[..suite.key_len()].to_vec();
                attributes.push(Attribute::Crypto(Crypto::new(tag, suite, key)));
            }
        }
        let mut session = Vec::new();
        if let Some(local) = &self.webrtc {
            proto = UDP_TLS_RTP_SAVPF;
            let mid = WebRtcLocal::offer_mid();
            attributes.extend(local.attributes(mid, Setup::ActPass, self.addr, rtp_port));
            session = WebRtcLocal::session_attributes(mid);
        }
        let media = audio(rtp_port, proto, &formats, attributes);
        self.stamp(session, vec![media])
    }

    /// Answers an offer: the first audio stream with a common codec is accepted with
    /// the codec we prefer most, every other stream is refused with port 0.
    pub fn answer(
        &mut self,
        offer: &SessionDescription,
        caps: &Caps,
        rtp_port: u16,
    ) -> Result<(SessionDescription, Negotiated), NegotiationError> {
        let caps = &*self.caps_for(caps);
        let mut negotiated = None;
        let mut session = Vec::new();
        let mut media = Vec::with_capacity(offer.media.len());
        for m in &offer.media {
            let keys = self.keys_for(offer, m);
            let pick = match (negotiated.is_some(), &keys) {
                (false, Ok(_)) if is_usable_audio(m) => prefer(m, caps),
                _ => None,
            };
            let (Some((pt, codec)), Ok(security)) = (pick, keys) else {
                media.push(refused(m));
                continue;
            };
            let mut agreed = stream(offer, m, pt, codec, caps.dtmf_pt.is_some())?;
            let mut answered = answer_media(m, &agreed, rtp_port);
            match security {
                Security::Plain => {}
                Security::Sdes(theirs, ours) => {
                    agreed.srtp = Some(SrtpKeys {
                        suite: ours.suite,
                        local: ours.key.clone(),
                        remote: theirs.key.clone(),
                    });
                    answered.attributes.push(Attribute::Crypto(ours));
                }
                Security::Dtls(remote) => {
                    let local = self.webrtc.as_ref().expect("keys_for checked it");
                    let mid = webrtc::mid(m).unwrap_or(WebRtcLocal::offer_mid());
                    let setup = match remote.dtls_client {
                        true => Setup::Active,
                        false => Setup::Passive,
                    };
                    answered
                        .attributes
                        .extend(local.attributes(mid, setup, self.addr, rtp_port));
                    session = WebRtcLocal::session_attributes(mid);
                    // BUNDLE only if the offer grouped the stream (RFC 8843 §7.3).
                    if !bundles(offer, mid) {
                        session.pop();
                    }
                    agreed.webrtc = Some(remote);
                }
            }
            media.push(answered);
            negotiated = Some(agreed);
        }
        let Some(negotiated) = negotiated else {
            // A stream with a common codec was refused for its security alone.
            let secure_only = offer
                .media
                .iter()
                .any(|m| is_usable_audio(m) && prefer(m, caps).is_some());
            return Err(match secure_only {
                true => NegotiationError::Srtp,
                false => NegotiationError::NoCommonCodec,
            });
        };
        Ok((self.stamp(session, media), negotiated))
    }

    /// Completes an exchange we started: `answer` replies to `our_offer` (from a 200 OK,
    /// or the ACK of an INVITE that carried no SDP). The answerer picked the codec, so
    /// its first payload type that we offered wins. A plain answer is refused when the session
    /// [requires SRTP](LocalSession::requiring_srtp).
    pub fn accept_answer(
        &self,
        our_offer: &SessionDescription,
        answer: &SessionDescription,
    ) -> Result<Negotiated, NegotiationError> {
        let agreed = accept_answer(our_offer, answer)?;
        match self.require_srtp && agreed.srtp.is_none() && agreed.webrtc.is_none() {
            true => Err(NegotiationError::Srtp),
            false => Ok(agreed),
        }
    }

    /// How stream `m` of `offer` is secured if we take it: plainly, by the offered key and our
    /// answering line, or by DTLS-SRTP; Err when its security is not acceptable to this session.
    fn keys_for(
        &self,
        offer: &SessionDescription,
        m: &Media,
    ) -> Result<Security, NegotiationError> {
        if m.is_webrtc() {
            return match (&self.webrtc, webrtc::remote(offer, m, false)) {
                (Some(_), Some(remote)) => Ok(Security::Dtls(remote)),
                _ => Err(NegotiationError::Srtp),
            };
        }
        let Some(sdes) = &self.sdes else {
            // Keys in clear-text signalling are worthless: RTP/SAVP is refused, `a=crypto` on
            // RTP/AVP ignored. A WebRTC session that requires SRTP takes only WebRTC.
            return match m.is_secure() || self.require_srtp {
                true => Err(NegotiationError::Srtp),
                false => Ok(Security::Plain),
            };
        };
        // Lines with session parameters or an MKI are not taken (RFC 4568 §6.3: an answer
        // must honour them).
        let offered = m.crypto().find(|c| c.params.is_empty() && c.mki.is_none());
        match offered {
            Some(theirs) => {
                let key = sdes.key[..theirs.suite.key_len()].to_vec();
                let ours = Crypto::new(theirs.tag, theirs.suite, key);
                Ok(Security::Sdes(theirs.clone(), ours))
            }
            None if m.is_secure() || self.require_srtp => Err(NegotiationError::Srtp),
            None => Ok(Security::Plain),
        }
    }

    /// The codecs of this session: a WebRTC session prefers Opus, which every browser has
    /// (RFC 7874 §3: Opus and G.711), whatever the configuration lists first; G.711 and the
    /// others follow as the configuration orders them.
    fn caps_for<'a>(&self, caps: &'a Caps) -> std::borrow::Cow<'a, Caps> {
        if self.webrtc.is_none() || caps.codecs.first() == Some(&Codec::OPUS) {
            return std::borrow::Cow::Borrowed(caps);
        }
        let others = caps.codecs.iter().filter(|c| **c != Codec::OPUS);
        std::borrow::Cow::Owned(Caps {
            codecs: std::iter::once(Codec::OPUS)
                .chain(others.copied())
                .collect(),
            ..caps.clone()
        })
    }

    fn stamp(&mut self, attributes: Vec<Attribute>, media: Vec<Media>) -> SessionDescription {
        let mut sdp = SessionDescription {
            origin: Origin {
                username: "strowger".to_owned(),
                session_id: self.id.to_string(),
                session_version: self.version,
                addr_type: addr_type(self.addr).to_owned(),
                address: self.addr.to_string(),
            },
            session_name: "strowger".to_owned(),
            connection: Some(self.addr),
            time: (0, 0),
            attributes,
            media,
        };
        if self.last.as_ref().is_some_and(|last| *last != sdp) {
            self.version += 1;
            sdp.origin.session_version = self.version;
        }
        self.last = Some(sdp.clone());
        sdp
    }
}

/// [`LocalSession::accept_answer`] without the session's policy.
fn accept_answer(
    our_offer: &SessionDescription,
    answer: &SessionDescription,
) -> Result<Negotiated, NegotiationError> {
    // Streams correspond by position (RFC 3264 §6).
    let (offered, answered) = our_offer
        .media
        .iter()
        .zip(&answer.media)
        .find(|(o, a)| is_usable_audio(o) && is_usable_audio(a))
        .ok_or(NegotiationError::NoCommonCodec)?;
    let (pt, codec) = answered
        .payload_types()
        .find_map(|pt| {
            let (name, clock) = offered.encoding(pt)?;
            // The answer's parameters govern (RFC 3952 §5: its iLBC mode wins).
            let fmtp = answered.fmtp(pt).or(offered.fmtp(pt));
            let codec = Codec::KNOWN
                .into_iter()
                .find(|c| c.matches_params(name, clock, fmtp))?;
            Some((pt, codec))
        })
        .ok_or(NegotiationError::NoCommonCodec)?;
    let we_offered_dtmf = telephone_event(offered, codec.clock).is_some();
    let mut agreed = stream(answer, answered, pt, codec, we_offered_dtmf)?;
    if offered.is_webrtc() && answered.is_webrtc() {
        let remote = webrtc::remote(answer, answered, true);
        agreed.webrtc = Some(remote.ok_or(NegotiationError::Srtp)?);
        return Ok(agreed);
    }
    // A plain RTP/AVP answer to our WebRTC offer (a SIP phone on a WebSocket that is no
    // browser) is taken as plain RTP, as an answer without a key to SDES on RTP/AVP is,
    // unless the session requires SRTP.
    agreed.srtp = answered_keys(offered, answered)?;
    Ok(agreed)
}

/// How a stream we answer is secured.
enum Security {
    Plain,
    /// SDES: the offered line we took, and our answering one.
    Sdes(Crypto, Crypto),
    Dtls(WebRtcRemote),
}

/// Whether the offer's `a=group:BUNDLE` names stream `mid`.
fn bundles(offer: &SessionDescription, mid: &str) -> bool {
    offer.attributes.iter().any(|a| match a {
        Attribute::Other {
            name,
            value: Some(v),
        } if name == "group" => v
            .strip_prefix("BUNDLE")
            .is_some_and(|mids| mids.split_ascii_whitespace().any(|m| m == mid)),
        _ => false,
    })
}

/// The SDES keys of an answer to our offered stream: the answer names one of our lines by
/// tag and suite (RFC 4568 §5.1.2). Without one, the stream is plain RTP unless we offered
/// RTP/SAVP.
fn answered_keys(offered: &Media, answered: &Media) -> Result<Option<SrtpKeys>, NegotiationError> {
    if offered.crypto().next().is_none() {
        return Ok(None);
    }
    let Some(theirs) = answered.crypto().next() else {
        return match offered.is_secure() {
            true => Err(NegotiationError::Srtp),
            false => Ok(None),
        };
    };
    offered
        .crypto()
        .find(|ours| ours.tag == theirs.tag && ours.suite == theirs.suite)
        .map(|ours| {
            Some(SrtpKeys {
                suite: ours.suite,
                local: ours.key.clone(),
                remote: theirs.key.clone(),
            })
        })
        .ok_or(NegotiationError::Srtp)
}

fn is_usable_audio(m: &Media) -> bool {
    m.kind == "audio" && m.port != 0 && (m.proto == RTP_AVP || m.proto == RTP_SAVP || m.is_webrtc())
}

/// Our most preferred codec among those the stream carries, with the remote's number.
fn prefer(m: &Media, caps: &Caps) -> Option<(u8, Codec)> {
    caps.codecs.iter().find_map(|codec| {
        m.payload_types()
            .find(|pt| {
                m.encoding(*pt)
                    .is_some_and(|(n, c)| codec.matches_params(n, c, m.fmtp(*pt)))
            })
            .map(|pt| (pt, *codec))
    })
}

fn telephone_event(m: &Media, clock: u32) -> Option<u8> {
    m.payload_types().find(|pt| {
        m.encoding(*pt)
            .is_some_and(|(n, c)| n.eq_ignore_ascii_case(TELEPHONE_EVENT) && c == clock)
    })
}

/// The agreed parameters for the remote's stream `m` in `sdp`, once a codec is chosen.
fn stream(
    sdp: &SessionDescription,
    m: &Media,
    pt: u8,
    codec: Codec,
    dtmf: bool,
) -> Result<Negotiated, NegotiationError> {
    let addr = m
        .connection
        .or(sdp.connection)
        .ok_or(NegotiationError::NoConnectionAddress)?;
    let mut theirs = m.direction(sdp);
    // A browser's c=0.0.0.0 is no hold: its media comes from where its ICE checks do.
    if addr.is_unspecified() && !m.is_webrtc() {
        // RFC 2543 hold: c=0.0.0.0 means "do not send to me".
        theirs = Direction::from_flags(theirs.sends(), false);
    }
    let (rtcp_port, rtcp_addr) = m.rtcp().unwrap_or((m.port.saturating_add(1), None));
    Ok(Negotiated {
        pt,
        codec,
        dtmf_pt: dtmf.then(|| telephone_event(m, codec.clock)).flatten(),
        remote: SocketAddr::new(addr, m.port),
        remote_rtcp: SocketAddr::new(rtcp_addr.unwrap_or(addr), rtcp_port),
        direction: theirs.reverse(),
        ptime: packet_time(m.ptime(), codec),
        srtp: None,
        webrtc: None,
    })
}

/// The remote's `a=ptime`, rounded up to whole frames for codecs with a
/// fixed frame (iLBC: 20 or 30 ms).
fn packet_time(ptime: Option<u32>, codec: Codec) -> u32 {
    match codec.frame_ms() {
        Some(frame) => ptime.unwrap_or(frame).div_ceil(frame).max(1) * frame,
        None => ptime.unwrap_or(DEFAULT_PTIME_MS),
    }
}

fn answer_media(offered: &Media, agreed: &Negotiated, rtp_port: u16) -> Media {
    let codec = agreed.codec;
    let mut formats = vec![agreed.pt];
    let mut attributes = vec![codec_rtpmap(agreed.pt, &codec)];
    if let Some(params) = codec.fmtp {
        attributes.push(Attribute::Fmtp {
            pt: agreed.pt,
            params: params.to_owned(),
        });
    }
    if let Some(pt) = agreed.dtmf_pt {
        formats.push(pt);
        attributes.push(rtpmap(pt, TELEPHONE_EVENT, codec.clock));
        if let Some(events) = offered.fmtp(pt) {
            attributes.push(Attribute::Fmtp {
                pt,
                params: events.to_owned(),
            });
        }
    }
    attributes.push(Attribute::Ptime(agreed.ptime));
    attributes.push(Attribute::Direction(agreed.direction));
    audio(rtp_port, &offered.proto, &formats, attributes)
}

/// A refused stream keeps its formats: RFC 3264 §6 requires at least one.
fn refused(m: &Media) -> Media {
    Media {
        port: 0,
        port_count: None,
        connection: None,
        attributes: Vec::new(),
        ..m.clone()
    }
}

fn audio(port: u16, proto: &str, formats: &[u8], attributes: Vec<Attribute>) -> Media {
    Media {
        kind: "audio".to_owned(),
        port,
        port_count: None,
        proto: proto.to_owned(),
        formats: formats.iter().map(u8::to_string).collect(),
        connection: None,
        attributes,
    }
}

fn codec_rtpmap(pt: u8, codec: &Codec) -> Attribute {
    Attribute::Rtpmap {
        pt,
        encoding: codec.name.to_owned(),
        clock: codec.clock,
        channels: codec.channels,
    }
}

fn rtpmap(pt: u8, encoding: &str, clock: u32) -> Attribute {
    Attribute::Rtpmap {
        pt,
        encoding: encoding.to_owned(),
        clock,
        channels: None,
    }
}
