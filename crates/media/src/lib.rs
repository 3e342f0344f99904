//! The per-worker media engine of strowger, sans-IO.
//!
//! The I/O shell (the `strowger` binary) owns the sockets — one UDP socket
//! per leg for RTP (port P) and one for RTCP (P+1) — and the clock. It feeds
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
//! The call logic controls legs with [`Engine::add_leg`],
//! [`Engine::update_leg`] (re-INVITE, hold), [`Engine::play`],
//! [`Engine::tone`], [`Engine::echo`], [`Engine::bridge`],
//! [`Engine::record`], [`Engine::silence`] and [`Engine::remove_leg`]
//! (which returns [`LegStats`] for the CDR). Starting a source on a bridged
//! leg ends the bridge, leaving the other side idle.
//!
//! Timing: generated frames carry timestamps counted in frames, so they are
//! exact however the ticks jitter; frames are due with half a frame of
//! slack, so tick jitter up to a quarter frame (±5 ms at 20 ms) never
//! bunches packets. A late tick emits the missed frames (up
//! to 5, counted in [`LegStats::late_ticks`]); a longer stall skips ahead.
//! Relayed packets (bridge, echo) are sent at once from `on_rtp`, their
//! sequence numbers and timestamps shifted onto the outgoing leg's stream.
//!
//! Steady state does not allocate: packets are built in one engine buffer,
//! prompts are stored pre-encoded in both laws, G.711 is table lookups.

mod decimate;
mod engine;
mod leg;
mod prompt;
mod recorder;
mod stream;
mod tone;

pub use codec::G711 as Law;
pub use engine::{Engine, LegId, MediaEvent, Transmit};
pub use leg::{LegConfig, LegStats, LegUpdate};
pub use prompt::{Prompt, PromptError};
pub use recorder::{RecordError, RecordSink};
pub use tone::ToneSpec;

#[cfg(test)]
mod tests;
