//! The per-worker media engine: a slab of legs driven by datagrams and a
//! 20 ms tick. See the crate docs for the contract with the I/O shell.

use std::collections::VecDeque;
use std::mem::offset_of;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use codec::translate::Graph;
use codec::{Codec, Format, Translator};
use rtp::packet::HEADER_LEN;
use rtp::rtcp::{self, RtcpPacket, SenderInfo};
use rtp::stats::ReceiveStats;
use rtp::{RtpHeader, RtpPacket, TelephoneEvent};

use crate::demux::Demux;
use crate::digit_tone::DigitTone;
use crate::frames::{DigitIn, Frame, FrameOut, Output, MIN_DIGIT};
use crate::leg::{Leg, Playout, Source, Totals};
use crate::legs::Legs;
use crate::mixer::Rooms;
use crate::playlist::{Cursor, Playlist};
use crate::recorder::{RecordError, RecordSink, Recorder, SilenceEnd};
use crate::stream::OutStream;
use crate::tap::{CallRecording, Mix, Tap};
use crate::tone::ToneGen;
use crate::{DtmfMode, LegConfig, LegStats, LegUpdate, Prompt, RoomId, SeatLevels, ToneSpec};

/// Largest datagram we build; longer incoming payloads are not relayed.
const MAX_PACKET: usize = 1500;
/// Linear samples in the largest generated packet (20 ms at 48 kHz; 120 ms at 8 kHz).
const MAX_PCM: usize = 960;
/// Mean RTCP report interval (RFC 3550's minimum), randomised ×0.5-1.5.
const RTCP_INTERVAL: Duration = Duration::from_secs(5);
/// A tick this many frames behind skips ahead instead of bursting.
const MAX_CATCH_UP: u32 = 5;
/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// Handle of a leg. Indices are reused after [`Engine::remove_leg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LegId(usize);

impl LegId {
    pub fn index(self) -> usize {
        self.0
    }

    pub fn from_index(index: usize) -> LegId {
        LegId(index)
    }
}

/// A datagram for the shell to send from the leg's RTP or RTCP socket.
/// `payload` borrows the engine's buffer: send it before returning.
#[derive(Debug)]
pub struct Transmit<'a> {
    pub leg: LegId,
    pub rtcp: bool,
    pub dst: SocketAddr,
    /// The leg takes RTP from `dst` alone (symmetric and latched to it, the address its far end
    /// announced): the I/O shell may connect the socket to `dst`, so the kernel filters other
    /// sources and skips the route lookup on every send.
    pub pinned: bool,
    pub payload: &'a [u8],
}

/// Things the call logic needs to hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaEvent {
    /// A non-looped prompt sent its last frame.
    PlaybackDone { leg: LegId },
    /// A digit (RFC 4733 events, or tones on a leg listened to), reported once when it ends.
    Dtmf {
        leg: LegId,
        digit: char,
        duration_ms: u32,
    },
    /// No RTP (frames, on a frame leg) for the leg's `media_timeout` while expecting it, or
    /// neither RTP nor RTCP for its `hold_timeout` while it is held.
    MediaTimeout { leg: LegId },
    /// RTP now goes to the source address of what the far end sends.
    RemoteLatched { leg: LegId, addr: SocketAddr },
    /// A conference member started or stopped talking (its level crossed the talking
    /// threshold, or stayed below it for the hang time).
    Talking { leg: LegId, talking: bool },
    /// A recording ended on a run of silence ([`SilenceEnd`]); its file is complete.
    RecordingSilent { leg: LegId },
    /// An SRTP or SRTCP packet failed authentication or was a replay, and was dropped
    /// (counted in [`LegStats::srtp_rejected`]).
    SrtpRejected { leg: LegId },
    /// A WebRTC leg's DTLS-SRTP handshake failed: it carries no media.
    DtlsFailed {
        leg: LegId,
        error: webrtc::DtlsError,
    },
}

/// Media for all the legs of one worker thread.
pub struct Engine {
    legs: Legs,
    events: VecDeque<MediaEvent>,
    /// Packet being built; `Transmit::payload` borrows it.
    buf: Box<[u8; MAX_PACKET]>,
    /// Linear PCM scratch for prompts and tones.
    pcm: Box<[i16; MAX_PCM]>,
    rng: fastrand::Rng,
    cname: Vec<u8>,
    /// Conference rooms, mixed on the ticks.
    rooms: Rooms,
    /// An `Instant` and its NTP time, to stamp SRs without reading clocks.
    ntp_anchor: Option<(Instant, u64)>,
    /// Legs playing a prompt or a tone.
    generating: usize,
    /// Legs by far-end address, for shells that share a socket between legs.
    demux: Demux,
    /// The mode of a new leg (the switch's `rtp.dtmf`).
    dtmf_mode: DtmfMode,
    /// The counters of the legs removed so far ([`Engine::totals`]).
    removed: Totals,
    /// WebRTC legs whose DTLS handshake is under way: their retransmissions are timed on the
    /// ticks, which cost the other legs nothing.
    handshaking: Vec<LegId>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine {
    /// An engine with random SSRCs; see [`Engine::set_wall_clock`].
    pub fn new() -> Engine {
        Self::with_seed(fastrand::u64(..))
    }

    /// A deterministic engine (tests, reproducible runs).
    pub fn with_seed(seed: u64) -> Engine {
        let mut rng = fastrand::Rng::with_seed(seed);
        let cname = format!("strowger-{:08x}", rng.u32(..)).into_bytes();
        Engine {
            legs: Legs::default(),
            events: VecDeque::with_capacity(64),
            buf: Box::new([0; MAX_PACKET]),
            pcm: Box::new([0; MAX_PCM]),
            rng,
            cname,
            rooms: Rooms::default(),
            ntp_anchor: None,
            generating: 0,
            demux: Demux::default(),
            dtmf_mode: DtmfMode::default(),
            removed: Totals::default(),
            handshaking: Vec::new(),
        }
    }

    /// Whether a leg plays a prompt or a tone, or a room mixes: frames leave on the ticks, which must then
    /// come each frame interval (or its phases). Without one, a tick sends no media, so a
    /// shell may tick less often while the other legs' packets are relayed as they arrive.
    pub fn generating(&self) -> bool {
        self.generating > 0 || !self.rooms.is_empty()
    }

    /// Whether what arrives on the leg goes out again at once (bridge, echo). Packets that are
    /// only counted, recorded or scanned for DTMF can wait in the socket a few frames and be
    /// read together, with their kernel arrival times.
    pub fn relays(&self, id: LegId) -> bool {
        self.legs
            .get(id.0)
            .is_some_and(|l| matches!(l.source, Source::Peer(_)))
    }

    /// Ties `now` to wall-clock time so SRs carry real NTP timestamps.
    /// Without it, SR times count from the first leg as if from 1970, which
    /// is still consistent for round-trip times.
    pub fn set_wall_clock(&mut self, now: Instant, wall: SystemTime) {
        let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.ntp_anchor = Some((now, ntp(since + Duration::from_secs(NTP_UNIX_OFFSET))));
    }

    pub fn add_leg(&mut self, cfg: LegConfig, now: Instant) -> LegId {
        self.ntp_anchor.get_or_insert((now, NTP_UNIX_OFFSET << 32));
        let out = OutStream::new(&mut self.rng);
        // The first report after half an interval (RFC 3550 §6.2), so that a far end learns the
        // round trip early in the call.
        let rtcp_due = now + rtcp_interval(&mut self.rng) / 2;
        let remote = cfg.remote;
        let mut leg = Leg::new(cfg, out, rtcp_due);
        leg.dtmf_mode = self.dtmf_mode;
        leg.listen_for_tones(false);
        let id = LegId(self.legs.insert(leg));
        self.demux.moved(id, None, remote);
        id
    }

    /// The leg whose far end sends RTP from `src`, for a shell that reads many legs' packets
    /// from one socket (see `demux`).
    pub fn rtp_leg_from(&self, src: SocketAddr) -> Option<LegId> {
        self.demux.rtp(src)
    }

    /// Starts loading what [`Engine::on_rtp`] reads of leg `id` into the cache, for a shell that
    /// looks up a batch's legs before handing the packets over: the misses of many legs then
    /// overlap instead of stalling a packet each. (With shared ports every packet is another
    /// call's; a leg spans 14 cache lines, of which a packet reads a few.)
    pub fn prefetch(&self, id: LegId) {
        self.legs.prefetch(id.0, &RECEIVING);
    }

    /// The leg whose far end sends RTCP from `src`: its RTP comes from the port below.
    pub fn rtcp_leg_from(&self, src: SocketAddr) -> Option<LegId> {
        self.demux.rtcp(src)
    }

    /// Removes the leg (ending a bridge with it, finishing a recording) and
    /// returns its final counters.
    pub fn remove_leg(&mut self, id: LegId) -> Option<LegStats> {
        self.unbridge(id);
        let mut leg = self.legs.try_remove(id.0)?;
        self.removed.add(&leg);
        self.demux.moved(id, leg.remote, None);
        if let Some(r) = leg.recorder.take() {
            let _ = r.finish();
        }
        Some(leg.stats())
    }

    /// RTP counters over every leg this engine ever had: the live legs' own plus the removed
    /// legs'. Summed when asked (metrics ask once a second), so a packet costs nothing more.
    pub fn totals(&self) -> Totals {
        let mut t = self.removed;
        for leg in self.legs.iter() {
            t.add(leg);
        }
        t
    }

    /// Calls `f` with the formats of each leg's translator (its own, and the format it
    /// relays to): the transcodings in use.
    pub fn translations(&self, mut f: impl FnMut(Format, Format)) {
        for t in self.legs.iter().filter_map(|l| l.translator.as_ref()) {
            let (from, to) = t.formats();
            f(from, to);
        }
    }

    /// Current counters of a leg.
    pub fn stats(&self, id: LegId) -> Option<LegStats> {
        self.legs.get(id.0).map(Leg::stats)
    }

    /// `packets` of leg `id`'s RTP that the shell could not send (the kernel refused them):
    /// counted as send errors instead of sent, so the CDR and RTCP reports say what left.
    pub fn send_failed(&mut self, id: LegId, packets: u64) {
        if let Some(leg) = self.legs.get_mut(id.0) {
            let packets = packets.min(leg.out.packets);
            leg.out.packets -= packets;
            leg.send_errors += packets;
        }
    }

    /// Adds a frame leg: one whose transport carries its frames and digits itself (IAX2), fed
    /// with [`Engine::on_frame`] and sending [`FrameOut`]s through [`Output::frame`]; no RTP,
    /// no RTCP, no addresses. It sends a frame per 20 ms (per packet of a coded format).
    pub fn add_frame_leg(
        &mut self,
        format: Format,
        media_timeout: Option<Duration>,
        now: Instant,
    ) -> LegId {
        let cfg = LegConfig {
            payload_type: 0,
            format,
            dtmf_pt: None,
            remote: None,
            remote_rtcp: None,
            // Latched to no address: a datagram handed to `on_rtp` for it is rejected.
            symmetric: true,
            media_timeout,
            // Its transport has no SDP hold.
            hold_timeout: None,
            ptime_ms: 20,
        };
        let out = OutStream::new(&mut self.rng);
        let mut leg = Leg::new(cfg, out, now);
        leg.latched = true;
        leg.frames = Some(Box::default());
        LegId(self.legs.insert(leg))
    }

    /// Applies a re-INVITE's result: codec, addresses, hold direction (of an RTP leg; a frame
    /// leg changes codec with [`Engine::set_format`]).
    pub fn update_leg(&mut self, id: LegId, update: LegUpdate) {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let changed = leg.format != update.format;
        let was = leg.remote;
        leg.update(update);
        self.demux.moved(id, was, leg.remote);
        self.format_set(id, changed);
        self.relisten(id);
        if let Some(peer) = self.peer(id) {
            self.relisten(peer);
        }
    }

    /// Changes a leg's codec alone (a frame leg's, whose transport agreed on another).
    pub fn set_format(&mut self, id: LegId, format: Format) {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let changed = leg.format != format;
        leg.set_format(format);
        self.format_set(id, changed);
    }

    /// What follows the leg's format: its recording, and when it `changed`, its bridge's
    /// translators or its prompt's playout.
    fn format_set(&mut self, id: LegId, changed: bool) {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        if let Some(rec) = &mut leg.recorder {
            rec.set_format(leg.format);
        }
        if let Some(tap) = &mut leg.tap {
            tap.set_format(leg.format);
        }
        if !changed {
            return;
        }
        let format = leg.format;
        match &mut leg.source {
            &mut Source::Peer(peer) => {
                self.translate(id, peer);
                self.translate(peer, id);
            }
            Source::Prompt {
                prompt,
                pos,
                playout,
                ..
            } => {
                // Positions count in the old format's units: start the new format over.
                let cache = !matches!(playout, Playout::Live(_));
                *playout = self::playout(format, prompt, cache);
                *pos = 0;
            }
            &mut Source::Room(room) => {
                if let Some(r) = self.rooms.get_mut(room) {
                    r.join(id, format);
                }
            }
            _ => {}
        }
    }

    /// Plays `prompt` from the start, optionally forever. With `cache` a
    /// non-G.711 leg plays the prompt's packets in its format, encoded once and
    /// shared by every call; without, this call transcodes it as it plays.
    pub fn play(&mut self, id: LegId, prompt: Arc<Prompt>, looped: bool, cache: bool) {
        let Some(leg) = self.legs.get(id.0) else {
            return;
        };
        let playout = playout(leg.format, &prompt, cache);
        self.set_source(
            id,
            Source::Prompt {
                prompt,
                pos: 0,
                looped,
                playout,
                list: None,
            },
        );
    }

    /// Plays `list`'s tracks one after another until something else is started (music on
    /// hold): in order from the first, or shuffled from any. Each track's packets in the leg's
    /// format are encoded once and shared, as `play` with `cache` does.
    pub fn play_list(&mut self, id: LegId, list: Arc<Playlist>) {
        let Some(leg) = self.legs.get(id.0) else {
            return;
        };
        let seed = self.rng.u64(1..);
        let at = list.first(seed);
        let prompt = list.tracks()[at].clone();
        let one = list.tracks().len() == 1;
        let playout = playout(leg.format, &prompt, true);
        self.set_source(
            id,
            Source::Prompt {
                prompt,
                pos: 0,
                looped: one,
                playout,
                list: (!one).then(|| Box::new(Cursor { list, at, seed })),
            },
        );
    }

    /// Plays a generated tone until something else is started.
    pub fn tone(&mut self, id: LegId, tone: ToneSpec) {
        let Some(rate) = self.legs.get(id.0).map(|l| l.format.pcm_rate()) else {
            return;
        };
        self.set_source(id, Source::Tone(ToneGen::new(&tone, rate)));
    }

    /// Sends back whatever arrives, as this leg's own stream.
    pub fn echo(&mut self, id: LegId) {
        self.set_source(id, Source::Peer(id));
    }

    /// Makes the leg idle: it stops sending RTP (no comfort noise: RTP
    /// allows pauses and the timestamps resume in step with the clock; RTCP
    /// continues). Also finishes a recording, returning its sample count.
    pub fn silence(&mut self, id: LegId) -> Option<Result<u32, RecordError>> {
        self.set_source(id, Source::Idle);
        self.legs
            .get_mut(id.0)?
            .recorder
            .take()
            .map(Recorder::finish)
    }

    /// Records what arrives on the leg as 8 kHz 16-bit mono WAV, until
    /// [`Engine::silence`] or [`Engine::remove_leg`]. Replaces (and
    /// finishes) an earlier recording.
    pub fn record(&mut self, id: LegId, sink: Box<dyn RecordSink>) -> Result<(), RecordError> {
        self.record_until(id, sink, None)
    }

    /// [`Engine::record`], ended also by a run of silence (`end`), which is left out of the file
    /// ([`MediaEvent::RecordingSilent`]).
    pub fn record_until(
        &mut self,
        id: LegId,
        sink: Box<dyn RecordSink>,
        end: Option<SilenceEnd>,
    ) -> Result<(), RecordError> {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return Ok(());
        };
        if let Some(old) = leg.recorder.replace(Recorder::new(sink, leg.format, end)?) {
            old.finish()?;
        }
        Ok(())
    }

    /// Records the whole call on the leg in the background, from `now` until
    /// [`Engine::stop_call_recording`] or [`Engine::remove_leg`]: what it receives and what it
    /// sends (bridged, echoed or generated), decoded to 8 kHz, mixed or as two channels. Hand
    /// the returned end to a writer thread. Replaces (and ends) an earlier one.
    pub fn record_call(&mut self, id: LegId, mix: Mix, now: Instant) -> Option<CallRecording> {
        let leg = self.legs.get_mut(id.0)?;
        let (tap, recording) = Tap::new(leg.format, mix, now);
        if let Some(old) = leg.tap.replace(Box::new(tap)) {
            old.finish(now);
        }
        Some(recording)
    }

    /// Ends the leg's whole-call recording at `now`, handing its last audio to the writer.
    pub fn stop_call_recording(&mut self, id: LegId, now: Instant) {
        if let Some(tap) = self.legs.get_mut(id.0).and_then(|l| l.tap.take()) {
            tap.finish(now);
        }
    }

    /// Relays RTP between `a` and `b`, each rewritten onto the other's
    /// stream: passed through when both use the same format, transcoded
    /// between µ-law and A-law by table, and otherwise through a
    /// [`Translator`] along the cheapest path (made here, not per packet).
    pub fn bridge(&mut self, a: LegId, b: LegId) {
        if !self.legs.contains(a.0) || !self.legs.contains(b.0) {
            return;
        }
        self.set_source(a, Source::Peer(b));
        self.set_source(b, Source::Peer(a));
        if a != b {
            self.translate(a, b);
            self.translate(b, a);
        }
        self.relisten(a);
        self.relisten(b);
    }

    /// The call logic reads the digits of leg `id` from now on: tones are looked for in its
    /// audio if it sends digits no other way.
    pub fn read_digits(&mut self, id: LegId) {
        if let Some(leg) = self.legs.get_mut(id.0) {
            leg.reads_digits = true;
        }
        self.relisten(id);
    }

    /// Decides again whether leg `id` is listened to for tones (its negotiation, its readers
    /// or its peer changed).
    fn relisten(&mut self, id: LegId) {
        let peer_takes = self
            .peer(id)
            .and_then(|p| self.legs.get(p.0))
            .is_some_and(|p| p.dtmf_pt.is_some() || p.dtmf_mode == DtmfMode::Info);
        if let Some(leg) = self.legs.get_mut(id.0) {
            leg.listen_for_tones(peer_takes);
        }
    }

    /// Sets up (or clears) the translator from `from`'s format to `to`'s.
    fn translate(&mut self, from: LegId, to: LegId) {
        let Some(to_format) = self.legs.get(to.0).map(|l| l.format) else {
            return;
        };
        let Some(leg) = self.legs.get_mut(from.0) else {
            return;
        };
        leg.translator = match (leg.format, to_format) {
            (a, b) if a == b || (leg.law.is_some() && is_g711(b)) => None,
            (a, b) => Translator::new(Graph::global(), a, b),
        };
    }

    /// Mutes leg `id` (`muted`: what arrives from it reaches nobody — its bridge's peer, its
    /// room) or makes it deaf (`deaf`: nothing is sent to it, relayed or generated), or undoes
    /// either; its source (bridge, prompt, room) stays, so what was there resumes.
    pub fn set_mute(&mut self, id: LegId, muted: bool, deaf: bool) {
        if let Some(leg) = self.legs.get_mut(id.0) {
            leg.muted = muted;
            leg.deaf = deaf;
            leg.sends = leg.negotiated_sends && !deaf;
            leg.rearm();
        }
    }

    /// Ends the leg's bridge (or echo); both sides go idle.
    pub fn unbridge(&mut self, id: LegId) {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        leg.translator = None;
        let old = std::mem::replace(&mut leg.source, Source::Idle);
        if old.generates() {
            self.generating -= 1;
        }
        if let Source::Room(room) = old {
            if let Some(r) = self.rooms.get_mut(room) {
                r.leave(id);
            }
        }
        if let Source::Peer(peer) = old {
            if let Some(p) = self
                .legs
                .get_mut(peer.0)
                .filter(|p| matches!(p.source, Source::Peer(x) if x == id))
            {
                p.source = Source::Idle;
                p.translator = None;
            }
        }
    }

    fn set_source(&mut self, id: LegId, source: Source) {
        self.unbridge(id);
        if let Some(leg) = self.legs.get_mut(id.0) {
            self.generating += usize::from(source.generates());
            leg.source = source;
            leg.next_frame = None;
            leg.out.restart();
        }
    }

    /// A conference room mixing at `rate` (8, 16 or 48 kHz) the `loudest` members heard most.
    pub fn add_room(&mut self, rate: u32, loudest: usize) -> RoomId {
        self.rooms.add(rate, loudest)
    }

    /// Ends a room; its members go idle.
    pub fn remove_room(&mut self, room: RoomId) {
        for leg in self.rooms.remove(room) {
            if let Some(l) = self.legs.get_mut(leg.0) {
                l.source = Source::Idle;
            }
        }
    }

    /// Seats the leg in `room`, in place of what it did (a bridge ends as with any source).
    /// Starting another source on it, or removing it, takes it out of the room.
    pub fn join_room(&mut self, id: LegId, room: RoomId) {
        let Some(format) = self.legs.get(id.0).map(|l| l.format) else {
            return;
        };
        if self.rooms.get_mut(room).is_none() {
            return;
        }
        self.set_source(id, Source::Room(room));
        if let Some(r) = self.rooms.get_mut(room) {
            r.join(id, format);
        }
    }

    /// Mutes a member or changes its volumes.
    pub fn set_seat(&mut self, id: LegId, levels: SeatLevels) {
        if let Some(Source::Room(room)) = self.legs.get(id.0).map(|l| &l.source) {
            if let Some(r) = self.rooms.get_mut(*room) {
                r.set_levels(id, levels);
            }
        }
    }

    /// Plays `tone` for `duration` to every member of the room, over the voices.
    pub fn room_tone(&mut self, room: RoomId, tone: &ToneSpec, duration: Duration) {
        if let Some(r) = self.rooms.get_mut(room) {
            r.cue(tone, duration);
        }
    }

    pub fn poll_event(&mut self) -> Option<MediaEvent> {
        self.events.pop_front()
    }

    /// Keys the leg's SRTP with what its SDP agreed, or makes it plain RTP again (`None`).
    /// A direction whose key a re-INVITE leaves as it was keeps its context, replay window and
    /// rollover counter. Err leaves the leg as it was.
    pub fn set_srtp(&mut self, id: LegId, keys: Option<&sdp::SrtpKeys>) -> Result<(), srtp::Error> {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return Ok(());
        };
        match (keys, &mut leg.srtp) {
            (Some(k), Some(s)) => s.rekey(k)?,
            (Some(k), None) => leg.srtp = Some(Box::new(crate::leg_srtp::LegSrtp::new(k)?)),
            (None, _) => leg.srtp = None,
        }
        Ok(())
    }

    /// Makes the leg a WebRTC leg (ICE-lite, DTLS-SRTP, rtcp-mux) as its SDP agreed, or an
    /// RTP leg again (`None`). Its media waits for the handshake's keys: nothing is sent in
    /// clear, and nothing is taken from a source that passed no ICE check. A re-INVITE from
    /// the same far end (same fingerprint and ufrag) keeps the association and its keys.
    pub fn set_webrtc(
        &mut self,
        id: LegId,
        cfg: Option<&crate::WebRtcConfig>,
        now: Instant,
    ) -> Result<(), webrtc::ErrorStack> {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return Ok(());
        };
        let same = match (cfg, leg.webrtc.as_deref_mut()) {
            (Some(c), Some(w)) => w.same_peer(c),
            _ => false,
        };
        match cfg {
            None => {
                leg.webrtc = None;
                leg.rtcp_mux = false;
            }
            Some(_) if same => {}
            Some(c) => {
                leg.webrtc = Some(Box::new(crate::leg_webrtc::LegWebRtc::new(c, now)?));
                leg.srtp = None;
                leg.rtcp_mux = true;
                self.demux.moved(id, leg.remote, None);
                leg.remote = None;
                leg.announced = None;
                self.handshaking.push(id);
            }
        }
        Ok(())
    }

    /// A datagram on a WebRTC leg's port: checks and DTLS are answered, SRTCP read; true for
    /// SRTP from a checked source, for the leg's SRTP to open.
    #[cold]
    fn webrtc_in<F>(
        &mut self,
        id: LegId,
        data: &[u8],
        src: SocketAddr,
        now: Instant,
        tx: &mut F,
    ) -> bool
    where
        F: Output + ?Sized,
    {
        use crate::leg_webrtc::Verdict;
        let Some(leg) = self.legs.get_mut(id.0) else {
            return false;
        };
        let Some(w) = leg.webrtc.as_deref_mut() else {
            return true;
        };
        match w.on_datagram(data, src, now) {
            Verdict::Refused => {
                leg.rejected += 1;
                leg.ice_refused += 1;
                false
            }
            Verdict::Taken => {
                self.webrtc_flush(id, tx);
                false
            }
            // Nothing in clear before the handshake's keys.
            Verdict::Media if leg.srtp.is_none() => {
                leg.rejected += 1;
                false
            }
            // RFC 5761 §4: RTCP packet types 192-223 where RTP has its marker and payload type.
            Verdict::Media if matches!(data.get(1), Some(192..=223)) => {
                self.on_rtcp(id, data, src, now);
                false
            }
            Verdict::Media => true,
        }
    }

    /// Sends what a WebRTC leg's ICE and DTLS have to say, and keys its SRTP when the
    /// handshake is done; a leg still shaking hands is timed on the ticks.
    fn webrtc_flush<F>(&mut self, id: LegId, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let Some(w) = leg.webrtc.as_deref_mut() else {
            return;
        };
        while let Some((dst, d)) = w.poll_transmit() {
            tx.transmit(Transmit {
                leg: id,
                rtcp: false,
                dst,
                pinned: false,
                payload: &d,
            });
        }
        let handshaking = w.handshaking();
        let outcome = w.outcome().map(|r| {
            r.and_then(|keys| {
                crate::leg_srtp::LegSrtp::new(&keys).map_err(|e| {
                    webrtc::DtlsError::Handshake(format!("SRTP refused its keys: {e:?}"))
                })
            })
        });
        let addr = w.media_addr();
        match outcome {
            Some(Ok(srtp)) => leg.srtp = Some(Box::new(srtp)),
            Some(Err(error)) => self
                .events
                .push_back(MediaEvent::DtlsFailed { leg: id, error }),
            None => {}
        }
        // Media follows the pair ICE selected, once there are keys to send it with.
        if leg.srtp.is_some() && addr.is_some() && leg.remote != addr {
            leg.remote = addr;
            leg.latched = false;
        }
        if handshaking && !self.handshaking.contains(&id) {
            self.handshaking.push(id);
        }
    }

    /// Resends the unanswered DTLS flights whose time has come.
    #[cold]
    fn dtls_timers<F>(&mut self, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        for id in std::mem::take(&mut self.handshaking) {
            if let Some(w) = self
                .legs
                .get_mut(id.0)
                .and_then(|l| l.webrtc.as_deref_mut())
            {
                w.handle_timeout(now);
                self.webrtc_flush(id, tx);
            }
        }
    }

    /// An RTP datagram arrived on the leg's RTP socket. Relays (bridge,
    /// echo) go out through `tx` before this returns.
    pub fn on_rtp<F>(&mut self, id: LegId, data: &[u8], src: SocketAddr, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let leg = if leg.webrtc.is_some() {
            if !self.webrtc_in(id, data, src, now, tx) {
                return;
            }
            let Some(leg) = self.legs.get_mut(id.0) else {
                return;
            };
            leg
        } else {
            leg
        };
        if let Some(srtp) = leg.srtp.as_deref_mut() {
            // Decrypted on a copy: the shell's buffer is not ours to write.
            let mut plain = [0u8; MAX_PACKET];
            let Some(copy) = plain.get_mut(..data.len()) else {
                leg.rejected += 1;
                return;
            };
            copy.copy_from_slice(data);
            match srtp.rx.unprotect(copy) {
                Ok(n) => self.rtp_in(id, &plain[..n], src, now, tx),
                Err(_) => {
                    leg.srtp_rejected += 1;
                    self.events.push_back(MediaEvent::SrtpRejected { leg: id });
                }
            }
            return;
        }
        self.rtp_in(id, data, src, now, tx)
    }

    /// [`Engine::on_rtp`] once the packet is plain RTP.
    #[inline(always)]
    fn rtp_in<F>(&mut self, id: LegId, data: &[u8], src: SocketAddr, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let Ok(pkt) = RtpPacket::parse(data) else {
            leg.rejected += 1;
            return;
        };
        if leg.symmetric && leg.latched && leg.remote != Some(src) {
            if leg.announced != Some(src) {
                leg.rejected += 1;
                return;
            }
            // The far end's own address takes its leg back from a source that latched first.
            leg.latched = false;
        }
        if (leg.symmetric || leg.remote.is_none()) && !leg.latched {
            leg.latched = true;
            if leg.remote != Some(src) {
                self.demux.moved(id, leg.remote, Some(src));
                leg.remote = Some(src);
                self.events
                    .push_back(MediaEvent::RemoteLatched { leg: id, addr: src });
            }
        }
        leg.last_rx = Some(now);
        leg.timed_out = false;
        leg.packets_received += 1;
        leg.bytes_received += pkt.payload().len() as u64;
        let stats = match &mut leg.rx {
            Some((ssrc, stats)) if *ssrc == pkt.ssrc() => stats,
            rx => {
                leg.lost_before += rx.as_ref().map_or(0, |(_, s)| s.lost());
                &mut rx
                    .insert((
                        pkt.ssrc(),
                        ReceiveStats::new(pkt.sequence(), leg.format.rtp_clock(), now),
                    ))
                    .1
            }
        };
        stats.on_packet(pkt.sequence());
        if !leg.receives {
            return;
        }

        let audio = pkt.payload_type() == leg.payload_type;
        // A digit that ended here: its peer hears of it in the form it takes.
        let mut heard = None;
        if audio {
            stats.on_timestamp(pkt.timestamp(), now);
            let events = &mut self.events;
            leg.dtmf
                .on_audio(pkt.timestamp(), |d| events.push_back(dtmf_event(id, d)));
            if let (Some(det), Some(law)) = (leg.tones.as_deref_mut(), leg.law) {
                let pcm = pkt.payload().iter().map(|&b| law.decode_sample(b));
                det.push(pcm, |d| {
                    heard = Some((d.digit, d.duration_ms, Heard::Tones));
                    events.push_back(MediaEvent::Dtmf {
                        leg: id,
                        digit: d.digit,
                        duration_ms: d.duration_ms,
                    });
                });
            }
            record(
                &mut leg.recorder,
                id,
                events,
                pkt.ssrc(),
                pkt.timestamp(),
                pkt.payload(),
            );
            if let Some(tap) = &mut leg.tap {
                tap.received(pkt.payload());
            }
        } else if Some(pkt.payload_type()) == leg.dtmf_pt {
            let Ok(ev) = TelephoneEvent::parse(pkt.payload()) else {
                leg.rejected += 1;
                return;
            };
            let events = &mut self.events;
            leg.dtmf.on_event(pkt.timestamp(), &ev, |d| {
                heard = Some((d.digit, d.duration / 8, Heard::Events));
                events.push_back(dtmf_event(id, d))
            });
        } else {
            return; // comfort noise and anything else not negotiated
        }

        let from_law = leg.law;
        let peer = match leg.source {
            Source::Peer(peer) if !leg.muted => peer,
            Source::Room(room) if audio && !leg.muted => {
                return self.rooms.hear(room, id, pkt.payload())
            }
            _ => return,
        };
        let translated = leg.translator.is_some();
        if let Some((digit, ms, form)) = heard {
            self.digit_out(peer, digit, ms, form, now, tx);
        }
        if audio && translated {
            self.relay_translated(id, peer, pkt.payload(), now, tx);
            return;
        }
        let Some(out) = self.legs.get_mut(peer.0) else {
            return;
        };
        let (Some(dst), true) = (out.remote, out.sends) else {
            // A frame leg has no address: its packets leave as frames.
            if out.frames.is_some() {
                rtp_to_frames(peer, out, &pkt, audio, from_law, &mut self.buf[..], now, tx);
            }
            return;
        };
        let payload = pkt.payload();
        let len = HEADER_LEN + payload.len();
        if len > MAX_PACKET {
            return;
        }
        let header = if audio {
            // Same format, or G.711 both sides (a translator handles the rest).
            let body = &mut self.buf[HEADER_LEN..len];
            let units = relay_payload(from_law, out.law, payload, body, out.frame_units);
            if let (Some(tone), Some(law)) = (out.digit_tone.as_deref_mut(), out.law) {
                if tone.overlay(law, body) {
                    out.digit_tone = None;
                }
            }
            out.out.relay(&pkt, out.payload_type, units, now)
        } else {
            // To a leg in DtmfMode::Info the call logic sends the digit by signalling instead.
            let info = out.dtmf_mode == DtmfMode::Info;
            let Some(pt) = out.dtmf_pt.filter(|_| !info) else {
                return;
            };
            self.buf[HEADER_LEN..len].copy_from_slice(payload);
            out.out.relay(&pkt, pt, 0, now)
        };
        send_rtp(
            &mut self.buf[..],
            peer,
            out,
            dst,
            &header,
            payload.len(),
            None,
            now,
            tx,
        );
    }

    /// Runs a bridged packet through the leg's translator and sends every
    /// whole packet of the peer's format that comes out, on the peer's clock.
    fn relay_translated<F>(
        &mut self,
        id: LegId,
        peer: LegId,
        payload: &[u8],
        now: Instant,
        tx: &mut F,
    ) where
        F: Output + ?Sized,
    {
        let Some((leg, out)) = self.legs.get2_mut(id.0, peer.0) else {
            return;
        };
        let Some(tr) = leg.translator.as_mut() else {
            return;
        };
        if tr.push(Some(payload), 0).is_err() {
            return; // a corrupt packet is dropped like a lost one
        }
        while let Some(r) = tr.pull(out.ptime_ms, &mut self.buf[HEADER_LEN..]) {
            let (Ok(n), true) = (r, out.sends) else {
                continue;
            };
            let Some(dst) = out.remote else {
                if out.frames.is_some() {
                    let header = out.out.next_frame(out.payload_type, out.frame_units, now);
                    let body = &self.buf[HEADER_LEN..HEADER_LEN + n];
                    frame_out(peer, out, &header, body, None, now, tx);
                }
                continue;
            };
            let header = out.out.next_frame(out.payload_type, out.frame_units, now);
            send_rtp(&mut self.buf[..], peer, out, dst, &header, n, None, now, tx);
        }
    }

    /// A frame arrived on frame leg `id` ([`Engine::add_frame_leg`]): voice in the leg's
    /// format, or a digit. What it relays (bridge, echo) goes out through `tx` before this
    /// returns: RTP to an RTP peer, frames to a frame leg.
    pub fn on_frame<F>(&mut self, id: LegId, frame: Frame<'_>, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let Some(fs) = leg.frames.as_deref_mut() else {
            leg.rejected += 1;
            return;
        };
        leg.last_rx = Some(now);
        leg.timed_out = false;
        let (ts, payload) = match frame {
            Frame::Voice { ts, payload } => (ts, payload),
            Frame::Digit { digit, end } => return self.digit_in(id, digit, end, now, tx),
        };
        leg.packets_received += 1;
        leg.bytes_received += payload.len() as u64;
        if !leg.receives {
            return;
        }
        let clock = leg.format.rtp_clock();
        let ts = ts.wrapping_mul(clock / 1000);
        fs.jitter
            .get_or_insert_with(|| ReceiveStats::new(0, clock, now))
            .on_timestamp(ts, now);
        record(&mut leg.recorder, id, &mut self.events, 0, ts, payload);
        if let Some(tap) = &mut leg.tap {
            tap.received(payload);
        }
        let peer = match leg.source {
            Source::Peer(peer) if !leg.muted => peer,
            Source::Room(room) if !leg.muted => return self.rooms.hear(room, id, payload),
            _ => return,
        };
        if leg.translator.is_some() {
            return self.relay_translated(id, peer, payload, now, tx);
        }
        let from_law = leg.law;
        let Some(out) = self.legs.get_mut(peer.0) else {
            return;
        };
        let len = HEADER_LEN + payload.len();
        if !out.sends || len > MAX_PACKET {
            return;
        }
        // Same format, or G.711 both sides (a translator handles the rest).
        let body = &mut self.buf[HEADER_LEN..len];
        let units = relay_payload(from_law, out.law, payload, body, out.frame_units);
        let header = out.out.relay_frame(ts, out.payload_type, units, now);
        let Some(dst) = out.remote else {
            return frame_out(
                peer,
                out,
                &header,
                &self.buf[HEADER_LEN..len],
                None,
                now,
                tx,
            );
        };
        send_rtp(
            &mut self.buf[..],
            peer,
            out,
            dst,
            &header,
            payload.len(),
            None,
            now,
            tx,
        );
    }

    /// A digit went down or came up on frame leg `id`: reported when it ends, and relayed to
    /// the peer as a digit frame or as RFC 4733 events (the start once, the end three times).
    fn digit_in<F>(&mut self, id: LegId, digit: char, end: bool, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let code = rtp::dtmf::char_event(digit);
        let (Some(fs), Some(code), true) = (leg.frames.as_deref_mut(), code, leg.receives) else {
            return;
        };
        let ongoing = fs.digit_in.filter(|d| d.digit == digit);
        if !end && ongoing.is_some() {
            return; // a repeated begin
        }
        let peer = match leg.source {
            Source::Peer(p) => self.legs.get_mut(p.0).map(|o| (p, o)),
            _ => None,
        };
        let start = ongoing.unwrap_or_else(|| DigitIn {
            digit,
            since: now,
            peer_ts: peer.map_or(0, |(_, o)| o.out.position(now)),
        });
        let held = now.saturating_duration_since(start.since).max(MIN_DIGIT);
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        if let Some(fs) = leg.frames.as_deref_mut() {
            fs.digit_in = (!end).then_some(start);
        }
        if end {
            self.events.push_back(MediaEvent::Dtmf {
                leg: id,
                digit,
                duration_ms: held.as_millis() as u32,
            });
        }
        let Some(peer) = (match leg.source {
            Source::Peer(p) => Some(p),
            _ => None,
        }) else {
            return;
        };
        let Some(out) = self.legs.get_mut(peer.0).filter(|o| o.sends) else {
            return;
        };
        if out.frames.is_some() {
            return tx.frame(FrameOut::Digit {
                leg: peer,
                digit,
                end,
            });
        }
        // To a leg in DtmfMode::Info the call logic sends the digit by signalling instead.
        let info = out.dtmf_mode == DtmfMode::Info;
        let (Some(dst), Some(pt)) = (out.remote, out.dtmf_pt.filter(|_| !info)) else {
            return;
        };
        let duration = match end {
            true => held.as_millis() as u64 * u64::from(out.format.rtp_clock()) / 1000,
            false => u64::from(out.frame_units),
        };
        let event = TelephoneEvent {
            event: code,
            end,
            volume: 10,
            duration: duration.min(u64::from(u16::MAX)) as u16,
        };
        let first = ongoing.is_none();
        let to = EventTo { peer, dst, pt };
        send_event(
            &mut self.buf[..],
            to,
            out,
            &event,
            start.peer_ts,
            first,
            now,
            tx,
        );
    }

    /// How digits are taken from and given to the far ends of legs added from now on.
    pub fn set_dtmf_mode(&mut self, mode: DtmfMode) {
        self.dtmf_mode = mode;
    }

    /// How leg `id`'s far end takes and gives digits (its user's or trunk's setting), in place
    /// of the engine's: a bridge gives each leg digits in the form of its own mode.
    pub fn set_leg_dtmf_mode(&mut self, id: LegId, mode: DtmfMode) {
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        leg.dtmf_mode = mode;
        self.relisten(id);
        if let Some(peer) = self.peer(id) {
            self.relisten(peer);
        }
    }

    /// Leg `id`'s mode (the engine's for a leg that is gone).
    pub fn leg_dtmf_mode(&self, id: LegId) -> DtmfMode {
        self.legs.get(id.0).map_or(self.dtmf_mode, |l| l.dtmf_mode)
    }

    /// The leg bridged to `id`, if any.
    pub fn peer(&self, id: LegId) -> Option<LegId> {
        match self.legs.get(id.0)?.source {
            Source::Peer(p) if p != id => Some(p),
            _ => None,
        }
    }

    /// Sends a digit to leg `id`'s far end in its media: as RFC 4733 events if it negotiated
    /// telephone-event, else as tones over what it is sent. For a digit that arrived by
    /// signalling (SIP INFO), or one the call logic does not send by signalling.
    pub fn send_digit<F>(
        &mut self,
        id: LegId,
        digit: char,
        duration_ms: u32,
        now: Instant,
        tx: &mut F,
    ) where
        F: Output + ?Sized,
    {
        self.digit_out(id, digit, duration_ms, Heard::Signalling, now, tx);
    }

    /// Regenerates a digit heard in form `from` on leg `to`'s peer in the form `to` takes,
    /// unless it reaches `to` already: RFC 4733 events are relayed as they are, tones are in
    /// the relayed audio, and to a leg in [`DtmfMode::Info`] the call logic sends it by
    /// signalling.
    fn digit_out<F>(
        &mut self,
        to: LegId,
        digit: char,
        duration_ms: u32,
        from: Heard,
        now: Instant,
        tx: &mut F,
    ) where
        F: Output + ?Sized,
    {
        let Some(out) = self.legs.get_mut(to.0) else {
            return;
        };
        let signalled = out.dtmf_mode == DtmfMode::Info && from != Heard::Signalling;
        if signalled || !out.sends || out.frames.is_some() {
            return;
        }
        match (out.dtmf_pt, out.remote, rtp::dtmf::char_event(digit)) {
            (Some(pt), Some(dst), Some(code)) if from != Heard::Events => {
                let start = out.out.position(now);
                let to = EventTo { peer: to, dst, pt };
                let clock = u64::from(out.format.rtp_clock());
                let units = (u64::from(duration_ms) * clock / 1000).min(u64::from(u16::MAX));
                let mut event = TelephoneEvent {
                    event: code,
                    end: false,
                    volume: 10,
                    duration: out.frame_units.min(units as u32) as u16,
                };
                send_event(&mut self.buf[..], to, out, &event, start, true, now, tx);
                event.end = true;
                event.duration = units as u16;
                send_event(&mut self.buf[..], to, out, &event, start, false, now, tx);
            }
            (None, _, _) if from != Heard::Tones && out.law.is_some() => {
                out.digit_tone = DigitTone::new(digit, duration_ms).map(Box::new);
            }
            _ => {}
        }
    }

    /// An RTCP datagram arrived on the leg's RTCP socket.
    pub fn on_rtcp(&mut self, id: LegId, data: &[u8], src: SocketAddr, now: Instant) {
        let arrival = self.ntp_at(now);
        let Some(leg) = self.legs.get_mut(id.0) else {
            return;
        };
        let mut plain = [0u8; MAX_PACKET];
        let data = match leg.srtp.as_deref_mut() {
            None => data,
            Some(srtp) => {
                let Some(copy) = plain.get_mut(..data.len()) else {
                    leg.rejected += 1;
                    return;
                };
                copy.copy_from_slice(data);
                match srtp.rx.unprotect_rtcp(copy) {
                    Ok(n) => &plain[..n],
                    Err(_) => {
                        leg.srtp_rejected += 1;
                        self.events.push_back(MediaEvent::SrtpRejected { leg: id });
                        return;
                    }
                }
            }
        };
        if leg.symmetric {
            leg.remote_rtcp = Some(src);
        }
        // A held party's reports show it is still there (on the RTCP path, not RTP's).
        if !(leg.receives && leg.sends) {
            leg.last_rx = Some(now);
        }
        for pkt in rtcp::parse_compound(data) {
            let blocks = match pkt {
                Ok(RtcpPacket::SenderReport { info, blocks, .. }) => {
                    leg.last_sr = Some((rtcp::ntp_short(info.ntp), now));
                    blocks
                }
                Ok(RtcpPacket::ReceiverReport { blocks, .. }) => blocks,
                Ok(_) => continue,
                Err(_) => {
                    leg.rejected += 1;
                    break;
                }
            };
            for b in blocks.filter(|b| b.ssrc == leg.out.ssrc) {
                leg.rtt = rtcp::round_trip(arrival, &b).or(leg.rtt);
                leg.remote_report = Some(b);
            }
        }
    }

    /// The 20 ms pass over all legs: due frames of prompts and tones (with
    /// catch-up after a late tick), RTCP reports, media timeouts.
    pub fn tick<F>(&mut self, now: Instant, tx: &mut F)
    where
        F: Output + ?Sized,
    {
        self.tick_phase(now, now, 0, 1, tx);
    }

    /// The pass over the legs whose index is `phase` modulo `phases`: a shell that ticks
    /// `phases` times per frame interval spreads the calls' packets over the interval instead
    /// of sending them in one burst. Each leg must be visited once per interval.
    ///
    /// `due` is when the shell's tick grid scheduled this pass and `now` when it runs (`due`
    /// ≤ `now`). Frames are scheduled on `due`: a leg's frames fall due on the grid time of its
    /// first pass, and a pass that runs late sends what was due at its grid time, late, but
    /// never a frame of the next pass early. Scheduled on `now`, a pass 12 ms late also sent
    /// the next frame 8 ms early (within the half frame of slack), and the receiver saw
    /// 20 ms of spread from 12 ms of lateness. RTCP and media timeouts go by `now`.
    pub fn tick_phase<F>(
        &mut self,
        due: Instant,
        now: Instant,
        phase: usize,
        phases: usize,
        tx: &mut F,
    ) where
        F: Output + ?Sized,
    {
        if !self.handshaking.is_empty() {
            self.dtls_timers(now, tx);
        }
        let ntp_now = self.ntp_at(now);
        let Engine {
            legs,
            events,
            buf,
            pcm,
            rng,
            cname,
            generating,
            rooms,
            ..
        } = self;
        if !rooms.is_empty() {
            rooms.mix_due(due, events, |id, heard, late| {
                if let Some(leg) = legs.get_mut(id.0) {
                    send_heard(id, leg, heard, late, &mut buf[..], now, tx);
                }
            });
        }
        let end = legs.end();
        let step = phases.max(1);
        for index in (phase..end).step_by(step) {
            // The legs a pass visits lie apart in memory: start loading the one two visits on
            // now, so its misses overlap this leg's work instead of stalling the loop a leg each.
            legs.prefetch(index + 2 * step, &TICKING);
            let Some(leg) = legs.get_mut(index) else {
                continue;
            };
            let id = LegId(index);
            let last_rx = *leg.last_rx.get_or_insert(now);
            // The media timeout, or the hold timeout while held (`Leg::rearm`).
            if let Some(limit) = leg.quiet_limit {
                if !leg.timed_out && now.saturating_duration_since(last_rx) >= limit {
                    leg.timed_out = true;
                    events.push_back(MediaEvent::MediaTimeout { leg: id });
                }
            }
            if leg.source.generates()
                && emit_frames(id, leg, due, &mut buf[..], &mut pcm[..], events, tx)
            {
                *generating -= 1;
            }
            if let Some(tap) = &mut leg.tap {
                tap.advance(now);
            }
            if now >= leg.rtcp_due {
                leg.rtcp_due = now + rtcp_interval(rng);
                send_report(id, leg, now, ntp_now, cname, &mut buf[..], tx);
            }
        }
    }

    /// NTP time at `now`, from the anchor.
    fn ntp_at(&self, now: Instant) -> u64 {
        let (at, base) = self.ntp_anchor.unwrap_or((now, NTP_UNIX_OFFSET << 32));
        base.wrapping_add(ntp(now.saturating_duration_since(at)))
    }
}

/// Where in a leg the fields lie that [`Engine::on_rtp`] reads for an audio packet. The slab's
/// own test of the slot reads the leg's first bytes (where its `None` lies), and a leg's storage
/// need not start on a cache line, so fields next to each other here may still lie on two lines:
/// every field read is named, not one per line.
const RECEIVING: [usize; 21] = [
    0,
    offset_of!(Leg, webrtc),
    offset_of!(Leg, srtp),
    offset_of!(Leg, symmetric),
    offset_of!(Leg, receives),
    offset_of!(Leg, payload_type),
    offset_of!(Leg, remote),
    offset_of!(Leg, announced),
    offset_of!(Leg, last_rx),
    offset_of!(Leg, packets_received),
    offset_of!(Leg, bytes_received),
    offset_of!(Leg, rx),
    offset_of!(Leg, rx) + size_of::<Option<(u32, ReceiveStats)>>() - 1,
    offset_of!(Leg, dtmf),
    offset_of!(Leg, tones),
    offset_of!(Leg, recorder),
    offset_of!(Leg, tap),
    offset_of!(Leg, source),
    offset_of!(Leg, translator),
    offset_of!(Leg, law),
    offset_of!(Leg, muted),
];

/// Where in a leg the fields lie that [`Engine::tick_phase`] reads for a leg that plays a
/// prompt (as [`RECEIVING`], every one named).
const TICKING: [usize; 15] = [
    0,
    offset_of!(Leg, last_rx),
    offset_of!(Leg, quiet_limit),
    offset_of!(Leg, source),
    offset_of!(Leg, next_frame),
    offset_of!(Leg, ptime),
    offset_of!(Leg, frame_units),
    offset_of!(Leg, out),
    offset_of!(Leg, out) + size_of::<OutStream>() - 1,
    offset_of!(Leg, remote),
    offset_of!(Leg, sends),
    offset_of!(Leg, srtp),
    offset_of!(Leg, tap),
    offset_of!(Leg, rtcp_due),
    offset_of!(Leg, late_ticks),
];

/// Sends every frame due by `now`, the pass's grid time (with half a frame
/// of slack, so a shell that ticks on wall-clock times with jitter does not
/// alternate 0 and 2 frames per tick). True when the prompt ended (the leg
/// went idle).
fn emit_frames<F>(
    id: LegId,
    leg: &mut Leg,
    now: Instant,
    buf: &mut [u8],
    pcm: &mut [i16],
    events: &mut VecDeque<MediaEvent>,
    tx: &mut F,
) -> bool
where
    F: Output + ?Sized,
{
    let units = leg.frame_units;
    let mut due = *leg.next_frame.get_or_insert(now);
    let horizon = now + leg.ptime / 2;
    let mut frames = 0;
    while due <= horizon {
        if frames == MAX_CATCH_UP {
            // A stall, not jitter: skip the rest but keep timestamps on the clock.
            let missed = (horizon - due).as_nanos() / leg.ptime.as_nanos() + 1;
            leg.out.skip((missed as u64 * units as u64) as u32);
            due += leg.ptime * missed as u32;
            break;
        }
        frames += 1;
        let (n, done, linear) = leg.generate(&mut buf[HEADER_LEN..], pcm);
        let linear = linear.then(|| &pcm[..n]);
        let len = HEADER_LEN + n;
        let header = leg.out.next_frame(leg.payload_type, units, now);
        if let (Some(dst), true, true) = (leg.remote, leg.sends, n > 0) {
            send_rtp(buf, id, leg, dst, &header, n, linear, now, tx);
        } else if leg.sends && n > 0 {
            frame_out(id, leg, &header, &buf[HEADER_LEN..len], linear, now, tx);
        }
        due += leg.ptime;
        if done && next_track(leg) {
            continue;
        }
        if done {
            leg.source = Source::Idle;
            events.push_back(MediaEvent::PlaybackDone { leg: id });
            leg.next_frame = None;
            return true;
        }
    }
    if frames > 1 {
        leg.late_ticks += 1;
    }
    leg.next_frame = Some(due);
    false
}

/// Encodes and sends the packets a conference member's share fills (`heard`, at its format's
/// rate); a member on hold (or a refused encoding) sends nothing, but its share is used up.
fn send_heard<F>(
    id: LegId,
    leg: &mut Leg,
    heard: &mut Vec<i16>,
    late: bool,
    buf: &mut [u8],
    now: Instant,
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let n = leg.frame_pcm.max(1);
    let mut sent = 0;
    while heard.len() - sent >= n {
        let pcm = &heard[sent..sent + n];
        sent += n;
        let body = &mut buf[HEADER_LEN..];
        let len = match (leg.law, leg.encoder.as_mut()) {
            (Some(law), _) => {
                law.encode(pcm, &mut body[..n]);
                n
            }
            (None, Some(enc)) => enc.encode(pcm, body).unwrap_or(0),
            (None, None) => 0,
        };
        if !leg.sends || len == 0 {
            continue;
        }
        let header = leg.out.next_frame(leg.payload_type, leg.frame_units, now);
        match leg.remote {
            Some(dst) => send_rtp(buf, id, leg, dst, &header, len, None, now, tx),
            None => frame_out(
                id,
                leg,
                &header,
                &buf[HEADER_LEN..HEADER_LEN + len],
                None,
                now,
                tx,
            ),
        }
    }
    heard.drain(..sent);
    if late {
        leg.late_ticks += 1;
    }
}

/// Writes a received packet to the leg's recording, if it has one. A failing sink ends the
/// recording rather than the call; a run of silence ends it with an event.
fn record(
    recorder: &mut Option<Recorder>,
    id: LegId,
    events: &mut VecDeque<MediaEvent>,
    ssrc: u32,
    ts: u32,
    payload: &[u8],
) {
    let Some(rec) = recorder else {
        return;
    };
    if rec.write(ssrc, ts, payload).is_err() {
        *recorder = None;
    } else if rec.ended_on_silence() {
        if let Some(r) = recorder.take() {
            let _ = r.finish();
        }
        events.push_back(MediaEvent::RecordingSilent { leg: id });
    }
}

/// Copies an audio packet the leg sends into its whole-call recording, if it has one.
/// `linear`: the packet's audio as 8 kHz samples, when the sender has it (a µ-law prompt's).
#[inline]
fn tap_sent(leg: &mut Leg, header: &RtpHeader, body: &[u8], linear: Option<&[i16]>) {
    if let Some(tap) = &mut leg.tap {
        if header.payload_type == leg.payload_type {
            match linear {
                Some(pcm) => tap.sent_linear(pcm),
                None => tap.sent(body),
            }
        }
    }
}

/// Writes `header` in front of the `body_len` bytes of payload already in `buf` and sends the
/// packet to `dst` from leg `peer`, counting it in the leg's sender statistics.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn send_rtp<F>(
    buf: &mut [u8],
    peer: LegId,
    out: &mut Leg,
    dst: SocketAddr,
    header: &RtpHeader,
    body_len: usize,
    linear: Option<&[i16]>,
    now: Instant,
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let _ = header.write(buf);
    tap_sent(out, header, &buf[HEADER_LEN..HEADER_LEN + body_len], linear);
    let mut len = HEADER_LEN + body_len;
    if let Some(srtp) = out.srtp.as_deref_mut() {
        // Refused only for a packet too long for the tag: dropped like one too long to relay.
        let Ok(n) = srtp.tx.protect(buf, len) else {
            return;
        };
        len = n;
    }
    out.out.sent(header, body_len, now);
    tx.transmit(Transmit {
        leg: peer,
        rtcp: false,
        dst,
        pinned: out.pinned(),
        payload: &buf[..len],
    });
}

/// Sends a packet built for frame leg `id` (an RTP leg sends nothing here) as a voice frame,
/// stamped in ms from its RTP `header`.
fn frame_out<F>(
    id: LegId,
    leg: &mut Leg,
    header: &RtpHeader,
    payload: &[u8],
    linear: Option<&[i16]>,
    now: Instant,
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let Some(fs) = leg.frames.as_deref_mut() else {
        return;
    };
    leg.out.sent(header, payload.len(), now);
    let ts = fs.out_ms(header.timestamp, leg.format.rtp_clock() / 1000);
    tap_sent(leg, header, payload, linear);
    tx.frame(FrameOut::Voice {
        leg: id,
        ts,
        payload,
    });
}

/// Relays an RTP packet of a bridged leg to frame leg `peer` (which sends): audio as a voice
/// frame on the peer's clock, RFC 4733 events as a digit's begin and end.
#[cold]
#[allow(clippy::too_many_arguments)]
fn rtp_to_frames<F>(
    peer: LegId,
    out: &mut Leg,
    pkt: &RtpPacket<'_>,
    audio: bool,
    from_law: Option<codec::G711>,
    buf: &mut [u8],
    now: Instant,
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let Some(fs) = out.frames.as_deref_mut().filter(|_| out.sends) else {
        return;
    };
    let payload = pkt.payload();
    if !audio {
        let Ok(ev) = TelephoneEvent::parse(payload) else {
            return;
        };
        let Some(digit) = rtp::dtmf::event_char(ev.event) else {
            return;
        };
        let ts = pkt.timestamp();
        match fs.digit_out {
            Some((t, true)) if t == ts => return,
            Some((t, false)) if t == ts => {}
            _ => tx.frame(FrameOut::Digit {
                leg: peer,
                digit,
                end: false,
            }),
        }
        fs.digit_out = Some((ts, ev.end));
        if ev.end {
            tx.frame(FrameOut::Digit {
                leg: peer,
                digit,
                end: true,
            });
        }
        return;
    }
    let Some(body) = buf.get_mut(..payload.len()) else {
        return;
    };
    // Same format, or G.711 both sides (a translator handles the rest).
    let units = relay_payload(from_law, out.law, payload, body, out.frame_units);
    let header = out.out.relay(pkt, out.payload_type, units, now);
    frame_out(peer, out, &header, &buf[..payload.len()], None, now, tx);
}

/// Copies a relayed payload into `body`: as it is (same format), or from one G.711 law to the
/// other (a translator handles every other pair); returns the timestamp units it spans.
#[inline]
fn relay_payload(
    from: Option<crate::Law>,
    to: Option<crate::Law>,
    payload: &[u8],
    body: &mut [u8],
    frame_units: u32,
) -> u32 {
    match (from, to) {
        (Some(a), Some(b)) => {
            a.transcode(b, payload, body);
            payload.len() as u32
        }
        _ => {
            body.copy_from_slice(payload);
            frame_units
        }
    }
}

/// Builds and sends the leg's compound SR/RR + SDES.
fn send_report<F>(
    id: LegId,
    leg: &mut Leg,
    now: Instant,
    ntp_now: u64,
    cname: &[u8],
    buf: &mut [u8],
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let dst = match leg.rtcp_mux {
        true => leg.remote,
        false => leg.rtcp_destination(),
    };
    let Some(dst) = dst else {
        return;
    };
    // RFC 3550 §6.4: an SR if we sent since the last report.
    let sender = (leg.out.packets != leg.packets_at_last_report).then(|| SenderInfo {
        ntp: ntp_now,
        rtp_timestamp: leg.out.timestamp_at(now),
        packet_count: leg.out.packets as u32,
        octet_count: leg.out.octets as u32,
    });
    leg.packets_at_last_report = leg.out.packets;
    let mut block = leg
        .rx
        .as_mut()
        .filter(|(_, s)| s.received() > 0)
        .map(|(ssrc, s)| s.report_block(*ssrc));
    if let (Some(b), Some((lsr, at))) = (&mut block, leg.last_sr) {
        b.lsr = lsr;
        b.dlsr = rtcp::duration_to_short(now.saturating_duration_since(at));
    }
    let blocks = block.as_slice();
    if let Ok(mut n) = rtcp::write_report(buf, leg.out.ssrc, sender.as_ref(), blocks, cname) {
        if let Some(srtp) = leg.srtp.as_deref_mut() {
            let Ok(sealed) = srtp.tx.protect_rtcp(buf, n) else {
                return;
            };
            n = sealed;
        }
        tx.transmit(Transmit {
            leg: id,
            rtcp: !leg.rtcp_mux,
            dst,
            pinned: false,
            payload: &buf[..n],
        });
    }
}

/// Moves a leg whose track just ended to its playlist's next track; false if it plays no list.
fn next_track(leg: &mut Leg) -> bool {
    let format = leg.format;
    let Source::Prompt {
        prompt,
        pos,
        playout: out,
        list: Some(cursor),
        ..
    } = &mut leg.source
    else {
        return false;
    };
    cursor.at = cursor.list.after(cursor.at, &mut cursor.seed);
    *prompt = cursor.list.tracks()[cursor.at].clone();
    *pos = 0;
    *out = playout(format, prompt, true);
    true
}

/// How `prompt` becomes the packets of a leg in `format` (see [`Engine::play`]).
fn playout(format: Format, prompt: &Prompt, cache: bool) -> Playout {
    if is_g711(format) {
        return Playout::Law;
    }
    if cache {
        return Playout::Packets(prompt.packets(format));
    }
    match prompt.coded() {
        Some((from, _)) => {
            Playout::Live(Translator::new(Graph::global(), from, format).map(Box::new))
        }
        None => {
            // Resample now rather than on the first packet.
            prompt.linear(format.pcm_rate());
            Playout::Live(None)
        }
    }
}

fn is_g711(f: Format) -> bool {
    matches!(f, Format::Pcmu | Format::Pcma)
}

/// The form a digit arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    Events,
    Tones,
    Signalling,
}

/// Where RFC 4733 packets go: the leg, its far end, and its telephone-event payload type.
#[derive(Clone, Copy)]
struct EventTo {
    peer: LegId,
    dst: SocketAddr,
    pt: u8,
}

/// Sends `event` (started at `start_ts`) from leg `to.peer`: a start once, with the marker
/// when it is the event's `first` packet, or an end three times (RFC 4733 §2.5.1.4).
#[allow(clippy::too_many_arguments)]
fn send_event<F>(
    buf: &mut [u8],
    to: EventTo,
    out: &mut Leg,
    event: &TelephoneEvent,
    start_ts: u32,
    first: bool,
    now: Instant,
    tx: &mut F,
) where
    F: Output + ?Sized,
{
    let _ = event.write(&mut buf[HEADER_LEN..]);
    for i in 0..if event.end { 3 } else { 1 } {
        let header = out.out.event(to.pt, start_ts, i == 0 && first);
        let len = rtp::dtmf::EVENT_LEN;
        send_rtp(buf, to.peer, out, to.dst, &header, len, None, now, tx);
    }
}

fn dtmf_event(leg: LegId, d: rtp::dtmf::Digit) -> MediaEvent {
    MediaEvent::Dtmf {
        leg,
        digit: d.digit,
        duration_ms: d.duration / 8,
    }
}

fn rtcp_interval(rng: &mut fastrand::Rng) -> Duration {
    RTCP_INTERVAL.mul_f64(0.5 + rng.f64())
}

/// A duration as 64-bit NTP fixed point.
fn ntp(d: Duration) -> u64 {
    (d.as_secs() << 32) | (((d.subsec_nanos() as u64) << 32) / 1_000_000_000)
}
