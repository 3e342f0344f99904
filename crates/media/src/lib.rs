//! The per-worker media engine of strowger, sans-IO.
//!
//! The I/O shell (the `strowger` binary) owns the sockets — one UDP socket
//! per leg for RTP (port P) and one for RTCP (P+1), or one pair for many legs
//! ([`Engine::rtp_leg_from`] tells them apart) — and the clock. It feeds
//! the [`Engine`]:
//!
//! - [`Engine::on_rtp`] / [`Engine::on_rtcp`] for each datagram received,
//!   with its source address and the current [`std::time::Instant`];
//! - [`Engine::tick`] every 20 ms: one pass over all legs that sends due
//!   prompt/tone frames, RTCP reports (every 2.5-7.5 s) and checks media
//!   timeouts;
//!
//! and sends every [`Transmit`] handed to its `tx` callback from the leg's
//! RTP or RTCP socket, then drains [`Engine::poll_event`].
//!
//! A leg whose transport carries frames itself (IAX2) is a frame leg
//! ([`Engine::add_frame_leg`]): the shell hands what arrives to [`Engine::on_frame`] as a
//! [`Frame`] (voice with a millisecond timestamp, or a digit), and what the engine sends it
//! comes out as a [`FrameOut`] through [`Output::frame`] (the `tx` callbacks are [`Output`]s; a
//! closure taking [`Transmit`] is one that has no frame legs). No RTP header is written or
//! parsed for such a leg, and sequence-based statistics and RTCP do not apply to it.
//!
//! The call logic controls legs with [`Engine::add_leg`],
//! [`Engine::update_leg`] (re-INVITE, hold), [`Engine::play`],
//! [`Engine::tone`], [`Engine::echo`], [`Engine::bridge`],
//! [`Engine::record`], [`Engine::silence`] and [`Engine::remove_leg`]
//! (which returns [`LegStats`] for the CDR). Starting a source on a bridged
//! leg ends the bridge, leaving the other side idle.
//!
//! Conference rooms ([`Engine::add_room`], [`Engine::join_room`]) mix their members' voices in
//! linear PCM on the ticks; see the `mixer` module.
//!
//! Timing: generated frames carry timestamps counted in frames, so they are
//! exact however the ticks jitter; frames are due with half a frame of
//! slack, so tick jitter up to a quarter frame (±5 ms at 20 ms) never
//! bunches packets. A shell with a tick grid passes each pass's grid time
//! ([`Engine::tick_phase`]), so frames fall due on the grid and a late pass
//! never sends the next frame early. A late tick emits the missed frames (up
//! to 5, counted in [`LegStats::late_ticks`]); a longer stall skips ahead.
//! Relayed packets (bridge, echo) are sent at once from `on_rtp`, their
//! sequence numbers and timestamps shifted onto the outgoing leg's stream.
//!
//! Codecs: a leg carries a [`Format`] (G.711, GSM, G.722, G.726-32, Speex,
//! Opus, L16, iLBC). Prompts play pre-encoded: G.711 by table, other formats
//! as packets encoded once per prompt and format (each as the first call
//! reaches it, so no call waits for a whole prompt) and shared by every call
//! (or, with `cache` off, transcoded per call from the file's own frames or
//! its linear audio, as a switch without a prompt cache does); echo returns the
//! payload unchanged; a bridge passes payloads through when both legs share a
//! format, transcodes µ-law↔A-law by table, and otherwise runs the codec
//! crate's [`codec::Translator`] along the cheapest path, re-packetized to the
//! receiving leg's 20 ms frames on its own clock. Recordings decode any format
//! to 8 kHz, and so does a whole-call recording ([`Engine::record_call`]), which taps both
//! directions of a leg and hands bounded blocks to the shell's writer. Non-G.711 legs send one packet per 20 ms (per 30 ms for iLBC's 30 ms
//! mode) whatever `ptime` says.
//!
//! Steady state does not allocate: packets are built in one engine buffer,
//! prompts are stored pre-encoded in both laws (and in the packets of the
//! other formats legs have played them in; only the first pass through a
//! prompt in a new format allocates, one packet at a time), G.711 is table lookups, and encoders, decoders
//! and translators with their buffers are made when a leg is set up or bridged.

mod callfile;
mod decimate;
mod demux;
mod digit_tone;
mod dtmf_detect;
mod dtmf_mode;
mod engine;
mod frames;
mod leg;
mod leg_srtp;
mod leg_webrtc;
mod legs;
mod mixer;
mod playlist;
mod prompt;
mod recorder;
mod stream;
mod tap;
mod tone;

pub use codec::Format;
pub use codec::G711 as Law;
pub use dtmf_mode::DtmfMode;
pub use engine::{Engine, LegId, MediaEvent, Transmit};
pub use frames::{Frame, FrameOut, Output};
pub use leg::{LegConfig, LegStats, LegUpdate, Totals};
pub use leg_webrtc::WebRtcConfig;
pub use mixer::{RoomId, SeatLevels, MAX_STEP};
pub use playlist::Playlist;
pub use prompt::{Frames, Packets, Prompt, PromptError};
pub use recorder::{RecordError, RecordSink, SilenceEnd};
pub use tone::ToneSpec;

pub use callfile::{CallFile, FileFormat};
pub use tap::{CallRecording, Mix, RecordingStatus};

#[cfg(test)]
mod tests;
