//! Voice-menu steps (`background`, `read`, `say`, `menu`): the prompts a call has still to
//! play and the digits its caller typed, kept here while such a step runs. The program waits
//! on `Wait::Playback` for each prompt and on `Wait::Digits` for the next digit; a call that
//! runs none of these steps holds nothing here, and its digits stop at the check for it.

pub(crate) mod say;

pub(crate) use say::number;

use crate::call::{Call, Wait};
use crate::dialplan::{SayAs, Step, MAX_READ_DIGITS};
use crate::engine::Engine;
use crate::io::Level;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One call's voice-menu state (`Call::ivr`).
#[derive(Default)]
pub(crate) struct Ivr {
    /// Prompts still to play, in order.
    prompts: VecDeque<String>,
    /// A digit stops the prompts (those of background, read and menu; not say's).
    interruptible: bool,
    /// Digits typed and not yet taken by a read or a menu.
    typed: String,
    /// The read or menu that takes them.
    collect: Option<Collect>,
    /// When the caller's time for the next digit is up (set once the prompts have played).
    until: Option<Instant>,
    /// A digit came while the prompt to play loaded (`Wait::File`): it is not played.
    interrupted: bool,
}

struct Collect {
    goal: Goal,
    max: usize,
    terminator: Option<char>,
    timeout: Duration,
}

enum Goal {
    /// `read`: the variable the digits go to.
    Var(String),
    /// `menu`: its name, and how many invalid or silent tries the caller has had.
    Menu { name: String, tries: u32 },
}

/// What the digits typed so far come to.
enum Outcome {
    /// More may come.
    Pending,
    /// A read's value (the digits before the terminator, or all of them).
    Read(String),
    /// A menu's choice.
    Chosen(Step),
    /// A menu got an invalid choice (true) or nothing before its timeout.
    Retry { invalid: bool },
}

impl Ivr {
    /// What the digits typed come to for `c`, taking them when they are a result.
    fn outcome(&mut self, c: &Collect, menus: &crate::config::Ivr, expired: bool) -> Outcome {
        match &c.goal {
            Goal::Var(_) => {
                if let Some(end) = c.terminator.and_then(|t| self.typed.find(t)) {
                    let value = self.typed[..end].to_string();
                    self.typed.drain(..=end);
                    return Outcome::Read(value);
                }
                if self.typed.len() >= c.max || expired {
                    let n = self.typed.len().min(c.max);
                    return Outcome::Read(self.typed.drain(..n).collect());
                }
                Outcome::Pending
            }
            Goal::Menu { name, .. } => {
                let Some(menu) = menus.menus.get(name) else {
                    return Outcome::Retry { invalid: true };
                };
                let typed = self.typed.as_str();
                let longer = menu
                    .choices
                    .keys()
                    .any(|k| k.len() > typed.len() && k.starts_with(typed));
                match menu.choices.get(typed) {
                    Some(step) if !longer || expired => {
                        self.typed.clear();
                        Outcome::Chosen(step.clone())
                    }
                    _ if longer && !expired => Outcome::Pending,
                    _ => Outcome::Retry {
                        invalid: !std::mem::take(&mut self.typed).is_empty(),
                    },
                }
            }
        }
    }
}

impl Engine {
    /// Starts a `background`, `read`, `say` or `menu` step; `ivr_next` then plays its prompts
    /// and waits for its digits.
    pub(crate) fn ivr_start(&mut self, call: usize, step: Step, now: Instant) {
        if !self.answer_or_early(call, now) {
            return;
        }
        let ivr_cfg = self.s.ivr.clone();
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let ivr = c.ivr.get_or_insert_with(Box::default);
        ivr.until = None;
        ivr.interruptible = true;
        match step {
            Step::Background { file } => ivr.prompts.push_back(file),
            Step::Read {
                var,
                max,
                timeout,
                terminator,
                prompt,
            } => {
                if ivr.typed.is_empty() {
                    ivr.prompts.extend(prompt);
                }
                ivr.collect = Some(Collect {
                    goal: Goal::Var(var),
                    max: max.unwrap_or(MAX_READ_DIGITS),
                    terminator,
                    timeout,
                });
            }
            Step::Say { kind, value } => {
                ivr.interruptible = false;
                match kind {
                    SayAs::Text => ivr.prompts.push_back(format!("tts:{value}")),
                    _ => {
                        let dir = &ivr_cfg.sounds_dir;
                        let files = say::pieces(kind, &value);
                        ivr.prompts
                            .extend(files.iter().map(|p| format!("{dir}/{p}.wav")));
                        if files.is_empty() && !value.is_empty() {
                            let call_id = c.caller().call_id().to_string();
                            let msg = format!(
                                "call {call_id}: say: nothing to say for {value:?} as {kind:?}"
                            );
                            self.log(Level::Warn, Some(&call_id), msg);
                        }
                    }
                }
            }
            Step::Menu { name } => {
                let Some(menu) = ivr_cfg.menus.get(&name) else {
                    let call_id = c.caller().call_id().to_string();
                    let msg = format!("call {call_id}: menu {name}: no [menus.{name}] table");
                    self.log(Level::Warn, Some(&call_id), msg);
                    return;
                };
                if ivr.typed.is_empty() {
                    ivr.prompts.push_back(menu.prompt.clone());
                }
                ivr.collect = Some(Collect {
                    max: menu.choices.keys().map(String::len).max().unwrap_or(1),
                    goal: Goal::Menu { name, tries: 0 },
                    terminator: None,
                    timeout: menu.timeout,
                });
            }
            _ => {}
        }
    }

    /// Runs the call's voice-menu step on, before its program's next step: plays the next
    /// prompt, waits for a digit, or ends a read or menu with what was typed. False when no
    /// such step is under way (the program goes on).
    pub(crate) fn ivr_next(&mut self, call: usize, now: Instant) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        let Some(ivr) = c.ivr.as_deref_mut() else {
            return false;
        };
        ivr.interrupted = false;
        if let Some(file) = ivr.prompts.pop_front() {
            self.play_file(call, Call::CALLER, file, false, true);
            return true;
        }
        let Some(collect) = ivr.collect.take() else {
            // Typed-ahead digits wait for a later read or menu; the step is over.
            ivr.interruptible = false;
            if ivr.typed.is_empty() {
                c.ivr = None;
            }
            return false;
        };
        let expired = ivr.until.is_some_and(|t| t <= now);
        match ivr.outcome(&collect, &self.s.ivr, expired) {
            Outcome::Pending => {
                let until = *ivr.until.get_or_insert(now + collect.timeout);
                ivr.collect = Some(collect);
                c.wait = Wait::Digits;
                self.calls.arm(call, until);
                true
            }
            Outcome::Read(value) => {
                ivr.until = None;
                ivr.interruptible = false;
                if let Goal::Var(var) = collect.goal {
                    c.vars.set(var, value);
                }
                false
            }
            Outcome::Chosen(step) => {
                c.ivr = None;
                let step = c.program.expand(&step, &c.vars);
                self.step(call, step, now);
                true
            }
            Outcome::Retry { invalid } => {
                let Goal::Menu { name, tries } = collect.goal else {
                    return false;
                };
                let Some(menu) = self.s.ivr.menus.get(&name) else {
                    return false;
                };
                if tries >= menu.retries {
                    let step = c.program.expand(&menu.fallback, &c.vars);
                    c.ivr = None;
                    self.step(call, step, now);
                    return true;
                }
                ivr.until = None;
                ivr.interruptible = true;
                ivr.prompts
                    .extend(menu.invalid.iter().filter(|_| invalid).cloned());
                ivr.prompts.push_back(menu.prompt.clone());
                ivr.collect = Some(Collect {
                    goal: Goal::Menu {
                        name,
                        tries: tries + 1,
                    },
                    ..collect
                });
                true
            }
        }
    }

    /// A caller's digit: kept for the read or menu under way (or the next), stopping an
    /// interruptible prompt. Nothing for a call without a voice-menu step.
    pub(crate) fn ivr_digit(&mut self, call: usize, digit: char) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let Some(ivr) = c.ivr.as_deref_mut() else {
            return;
        };
        let playing = matches!(c.wait, Wait::Playback | Wait::File);
        if playing && !ivr.interruptible || !playing && c.wait != Wait::Digits {
            return;
        }
        ivr.typed.push(digit);
        ivr.until = None;
        ivr.interrupted = c.wait == Wait::File;
        if playing {
            ivr.prompts.clear();
            if let Some(m) = c.caller().media {
                self.media.silence(m);
            }
        }
        if c.wait != Wait::File {
            c.wait = Wait::None;
            self.calls.run_later(call);
        }
    }

    /// Whether the caller typed a digit that stops the prompt the call waited for while it
    /// loaded: it is not played then.
    pub(crate) fn ivr_interrupted(&self, call: usize) -> bool {
        let ivr = self.calls.get(call).and_then(|c| c.ivr.as_deref());
        ivr.is_some_and(|i| i.interrupted)
    }

    /// A call timer while the call waits for a digit: the read or menu ends or retries once
    /// its time is up.
    pub(crate) fn ivr_timeout(&mut self, call: usize, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let due = c
            .ivr
            .as_ref()
            .is_some_and(|i| i.until.is_some_and(|t| t <= now));
        if due && c.wait == Wait::Digits {
            c.wait = Wait::None;
            self.calls.run_later(call);
        }
    }
}
