//! Commands the control API gives a call in progress (`Command::Act`): digits, a blind
//! transfer of a party, the whole-call recording started and stopped, a prompt played over a
//! bridge, a leg muted. Each reuses the path the
//! same thing takes when a phone asks for it — a digit as an INFO digit goes, a transfer as a
//! REFER's, a recording as the `record-call` step's — so an API command behaves as that would.

use crate::call::{Call, LegIdx, LegRef, Wait};
use crate::engine::Engine;
use crate::originate::Refused;
use media::{FileFormat, Mix};
use std::sync::Arc;
use std::time::Instant;

/// A leg of a call as an API client names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Caller,
    /// The answered callee of a bridged call.
    Callee,
}

/// What to do to a call.
#[derive(Debug, Clone)]
pub enum Action {
    /// Digits as if `leg` had pressed them: the call's app hears them (a menu, voicemail, a
    /// `read`), and the party bridged to `leg` gets them in its own negotiated form (RFC 4733
    /// events, INFO, or in-band tones).
    Dtmf { digits: String, leg: Side },
    /// Blind transfer of `leg`'s party: it runs the dialplan for `to` in the call's context
    /// while the other leg is released, as after a REFER from that leg.
    Transfer { to: String, leg: Side },
    /// Starts recording the call (both directions, stereo) to `file` under the data directory;
    /// None: `calls/CALL-ID.wav`.
    Record { file: Option<String> },
    /// Stops the recording under way (the CDR names the file and its length).
    StopRecording,
    /// `muted`: what `leg` says reaches nobody; `deaf`: `leg` hears nothing. Both false: as
    /// before. What the leg was joined to (bridge, app, room) stays, so it resumes.
    Mute { leg: Side, muted: bool, deaf: bool },
    /// Plays `file` (`demo`, `tts:TEXT`, or a WAV under the data directory) to `leg` of a
    /// bridged call; the other party hears silence meanwhile, and the bridge resumes when the
    /// prompt ends.
    Play { file: String, leg: Side },
}

/// How long a digit given by the API sounds, in the media.
const DIGIT_MS: u32 = 100;

fn refused(status: u16, message: impl Into<String>) -> Result<(), Refused> {
    Err(Refused {
        status,
        message: message.into(),
    })
}

impl Engine {
    /// Runs `action` on the call whose caller's Call-ID is `call_id`; None: no such call here.
    pub(crate) fn act(
        &mut self,
        call_id: &str,
        action: Action,
        now: Instant,
    ) -> Option<Result<(), Refused>> {
        let call = self.calls.leg_by_call_id(call_id).map(|l| l.call)?;
        if self.calls[call].caller().call_id() != call_id {
            return None;
        }
        Some(match action {
            Action::Dtmf { digits, leg } => self.api_digits(call, &digits, leg, now),
            Action::Transfer { to, leg } => self.api_transfer(call, to, leg, now),
            Action::Record { file } => self.api_record(call, file, now),
            Action::Mute { leg, muted, deaf } => self.api_mute(call, leg, muted, deaf),
            Action::Play { file, leg } => self.api_play(call, file, leg),
            Action::StopRecording => match self.stop_call_recording(call, now) {
                true => Ok(()),
                false => refused(409, "the call is not being recorded"),
            },
        })
    }

    /// The leg `side` names in an answered call: 409 while it is not up.
    fn up_leg(&self, call: usize, side: Side) -> Result<LegIdx, Refused> {
        let c = &self.calls[call];
        let leg = match side {
            Side::Caller => Some(Call::CALLER).filter(|_| c.answered),
            Side::Callee => c
                .callee_idx()
                .filter(|&i| c.leg(i).is_some_and(|l| l.confirmed)),
        };
        leg.ok_or_else(|| Refused {
            status: 409,
            message: match side {
                Side::Caller => "the call is not answered yet".into(),
                Side::Callee => "the call has no answered callee (it is not bridged)".into(),
            },
        })
    }

    fn api_digits(
        &mut self,
        call: usize,
        digits: &str,
        side: Side,
        now: Instant,
    ) -> Result<(), Refused> {
        let leg = self.up_leg(call, side)?;
        let at = LegRef { call, leg };
        for d in digits.chars() {
            self.digit(at, d, now);
            self.digit_to_peer(at, d, DIGIT_MS, true, now);
        }
        self.run_pending(now);
        Ok(())
    }

    fn api_transfer(
        &mut self,
        call: usize,
        to: String,
        side: Side,
        now: Instant,
    ) -> Result<(), Refused> {
        self.up_leg(call, side)?;
        // The transferor is the other party: a bridged call's other answered leg.
        let other = match side {
            Side::Caller => Side::Callee,
            Side::Callee => Side::Caller,
        };
        let transferor = self.up_leg(call, other)?;
        let context = self.calls[call].cdr.context.clone();
        let r = self.transfer_by_api(
            LegRef {
                call,
                leg: transferor,
            },
            &to,
            now,
        );
        self.run_pending(now);
        match r {
            Ok(()) => Ok(()),
            Err(409) => refused(409, "a transfer of this call is under way"),
            Err(_) => refused(
                400,
                format!("no dialplan rule for {to:?} in the call's context {context:?} (dialplan.contexts.{context}.rules)"),
            ),
        }
    }

    fn api_mute(
        &mut self,
        call: usize,
        side: Side,
        muted: bool,
        deaf: bool,
    ) -> Result<(), Refused> {
        let leg = self.up_leg(call, side)?;
        let Some(m) = self.calls[call].leg(leg).and_then(|l| l.media) else {
            return refused(409, "the leg has no media");
        };
        self.media.set_mute(m, muted, deaf);
        Ok(())
    }

    fn api_record(
        &mut self,
        call: usize,
        file: Option<String>,
        now: Instant,
    ) -> Result<(), Refused> {
        let c = &self.calls[call];
        if c.call_recording.is_some() {
            return refused(
                409,
                "the call is being recorded already (DELETE .../record stops it)",
            );
        }
        let file = file.unwrap_or_else(|| {
            format!(
                "calls/{}.wav",
                crate::call_recording::file_name(c.caller().call_id())
            )
        });
        let format = match file.rsplit_once('.').map(|(_, e)| e) {
            Some("wav") => FileFormat::Wav,
            Some("opus") => FileFormat::Opus,
            _ => {
                return refused(
                    400,
                    format!("file {file:?}: expected a name ending .wav or .opus"),
                )
            }
        };
        if file.starts_with('/') || file.split('/').any(|p| p == "..") {
            return refused(
                400,
                format!("file {file:?}: expected a path under the data directory, without \"..\""),
            );
        }
        self.record_call(call, file, Mix::Stereo, format, now);
        match self.calls[call].call_recording.is_some() {
            true => Ok(()),
            false => refused(409, "the call has no media to record"),
        }
    }

    fn api_play(&mut self, call: usize, file: String, side: Side) -> Result<(), Refused> {
        let leg = self.up_leg(call, side)?;
        let bridged = self.up_leg(call, Side::Callee).is_ok()
            && self.calls[call].wait == Wait::Forever
            && !self.calls[call].legs().any(|(_, l)| l.held);
        if !bridged {
            return refused(
                409,
                "the call is not in a two-party bridge (a prompt is played over a bridge only)",
            );
        }
        let plain = file == "demo"
            || file.starts_with("tts:")
            || (file.ends_with(".wav")
                && !file.starts_with('/')
                && !file.split('/').any(|p| p == ".." || p.is_empty()));
        if !plain {
            return refused(
                400,
                format!("file {file:?}: expected demo, tts:TEXT, or NAME.wav under the data directory, without \"..\""),
            );
        }
        match self.files.prompt(&file) {
            Some(prompt) => self.play_over(call, leg, prompt),
            None => self.ask_overlay(call, leg, file),
        }
        Ok(())
    }

    /// Plays `prompt` to a leg of a bridged call in place of its party (see `Action::Play`).
    pub(crate) fn play_over(&mut self, call: usize, leg: LegIdx, prompt: Arc<media::Prompt>) {
        let Some(m) = self.calls[call].leg(leg).and_then(|l| l.media) else {
            return;
        };
        self.media.play(m, prompt, false, true);
        self.calls[call].api_prompt = true;
    }

    /// The API's prompt ended: the bridge (or the hold's music) comes back.
    pub(crate) fn api_prompt_done(&mut self, call: usize) {
        self.rejoin(call);
    }
}
