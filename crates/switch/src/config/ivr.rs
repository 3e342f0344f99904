//! `[sounds]` (the sound set `say` speaks from, the speech engine of `tts:` prompts) and
//! `[menus.NAME]` (voice menus: a prompt, a step per digit, and what invalid input and
//! silence get).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::raw::RawDialplan;
use super::{bounded, Diagnostics};
use crate::dialplan::Step;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawSounds {
    pub dir: String,
    pub tts: Vec<String>,
}

impl Default for RawSounds {
    fn default() -> RawSounds {
        RawSounds {
            dir: "/usr/share/asterisk/sounds/en_US_f_Allison".into(),
            tts: [
                "espeak-ng",
                "-v",
                "en-us",
                "-s",
                "150",
                "-w",
                "{out}",
                "--",
                "{text}",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMenu {
    pub prompt: String,
    pub choices: BTreeMap<String, String>,
    #[serde(default)]
    pub invalid: String,
    #[serde(default = "default_menu_timeout")]
    pub timeout_s: u64,
    #[serde(default = "default_retries")]
    pub retries: u64,
    #[serde(default = "default_fallback")]
    pub fallback: String,
}

fn default_menu_timeout() -> u64 {
    5
}

fn default_retries() -> u64 {
    2
}

fn default_fallback() -> String {
    "hangup".into()
}

/// `[sounds]` and `[menus]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ivr {
    /// The sound set `say` speaks from (digits/N.wav, letters/x.wav; Asterisk's names).
    pub sounds_dir: String,
    /// The speech engine's command line: `{text}` is replaced by the text, `{out}` by the WAV
    /// file it must write. Run by the shell, never linked.
    pub tts: Vec<String>,
    pub menus: BTreeMap<String, Menu>,
}

/// One `[menus.NAME]`: the prompt is played (a digit stops it), the caller's choice runs its
/// step; an invalid choice or silence for `timeout` plays the prompt again, up to `retries`
/// more times, then `fallback` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Menu {
    pub prompt: String,
    /// Digits typed → the step they run (a `goto` to go on elsewhere).
    pub choices: BTreeMap<String, Step>,
    /// Played on an invalid choice before the prompt again; None: just the prompt.
    pub invalid: Option<String>,
    pub timeout: Duration,
    pub retries: u32,
    pub fallback: Step,
}

pub(crate) fn ivr(sounds: RawSounds, menus: BTreeMap<String, RawMenu>, d: &mut Diagnostics) -> Ivr {
    if sounds.dir.is_empty() {
        d.error(
            "sounds.dir",
            "is empty — set it to the sound set `say` speaks from (Debian: asterisk-core-sounds-en-wav, /usr/share/asterisk/sounds/en_US_f_Allison)",
        );
    }
    let placeholders = ["{out}", "{text}"];
    if !placeholders
        .iter()
        .all(|p| sounds.tts.iter().any(|a| a.contains(p)))
    {
        d.error(
            "sounds.tts",
            "needs a command with {out} (the WAV file it writes) and {text}, e.g. [\"espeak-ng\", \"-w\", \"{out}\", \"{text}\"]",
        );
    }
    let menus = menus
        .into_iter()
        .map(|(name, m)| {
            let key = |k: &str| format!("menus.{name}.{k}");
            let mut step = |k: String, text: &str| match Step::parse(text) {
                Ok(step) => step,
                Err(e) => {
                    d.at(&k, e.offset, e.message, false);
                    Step::Hangup {
                        cause: crate::dialplan::Cause::NORMAL_CLEARING,
                    }
                }
            };
            let choices = m
                .choices
                .iter()
                .map(|(digits, text)| {
                    (
                        digits.clone(),
                        step(key(&format!("choices.{digits}")), text),
                    )
                })
                .collect();
            let fallback = step(key("fallback"), &m.fallback);
            if m.choices.is_empty() {
                d.error(
                    &key("choices"),
                    "needs at least one choice, e.g. { \"1\" = \"goto default exten=9196\" }",
                );
            }
            for digits in m.choices.keys() {
                if digits.is_empty() || !digits.chars().all(|c| "0123456789*#".contains(c)) {
                    d.error(
                        &key(&format!("choices.{digits}")),
                        format_args!(
                            "{digits:?} is not a choice a phone can dial — use digits, * and #"
                        ),
                    );
                }
            }
            if m.prompt.is_empty() {
                d.error(
                    &key("prompt"),
                    "is empty — name the prompt the menu plays (a WAV file, or tts:TEXT)",
                );
            }
            let menu = Menu {
                prompt: m.prompt,
                choices,
                invalid: Some(m.invalid).filter(|f| !f.is_empty()),
                timeout: Duration::from_secs(bounded(d, &key("timeout_s"), m.timeout_s, 1, 300)),
                retries: bounded(d, &key("retries"), m.retries, 0, 10) as u32,
                fallback,
            };
            (name, menu)
        })
        .collect();
    Ivr {
        sounds_dir: sounds.dir,
        tts: sounds.tts,
        menus,
    }
}

/// Every `menu NAME` step of the dialplan names a `[menus.NAME]` table.
pub(crate) fn check_dialplan(ivr: &Ivr, raw: &RawDialplan, d: &mut Diagnostics) {
    let names: Vec<_> = ivr.menus.keys().map(String::as_str).collect();
    let named = |step| match step {
        Step::Menu { name } => Some(name),
        _ => None,
    };
    super::check_named(raw, ("menu", "menus"), &names, named, d);
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::dialplan::Step;

    fn errors(text: &str) -> Vec<String> {
        match Config::from_str(text, "t.toml") {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn menus_are_read_with_their_steps() {
        let cfg = Config::from_str(
            "[menus.main]\nprompt = \"tts:Press 1\"\nchoices = { \"1\" = \"goto default exten=9196\", \"*9\" = \"hangup\" }\ninvalid = \"bad.wav\"\n\n[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"menu main\"]\n",
            "t.toml",
        )
        .unwrap();
        let main = &cfg.ivr.menus["main"];
        assert_eq!(main.choices.len(), 2);
        assert!(matches!(main.choices["1"], Step::Goto { .. }));
        assert_eq!(main.invalid.as_deref(), Some("bad.wav"));
        assert_eq!((main.retries, main.timeout.as_secs()), (2, 5));
        assert!(matches!(main.fallback, Step::Hangup { .. }));
    }

    #[test]
    fn menu_mistakes_name_their_keys() {
        let e = errors(
            "[sounds]\ndir = \"\"\ntts = [\"say\"]\n[menus.m]\nprompt = \"\"\nchoices = { \"1\" = \"dance\", \"x\" = \"hangup\" }\nretries = 99\n\n[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"menu other\"]\n",
        )
        .join("\n");
        for wanted in [
            "sounds.dir: is empty",
            "sounds.tts: needs a command with {out}",
            "menus.m.choices.1: unknown app \"dance\"",
            "menus.m.choices.x: \"x\" is not a choice",
            "menus.m.prompt: is empty",
            "menus.m.retries: 99 is out of range",
            "steps[0]: no menu \"other\" — defined: m (add a [menus.other] table)",
        ] {
            assert!(e.contains(wanted), "{wanted:?} not in:\n{e}");
        }
    }
}
