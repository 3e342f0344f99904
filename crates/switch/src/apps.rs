//! The dialplan interpreter: runs a call's steps (answer, playback, echo, record, …) until one
//! waits, and the answer / hang-up procedures every app shares.

use crate::call::{Call, LegIdx, LegRef, Wait};
use crate::control::Notice;
use crate::dialplan::cause::Cause;
use crate::dialplan::{Audio, Step};
use crate::engine::{Engine, ALLOW, SUPPORTED};
use crate::io::Event;
use rustc_hash::FxHashMap;
use sip::header::HeaderName;
use sip::Method;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The files of the calls' apps: prompts loaded once (the shell loads each configured one
/// once), and the prompt and recording files asked of the shell, by token.
#[derive(Default)]
pub(crate) struct Files {
    waiting: FxHashMap<u64, FileWait>,
    next_token: u64,
    prompts: FxHashMap<String, Arc<media::Prompt>>,
}

/// A file a call waits for the shell to open (`Event::Prompt`, `Event::Recording`); `gen` is the
/// call's timer generation, so an answer for a call that ended and whose slot was reused is
/// dropped.
enum FileWait {
    Prompt {
        call: usize,
        /// The leg that hears it.
        leg: LegIdx,
        gen: u64,
        file: String,
        looped: bool,
        cache: bool,
    },
    Recording {
        call: usize,
        gen: u64,
        file: String,
        max: Duration,
        end: Option<media::SilenceEnd>,
    },
    /// A prompt loaded ahead for no call in particular (a queue's announcements).
    Preload { file: String },
    /// A prompt the control API plays over a bridge (call_commands.rs); the call does not wait
    /// for it, so it is matched by Call-ID rather than by the call's timer generation.
    Overlay {
        call: usize,
        leg: LegIdx,
        call_id: String,
        file: String,
    },
}

/// The media engine's tone from the dialplan's.
fn tone_spec(t: &crate::dialplan::Tone) -> media::ToneSpec {
    media::ToneSpec::new(t.freqs_hz.clone(), t.cadence.clone())
}

impl crate::apps::Files {
    /// A prompt loaded already.
    pub(crate) fn prompt(&self, name: &str) -> Option<Arc<media::Prompt>> {
        self.prompts.get(name).cloned()
    }
}

impl Engine {
    /// Asks the shell for a prompt that calls will play later, once (kept when loaded).
    pub(crate) fn preload(&mut self, file: String) {
        self.files.next_token += 1;
        let token = self.files.next_token;
        let name = file.clone();
        self.files.waiting.insert(token, FileWait::Preload { file });
        self.events.push_back(Event::Prompt {
            token,
            name,
            cache: true,
        });
    }

    /// Asks the shell for a prompt to play over leg `leg` of a bridged call once loaded
    /// ([`Engine::play_over`]); the call goes on meanwhile.
    pub(crate) fn ask_overlay(&mut self, call: usize, leg: LegIdx, file: String) {
        let call_id = self.calls[call].caller().call_id().to_string();
        let cache = worth_keeping(&file, &call_id);
        self.files.next_token += 1;
        let token = self.files.next_token;
        let name = file.clone();
        let wait = FileWait::Overlay {
            call,
            leg,
            call_id,
            file,
        };
        self.files.waiting.insert(token, wait);
        self.events.push_back(Event::Prompt { token, name, cache });
    }

    pub(crate) fn run_pending(&mut self, now: Instant) {
        while let Some(call) = self.calls.next_to_run() {
            self.run_steps(call, now);
        }
    }

    /// Asks the shell for a prompt or recording file; the call waits for the answer.
    fn ask_file(&mut self, call: usize, mut wait: FileWait) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let call_id = c.caller().call_id();
        let event = match &mut wait {
            FileWait::Prompt { gen, file, .. } => {
                *gen = c.timer_gen;
                let keep = worth_keeping(file, call_id);
                (file.clone(), Some(keep))
            }
            FileWait::Recording { gen, file, .. } => {
                *gen = c.timer_gen;
                (file.clone(), None)
            }
            FileWait::Preload { .. } | FileWait::Overlay { .. } => return,
        };
        c.wait = Wait::File;
        let files = &mut self.files;
        files.next_token += 1;
        let token = files.next_token;
        files.waiting.insert(token, wait);
        self.events.push_back(match event {
            (name, Some(cache)) => Event::Prompt { token, name, cache },
            (name, None) => Event::Recording { token, name },
        });
    }

    /// The request `token` answers, if its call still waits for it (it waits no more), with the
    /// call's Call-ID.
    fn file_answer(&mut self, token: u64) -> Option<(FileWait, String)> {
        let wait = self.files.waiting.remove(&token)?;
        let (call, gen) = match &wait {
            FileWait::Prompt { call, gen, .. } | FileWait::Recording { call, gen, .. } => {
                (*call, *gen)
            }
            FileWait::Preload { .. } | FileWait::Overlay { .. } => return None,
        };
        let c = self.calls.get_mut(call)?;
        if c.timer_gen != gen || c.wait != Wait::File {
            return None;
        }
        c.wait = Wait::None;
        Some((wait, c.caller().call_id().to_string()))
    }

    pub(crate) fn on_prompt(
        &mut self,
        token: u64,
        result: Result<Arc<media::Prompt>, String>,
        now: Instant,
    ) {
        if let Some(FileWait::Preload { .. }) = self.files.waiting.get(&token) {
            let Some(FileWait::Preload { file }) = self.files.waiting.remove(&token) else {
                return;
            };
            match result {
                Ok(prompt) => {
                    self.files.prompts.insert(file, prompt);
                }
                Err(e) => self.warn(format!("prompt {file}: {e}")),
            }
            return;
        }
        if let Some(FileWait::Overlay { .. }) = self.files.waiting.get(&token) {
            let Some(FileWait::Overlay {
                call,
                leg,
                call_id,
                file,
            }) = self.files.waiting.remove(&token)
            else {
                return;
            };
            let same = self
                .calls
                .get(call)
                .is_some_and(|c| c.caller().call_id() == call_id);
            match result {
                Ok(prompt) if same => {
                    if worth_keeping(&file, &call_id) {
                        self.files.prompts.insert(file, prompt.clone());
                    }
                    self.play_over(call, leg, prompt);
                }
                Ok(_) => {}
                Err(e) => self.log(
                    crate::io::Level::Warn,
                    Some(&call_id),
                    format!("call {call_id}: play {file}: {e}"),
                ),
            }
            return;
        }
        let Some((
            FileWait::Prompt {
                call,
                leg,
                file,
                looped,
                cache,
                ..
            },
            call_id,
        )) = self.file_answer(token)
        else {
            return;
        };
        match result {
            Ok(prompt) => {
                if worth_keeping(&file, &call_id) {
                    self.files.prompts.insert(file, prompt.clone());
                }
                if !self.ivr_interrupted(call) {
                    self.play(call, leg, prompt, looped, cache);
                }
            }
            Err(e) => self.log(
                crate::io::Level::Warn,
                Some(&call_id),
                format!("call {call_id}: playback {file}: {e}"),
            ),
        }
        self.calls.run_later(call);
        self.run_pending(now);
    }

    pub(crate) fn on_recording(
        &mut self,
        token: u64,
        result: Result<Box<dyn media::RecordSink>, String>,
        now: Instant,
    ) {
        let Some((
            FileWait::Recording {
                call,
                file,
                max,
                end,
                ..
            },
            call_id,
        )) = self.file_answer(token)
        else {
            return;
        };
        let media = self.calls[call].caller().media;
        let started = match (result, media) {
            (Ok(sink), Some(m)) => self
                .media
                .record_until(m, sink, end)
                .map_err(|e| e.to_string()),
            (Ok(_), None) => Ok(()),
            (Err(e), _) => Err(format!("{e} (check general.data_dir is writable)")),
        };
        match started {
            Ok(()) => {
                let c = &mut self.calls[call];
                c.recording = true;
                let until = now + max;
                c.wait = Wait::Record { until };
                self.calls.arm(call, until);
            }
            Err(e) => {
                let msg = format!("call {call_id}: record {file}: {e}");
                self.log(crate::io::Level::Warn, Some(&call_id), msg);
                self.calls.run_later(call);
            }
        }
        self.run_pending(now);
    }

    /// Starts a prompt on one of the call's legs.
    fn play(
        &mut self,
        call: usize,
        leg: LegIdx,
        prompt: Arc<media::Prompt>,
        looped: bool,
        cache: bool,
    ) {
        let c = &mut self.calls[call];
        if let Some(m) = c.leg(leg).and_then(|l| l.media) {
            self.media.play(m, prompt, looped, cache);
        }
        c.wait = if looped {
            Wait::Forever
        } else {
            Wait::Playback
        };
    }

    /// Ends a media leg: the shell closes or leaves its port pair.
    pub(crate) fn close_media(&mut self, m: media::LegId, port: u16) {
        self.ports.release(port);
        self.events.push_back(Event::MediaClose { leg: m.index() });
    }

    fn run_steps(&mut self, call: usize, now: Instant) {
        for _ in 0..256 {
            let Some(c) = self.calls.get_mut(call) else {
                return;
            };
            if c.wait != Wait::None {
                return;
            }
            if self.parked_step(call) || self.ivr_next(call, now) || self.voicemail_run(call, now) {
                continue;
            }
            let Some(c) = self.calls.get_mut(call) else {
                return;
            };
            let Some(step) = c.program.next(&mut c.vars) else {
                let status = c.bridge_status;
                if self.transfer_failed(call, status, now) {
                    return;
                }
                let q = status.map_or(16, |s| Cause::from_sip_status(s).0);
                self.hangup(call, q, "switch", None, now);
                return;
            };
            self.record_if_asked(call, now);
            self.step(call, step, now);
        }
        // A program that loops on itself without waiting (goto cycles) is cut off.
        self.hangup(call, 41, "switch", None, now);
    }

    pub(crate) fn step(&mut self, call: usize, step: Step, now: Instant) {
        if step.reads_digits() {
            self.read_digits(call);
        }
        match step {
            Step::Answer => {
                self.answer(call, now);
            }
            Step::Ringing => self.provisional(call, 180, "Ringing", false, now),
            Step::Progress => self.provisional(call, 183, "Session Progress", true, now),
            Step::Playback {
                audio,
                looped,
                cache,
            } => {
                if !self.answer_or_early(call, now) {
                    return;
                }
                let file = match audio {
                    Audio::Demo => "demo".to_string(),
                    Audio::File(f) => f,
                };
                self.play_file(call, Call::CALLER, file, looped, cache);
            }
            Step::Tone { tone, duration } => {
                if !self.answer_or_early(call, now) {
                    return;
                }
                let c = &mut self.calls[call];
                if let Some(m) = c.caller().media {
                    self.media.tone(m, tone_spec(&tone));
                }
                c.wait = match duration {
                    Some(d) => Wait::Timer(now + d),
                    None => Wait::Forever,
                };
                if let Wait::Timer(t) = c.wait {
                    self.calls.arm(call, t);
                }
            }
            Step::Echo => {
                if !self.answer(call, now) {
                    return;
                }
                let c = &mut self.calls[call];
                if let Some(m) = c.caller().media {
                    self.media.echo(m);
                }
                c.wait = Wait::Forever;
            }
            Step::Music { class } => {
                if !self.answer_or_early(call, now) {
                    return;
                }
                let c = &mut self.calls[call];
                if let Some(class) = class {
                    c.vars.set("MOH", class);
                }
                c.wait = Wait::Forever;
                self.start_moh(call, Call::CALLER);
            }
            Step::RecordCall { file, mix, format } => {
                self.record_call(call, file, mix, format, now);
            }
            Step::Record { file, max } => {
                if !self.answer(call, now) {
                    return;
                }
                self.record(call, file, max, None);
            }
            Step::Bridge {
                uri,
                timeout,
                strategy,
                member_timeout,
                turn,
            } => {
                let b = crate::hunt::BridgeStep {
                    uri,
                    timeout,
                    strategy,
                    member_timeout,
                    turn,
                };
                self.bridge_step(call, b, now)
            }
            Step::Set { .. } => {}
            Step::Wait { duration } => {
                let until = now + duration;
                self.calls[call].wait = Wait::Timer(until);
                self.calls.arm(call, until);
            }
            Step::Hangup { cause } => {
                if !self.transfer_failed(call, Some(cause.sip_status()), now) {
                    self.hangup(call, cause.0, "switch", None, now)
                }
            }
            Step::Queue { queue } => self.queue_step(call, &queue, now),
            Step::QueueLogin { queue } => self.queue_login(call, &queue, true, now),
            Step::QueueLogout { queue } => self.queue_login(call, &queue, false, now),
            Step::Goto {
                context,
                exten,
                cond,
                time,
            } => {
                let wall = self.clock.wall_at(now);
                let tz = self.dialplan.timezone();
                if cond.is_none_or(|c| c.holds()) && time.is_none_or(|t| t.holds_at(wall, tz)) {
                    self.goto(call, &context, exten, now);
                }
            }
            Step::Forward { kind, target } => self.forward_step(call, kind, target, now),
            Step::Park { lot } => self.park(call, &lot, now),
            Step::Retrieve { slot } => self.retrieve(call, &slot, now),
            Step::Pickup { exten } => self.pickup(call, exten.as_deref(), now),
            Step::Background { .. } | Step::Read { .. } | Step::Say { .. } | Step::Menu { .. } => {
                self.ivr_start(call, step, now)
            }
            Step::Voicemail { user, greeting } => self.voicemail_step(call, user, greeting, now),
            Step::VoicemailMain { user } => self.voicemail_main_step(call, user, now),
            Step::Conference { room } => self.conference_step(call, room, now),
        }
    }

    /// Records the caller to `file` (relative to the data directory) until `#`, `max`, a run
    /// of silence (`end`) or hang-up; the call waits for it.
    pub(crate) fn record(
        &mut self,
        call: usize,
        file: String,
        max: Duration,
        end: Option<media::SilenceEnd>,
    ) {
        let wait = FileWait::Recording {
            call,
            gen: 0,
            file,
            max,
            end,
        };
        self.ask_file(call, wait);
    }

    /// Plays `file` (or `demo`) to leg `leg` of the call: at once if it is loaded, else once
    /// the shell has loaded it (the call waits for it).
    pub(crate) fn play_file(
        &mut self,
        call: usize,
        leg: LegIdx,
        file: String,
        looped: bool,
        cache: bool,
    ) {
        match self.files.prompts.get(&file) {
            Some(prompt) => {
                let prompt = prompt.clone();
                self.play(call, leg, prompt, looped, cache);
            }
            None => self.ask_file(
                call,
                FileWait::Prompt {
                    call,
                    leg,
                    gen: 0,
                    file,
                    looped,
                    cache,
                },
            ),
        }
    }

    /// Creates the media leg of a SIP leg (strowger's RTP port is needed for its SDP).
    pub(crate) fn ensure_media(&mut self, call: usize, at: LegIdx, now: Instant) -> bool {
        let Some(leg) = self.calls.get(call).and_then(|c| c.leg(at)) else {
            return false;
        };
        if leg.media.is_some() {
            return true;
        }
        if let Some(iax) = leg.iax() {
            let id = self.iax_media(iax, now);
            self.calls.bind_media(id, LegRef { call, leg: at });
            if let Some(leg) = self.calls[call].leg_mut(at) {
                leg.media = Some(id);
            }
            return true;
        }
        let cfg = self.leg_config(call, at);
        let Some(leg) = self.calls[call].leg_mut(at) else {
            return false;
        };
        let keying = crate::sdes::Keying::of(
            leg.negotiated.as_ref(),
            &leg.sdp,
            &self.s.webrtc_certificate,
        );
        // A port shared by many legs tells them apart by the address each far end announced,
        // so it can take only a far end alone on that address: not one behind NAT, not one that
        // serves many calls from one port (its address is some other leg's already). An
        // outbound leg learns its far end from the answer: it is offered a shared port when
        // its far end is known to answer each call from an address of its own, and moved to a
        // pair of its own if the answer collides all the same (`move_if_indistinct`). One whose
        // far end sends from elsewhere is moved once that is heard (`strays`).
        let shareable = match cfg.remote {
            Some(r) => {
                !behind_nat(r.ip(), leg.peer_addr().ip()) && self.media.rtp_leg_from(r).is_none()
            }
            None => {
                at != Call::CALLER
                    && leg.sdp.webrtc().is_none()
                    && leg.dialog().is_some()
                    && self.strays.distinct(leg.peer_addr())
            }
        };
        let dtmf = leg.dtmf;
        let ip = self.s.media.for_remote(leg.sdp.addr()).bind;
        let id = self.media.add_leg(cfg, now);
        keying.apply(&mut self.media, id, now);
        if let Some(mode) = dtmf {
            self.media.set_leg_dtmf_mode(id, mode);
        }
        if at == Call::CALLER && self.calls[call].reads_digits {
            self.media.read_digits(id);
        }
        let Some(place) = self.ports.take(shareable, ip.is_ipv6()) else {
            self.media.remove_leg(id);
            self.metrics.refused(crate::metrics::Refusal::NoRtpPort);
            if let Some(n) = self.no_port.note(now) {
                self.warn(format!(
                    "no free RTP port ({n} call(s) refused since the last report): widen rtp.ports in the configuration"
                ));
            }
            return false;
        };
        let port = place.port;
        self.events.push_back(Event::MediaOpen {
            leg: id.index(),
            port,
            shared: place.shared,
            first: place.first,
            ip,
        });
        let Some(leg) = self.calls[call].leg_mut(at) else {
            return false;
        };
        leg.media = Some(id);
        leg.port = port;
        self.calls.bind_media(id, LegRef { call, leg: at });
        true
    }

    /// The SDP strowger sends on an inbound leg (the caller's, or one that replaces a dialog):
    /// the answer to its offer, or an offer when its INVITE had none (the answer then comes in
    /// the ACK).
    pub(crate) fn answer_body(&mut self, call: usize, at: LegIdx) -> Option<String> {
        let caps = self.s.caps.clone();
        let leg = self.calls.get_mut(call)?.leg_mut(at)?;
        if let Some(b) = &leg.local_body {
            return Some(b.clone());
        }
        let body = match &leg.remote_offer {
            Some(offer) => leg.sdp.answer(offer, &caps, leg.port).ok()?.0.to_string(),
            None => {
                let offer = leg.sdp.offer(&caps, leg.port);
                let body = offer.to_string();
                leg.our_offer = Some(offer);
                body
            }
        };
        leg.local_body = Some(body.clone());
        Some(body)
    }

    /// 180 (no SDP) or 183 with SDP (early media) to the caller, once the call is not answered.
    pub(crate) fn provisional(
        &mut self,
        call: usize,
        status: u16,
        reason: &str,
        with_sdp: bool,
        now: Instant,
    ) {
        let Some(c) = self.calls.get(call) else {
            return;
        };
        if c.caller().iax().is_some() {
            self.call_notice(call, crate::control::CALL, |call_id| Notice::Ringing {
                call_id,
                contact: None,
            });
            return self.iax_ringing(call, with_sdp, now);
        }
        if c.answered || c.invite_tx.is_none() {
            return;
        }
        self.call_notice(call, crate::control::CALL, |call_id| Notice::Ringing {
            call_id,
            contact: None,
        });
        let body = if with_sdp {
            if !self.ensure_media(call, Call::CALLER, now) {
                return;
            }
            self.answer_body(call, Call::CALLER)
        } else {
            None
        };
        let c = &mut self.calls[call];
        if with_sdp {
            c.early_media = true;
        }
        let (Some(stx), Some(invite)) = (c.invite_tx, c.invite.clone()) else {
            return;
        };
        let Some(d) = c.caller().dialog() else {
            return;
        };
        let (peer, tag) = (d.peer, d.local_tag.clone());
        let extra = [("Contact", d.local_contact.clone())];
        self.respond(
            stx,
            &invite,
            peer,
            status,
            reason,
            Some(&tag),
            &extra,
            body.as_deref().map(str::as_bytes),
            now,
        );
    }

    /// Early media when the caller is not answered yet and the program asked for progress;
    /// otherwise a playback or tone answers the call, as in most PBXs.
    pub(crate) fn answer_or_early(&mut self, call: usize, now: Instant) -> bool {
        let c = &self.calls[call];
        if c.early_media && !c.answered {
            return true;
        }
        self.answer(call, now)
    }

    /// Sends 200 OK to the caller (once). Returns false if the call could not be answered.
    pub(crate) fn answer(&mut self, call: usize, now: Instant) -> bool {
        let Some(c) = self.calls.get(call) else {
            return false;
        };
        if c.answered {
            // Answering again: a transfer's target took the transferee (transfer.rs).
            self.transfer_answered(call, now);
            return true;
        }
        if c.caller().iax().is_some() {
            return self.iax_answer(call, now);
        }
        if !self.ensure_media(call, Call::CALLER, now) {
            self.hangup(call, 34, "switch", None, now);
            return false;
        }
        let Some(body) = self.answer_body(call, Call::CALLER) else {
            self.hangup(call, 58, "switch", None, now);
            return false;
        };
        let c = &mut self.calls[call];
        let (Some(stx), Some(invite)) = (c.invite_tx.take(), c.invite.clone()) else {
            return false;
        };
        let Some(d) = c.caller().dialog() else {
            return false;
        };
        let (tag, peer) = (d.local_tag.clone(), d.peer);
        let mut extra = vec![
            ("Contact", d.local_contact.clone()),
            ("Allow", ALLOW.to_string()),
            ("Supported", SUPPORTED.join(", ")),
        ];
        for rr in invite.all(HeaderName::RecordRoute) {
            extra.push(("Record-Route", rr.to_string()));
        }
        if let Some(se) = c.session_interval {
            c.refresh_session(se, now);
            extra.push(("Session-Expires", format!("{se};refresher=uac")));
            if invite
                .all(HeaderName::Supported)
                .any(|t| t.eq_ignore_ascii_case("timer"))
            {
                extra.push(("Require", "timer".to_string()));
            }
        }
        c.answered = true;
        c.answered_at = Some(now);
        self.metrics
            .set_up(now.saturating_duration_since(c.started));
        let at = crate::cdr::unix_seconds(self.clock.wall_at(now));
        c.cdr.answer = Some(at);
        c.caller_mut().confirmed = true;
        let deadline = c.session_deadline;
        let bytes = self.response_bytes(
            &invite,
            peer,
            200,
            "OK",
            Some(&tag),
            &extra,
            Some(body.as_bytes()),
        );
        self.txs.respond(stx, 200, bytes, now);
        self.calls.answered(call, at);
        self.call_notice(call, crate::control::CALL, |call_id| Notice::Answered {
            call_id,
            contact: None,
        });
        if let Some(d) = deadline {
            self.calls.arm(call, d);
        }
        true
    }

    pub(crate) fn stop_recording(&mut self, call: usize) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if c.recording {
            c.recording = false;
            if let Some(m) = c.caller().media {
                self.media.silence(m);
            }
        }
        if matches!(c.wait, Wait::Record { .. }) {
            c.wait = Wait::None;
        }
    }

    /// Ends a call: final response or BYE/CANCEL on each leg that is still up (except `from`,
    /// the leg that hung up), media released, CDR written.
    pub(crate) fn hangup(
        &mut self,
        call: usize,
        q850: u8,
        side: &'static str,
        from: Option<bool>,
        now: Instant,
    ) {
        if !self.calls.contains(call) {
            return;
        }
        self.queue_ended(call, now);
        self.stop_recording(call);
        self.voicemail_ended(call, now);
        self.transfer_abandoned(call, now);
        let Some(mut c) = self.calls.remove(call) else {
            return;
        };
        self.s.slots.give_back();
        let status = Cause(q850).sip_status();
        let status = if from.is_none() {
            c.bridge_status.filter(|_| q850 != 16).unwrap_or(status)
        } else {
            status
        };
        let reason = sip::status::reason_phrase(status);
        // Inbound leg.
        if c.caller().iax().is_some() {
            self.iax_release(c.caller_mut(), q850, from != Some(false), now);
        } else if Engine::unanswered_origin(&c) {
            // The API's call to FROM rings or failed: CANCEL it if it rings (originate.rs).
            self.release_outbound(c.caller_mut(), q850, true, now);
            if c.cdr.sip_status == 0 {
                c.cdr.sip_status = 487;
            }
        } else if let (Some(stx), Some(invite), Some(d)) =
            (c.invite_tx.take(), &c.invite, c.caller().dialog())
        {
            let (status, reason) = if from == Some(false) {
                (487, "Request Terminated")
            } else {
                (status, reason)
            };
            let (tag, peer) = (d.local_tag.clone(), d.peer);
            self.metrics
                .set_up(now.saturating_duration_since(c.started));
            self.respond(
                stx,
                invite,
                peer,
                status,
                reason,
                Some(&tag),
                &[("Reason", format!("Q.850;cause={q850}"))],
                None,
                now,
            );
            c.cdr.sip_status = status;
        } else if from != Some(false) {
            self.send_bye(c.caller_mut(), q850, now);
            c.cdr.sip_status = 200;
        } else {
            c.cdr.sip_status = 200;
        }
        // The callee's leg, then the others: those still ringing are cancelled.
        if let Some(mut out) = c.take_callee(false) {
            self.release_outbound(&mut out, q850, from != Some(true), now);
        }
        let others: Vec<LegIdx> = c.legs().map(|(i, _)| i).collect();
        for i in others {
            if let Some(mut leg) = c.remove_leg(i) {
                self.release_outbound(&mut leg, q850, true, now);
            }
        }
        // Media, metrics and CDR.
        self.end_call_recording(&mut c, now);
        let mut media = None;
        if let Some(m) = c.caller_mut().media.take() {
            if let Some(stats) = self.media.remove_leg(m) {
                let jitter = Duration::from_secs_f64(stats.jitter_ms.max(0.0) / 1000.0);
                media = Some((stats.packets_received, stats.packets_lost, jitter));
                c.cdr.codec = stats.codec.to_string();
                c.cdr.packets_sent = stats.packets_sent;
                c.cdr.send_errors = stats.send_errors;
                c.cdr.packets_received = stats.packets_received;
                c.cdr.packets_lost = stats.packets_lost;
                c.cdr.jitter_ms = stats.jitter_ms;
                c.cdr.rtt_ms = stats.rtt.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0);
                c.cdr.remote_packets_lost = stats.remote_packets_lost;
            }
            self.close_media(m, c.caller().port);
        }
        let wall = self.clock.wall_at(now);
        let ms = wall
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        c.cdr.id = crate::cdr::uuid_v7(ms.as_millis() as u64, self.rng.u128(..));
        c.cdr.end = crate::cdr::unix_seconds(wall);
        c.cdr.duration_s = round_ms(now.duration_since(c.started));
        c.cdr.billable_s = c
            .answered_at
            .map_or(0.0, |a| round_ms(now.duration_since(a)));
        c.cdr.cause = q850;
        c.cdr.cause_text = Cause(q850).name().unwrap_or("unknown").to_string();
        c.cdr.hangup_side = side;
        self.metrics.ended(q850, media);
        self.events.push_back(Event::Cdr(c.cdr.to_json()));
        // The record itself moves to the notice (the call is gone): the API thread writes it.
        self.notice(crate::control::CALL, |_| {
            Some(Notice::Ended {
                call_id: c.cdr.call_id.clone(),
                cause: q850,
                cdr: Box::new(std::mem::take(&mut c.cdr)),
            })
        });
        self.call_ended(call, side, now);
    }

    /// Tears down an outbound leg: CANCEL while it rings, BYE once answered (if `notify`).
    pub(crate) fn release_outbound(
        &mut self,
        out: &mut crate::call::Leg,
        q850: u8,
        notify: bool,
        now: Instant,
    ) {
        self.calls.forget_leg(out);
        if out.iax().is_some() {
            self.iax_release(out, q850, notify, now);
        // A confirmed leg's pending INVITE is a re-INVITE (crossing.rs): its dialog ends by BYE.
        } else if let Some(ctx) = out.invite_tx.take().filter(|_| !out.confirmed) {
            if notify {
                // A fork another phone answered (or a pickup took): phones log no missed call.
                let reason = (q850 == 26).then_some(COMPLETED_ELSEWHERE);
                self.txs.cancel_because(ctx, reason, now);
                // If the callee answers anyway, its 2xx must still be ACKed and ended with a BYE.
                if let Some(d) = out.dialog() {
                    self.calls.orphan(ctx, d.clone());
                }
            }
        } else if notify && out.confirmed {
            self.send_bye(out, q850, now);
        }
        if let Some(m) = out.media.take() {
            self.media.remove_leg(m);
            self.close_media(m, out.port);
        }
    }

    pub(crate) fn send_bye(&mut self, leg: &mut crate::call::Leg, q850: u8, now: Instant) {
        let branch = self.branch();
        let Some(d) = leg.dialog_mut() else {
            return;
        };
        let local = self.local_for(d.peer);
        let mut b = d.request(&Method::Bye, &branch, local, None);
        b.header("Reason", format_args!("Q.850;cause={q850}"));
        b.header("User-Agent", &self.s.user_agent);
        let bytes = b.finish(None);
        self.txs.send_request(bytes, d.peer, now);
    }
}

/// The Reason of a CANCEL to a fork that lost (RFC 3326; RFC 3261 §9.1 leaves it to the UAC):
/// the phone that rang shows no missed call.
pub(crate) const COMPLETED_ELSEWHERE: &str = "SIP;cause=200;text=\"Call completed elsewhere\"";

/// Whether a prompt once loaded is kept for the next call: not per-call files (recordings
/// named after the call) nor voicemail boxes' files (messages and greetings come and go).
fn worth_keeping(file: &str, call_id: &str) -> bool {
    !file.contains(call_id) && !file.starts_with("voicemail/")
}

fn round_ms(d: Duration) -> f64 {
    (d.as_millis() as f64) / 1000.0
}

/// Whether a far end that signals from `signalled` and announces media at `announced` is likely
/// behind NAT: it announced a private address (RFC 1918, shared, link-local, unique local) of
/// another host, which its packets will not come from. A public or loopback address, or the
/// signalling host's own, is taken at its word.
pub(crate) fn behind_nat(announced: IpAddr, signalled: IpAddr) -> bool {
    let private = match announced {
        IpAddr::V4(a) => {
            let [first, second, ..] = a.octets();
            a.is_private() || a.is_link_local() || (first == 100 && (64..128).contains(&second))
        }
        IpAddr::V6(a) => a.is_unique_local() || a.is_unicast_link_local(),
    };
    private && announced != signalled
}
