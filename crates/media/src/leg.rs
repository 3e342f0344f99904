//! One call leg: its negotiated media, what it sends, and what it learned
//! about the far end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codec::{Codec, Encoder, Format, Translator, G711};
use rtp::rtcp::ReportBlock;
use rtp::stats::ReceiveStats;
use rtp::DtmfDetector;

use crate::digit_tone::DigitTone;
use crate::dtmf_detect::ToneDetector;
use crate::frames::FrameState;
use crate::leg_srtp::LegSrtp;
use crate::leg_webrtc::LegWebRtc;
use crate::prompt::Packets;
use crate::recorder::Recorder;
use crate::stream::OutStream;
use crate::tap::Tap;
use crate::tone::ToneGen;
use crate::{DtmfMode, LegId, Prompt};

/// Media of a new leg, from SDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegConfig {
    /// RTP payload type of the audio codec.
    pub payload_type: u8,
    /// The audio codec on the wire.
    pub format: Format,
    /// Payload type of telephone-event/8000, if negotiated.
    pub dtmf_pt: Option<u8>,
    /// Where to send RTP; `None` waits for the first packet and latches to it.
    pub remote: Option<SocketAddr>,
    /// Where to send RTCP (SDP `a=rtcp`); `None` means RTP port + 1.
    pub remote_rtcp: Option<SocketAddr>,
    /// Latch to the source of the first RTP packet (NAT) and then ignore
    /// packets from other addresses.
    pub symmetric: bool,
    /// Report [`crate::MediaEvent::MediaTimeout`] after this long without RTP.
    pub media_timeout: Option<Duration>,
    /// The same, for a held leg (sendonly, recvonly, inactive), after this long without RTP
    /// or RTCP: a held party may go quiet, but one that vanished must not hold the call for ever.
    pub hold_timeout: Option<Duration>,
    /// Packet interval; 10-120 ms for G.711, one frame for iLBC (20/30 ms),
    /// 20 ms for every other format.
    pub ptime_ms: u32,
}

/// New media state after a re-INVITE; replaces the negotiated fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegUpdate {
    pub payload_type: u8,
    pub format: Format,
    pub dtmf_pt: Option<u8>,
    pub remote: Option<SocketAddr>,
    pub remote_rtcp: Option<SocketAddr>,
    /// We may send (false for our `recvonly`/`inactive`): hold stops output.
    pub sends: bool,
    /// We expect to receive (false for our `sendonly`/`inactive`): no media
    /// timeout, and what arrives is ignored.
    pub receives: bool,
    pub symmetric: bool,
}

/// RTP counters summed over legs (metrics): packets and payload bytes each way, late ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    pub late_ticks: u64,
    /// SRTP/SRTCP packets dropped for failing authentication or being replayed.
    pub srtp_rejected: u64,
    /// Datagrams on WebRTC legs' ports refused by ICE: failed checks, and DTLS or SRTP from
    /// a source that passed no check.
    pub ice_refused: u64,
}

impl Totals {
    pub(crate) fn add(&mut self, leg: &Leg) {
        self.packets_sent += leg.out.packets;
        self.bytes_sent += leg.out.octets;
        self.packets_received += leg.packets_received;
        self.bytes_received += leg.bytes_received;
        self.late_ticks += leg.late_ticks;
        self.srtp_rejected += leg.srtp_rejected;
        self.ice_refused += leg.ice_refused;
    }
}

/// Per-leg counters, e.g. for the CDR.
#[derive(Debug, Clone, PartialEq)]
pub struct LegStats {
    pub codec: &'static str,
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    /// Packets lost on the way to us (RFC 3550 A.3, never negative here).
    pub packets_lost: u64,
    /// Current interarrival jitter.
    pub jitter_ms: f64,
    /// Round-trip time from the latest RTCP report about our stream.
    pub rtt: Option<Duration>,
    /// The far end's latest report about our stream.
    pub remote_fraction_lost: Option<u8>,
    pub remote_packets_lost: Option<i32>,
    /// Ticks that had to emit more than one frame to catch up.
    pub late_ticks: u64,
    /// RTP/RTCP datagrams that failed to parse or came from a foreign address (or were handed to
    /// a frame leg), and frames handed to an RTP leg.
    pub rejected: u64,
    /// RTP packets the kernel refused to send (a far end unreachable or of another address
    /// family), not counted in `packets_sent`.
    pub send_errors: u64,
    /// SRTP/SRTCP packets dropped for failing authentication or being replayed.
    pub srtp_rejected: u64,
    /// Datagrams refused by ICE (see [`Totals::ice_refused`]).
    pub ice_refused: u64,
}

/// What feeds the leg's outgoing stream.
pub(crate) enum Source {
    Idle,
    Prompt {
        prompt: Arc<Prompt>,
        /// In G.711 bytes, packets or linear samples, as `playout` counts.
        pos: usize,
        looped: bool,
        playout: Playout,
        /// The playlist this prompt is a track of: when it ends, the next one plays.
        list: Option<Box<crate::playlist::Cursor>>,
    },
    Tone(ToneGen),
    /// Packets arriving on the peer are relayed out of this leg, and vice
    /// versa (always symmetric). A peer of itself is echo.
    Peer(LegId),
    /// A member of a conference room: what arrives is mixed, and the room's mix is sent.
    Room(crate::RoomId),
}

impl Source {
    /// The leg makes its own frames, sent on the media ticks.
    pub(crate) fn generates(&self) -> bool {
        matches!(self, Source::Prompt { .. } | Source::Tone(_))
    }
}

/// How a prompt becomes a non-G.711 leg's packets.
pub(crate) enum Playout {
    /// G.711 bytes by table (G.711 legs).
    Law,
    /// The prompt's packets in the leg's format, encoded once and shared by every call.
    Packets(Arc<Packets>),
    /// Transcoded for this call alone, as a switch without a prompt cache does: the
    /// file's own packets through a translator, or its linear audio through the leg's encoder.
    Live(Option<Box<Translator>>),
}

pub(crate) struct Leg {
    pub(crate) payload_type: u8,
    pub(crate) format: Format,
    /// The table codec for G.711 formats; `None` for the others, which use `encoder`.
    pub(crate) law: Option<G711>,
    /// Encoder of generated audio (prompts, tones), made when the format is set.
    pub(crate) encoder: Option<Box<dyn Encoder>>,
    /// Bridged to a leg of another format: this leg's payloads into the peer's.
    pub(crate) translator: Option<Translator>,
    pub(crate) dtmf_pt: Option<u8>,
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) remote_rtcp: Option<SocketAddr>,
    /// The address the far end's SDP gave. A symmetric leg latches to the first source it hears,
    /// which may be anyone spraying the port range ("RTP bleed"); this address takes it back.
    pub(crate) announced: Option<SocketAddr>,
    pub(crate) symmetric: bool,
    pub(crate) latched: bool,
    pub(crate) media_timeout: Option<Duration>,
    pub(crate) hold_timeout: Option<Duration>,
    /// The one of the two that the leg's direction calls for, kept by [`Leg::rearm`] so the
    /// tick reads one field.
    pub(crate) quiet_limit: Option<Duration>,
    pub(crate) ptime: Duration,
    pub(crate) ptime_ms: u32,
    /// RTP clock units per packet.
    pub(crate) frame_units: u32,
    /// Linear samples (at the format's rate) per packet.
    pub(crate) frame_pcm: usize,
    /// Whether anything is sent to the leg: its SDP lets it (`negotiated_sends`) and it is not
    /// made deaf (`Engine::set_mute`) — one flag, so a mute costs the send path nothing more.
    pub(crate) sends: bool,
    pub(crate) negotiated_sends: bool,
    pub(crate) receives: bool,
    /// What arrives from the leg is passed on to nobody (its bridge's peer, its room).
    pub(crate) muted: bool,
    pub(crate) deaf: bool,

    pub(crate) out: OutStream,
    pub(crate) source: Source,
    /// When the next generated frame is due; `None` until the first tick.
    pub(crate) next_frame: Option<Instant>,

    pub(crate) rx: Option<(u32, ReceiveStats)>,
    /// Losses counted under earlier remote SSRCs.
    pub(crate) lost_before: i64,
    pub(crate) packets_received: u64,
    pub(crate) bytes_received: u64,
    /// Last RTP arrival, or RTCP's while held; `None` restarts the timeout clock at the next
    /// tick.
    pub(crate) last_rx: Option<Instant>,
    pub(crate) timed_out: bool,
    pub(crate) dtmf: DtmfDetector,
    /// Listens for digits sent as tones (a far end without telephone-event); `None` spends
    /// nothing on the audio.
    pub(crate) tones: Option<Box<ToneDetector>>,
    /// The call logic reads this leg's digits (a menu, a recording ended by `#`, a room's
    /// keys): without it, or a peer taking digits in another form, tones are not looked for.
    pub(crate) reads_digits: bool,
    /// How this leg's far end sends and takes digits: its user's or trunk's `dtmf`, else the
    /// engine's (`Engine::set_leg_dtmf_mode`).
    pub(crate) dtmf_mode: DtmfMode,
    /// Tones of a digit that arrived on the peer in another form, laid over the audio relayed
    /// to this leg (a far end without telephone-event).
    pub(crate) digit_tone: Option<Box<DigitTone>>,
    pub(crate) recorder: Option<Recorder>,
    /// Whole-call recording (`record-call`); None costs unrecorded calls one branch.
    pub(crate) tap: Option<Box<Tap>>,

    pub(crate) rtcp_due: Instant,
    pub(crate) packets_at_last_report: u64,
    /// LSR of the last SR from the far end and when it arrived.
    pub(crate) last_sr: Option<(u32, Instant)>,
    pub(crate) remote_report: Option<ReportBlock>,
    pub(crate) rtt: Option<Duration>,
    pub(crate) late_ticks: u64,
    pub(crate) rejected: u64,
    /// RTP the kernel refused to send ([`crate::Engine::send_failed`]), not in `out.packets`.
    pub(crate) send_errors: u64,
    /// A frame leg's own state (see [`crate::Frame`]); `None` for an RTP leg.
    pub(crate) frames: Option<Box<FrameState>>,
    /// SRTP keys of the leg ([`crate::Engine::set_srtp`]); `None` for plain RTP.
    pub(crate) srtp: Option<Box<LegSrtp>>,
    pub(crate) srtp_rejected: u64,
    /// ICE and DTLS of a WebRTC leg ([`crate::Engine::set_webrtc`]); `None` for the others.
    pub(crate) webrtc: Option<Box<LegWebRtc>>,
    /// RTCP shares the RTP port (RFC 5761: WebRTC legs).
    pub(crate) rtcp_mux: bool,
    pub(crate) ice_refused: u64,
}

impl Leg {
    /// Takes RTP from its remote address alone (see [`crate::Transmit::pinned`]). A leg latched
    /// to another address than its SDP gave (NAT, or an intruder first) is not: the announced
    /// address must still reach it.
    pub(crate) fn pinned(&self) -> bool {
        self.symmetric
            && self.latched
            && (self.announced.is_none() || self.remote == self.announced)
    }

    pub(crate) fn new(cfg: LegConfig, out: OutStream, rtcp_due: Instant) -> Leg {
        let mut leg = Leg {
            payload_type: cfg.payload_type,
            format: cfg.format,
            law: None,
            encoder: None,
            translator: None,
            dtmf_pt: cfg.dtmf_pt,
            remote: cfg.remote,
            remote_rtcp: cfg.remote_rtcp,
            announced: cfg.remote,
            symmetric: cfg.symmetric,
            latched: false,
            media_timeout: cfg.media_timeout,
            hold_timeout: cfg.hold_timeout,
            quiet_limit: cfg.media_timeout,
            ptime: Duration::ZERO,
            ptime_ms: cfg.ptime_ms,
            frame_units: 0,
            frame_pcm: 0,
            sends: true,
            negotiated_sends: true,
            receives: true,
            muted: false,
            deaf: false,
            out,
            source: Source::Idle,
            next_frame: None,
            rx: None,
            lost_before: 0,
            packets_received: 0,
            bytes_received: 0,
            last_rx: None,
            timed_out: false,
            dtmf: DtmfDetector::default(),
            tones: None,
            reads_digits: false,
            dtmf_mode: DtmfMode::default(),
            digit_tone: None,
            recorder: None,
            tap: None,
            rtcp_due,
            packets_at_last_report: 0,
            last_sr: None,
            remote_report: None,
            rtt: None,
            late_ticks: 0,
            rejected: 0,
            send_errors: 0,
            srtp: None,
            srtp_rejected: 0,
            webrtc: None,
            rtcp_mux: false,
            ice_refused: 0,
            frames: None,
        };
        leg.set_format(cfg.format);
        leg
    }

    /// Sets the codec: packet sizes, the clock, and an encoder for non-G.711 formats.
    pub(crate) fn set_format(&mut self, format: Format) {
        let same = self.format == format && self.frame_units != 0;
        self.format = format;
        self.law = match format {
            Format::Pcmu => Some(G711::Pcmu),
            Format::Pcma => Some(G711::Pcma),
            _ => None,
        };
        let ptime_ms = match self.law {
            Some(_) => self.ptime_ms.clamp(10, 120),
            None => format.packet_ms(),
        };
        self.ptime_ms = ptime_ms;
        self.ptime = Duration::from_millis(ptime_ms as u64);
        self.frame_units = format.clock_units_in(ptime_ms);
        self.frame_pcm = format.samples_in(ptime_ms);
        self.out.clock = format.rtp_clock().into();
        if !same {
            self.encoder = self.law.is_none().then(|| format.encoder());
            if let Some(f) = &mut self.frames {
                f.reclock();
            }
        }
    }

    /// Listens for tones if the leg's mode asks it: in [`DtmfMode::Inband`] every G.711
    /// leg; otherwise a G.711 leg without telephone-event whose digits someone reads — the
    /// call logic, or a `peer_takes_digits` in another form (events or INFO). A detector kept
    /// keeps its state.
    pub(crate) fn listen_for_tones(&mut self, peer_takes_digits: bool) {
        let wanted = self.dtmf_mode == DtmfMode::Inband
            || (self.dtmf_pt.is_none() && (self.reads_digits || peer_takes_digits));
        let listen = self.law.is_some() && wanted;
        if listen != self.tones.is_some() {
            self.tones = listen.then(Box::default);
        }
    }

    pub(crate) fn update(&mut self, u: LegUpdate) {
        // Holding or resuming restarts the timeout clock: media or hold, whichever now applies.
        if (u.receives && u.sends) != (self.receives && self.negotiated_sends) {
            self.last_rx = None;
        }
        self.payload_type = u.payload_type;
        self.set_format(u.format);
        self.dtmf_pt = u.dtmf_pt;
        if u.remote.is_some() {
            self.remote = u.remote;
            self.announced = u.remote;
        }
        self.remote_rtcp = u.remote_rtcp;
        self.symmetric = u.symmetric;
        self.latched = false;
        self.negotiated_sends = u.sends;
        self.sends = u.sends && !self.deaf;
        self.receives = u.receives;
        self.rearm();
    }

    /// A two-way stream is expected to keep arriving (the media timeout); a held party
    /// (sendonly, recvonly or inactive) may go quiet, but shows it is there by RTP or RTCP
    /// within the longer hold timeout.
    pub(crate) fn rearm(&mut self) {
        self.quiet_limit = match self.receives && self.sends {
            true => self.media_timeout,
            false => self.hold_timeout,
        };
    }

    /// Where RTCP goes: the explicit address, or RTP port + 1.
    pub(crate) fn rtcp_destination(&self) -> Option<SocketAddr> {
        self.remote_rtcp.or_else(|| {
            self.remote.map(|mut a| {
                a.set_port(a.port().wrapping_add(1));
                a
            })
        })
    }

    pub(crate) fn stats(&self) -> LegStats {
        let (lost, jitter_ms) = self.rx.as_ref().map_or((0, 0.0), |(_, s)| {
            (s.lost(), s.jitter_duration().as_secs_f64() * 1000.0)
        });
        let frame_jitter = self.frames.as_ref().and_then(|f| f.jitter.as_ref());
        let jitter_ms =
            frame_jitter.map_or(jitter_ms, |s| s.jitter_duration().as_secs_f64() * 1000.0);
        LegStats {
            codec: self.format.encoding_name(),
            packets_sent: self.out.packets,
            bytes_sent: self.out.octets,
            packets_received: self.packets_received,
            bytes_received: self.bytes_received,
            packets_lost: (self.lost_before + lost).max(0) as u64,
            jitter_ms,
            rtt: self.rtt,
            remote_fraction_lost: self.remote_report.map(|r| r.fraction_lost),
            remote_packets_lost: self.remote_report.map(|r| r.cumulative_lost),
            late_ticks: self.late_ticks,
            rejected: self.rejected,
            send_errors: self.send_errors,
            srtp_rejected: self.srtp_rejected,
            ice_refused: self.ice_refused,
        }
    }

    /// Encodes the next generated frame into `out` (room for the largest
    /// packet); returns the bytes written, whether the source just finished
    /// (a non-looped prompt ran out), and whether `pcm` holds the frame's audio
    /// exactly as decoding it gives (for a recorded leg's tap, which so copies it).
    pub(crate) fn generate(&mut self, out: &mut [u8], pcm: &mut [i16]) -> (usize, bool, bool) {
        match self.law {
            Some(law) => {
                let out = &mut out[..self.frame_units as usize];
                let (done, linear) = self.generate_g711(law, out, pcm);
                (out.len(), done, linear)
            }
            None => {
                let ms = self.ptime_ms;
                match &mut self.source {
                    Source::Prompt {
                        pos,
                        looped,
                        playout: Playout::Packets(packets),
                        ..
                    } => {
                        let (n, done) = next_packet(packets, pos, *looped, out);
                        return (n, done, false);
                    }
                    Source::Prompt {
                        prompt,
                        pos,
                        looped,
                        playout: Playout::Live(Some(tr)),
                        ..
                    } => {
                        let packets = prompt.coded().map_or(&[][..], |(_, p)| &p[..]);
                        let (n, done) = transcode_packet(tr, packets, pos, *looped, ms, out);
                        return (n, done, false);
                    }
                    _ => {}
                }
                let pcm = &mut pcm[..self.frame_pcm];
                let done = self.generate_linear(pcm);
                let Some(enc) = self.encoder.as_mut() else {
                    return (0, done, false);
                };
                // A refusal sends nothing rather than garbage.
                (enc.encode(pcm, out).unwrap_or(0), done, false)
            }
        }
    }

    /// A G.711 frame into `out`: whether the source just finished, and whether `pcm` holds the
    /// frame's linear audio too.
    fn generate_g711(&mut self, law: G711, out: &mut [u8], pcm: &mut [i16]) -> (bool, bool) {
        match &mut self.source {
            Source::Prompt {
                prompt,
                pos,
                looped,
                ..
            } => {
                let data = prompt.encoded(law);
                let start = *pos;
                let done = play(data, pos, *looped, out, law.silence());
                // A recorded leg's tap takes the prompt's linear audio, which is its µ-law
                // decoded, rather than decode every packet again: the same stretch of it.
                if self.tap.is_none() || law != G711::Pcmu || data.is_empty() {
                    return (done, false);
                }
                let lin = prompt.linear(8000);
                play(lin, &mut { start }, *looped, &mut pcm[..out.len()], 0);
                (done, true)
            }
            Source::Tone(gen) => {
                let pcm = &mut pcm[..out.len()];
                gen.fill(pcm);
                law.encode(pcm, out);
                (false, false)
            }
            Source::Idle | Source::Peer(_) | Source::Room(_) => (false, false),
        }
    }

    /// Linear audio at the format's rate for one packet.
    fn generate_linear(&mut self, out: &mut [i16]) -> bool {
        let rate = self.format.pcm_rate();
        match &mut self.source {
            Source::Prompt {
                prompt,
                pos,
                looped,
                ..
            } => play(prompt.linear(rate), pos, *looped, out, 0),
            Source::Tone(gen) => {
                gen.fill(out);
                false
            }
            Source::Idle | Source::Peer(_) | Source::Room(_) => false,
        }
    }
}

/// Copies a prompt's audio (its G.711 codes or its linear samples) from `pos` into `out`: from
/// the start again when it loops, else padded with `silence` once it ends. Whether it just ended.
fn play<T: Copy>(data: &[T], pos: &mut usize, looped: bool, out: &mut [T], silence: T) -> bool {
    if data.is_empty() {
        out.fill(silence);
        return true;
    }
    let mut filled = 0;
    while filled < out.len() {
        if *pos >= data.len() {
            if !looped {
                out[filled..].fill(silence);
                return true;
            }
            *pos = 0;
        }
        let n = (data.len() - *pos).min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&data[*pos..*pos + n]);
        filled += n;
        *pos += n;
    }
    !looped && *pos >= data.len()
}

/// Copies the next of a prompt's packets into `out`; returns its length and
/// whether a prompt that does not loop just ended.
fn next_packet(packets: &Packets, pos: &mut usize, looped: bool, out: &mut [u8]) -> (usize, bool) {
    if *pos >= packets.len() {
        if !looped || packets.is_empty() {
            return (0, true);
        }
        *pos = 0;
    }
    let p = packets.get(*pos);
    out[..p.len()].copy_from_slice(p);
    *pos += 1;
    (p.len(), !looped && *pos >= packets.len())
}

/// Feeds a prompt's own packets through `tr` until one `ms` packet of the
/// leg's format comes out. A packet that does not decode is skipped like a
/// lost one; a frame time with nothing to send sends nothing.
fn transcode_packet(
    tr: &mut Translator,
    packets: &[Box<[u8]>],
    pos: &mut usize,
    looped: bool,
    ms: u32,
    out: &mut [u8],
) -> (usize, bool) {
    for _ in 0..=packets.len() {
        if let Some(r) = tr.pull(ms, out) {
            let ended = !looped && *pos >= packets.len() && tr.buffered_ms() < ms;
            return (r.unwrap_or(0), ended);
        }
        if *pos >= packets.len() {
            if !looped || packets.is_empty() {
                return (0, true);
            }
            *pos = 0;
        }
        let _ = tr.push(Some(&packets[*pos]), 0);
        *pos += 1;
    }
    (0, false)
}
