//! Hold and resume: a party whose new offer stops it receiving (sendonly, inactive, or the old
//! connection address 0.0.0.0 of RFC 2543) leaves the other party of its bridge hearing music
//! on hold; once both receive again the bridge is restored. strowger anchors the media, so
//! neither phone is asked anything: the other party only hears the music.

use crate::call::{Call, LegIdx, Wait};
use crate::engine::Engine;

/// Whether an offer answered with `neg` puts its sender on hold.
pub(crate) fn holds(neg: &sdp::Negotiated) -> bool {
    !neg.direction.sends() || neg.remote.ip().is_unspecified()
}

impl Engine {
    /// Leg `at` of `call` went on hold or came back: the bridge's media follow.
    pub(crate) fn set_held(&mut self, call: usize, at: LegIdx, held: bool) {
        let Some(leg) = self.calls.get_mut(call).and_then(|c| c.leg_mut(at)) else {
            return;
        };
        if leg.held == held {
            return;
        }
        leg.held = held;
        self.rejoin(call);
    }

    /// The media of an answered two-party bridge — a call's caller and callee, or the callers
    /// of two joined calls (joins.rs) — as its parties' holds say: bridged when neither holds,
    /// music to the one not holding otherwise. Other calls (a prompt, a queue, a call still
    /// ringing) are left as they are. A prompt the API played over the bridge ends here.
    pub(crate) fn rejoin(&mut self, call: usize) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.api_prompt = false;
        let c = &*c;
        let (a, b) = match (c.callee_idx(), self.joined_to(call)) {
            (Some(callee), _) => ((call, Call::CALLER), (call, callee)),
            (None, Some(other)) => ((call, Call::CALLER), (other, Call::CALLER)),
            (None, None) => return,
        };
        let party = |e: &Engine, (call, at): (usize, LegIdx)| {
            let c = e.calls.get(call)?;
            let leg = c.leg(at)?;
            let up = c.answered && c.wait == Wait::Forever && (at == Call::CALLER || leg.confirmed);
            Some((leg.media?, leg.held)).filter(|_| up)
        };
        let (Some((am, a_held)), Some((bm, b_held))) = (party(self, a), party(self, b)) else {
            return;
        };
        match (a_held, b_held) {
            (false, false) => self.media.bridge(am, bm),
            (true, false) => {
                self.media.unbridge(am);
                self.start_moh(b.0, b.1);
            }
            (false, true) => {
                self.media.unbridge(bm);
                self.start_moh(a.0, a.1);
            }
            (true, true) => {
                self.stop_moh(a.0, a.1);
                self.stop_moh(b.0, b.1);
            }
        }
    }
}
