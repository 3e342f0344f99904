//! RTP the kernel refused to send (`Input::MediaSendFailed`: a far end unreachable, or of an
//! address family the leg's socket is not): the leg counts it as a send error, not as sent, so
//! the CDR says what left; an operator is told at most every 10 s.

use crate::engine::Engine;
use std::time::Instant;

impl Engine {
    pub(crate) fn on_send_failed(&mut self, leg: usize, packets: u32, now: Instant) {
        self.media
            .send_failed(media::LegId::from_index(leg), u64::from(packets));
        if let Some(n) = self.send_errors.note(now) {
            self.warn(format!(
                "the kernel refused to send RTP ({n} report(s) since the last one): a far end is \
                 unreachable or of an address family strowger has no media address of — see \
                 send_errors in the CDRs, and sip.listen / rtp.advertise_ipv4 / rtp.advertise_ipv6"
            ));
        }
    }
}
