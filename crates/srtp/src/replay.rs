//! Where a stream is: the rollover counter's estimate (RFC 3711 §3.3.1, Appendix A) and the
//! replay window (§3.3.2). A packet is checked with [`Window::check`] and only counted with
//! [`Window::accept`] after it authenticated, so a forged packet moves nothing.

/// Packets behind the newest one that are still accepted once (RFC 3711 asks for 64).
pub(crate) const WINDOW: u64 = 128;

/// The highest index seen and which of the [`WINDOW`] before it were seen.
#[derive(Default)]
pub(crate) struct Window {
    /// Highest index accepted, `None` before the first packet.
    top: Option<u64>,
    /// Bit `n` set: index `top - n` was accepted.
    seen: u128,
}

impl Window {
    /// The 48-bit packet index of RTP sequence number `seq`: the rollover counter guessed from
    /// the highest index, one behind or ahead when `seq` is more than half the space away.
    pub(crate) fn rtp_index(&self, seq: u16) -> Option<u64> {
        let Some(top) = self.top else {
            return Some(u64::from(seq));
        };
        let (roc, s_l) = (top >> 16, (top & 0xffff) as i64);
        let seq_i = i64::from(seq);
        let v = if s_l < 32768 {
            if seq_i - s_l > 32768 {
                // Still in the first rollover, a far-ahead number is ahead (as libsrtp2 reads it).
                roc.saturating_sub(1)
            } else {
                roc
            }
        } else if s_l - 32768 > seq_i {
            roc + 1
        } else {
            roc
        };
        // A 32-bit rollover counter: past it the key must change (§3.3.1), refuse instead.
        (v <= u64::from(u32::MAX)).then_some(v << 16 | u64::from(seq))
    }

    /// Whether `index` is new: ahead of the newest, or inside the window and not yet seen.
    pub(crate) fn check(&self, index: u64) -> bool {
        match self.top {
            None => true,
            Some(top) if index > top => true,
            Some(top) => top - index < WINDOW && self.seen & (1 << (top - index)) == 0,
        }
    }

    /// Records `index`, which [`Window::check`] let through and which authenticated.
    pub(crate) fn accept(&mut self, index: u64) {
        match self.top {
            Some(top) if index <= top => self.seen |= 1 << (top - index),
            top => {
                let ahead = top.map_or(WINDOW, |t| index - t);
                self.seen = if ahead >= WINDOW {
                    0
                } else {
                    self.seen << ahead
                } | 1;
                self.top = Some(index);
            }
        }
    }

    /// The next SRTCP index a sender uses (31 bits, from 1 as libsrtp2 does).
    pub(crate) fn next_rtcp_index(&self) -> Option<u64> {
        let next = self.top.map_or(1, |t| t + 1);
        (next < 1 << 31).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rollover_counter_follows_the_sequence_both_ways() {
        let mut w = Window::default();
        w.accept(w.rtp_index(65530).unwrap());
        assert_eq!(w.rtp_index(3), Some(1 << 16 | 3), "wrapped forward");
        w.accept(1 << 16 | 3);
        assert_eq!(
            w.rtp_index(65533),
            Some(65533),
            "late packet from before the wrap"
        );
        assert_eq!(w.rtp_index(4), Some(1 << 16 | 4));
    }

    #[test]
    fn the_window_refuses_repeats_and_the_too_old_only() {
        let mut w = Window::default();
        for i in [10, 12, 11, 200] {
            assert!(w.check(i));
            w.accept(i);
        }
        assert!(!w.check(200) && !w.check(200 - WINDOW));
        assert!(w.check(199) && w.check(200 - WINDOW + 1));
        assert!(!w.check(12), "behind the window");
    }
}
