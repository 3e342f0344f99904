//! Digits by SIP INFO, and digits across a bridge. An INFO digit (RFC 6086's legacy
//! `application/dtmf-relay` and `application/dtmf` bodies) goes into `Engine::digit` like any
//! other; a digit from either leg of a bridge reaches the other leg in the form it takes: by
//! INFO when its user's or trunk's `dtmf` (or `rtp.dtmf`) is `"info"`, else in its media (see `media::Engine::send_digit`; the media
//! engine regenerates digits heard in the media itself).

use crate::call::LegRef;
use crate::engine::Engine;
use media::DtmfMode;
use sip::dtmf_info::{self, DTMF, DTMF_RELAY};
use sip::header::HeaderName;
use sip::transaction::{Peer, ServerTxId};
use sip::{Message, Method};
use std::time::Instant;

impl Engine {
    /// An INFO within leg `at`'s dialog: a DTMF body is a digit, an empty one a keepalive (both
    /// 200); another body type gets 415 with the types taken, an unreadable DTMF body 400.
    pub(crate) fn on_info(
        &mut self,
        stx: ServerTxId,
        msg: &Message,
        peer: Peer,
        at: LegRef,
        now: Instant,
    ) {
        if msg.body().is_empty() {
            return self.respond(stx, msg, peer, 200, "OK", None, &[], None, now);
        }
        let content_type = msg.header(HeaderName::ContentType).unwrap_or_default();
        match dtmf_info::parse(content_type, msg.body()) {
            Ok(d) => {
                self.respond(stx, msg, peer, 200, "OK", None, &[], None, now);
                self.digit(at, d.digit, now);
                self.digit_to_peer(at, d.digit, d.duration_ms, true, now);
            }
            Err(e) => {
                let (status, reason) = e.status();
                let accept = [("Accept", format!("{DTMF_RELAY}, {DTMF}"))];
                let extra: &[_] = if status == 415 { &accept } else { &[] };
                self.respond(stx, msg, peer, status, reason, None, extra, None, now);
            }
        }
    }

    /// Sends a digit from leg `at` to the leg bridged to it: by INFO to a SIP leg in
    /// `DtmfMode::Info`, else in its media when the digit came by signalling (`signalled`; one heard
    /// in the media was passed on by the media engine).
    pub(crate) fn digit_to_peer(
        &mut self,
        at: LegRef,
        digit: char,
        duration_ms: u32,
        signalled: bool,
        now: Instant,
    ) {
        let Some(from) = self.calls.get(at.call).and_then(|c| c.leg(at.leg)?.media) else {
            return;
        };
        let Some(to) = self.media.peer(from) else {
            return;
        };
        let by_info = self.media.leg_dtmf_mode(to) == DtmfMode::Info;
        if by_info && self.send_info_digit(to, digit, duration_ms, now) {
            return;
        }
        if signalled {
            let out = &mut self.media_out;
            let tx: &mut dyn FnMut(media::Transmit<'_>) = &mut |t| out.push(t);
            self.media.send_digit(to, digit, duration_ms, now, tx);
        }
    }

    /// Sends `digit` in an INFO (application/dtmf-relay) within the dialog of the SIP leg
    /// whose media is `to`; false if that leg has no dialog.
    fn send_info_digit(
        &mut self,
        to: media::LegId,
        digit: char,
        duration_ms: u32,
        now: Instant,
    ) -> bool {
        let Some(at) = self.calls.leg_by_media(to.index()) else {
            return false;
        };
        let branch = self.branch();
        let Some(peer) = self.calls[at.call]
            .leg(at.leg)
            .and_then(|l| Some(l.dialog()?.peer))
        else {
            return false;
        };
        let local = self.local_for(peer);
        let user_agent = self.s.user_agent.clone();
        let Some(d) = self.calls[at.call]
            .leg_mut(at.leg)
            .and_then(|l| l.dialog_mut())
        else {
            return false;
        };
        let mut b = d.request(&Method::Info, &branch, local, None);
        b.header("User-Agent", &user_agent);
        let body = dtmf_info::relay_body(digit, duration_ms);
        let bytes = b.finish(Some((DTMF_RELAY, body.as_bytes())));
        self.txs.send_request(bytes, peer, now);
        true
    }
}
