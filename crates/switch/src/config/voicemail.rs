//! `[voicemail]`: the users' boxes, their limits and message-waiting indication.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{bounded, Diagnostics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawVoicemail {
    pub sounds_dir: String,
    pub store: String,
    pub max_message_s: u64,
    pub silence_s: u64,
    pub silence_threshold: u64,
    pub max_messages: u64,
    pub owner_skips_pin: bool,
    pub unsolicited_mwi: bool,
    pub max_subscriptions_per_user: u64,
    pub max_subscribe_expires_s: u64,
    pub min_subscribe_expires_s: u64,
    pub mailboxes: BTreeMap<String, String>,
}

impl Default for RawVoicemail {
    fn default() -> RawVoicemail {
        RawVoicemail {
            sounds_dir: "/usr/share/asterisk/sounds/en_US_f_Allison".into(),
            store: DATA_DIR.into(),
            max_message_s: 180,
            silence_s: 5,
            silence_threshold: 256,
            max_messages: 100,
            owner_skips_pin: false,
            unsolicited_mwi: true,
            max_subscriptions_per_user: 4,
            max_subscribe_expires_s: 3600,
            min_subscribe_expires_s: 60,
            mailboxes: BTreeMap::new(),
        }
    }
}

/// `voicemail.store` for boxes in the data directory.
const DATA_DIR: &str = "data_dir";

/// The voicemail settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voicemail {
    /// Asterisk's prompts (vm-intro.wav, beep.wav, digits/N.wav, ...).
    pub sounds_dir: String,
    /// Where boxes are kept: None, the data directory; a `redis://` URL, that Redis, shared by
    /// every node that names it.
    pub store: Option<String>,
    pub max_message_s: u64,
    /// A recording (message, greeting) ends after this run of silence, left out of it (None:
    /// only `#`, the length limit and hang-up end it).
    pub silence: Option<media::SilenceEnd>,
    pub max_messages: usize,
    /// A caller authenticated as the box's user reaches it from `voicemail_main` without its
    /// PIN.
    pub owner_skips_pin: bool,
    /// NOTIFY a user's registered phones of its box when none subscribes.
    pub unsolicited_mwi: bool,
    pub max_subscriptions_per_user: usize,
    pub min_subscribe_expires_s: u32,
    pub max_subscribe_expires_s: u32,
    /// The boxes: user name → PIN (until the user sets another by phone).
    pub mailboxes: BTreeMap<String, String>,
}

pub(crate) fn voicemail(raw: RawVoicemail, d: &mut Diagnostics) -> Voicemail {
    for (user, pin) in &raw.mailboxes {
        let key = format!("voicemail.mailboxes.{user}");
        if !store::voicemail::valid_user(user) {
            d.error(&key, "a user name: letters, digits, ., - and _");
        }
        if !valid_pin(pin) {
            d.error(&key, "the box's PIN — 4 to 10 digits, e.g. \"4711\"");
        }
    }
    let min = bounded(
        d,
        "voicemail.min_subscribe_expires_s",
        raw.min_subscribe_expires_s,
        1,
        86_400,
    );
    let store = match raw.store.as_str() {
        DATA_DIR => None,
        url => {
            if let Err(e) = store::voicemail::RedisMailboxes::check_url(url) {
                d.error(
                    "voicemail.store",
                    format_args!("{e} — expected \"{DATA_DIR}\" or redis://HOST:PORT[/DB]"),
                );
            }
            Some(url.to_string())
        }
    };
    let silence_s = bounded(d, "voicemail.silence_s", raw.silence_s, 0, 60);
    let level = bounded(
        d,
        "voicemail.silence_threshold",
        raw.silence_threshold,
        1,
        32_767,
    );
    Voicemail {
        sounds_dir: raw.sounds_dir,
        store,
        silence: (silence_s > 0).then(|| media::SilenceEnd {
            level: level as u16,
            after: std::time::Duration::from_secs(silence_s),
        }),
        max_message_s: bounded(d, "voicemail.max_message_s", raw.max_message_s, 1, 3600),
        max_messages: bounded(d, "voicemail.max_messages", raw.max_messages, 1, 10_000) as usize,
        owner_skips_pin: raw.owner_skips_pin,
        unsolicited_mwi: raw.unsolicited_mwi,
        max_subscriptions_per_user: bounded(
            d,
            "voicemail.max_subscriptions_per_user",
            raw.max_subscriptions_per_user,
            1,
            64,
        ) as usize,
        min_subscribe_expires_s: min as u32,
        max_subscribe_expires_s: bounded(
            d,
            "voicemail.max_subscribe_expires_s",
            raw.max_subscribe_expires_s,
            min,
            86_400,
        ) as u32,
        mailboxes: raw.mailboxes,
    }
}

/// A PIN a phone's keypad can enter: 4 to 10 digits.
pub fn valid_pin(pin: &str) -> bool {
    (4..=10).contains(&pin.len()) && pin.bytes().all(|b| b.is_ascii_digit())
}
