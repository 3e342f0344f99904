//! Which legs key SRTP in their SDP (SDES, RFC 4568): those whose signalling is TLS, as
//! `rtp.srtp` says. A key in an SDP sent in clear text protects nothing, so a leg over UDP or
//! TCP never takes or sends one, and its RTP/SAVP streams are refused. Legs over WebSockets
//! (browsers) are WebRTC legs instead: ICE-lite and DTLS-SRTP, keyed by a handshake on the
//! media path rather than in the SDP, unless `rtp.srtp` is "refuse". "require" holds for both
//! kinds and both ways: a plain offer is refused with 488, and a plain answer to our offer
//! ends its leg (ACK, then BYE) while the caller gets 488.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use sdp::{LocalSession, Negotiated, NegotiationError, SrtpKeys, WebRtcLocal};
use sip::transaction::Transport;

use crate::engine::Engine;

/// `rtp.srtp`: what a leg signalled over TLS (SDES) or a WebSocket (DTLS-SRTP) does about SRTP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SrtpPolicy {
    /// Take SRTP offered with keys (RTP/SAVP, or keys on RTP/AVP) and plain RTP alike; offer
    /// keys on RTP/AVP, so a far end without SRTP still answers.
    #[default]
    Offer,
    /// SRTP or nothing: offer RTP/SAVP (WebRTC on WebSockets), refuse plain offers with 488
    /// and end legs that answer plainly.
    Require,
    /// Plain RTP only, as on UDP and TCP.
    Refuse,
}

impl SrtpPolicy {
    pub fn parse(name: &str) -> Option<SrtpPolicy> {
        match name {
            "offer" => Some(SrtpPolicy::Offer),
            "require" => Some(SrtpPolicy::Require),
            "refuse" => Some(SrtpPolicy::Refuse),
            _ => None,
        }
    }
}

impl Engine {
    /// A new SIP leg's SDP session, SDES-keyed with a fresh master key when its signalling
    /// is TLS, WebRTC on a WebSocket, plain on UDP and TCP or when `rtp.srtp` is "refuse";
    /// with "require", the encrypted kinds refuse plain RTP both ways.
    pub(crate) fn local_session(&mut self, addr: IpAddr, transport: Transport) -> LocalSession {
        let sdp = LocalSession::new(self.rng.u64(..u64::MAX / 2), addr);
        let sdp = match (transport, self.s.srtp) {
            (_, SrtpPolicy::Refuse) => sdp,
            (Transport::Tls, _) => sdp.with_sdes(&srtp::master_key()),
            (Transport::Ws | Transport::Wss, _) => sdp.with_webrtc(self.webrtc_local()),
            _ => return sdp,
        };
        match self.s.srtp {
            SrtpPolicy::Require => sdp.requiring_srtp(),
            _ => sdp,
        }
    }

    /// A WebRTC leg's side of the SDP on this worker: fresh ICE credentials and this
    /// worker's certificate.
    pub(crate) fn webrtc_local(&self) -> WebRtcLocal {
        let ice = webrtc::IceCredentials::random();
        WebRtcLocal {
            ufrag: ice.ufrag,
            pwd: ice.pwd,
            fingerprint: self.s.webrtc_certificate.fingerprint().to_string(),
            candidate: self.s.webrtc_public_address,
        }
    }

    /// A packet of call `call` failed SRTP authentication or was a replay, and was dropped
    /// (the media leg counted it): an operator is told at most every 10 s.
    pub(crate) fn srtp_rejected(&mut self, call: usize, now: Instant) {
        if let Some(n) = self.srtp_rejects.note(now) {
            self.warn_call(
                call,
                format!(
                    "dropped {n} SRTP packet(s) since the last report that failed authentication \
                     or were replays: a far end keyed wrongly, or forged traffic \
                     (strowger_srtp_rejected_packets_total in the metrics)"
                ),
            );
        }
    }

    /// A 2xx answered our offer with SDP that cannot be taken (`e`, "require" refusing plain
    /// RTP among others): counted, and logged with what was ended (`ended`) and the key to change.
    pub(crate) fn note_refused_answer(&mut self, call: usize, e: NegotiationError, ended: &str) {
        self.metrics.answer_refused();
        let why = match (e, self.s.srtp) {
            (NegotiationError::Srtp, SrtpPolicy::Require) => {
                "it is plain RTP and rtp.srtp = \"require\" \
                asks for SRTP (SDES over TLS, DTLS-SRTP over WebSockets); set rtp.srtp = \"offer\" \
                to take plain answers"
                    .to_string()
            }
            (NegotiationError::Srtp, _) => {
                "its SRTP names no key line strowger offered, or no DTLS fingerprint".to_string()
            }
            (e, _) => e.to_string(),
        };
        self.warn_call(
            call,
            format!("ended {ended}: its 2xx answered with SDP strowger cannot take: {why} (strowger_sdp_answers_refused_total in the metrics)"),
        );
    }

    /// The Warning of a 488 for an offer refused for its security alone.
    pub(crate) fn srtp_refusal(&self, transport: Transport) -> String {
        let why = match (transport, self.s.srtp) {
            (Transport::Tls, SrtpPolicy::Refuse) => {
                "SRTP is off here (rtp.srtp = \\\"refuse\\\"): offer RTP/AVP"
            }
            (Transport::Tls, SrtpPolicy::Require) => {
                "SRTP is required here (rtp.srtp = \\\"require\\\"): offer RTP/SAVP with an a=crypto key"
            }
            (Transport::Tls, SrtpPolicy::Offer) => {
                "no usable a=crypto line: one inline key of AES_CM_128_HMAC_SHA1_80, AES_CM_128_HMAC_SHA1_32 or AEAD_AES_128_GCM, without session parameters or MKI"
            }
            (Transport::Ws | Transport::Wss, SrtpPolicy::Require) => {
                "SRTP is required here (rtp.srtp = \\\"require\\\"): on a WebSocket offer WebRTC (UDP/TLS/RTP/SAVPF with DTLS-SRTP)"
            }
            _ => "RTP/SAVP needs SIP over TLS (keys in clear text protect nothing): call over a tls: listener, or offer RTP/AVP",
        };
        format!("305 strowger \"{why}\"")
    }
}

/// How a media leg is keyed, as its SDP agreed: taken out of the call, to hand the media engine.
pub(crate) struct Keying {
    srtp: Option<SrtpKeys>,
    webrtc: Option<media::WebRtcConfig>,
}

impl Keying {
    /// SDES keys, or a WebRTC leg's ICE credentials and the far end's certificate (ours:
    /// `certificate`, the worker's); neither for plain RTP.
    pub(crate) fn of(
        neg: Option<&Negotiated>,
        sdp: &LocalSession,
        certificate: &Arc<webrtc::Certificate>,
    ) -> Keying {
        let webrtc = neg
            .and_then(|n| n.webrtc.as_ref())
            .zip(sdp.webrtc())
            .and_then(|(remote, local)| {
                Some(media::WebRtcConfig {
                    local: webrtc::IceCredentials {
                        ufrag: local.ufrag.clone(),
                        pwd: local.pwd.clone(),
                    },
                    remote_ufrag: Some(remote.ufrag.clone()),
                    // The SDP parser took only fingerprints of this form.
                    remote_fingerprint: webrtc::Fingerprint::parse(&remote.fingerprint)?,
                    role: match remote.dtls_client {
                        true => webrtc::Role::Client,
                        false => webrtc::Role::Server,
                    },
                    certificate: certificate.clone(),
                })
            });
        Keying {
            srtp: neg.and_then(|n| n.srtp.clone()),
            webrtc,
        }
    }

    /// Keys media leg `m` (plain RTP when there is nothing to key it with). A WebRTC leg's
    /// SRTP is its handshake's: a re-INVITE from the same far end leaves it as it is.
    pub(crate) fn apply(&self, media: &mut media::Engine, m: media::LegId, now: Instant) {
        if self.webrtc.is_none() {
            // The SDP parser takes only keys of their suite's length, and srtp refuses no
            // other key.
            media
                .set_srtp(m, self.srtp.as_ref())
                .expect("srtp refused a key of its suite's length");
        }
        media
            .set_webrtc(m, self.webrtc.as_ref(), now)
            .expect("OpenSSL made no DTLS session");
    }
}
