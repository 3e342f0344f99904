//! Where a caller's DTMF digit goes. Every source (RFC 4733 events, SIP INFO, in-band tones)
//! ends in `Engine::digit`, so the steps and apps that read digits see one stream whatever
//! the phone sends.

use crate::call::{LegRef, Wait};
use crate::control::Notice;
use crate::engine::Engine;
use std::time::Instant;

impl Engine {
    /// A step of the call reads the caller's digits: its media listens for them as tones too
    /// if the caller sends them no other way (in-band detection costs only where it is used).
    pub(crate) fn read_digits(&mut self, call: usize) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.reads_digits = true;
        if let Some(m) = c.caller().media {
            self.media.read_digits(m);
        }
    }

    /// A digit from leg `at`: kept in the call's `digits` and given to whatever of the call
    /// reads digits now (a recording ends on `#`).
    pub(crate) fn digit(&mut self, at: LegRef, digit: char, now: Instant) {
        self.call_notice(at.call, crate::control::DTMF, |call_id| Notice::Dtmf {
            call_id,
            digit,
        });
        if self.conference_digit(at.call, digit, now) {
            return;
        }
        let Some(c) = self.calls.get_mut(at.call) else {
            return;
        };
        c.digits.push(digit);
        if self.voicemail_digit(at, digit) {
            return;
        }
        let Some(c) = self.calls.get_mut(at.call) else {
            return;
        };
        if digit == '#' && matches!(c.wait, Wait::Record { .. }) {
            self.stop_recording(at.call);
            self.calls.run_later(at.call);
        }
        self.ivr_digit(at.call, digit);
    }
}
