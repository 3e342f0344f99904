//! Receive statistics for one RTP source: RFC 3550 appendix A.1 sequence
//! validation with wrap-around and probation, A.3 loss accounting, and A.8
//! interarrival jitter.

use std::time::{Duration, Instant};

use crate::rtcp::ReportBlock;

const SEQ_MOD: u32 = 1 << 16;
const MAX_DROPOUT: u16 = 3000;
const MAX_MISORDER: u16 = 100;
const MIN_SEQUENTIAL: u32 = 2;

/// How [`ReceiveStats::on_packet`] judged a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStatus {
    /// In sequence (or acceptably reordered/duplicated) and counted.
    Valid,
    /// Source still on probation, or a large jump awaiting confirmation.
    NotCounted,
}

/// Per-source receive state.
#[derive(Debug, Clone)]
pub struct ReceiveStats {
    clock_rate: u32,
    max_seq: u16,
    cycles: u32,
    base_seq: u32,
    bad_seq: u32,
    probation: u32,
    received: u32,
    expected_prior: u32,
    received_prior: u32,
    /// Arrival clock origin: arrival times are measured from here.
    origin: Instant,
    transit: Option<u32>,
    /// Jitter in timestamp units, scaled by 16 (A.8 integer form).
    jitter_q4: u32,
}

impl ReceiveStats {
    /// Starts tracking a source from its first packet (A.1: that packet
    /// starts probation and is not counted).
    pub fn new(seq: u16, clock_rate: u32, now: Instant) -> Self {
        let mut s = ReceiveStats {
            clock_rate,
            max_seq: 0,
            cycles: 0,
            base_seq: 0,
            bad_seq: 0,
            probation: MIN_SEQUENTIAL,
            received: 0,
            expected_prior: 0,
            received_prior: 0,
            origin: now,
            transit: None,
            jitter_q4: 0,
        };
        s.init_seq(seq);
        s.max_seq = seq.wrapping_sub(1);
        s
    }

    fn init_seq(&mut self, seq: u16) {
        self.base_seq = seq as u32;
        self.max_seq = seq;
        self.bad_seq = SEQ_MOD + 1;
        self.cycles = 0;
        self.received = 0;
        self.received_prior = 0;
        self.expected_prior = 0;
    }

    /// Sequence bookkeeping for one packet (A.1 `update_seq`).
    pub fn on_packet(&mut self, seq: u16) -> SeqStatus {
        let udelta = seq.wrapping_sub(self.max_seq);
        if self.probation > 0 {
            if seq == self.max_seq.wrapping_add(1) {
                self.probation -= 1;
                self.max_seq = seq;
                if self.probation == 0 {
                    self.init_seq(seq);
                    self.received += 1;
                    return SeqStatus::Valid;
                }
            } else {
                self.probation = MIN_SEQUENTIAL - 1;
                self.max_seq = seq;
            }
            return SeqStatus::NotCounted;
        } else if udelta < MAX_DROPOUT {
            if seq < self.max_seq {
                self.cycles += SEQ_MOD;
            }
            self.max_seq = seq;
        } else if udelta as u32 <= SEQ_MOD - MAX_MISORDER as u32 {
            if seq as u32 == self.bad_seq {
                // Two sequential packets after a big jump: the source restarted.
                self.init_seq(seq);
            } else {
                self.bad_seq = (seq as u32 + 1) & (SEQ_MOD - 1);
                return SeqStatus::NotCounted;
            }
        }
        self.received += 1;
        SeqStatus::Valid
    }

    /// Jitter update (A.8) for a packet with RTP timestamp `ts` arriving at
    /// `now`. Feed only packets sampled at the media clock (not repeated
    /// telephone-event timestamps).
    pub fn on_timestamp(&mut self, ts: u32, now: Instant) {
        let arrival = clock_units(now.saturating_duration_since(self.origin), self.clock_rate);
        let transit = arrival.wrapping_sub(ts);
        if let Some(prev) = self.transit {
            let d = (transit.wrapping_sub(prev) as i32).unsigned_abs();
            self.jitter_q4 = self
                .jitter_q4
                .wrapping_add(d)
                .wrapping_sub((self.jitter_q4 + 8) >> 4);
        }
        self.transit = Some(transit);
    }

    /// Packets counted as received.
    pub fn received(&self) -> u32 {
        self.received
    }

    /// Extended highest sequence number received.
    pub fn extended_max(&self) -> u32 {
        self.cycles.wrapping_add(self.max_seq as u32)
    }

    /// Packets expected from the sequence range seen (A.3).
    pub fn expected(&self) -> u32 {
        if self.probation > 0 {
            return 0;
        }
        self.extended_max()
            .wrapping_sub(self.base_seq)
            .wrapping_add(1)
    }

    /// Cumulative packets lost; negative when duplicates outnumber losses.
    pub fn lost(&self) -> i64 {
        self.expected() as i64 - self.received as i64
    }

    /// Interarrival jitter in timestamp units.
    pub fn jitter(&self) -> u32 {
        self.jitter_q4 >> 4
    }

    /// Interarrival jitter as wall-clock time.
    pub fn jitter_duration(&self) -> Duration {
        Duration::from_nanos(self.jitter() as u64 * 1_000_000_000 / self.clock_rate.max(1) as u64)
    }

    /// A report block for this source (LSR/DLSR left for the caller, who
    /// knows about sender reports). Starts a new fraction-lost interval.
    pub fn report_block(&mut self, ssrc: u32) -> ReportBlock {
        let expected = self.expected();
        let expected_interval = expected.wrapping_sub(self.expected_prior);
        let received_interval = self.received.wrapping_sub(self.received_prior);
        self.expected_prior = expected;
        self.received_prior = self.received;
        let lost_interval = expected_interval as i64 - received_interval as i64;
        let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
            0
        } else {
            ((lost_interval << 8) / expected_interval as i64).min(255) as u8
        };
        ReportBlock {
            ssrc,
            fraction_lost,
            cumulative_lost: self.lost().clamp(-0x80_0000, 0x7F_FFFF) as i32,
            highest_seq: self.extended_max(),
            jitter: self.jitter(),
            lsr: 0,
            dlsr: 0,
        }
    }
}

/// `elapsed` in units of a `rate` Hz clock, wrapping as RTP timestamps do: whole seconds and the
/// nanoseconds after them apart, the units of the nanoseconds' 128-bit product in 64-bit
/// arithmetic (no 128-bit division per packet).
fn clock_units(elapsed: Duration, rate: u32) -> u32 {
    let rate = u64::from(rate);
    elapsed
        .as_secs()
        .wrapping_mul(rate)
        .wrapping_add(u64::from(elapsed.subsec_nanos()) * rate / 1_000_000_000) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_units_are_the_nanoseconds_times_the_rate_wrapped_to_32_bits() {
        for rate in [8_000u32, 16_000, 48_000, 90_000] {
            for ns in [
                0u64,
                1,
                124_999,
                125_000,
                999_999_999,
                20_000_000_001,
                86_400 * 40 * 1_000_000_007,
            ] {
                let d = Duration::from_nanos(ns);
                let want = (d.as_nanos() * u128::from(rate) / 1_000_000_000) as u32;
                assert_eq!(clock_units(d, rate), want, "{ns} ns at {rate} Hz");
            }
        }
    }

    fn feed(s: &mut ReceiveStats, seqs: impl IntoIterator<Item = u16>) {
        for q in seqs {
            s.on_packet(q);
        }
    }

    #[test]
    fn probation_then_counting() {
        let now = Instant::now();
        let mut s = ReceiveStats::new(100, 8000, now);
        assert_eq!(s.on_packet(100), SeqStatus::NotCounted);
        assert_eq!(s.on_packet(101), SeqStatus::Valid);
        assert_eq!((s.received(), s.expected(), s.lost()), (1, 1, 0));
    }

    #[test]
    fn loss_and_wrap() {
        let mut s = ReceiveStats::new(65530, 8000, Instant::now());
        // 65530..=65535, 0..=9 with 3 and 5 missing.
        feed(
            &mut s,
            (65530..=65535).chain((0..10).filter(|q| *q != 3 && *q != 5)),
        );
        assert_eq!(s.extended_max(), 65536 + 9);
        // The first packet was probation: expected counts from 65531.
        assert_eq!(s.expected(), 15);
        assert_eq!(s.lost(), 2);
        let rb = s.report_block(7);
        assert_eq!(rb.cumulative_lost, 2);
        assert_eq!(rb.fraction_lost, (2 * 256 / 15) as u8);
        assert_eq!(rb.highest_seq, 65545);
        // No new loss in the next interval.
        feed(&mut s, 10..20);
        assert_eq!(s.report_block(7).fraction_lost, 0);
    }

    #[test]
    fn duplicates_and_jumps() {
        let mut s = ReceiveStats::new(1, 8000, Instant::now());
        feed(&mut s, [1, 2, 3, 3, 4]);
        assert_eq!(s.lost(), -1, "a duplicate counts as received");
        // A single wild jump is not trusted...
        assert_eq!(s.on_packet(40000), SeqStatus::NotCounted);
        assert_eq!(s.extended_max(), 4);
        // ...but two sequential packets after it resynchronise.
        assert_eq!(s.on_packet(40001), SeqStatus::Valid);
        assert_eq!((s.expected(), s.received()), (1, 1));
    }

    #[test]
    fn jitter_of_regular_and_irregular_arrivals() {
        let t0 = Instant::now();
        let mut s = ReceiveStats::new(0, 8000, t0);
        for i in 0..100u32 {
            s.on_timestamp(i * 160, t0 + Duration::from_millis(20 * i as u64));
        }
        assert_eq!(s.jitter(), 0);
        // Every other packet 10 ms late: |D| = 80 units each time, so jitter nears 80.
        for i in 100..1000u32 {
            let skew = if i % 2 == 0 { 10 } else { 0 };
            s.on_timestamp(i * 160, t0 + Duration::from_millis(20 * i as u64 + skew));
        }
        assert!((75..=85).contains(&s.jitter()), "jitter {}", s.jitter());
        assert_eq!(s.jitter_duration().as_millis(), s.jitter() as u128 / 8);
    }
}
