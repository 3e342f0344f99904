//! strowger's own re-INVITEs. strowger anchors the media, so it offers a confirmed leg new
//! media only when the leg's port changes: a party moved from another worker by an attended
//! transfer (crossing.rs), or a leg moved off a shared RTP port onto a pair of its own
//! (strays.rs, whose own response handling takes that answer, on a caller leg too). The moved
//! party is the call's callee, so its 2xx is taken as a callee's answer (`bridge_response`): its
//! SDP takes effect, or under `rtp.srtp = "require"` a plain answer is ACKed, refused and its leg
//! ended. A 491 to either (the far end sent an offer of its own at the same time) is no failure:
//! the same offer goes again after the wait of RFC 3261 §14.1, kept on the leg
//! (`Leg::reoffer_at`) and run by the call's timer.

use crate::call::{LegIdx, LegRef};
use crate::engine::Engine;
use sip::transaction::ClientTxId;
use std::time::{Duration, Instant};

/// How strowger's own Call-IDs end (`Engine::own_call_id`): a dialog with one is strowger's
/// to retry first after a 491.
pub(crate) const OWN_CALL_ID: &str = "@strowger";

impl Engine {
    /// A leg that came from another worker (its media closed there): a media leg and port of
    /// this worker, offered to its far end in a re-INVITE whose answer `bridge_response` takes
    /// as a callee's. A WebRTC leg's DTLS association and ICE checks stayed with the port it
    /// left, so its offer restarts ICE (new credentials) and names this worker's certificate,
    /// whose new fingerprint has the browser shake hands anew (RFC 8842 §4).
    pub(crate) fn reinvite(&mut self, at: LegRef, now: Instant) {
        let webrtc = self.calls[at.call]
            .leg(at.leg)
            .is_some_and(|l| l.sdp.webrtc().is_some());
        if webrtc {
            let local = self.webrtc_local();
            if let Some(out) = self.calls[at.call].leg_mut(at.leg) {
                out.sdp = out.sdp.clone().with_webrtc(local);
            }
        }
        if !self.ensure_media(at.call, at.leg, now) {
            return;
        }
        let caps = self.s.caps.clone();
        let Some(out) = self.calls[at.call].leg_mut(at.leg) else {
            return;
        };
        out.our_offer = Some(out.sdp.offer(&caps, out.port));
        self.send_invite(at.call, at.leg, None, now);
    }
    /// A final response `status` to a client INVITE `ctx` of leg `at`: true if it was a 491
    /// to that confirmed leg's re-INVITE, whose offer then goes again in 2.1–4 s when strowger
    /// chose the dialog's Call-ID and in 0–2 s otherwise (RFC 3261 §14.1), so the two ends
    /// do not collide again.
    pub(crate) fn reinvite_glare(
        &mut self,
        at: LegRef,
        ctx: ClientTxId,
        status: u16,
        now: Instant,
    ) -> bool {
        if status != 491 {
            return false;
        }
        let Some(leg) = self.calls.get_mut(at.call).and_then(|c| c.leg_mut(at.leg)) else {
            return false;
        };
        if !leg.confirmed || leg.invite_tx != Some(ctx) || leg.our_offer.is_none() {
            return false;
        }
        let tens_of_ms = match leg.call_id().ends_with(OWN_CALL_ID) {
            true => self.rng.u64(210..=400),
            false => self.rng.u64(0..=200),
        };
        let due = now + Duration::from_millis(tens_of_ms * 10);
        leg.invite_tx = None;
        leg.reoffer_at = Some(due);
        self.calls.arm(at.call, due);
        true
    }

    /// A timer of `call` went off: the re-INVITEs whose 491 wait is over go again.
    pub(crate) fn reinvite_timer(&mut self, call: usize, now: Instant) {
        let due = |c: &crate::call::Call| -> Option<LegIdx> {
            c.legs()
                .find(|(_, l)| l.reoffer_at.is_some_and(|t| t <= now))
                .map(|(i, _)| i)
        };
        while let Some(leg) = self.calls.get(call).and_then(due) {
            if let Some(l) = self.calls[call].leg_mut(leg) {
                l.reoffer_at = None;
            }
            self.send_invite(call, leg, None, now);
        }
    }
}
