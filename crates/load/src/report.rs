//! What one thread measured, merged over threads, printed as text or one JSON object.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Live counters a thread publishes for the progress line (uncontended relaxed atomics).
#[derive(Default)]
pub struct Progress {
    pub attempted: AtomicU64,
    pub up: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub rtp_rx: AtomicU64,
    pub rtp_tx: AtomicU64,
    pub retransmissions: AtomicU64,
}

impl Progress {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

#[derive(Default, Debug, Clone)]
pub struct Report {
    pub attempted: u64,
    pub answered: u64,
    pub completed: u64,
    pub failed: u64,
    /// Failure reasons: a status code ("404"), "timeout" (timer B), "bye-timeout" (timer F),
    /// "remote-bye" (the server hung up first), "unfinished" (still up when the run stopped).
    pub reasons: BTreeMap<String, u64>,
    pub retransmissions: u64,
    pub max_concurrent: u64,
    /// INVITE → 2xx, µs, one per answered call.
    pub setup_us: Vec<u32>,
    pub rtp_sent: u64,
    pub rtp_received: u64,
    pub rtp_expected: u64,
    pub rtp_lost: u64,
    pub jitter_sum_us: u64,
    pub jitter_max_us: u64,
    pub jitter_calls: u64,
    /// Frames that left later than the frame loop allows: a send-mode frame more than 25 ms
    /// (one frame plus one tick) after it was due, an echo sent from a tick running over 20 ms late.
    pub late_frames: u64,
    /// Frames from the server that arrived more than one frame (20 ms) later than the earliest
    /// frame of their call, measured on the RTP timestamp's clock with the kernel's arrival stamp:
    /// the server's own lateness (or loss of pacing), which the load generator does not add to.
    pub late_arrivals: u64,
    /// Send mode: packets from the server whose payload is one the tone sent (an echo intact).
    pub tone_echoed: u64,
    /// SRTP: packets from the server that failed authentication or replayed (dropped), and
    /// answered calls whose answer carried no usable key (they send nothing).
    pub srtp_rejected: u64,
    pub srtp_unkeyed: u64,
    pub wall: Duration,
    pub cpu: Duration,
    /// When the first and the last INVITE of the run left (for the attempt rate).
    pub first_attempt: Option<std::time::Instant>,
    pub last_attempt: Option<std::time::Instant>,
}

impl Report {
    pub fn fail(&mut self, reason: &str) {
        self.failed += 1;
        *self.reasons.entry(reason.to_string()).or_default() += 1;
    }

    pub fn merge(&mut self, o: Report) {
        self.attempted += o.attempted;
        self.answered += o.answered;
        self.completed += o.completed;
        self.failed += o.failed;
        for (k, v) in o.reasons {
            *self.reasons.entry(k).or_default() += v;
        }
        self.retransmissions += o.retransmissions;
        self.max_concurrent += o.max_concurrent;
        self.setup_us.extend(o.setup_us);
        self.rtp_sent += o.rtp_sent;
        self.rtp_received += o.rtp_received;
        self.rtp_expected += o.rtp_expected;
        self.rtp_lost += o.rtp_lost;
        self.jitter_sum_us += o.jitter_sum_us;
        self.jitter_max_us = self.jitter_max_us.max(o.jitter_max_us);
        self.jitter_calls += o.jitter_calls;
        self.late_frames += o.late_frames;
        self.late_arrivals += o.late_arrivals;
        self.tone_echoed += o.tone_echoed;
        self.srtp_rejected += o.srtp_rejected;
        self.srtp_unkeyed += o.srtp_unkeyed;
        self.wall = self.wall.max(o.wall);
        self.first_attempt = match (self.first_attempt, o.first_attempt) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_attempt = self.last_attempt.max(o.last_attempt);
    }

    /// New calls per second: attempts between the first and the last INVITE.
    pub fn attempt_rate(&self) -> f64 {
        match (self.first_attempt, self.last_attempt) {
            (Some(a), Some(b)) if b > a && self.attempted > 1 => {
                (self.attempted - 1) as f64 / (b - a).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// The `p`-th percentile (nearest rank) of the set-up times; sorts them.
    pub fn percentile(&mut self, p: f64) -> Option<u32> {
        if self.setup_us.is_empty() {
            return None;
        }
        self.setup_us.sort_unstable();
        let rank = ((p / 100.0) * self.setup_us.len() as f64).ceil() as usize;
        Some(self.setup_us[rank.clamp(1, self.setup_us.len()) - 1])
    }

    pub fn json(&mut self) -> serde_json::Value {
        let (p50, p90, p99) = (
            self.percentile(50.0),
            self.percentile(90.0),
            self.percentile(99.0),
        );
        let wall = self.wall.as_secs_f64();
        serde_json::json!({
            "attempted": self.attempted,
            "answered": self.answered,
            "completed": self.completed,
            "failed": self.failed,
            "failed_reasons": self.reasons,
            "retransmissions": self.retransmissions,
            "max_concurrent": self.max_concurrent,
            "wall_s": round3(wall),
            "calls_per_s": round3(self.attempt_rate()),
            "setup_us": { "mean": (!self.setup_us.is_empty()).then(|| {
                              self.setup_us.iter().map(|&v| v as u64).sum::<u64>() / self.setup_us.len() as u64 }),
                          "p50": p50, "p90": p90, "p99": p99,
                          "max": self.setup_us.last().copied(), "n": self.setup_us.len() },
            "rtp": {
                "sent": self.rtp_sent,
                "received": self.rtp_received,
                "expected": self.rtp_expected,
                "lost": self.rtp_lost,
                "jitter_mean_us": self.jitter_sum_us.checked_div(self.jitter_calls),
                "jitter_max_us": self.jitter_max_us,
                "late_frames": self.late_frames,
                "late_arrivals": self.late_arrivals,
                "tone_echoed": self.tone_echoed,
                "srtp_rejected": self.srtp_rejected,
                "srtp_unkeyed_calls": self.srtp_unkeyed,
            },
            "cpu_s": round3(self.cpu.as_secs_f64()),
            "cpu_pct": round3(if wall > 0.0 { 100.0 * self.cpu.as_secs_f64() / wall } else { 0.0 }),
        })
    }

    pub fn text(&mut self) -> String {
        let j = self.json();
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let us = |k: &str| {
            j["setup_us"][k]
                .as_u64()
                .map_or("-".to_string(), |v| v.to_string())
        };
        format!(
            "calls: attempted {} answered {} completed {} failed {}{} | retransmissions {} | max concurrent {}\n\
             rate: {:.1} calls/s (first to last INVITE); run {:.1} s\n\
             set-up (INVITE→200) µs: p50 {} p90 {} p99 {} max {}\n\
             rtp: sent {} received {} expected {} lost {} | jitter mean {} µs max {} µs | late frames {} sent, {} received\n\
             echoes of the tone {} | srtp: rejected {} unkeyed calls {}\n\
             cpu: {:.2} s ({:.1} % of one core)",
            self.attempted,
            self.answered,
            self.completed,
            self.failed,
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
            self.retransmissions,
            self.max_concurrent,
            j["calls_per_s"].as_f64().unwrap_or(0.0),
            self.wall.as_secs_f64(),
            us("p50"),
            us("p90"),
            us("p99"),
            us("max"),
            self.rtp_sent,
            self.rtp_received,
            self.rtp_expected,
            self.rtp_lost,
            j["rtp"]["jitter_mean_us"].as_u64().unwrap_or(0),
            self.jitter_max_us,
            self.late_frames,
            self.late_arrivals,
            self.tone_echoed,
            self.srtp_rejected,
            self.srtp_unkeyed,
            self.cpu.as_secs_f64(),
            j["cpu_pct"].as_f64().unwrap_or(0.0),
        )
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// This process's CPU time (user + system, all threads).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let mut a = Report {
            setup_us: (1..=100).rev().collect(),
            ..Report::default()
        };
        let mut b = Report::default();
        b.fail("404");
        b.fail("404");
        a.merge(b);
        assert_eq!(a.percentile(50.0), Some(50));
        assert_eq!(a.percentile(99.0), Some(99));
        assert_eq!(a.percentile(100.0), Some(100));
        let j = a.json();
        assert_eq!(j["failed"], 2);
        assert_eq!(j["failed_reasons"]["404"], 2);
        assert_eq!(j["setup_us"]["p90"], 90);
    }
}
