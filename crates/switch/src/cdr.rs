//! Call detail records: one JSON object per call, written when the call ends.

use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cdr {
    /// The record's own id (a UUIDv7, [`uuid_v7`]): a database stores each CDR once under it,
    /// however often a spooled one is replayed. The Call-ID is not unique enough: a phone
    /// may reuse it, and a transfer's calls share one.
    pub id: String,
    pub call_id: String,
    pub from: String,
    pub to: String,
    pub exten: String,
    pub context: String,
    /// The user the caller authenticated as (None: a trusted peer, or the public context).
    pub user: Option<String>,
    /// Unix times in seconds with millisecond precision.
    pub start: f64,
    pub answer: Option<f64>,
    pub end: f64,
    pub duration_s: f64,
    pub billable_s: f64,
    /// Q.850 cause code and its name, and the SIP status the call ended with.
    pub cause: u8,
    pub cause_text: String,
    pub sip_status: u16,
    /// Who hung up: "caller", "callee" or "switch".
    pub hangup_side: &'static str,
    pub codec: String,
    pub packets_sent: u64,
    /// The caller's RTP the kernel refused to send (not in `packets_sent`).
    pub send_errors: u64,
    pub packets_received: u64,
    pub packets_lost: u64,
    pub jitter_ms: f64,
    /// Round trip to the caller's phone from its last RTCP report on our stream (RFC 3550
    /// §6.4.1), and the packets of ours it reported lost; none if it sent no such report.
    pub rtt_ms: Option<f64>,
    pub remote_packets_lost: Option<i32>,
    pub bridged_to: Option<String>,
    /// Where a transfer took the call (transfer.rs): the extension of a blind transfer, the
    /// party of an attended one, the phone whose INVITE replaced a leg.
    pub transferred_to: Option<String>,
    /// The trunk the call came in by or went out through.
    pub trunk: Option<String>,
    /// The whole-call recording (`record-call`, `RECORD_CALLS`): its file (relative to the
    /// data directory), the audio handed to the writer in seconds, and false when audio was
    /// dropped or could not be written (a slow or full disk).
    pub recording: Option<String>,
    pub recording_s: Option<f64>,
    pub recording_complete: Option<bool>,
}

pub fn unix_seconds(t: SystemTime) -> f64 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    (d.as_millis() as f64) / 1000.0
}

/// A UUIDv7 (RFC 9562) from a wall time and random bits: time-ordered, so a database index
/// on it grows at its end, and unique across workers and processes without coordination.
pub fn uuid_v7(unix_ms: u64, random: u128) -> String {
    let v = (u128::from(unix_ms & 0xffff_ffff_ffff) << 80)
        | (0x7 << 76)
        | (((random >> 62) & 0xfff) << 64)
        | (0b10 << 62)
        | (random & 0x3fff_ffff_ffff_ffff);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

impl Cdr {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v7_has_its_time_version_and_variant() {
        let id = uuid_v7(0x0190_1234_5678, u128::MAX);
        assert_eq!(id, "01901234-5678-7fff-bfff-ffffffffffff");
        let zero = uuid_v7(1, 0);
        assert_eq!(zero, "00000000-0001-7000-8000-000000000000");
        assert!(
            uuid_v7(1, 5) < uuid_v7(2, 0),
            "later ids sort after earlier ones"
        );
    }
}
