//! `[moh.NAME]`: music-on-hold classes, a directory of WAV files each.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::Diagnostics;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMusicClass {
    pub directory: String,
    #[serde(default = "sequential")]
    pub order: String,
}

fn sequential() -> String {
    "sequential".into()
}

/// One class: its WAV files are read at start (a directory without any leaves the class to
/// the built-in tune, with a warning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MusicClass {
    pub name: String,
    pub directory: PathBuf,
    /// Played in a random order rather than by file name.
    pub shuffle: bool,
}

pub(crate) fn music(raw: BTreeMap<String, RawMusicClass>, d: &mut Diagnostics) -> Vec<MusicClass> {
    let mut classes = Vec::new();
    for (name, c) in raw {
        let key = format!("moh.{name}");
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            d.error(
                &key,
                format_args!("class name {name:?} — use letters, digits, - and _"),
            );
        }
        let shuffle = match c.order.as_str() {
            "sequential" => false,
            "random" => true,
            other => {
                d.error(
                    &format!("{key}.order"),
                    format_args!("{other:?} — expected \"sequential\" or \"random\""),
                );
                false
            }
        };
        if c.directory.is_empty() {
            d.error(
                &format!("{key}.directory"),
                "empty — give the directory that holds the class's WAV files",
            );
        }
        classes.push(MusicClass {
            name,
            directory: c.directory.into(),
            shuffle,
        });
    }
    classes
}
