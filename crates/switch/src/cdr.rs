//! Call detail records: one JSON object per call, written when the call ends.

use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cdr {
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

impl Cdr {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
