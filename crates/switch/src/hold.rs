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

    /// The media of an answered two-party bridge as its parties' holds say: bridged when
    /// neither holds, music to the one not holding otherwise. Other calls (a prompt, a queue,
    /// a call still ringing) are left as they are.
    pub(crate) fn rejoin(&mut self, call: usize) {
        let Some(c) = self.calls.get(call) else {
            return;
        };
        let Some(callee) = c.callee_idx() else {
            return;
        };
        let (a, b) = (c.caller(), c.leg(callee));
        let bridged = c.answered && c.wait == Wait::Forever && b.is_some_and(|b| b.confirmed);
        let (Some(am), Some((bm, b_held))) = (a.media, b.and_then(|b| Some((b.media?, b.held))))
        else {
            return;
        };
        if !bridged {
            return;
        }
        match (a.held, b_held) {
            (false, false) => self.media.bridge(am, bm),
            (true, false) => {
                self.media.unbridge(am);
                self.start_moh(call, callee);
            }
            (false, true) => {
                self.media.unbridge(bm);
                self.start_moh(call, Call::CALLER);
            }
            (true, true) => {
                self.stop_moh(call, Call::CALLER);
                self.stop_moh(call, callee);
            }
        }
    }
}
