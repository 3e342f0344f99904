//! A WebRTC leg's transport (RFC 8829 as a browser needs it): one port carries ICE checks,
//! the DTLS-SRTP handshake and SRTP with SRTCP multiplexed (RFC 5761), told apart by their
//! first byte (RFC 7983). Only a source that passed an ICE check may carry DTLS or SRTP;
//! the handshake's keys become the leg's SRTP, as SDES keys do.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use sdp::SrtpKeys;
use webrtc::{
    Certificate, Dtls, DtlsError, DtlsState, Fingerprint, IceCredentials, IceLite, Kind, Role,
};

/// What a leg needs to speak WebRTC: from its SDP exchange and the process's certificate.
#[derive(Clone)]
pub struct WebRtcConfig {
    /// Our `a=ice-ufrag` / `a=ice-pwd`.
    pub local: IceCredentials,
    /// The far end's `a=ice-ufrag`; `None` while its answer is on the way.
    pub remote_ufrag: Option<String>,
    /// The far end's `a=fingerprint`: its DTLS certificate must have it.
    pub remote_fingerprint: Fingerprint,
    pub role: Role,
    pub certificate: Arc<Certificate>,
}

/// What became of a datagram on the leg's port.
pub(crate) enum Verdict {
    /// A check or a DTLS record, taken here (replies wait in `poll_transmit`).
    Taken,
    /// SRTP or SRTCP from a source that passed a check: the leg's SRTP opens it.
    Media,
    /// From a source that passed no check, or neither STUN, DTLS nor RTP: dropped.
    Refused,
}

pub(crate) struct LegWebRtc {
    ice: IceLite,
    dtls: Dtls,
    /// The far end's credentials and certificate, to tell a re-INVITE's from new ones.
    remote: (Option<String>, Fingerprint),
    /// Where DTLS goes: the checked source the far end's DTLS comes from.
    dtls_peer: Option<SocketAddr>,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    /// The handshake's outcome was handed to the engine.
    reported: bool,
}

impl LegWebRtc {
    pub(crate) fn new(cfg: &WebRtcConfig, now: Instant) -> Result<LegWebRtc, webrtc::ErrorStack> {
        let fp = cfg.remote_fingerprint.clone();
        Ok(LegWebRtc {
            ice: IceLite::new(cfg.local.clone(), cfg.remote_ufrag.clone()),
            dtls: Dtls::new(&cfg.certificate, cfg.role, fp.clone(), now)?,
            remote: (cfg.remote_ufrag.clone(), fp),
            dtls_peer: None,
            out: VecDeque::new(),
            reported: false,
        })
    }

    /// A re-INVITE's parameters: the same far end keeps its association (and its keys), and
    /// learns its ufrag if the answer only now brought it.
    pub(crate) fn same_peer(&mut self, cfg: &WebRtcConfig) -> bool {
        let same = self.remote.1 == cfg.remote_fingerprint
            && (self.remote.0.is_none() || self.remote.0 == cfg.remote_ufrag);
        if same {
            if let Some(u) = &cfg.remote_ufrag {
                self.ice.set_remote_ufrag(u.clone());
                self.remote.0 = Some(u.clone());
            }
        }
        same
    }

    pub(crate) fn on_datagram(&mut self, data: &[u8], src: SocketAddr, now: Instant) -> Verdict {
        match webrtc::classify(data) {
            Kind::Stun => match self.ice.on_stun(data, src) {
                Ok(reply) => {
                    self.out.push_back((src, reply));
                    self.flush_dtls();
                    Verdict::Taken
                }
                Err(_) => Verdict::Refused,
            },
            Kind::Dtls if self.ice.checked(src) => {
                self.dtls_peer = Some(src);
                self.dtls.handle(data, now);
                self.flush_dtls();
                Verdict::Taken
            }
            Kind::Rtp if self.ice.checked(src) => Verdict::Media,
            _ => Verdict::Refused,
        }
    }

    /// Resends an unanswered flight when its time has come.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.dtls.handle_timeout(now);
        self.flush_dtls();
    }

    pub(crate) fn handshaking(&self) -> bool {
        matches!(self.dtls.state(), DtlsState::Handshaking)
    }

    /// The handshake's outcome, once: the keys, or why it failed.
    pub(crate) fn outcome(&mut self) -> Option<Result<SrtpKeys, DtlsError>> {
        if self.reported {
            return None;
        }
        let r = match self.dtls.state() {
            DtlsState::Handshaking => return None,
            DtlsState::Connected(keys) => Ok(keys.clone()),
            DtlsState::Failed(e) => Err(e.clone()),
        };
        self.reported = true;
        Some(r)
    }

    /// Where the leg's media goes: the pair ICE selected.
    pub(crate) fn media_addr(&self) -> Option<SocketAddr> {
        self.ice.selected()
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    /// Moves DTLS's datagrams out once there is somewhere to send them (a client's hello
    /// waits for the first check).
    fn flush_dtls(&mut self) {
        let Some(dst) = self.dtls_peer.or(self.ice.selected()) else {
            return;
        };
        while let Some(d) = self.dtls.poll_transmit() {
            self.out.push_back((dst, d));
        }
    }
}
