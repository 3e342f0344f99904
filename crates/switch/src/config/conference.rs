//! `[conferences.NAME]`: a conference room's PINs and size. A `conference ROOM` step whose
//! room has no table gets an open room with the defaults below.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{bounded, Diagnostics};

/// A room as the file gives it.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConference {
    pub pin: String,
    pub moderator_pin: String,
    pub rate: u64,
    pub max_members: u64,
    pub loudest: u64,
}

impl Default for RawConference {
    fn default() -> RawConference {
        let c = Conference::default();
        RawConference {
            pin: String::new(),
            moderator_pin: String::new(),
            rate: c.rate.into(),
            max_members: c.max_members as u64,
            loudest: c.loudest as u64,
        }
    }
}

/// One conference room's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conference {
    /// Callers must key this (then `#`) to join; None: the room is open.
    pub pin: Option<String>,
    /// Keyed instead of the PIN, it makes the caller a moderator (lock, unlock, kick). A room
    /// with only a moderator PIN lets others in with `#` alone.
    pub moderator_pin: Option<String>,
    /// The most the room mixes at: 8000, 16000 (wideband, the default) or 48000 (it mixes at
    /// its widest member's rate up to this).
    pub rate: u32,
    /// Callers beyond this many are turned away (CONFSTATUS=FULL).
    pub max_members: usize,
    /// Only the loudest this many members are mixed.
    pub loudest: usize,
}

impl Default for Conference {
    fn default() -> Conference {
        Conference {
            pin: None,
            moderator_pin: None,
            rate: 16000,
            max_members: 50,
            loudest: 3,
        }
    }
}

/// `[conferences]`: the configured rooms by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conferences {
    pub rooms: BTreeMap<String, Conference>,
}

impl Conferences {
    /// Room `name`'s settings: its table's, or the defaults.
    pub fn get(&self, name: &str) -> Conference {
        self.rooms.get(name).cloned().unwrap_or_default()
    }
}

pub(crate) fn conferences(
    raw: BTreeMap<String, RawConference>,
    d: &mut Diagnostics,
) -> Conferences {
    let rooms = raw
        .into_iter()
        .map(|(name, c)| {
            let key = |k: &str| format!("conferences.{name}.{k}");
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                d.error(
                    &format!("conferences.{name}"),
                    "a room name is letters, digits, - and _, e.g. [conferences.8000]",
                );
            }
            let mut pin = |k: &str, v: String| {
                let ok = v.len() <= 16 && v.bytes().all(|b| b.is_ascii_digit());
                if !ok {
                    d.error(
                        &key(k),
                        format_args!("{v:?} — expected up to 16 digits, e.g. \"1234\""),
                    );
                }
                (!v.is_empty()).then_some(v)
            };
            let (pin, moderator_pin) = (pin("pin", c.pin), pin("moderator_pin", c.moderator_pin));
            if pin.is_some() && pin == moderator_pin {
                d.error(
                    &key("moderator_pin"),
                    "is the same as pin — give moderators a PIN of their own",
                );
            }
            if ![8000, 16000, 48000].contains(&c.rate) {
                d.error(
                    &key("rate"),
                    format_args!("{} — expected 8000, 16000 or 48000", c.rate),
                );
            }
            let room = Conference {
                pin,
                moderator_pin,
                rate: c.rate as u32,
                max_members: bounded(d, &key("max_members"), c.max_members, 2, 1000) as usize,
                loudest: bounded(d, &key("loudest"), c.loudest, 1, 16) as usize,
            };
            (name, room)
        })
        .collect();
    Conferences { rooms }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// One rule, which any file needs.
    const RULE: &str = "[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n";

    #[test]
    fn rooms_load_with_defaults_and_bad_values_name_their_key() {
        let text = "[conferences.board]\npin = \"1234\"\nmoderator_pin = \"99\"\nloudest = 5\n";
        let c = Config::from_str(&format!("{text}{RULE}"), "s.toml").unwrap();
        let board = c.conferences.get("board");
        assert_eq!(board.pin.as_deref(), Some("1234"));
        assert_eq!(board.moderator_pin.as_deref(), Some("99"));
        assert_eq!(
            (board.rate, board.max_members, board.loudest),
            (16000, 50, 5)
        );
        assert_eq!(c.conferences.get("8000"), super::Conference::default());

        let text = "[conferences.x]\npin = \"12a\"\nmoderator_pin = \"12a\"\nrate = 44100\n";
        let errors: Vec<String> = Config::from_str(&format!("{text}{RULE}"), "s.toml")
            .unwrap_err()
            .iter()
            .map(|e| format!("{}: {}", e.key, e.message))
            .collect();
        assert_eq!(
            errors,
            [
                "conferences.x.pin: \"12a\" — expected up to 16 digits, e.g. \"1234\"",
                "conferences.x.moderator_pin: \"12a\" — expected up to 16 digits, e.g. \"1234\"",
                "conferences.x.moderator_pin: is the same as pin — give moderators a PIN of their own",
                "conferences.x.rate: 44100 — expected 8000, 16000 or 48000",
            ]
        );
    }
}
