//! `[parking.LOT]` (park lots: their slots, how long a call stays parked, what it hears) and
//! `[pickup_groups]` (who may pick up whose ringing calls with `*8`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{bounded, Diagnostics};

/// A lot as the file gives it.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawLot {
    pub slots: String,
    pub timeout_s: u64,
    pub music: String,
    pub announce: String,
    pub timeout_exten: Option<String>,
}

impl Default for RawLot {
    fn default() -> RawLot {
        RawLot {
            slots: "701-720".into(),
            timeout_s: 60,
            music: "default".into(),
            announce: DIGITS.into(),
            timeout_exten: None,
        }
    }
}

/// Where Debian's asterisk-core-sounds-en-wav keeps the spoken digits (`0.wav` … `9.wav`).
const DIGITS: &str = "/usr/share/asterisk/sounds/en_US_f_Allison/digits";

/// The lot a `park` step uses when it names none; it exists even when not configured.
pub const DEFAULT_LOT: &str = "default";

/// One park lot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lot {
    /// Its slots' extensions, in the order they are taken ("701", "702", …).
    pub slots: Vec<String>,
    /// How long a call stays parked before it rings back whoever parked it.
    pub timeout: Duration,
    /// The music on hold class (`[moh.NAME]`) the parked call hears.
    pub music: String,
    /// The directory of the digit prompts (`N.wav`) the slot is told with; "" = not told.
    pub announce: String,
    /// Where a timed-out call goes (in its context) when nobody can be rung back.
    pub timeout_exten: Option<String>,
}

/// `[parking]` and `[pickup_groups]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parking {
    pub lots: BTreeMap<String, Lot>,
    /// Group name → its members (user names).
    pub pickup_groups: BTreeMap<String, Vec<String>>,
}

impl Parking {
    /// The users whose ringing calls `user` may pick up: the members of every group it is in.
    pub fn pickup_peers(&self, user: &str) -> Vec<&str> {
        let mut peers: Vec<&str> = self
            .pickup_groups
            .values()
            .filter(|m| m.iter().any(|u| u == user))
            .flatten()
            .map(String::as_str)
            .filter(|u| *u != user)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}

pub(crate) fn parking(
    mut raw: BTreeMap<String, RawLot>,
    groups: BTreeMap<String, Vec<String>>,
    music: &[super::MusicClass],
    d: &mut Diagnostics,
) -> Parking {
    raw.entry(DEFAULT_LOT.into()).or_default();
    let mut lots = BTreeMap::new();
    for (name, l) in raw {
        let key = format!("parking.{name}");
        let slots = match slot_range(&l.slots) {
            Ok(s) => s,
            Err(e) => {
                d.error(&format!("{key}.slots"), e);
                Vec::new()
            }
        };
        let timeout = bounded(d, &format!("{key}.timeout_s"), l.timeout_s, 1, 86_400);
        if l.music != crate::moh::DEFAULT_CLASS && !music.iter().any(|c| c.name == l.music) {
            d.error(
                &format!("{key}.music"),
                format_args!(
                    "no music class {:?} — define [moh.{}] or use \"default\"",
                    l.music, l.music
                ),
            );
        }
        let lot = Lot {
            slots,
            timeout: Duration::from_secs(timeout),
            music: l.music,
            announce: l.announce,
            timeout_exten: l.timeout_exten.filter(|e| !e.is_empty()),
        };
        lots.insert(name, lot);
    }
    let names: Vec<&String> = lots.keys().collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            if lots[*a].slots.iter().any(|s| lots[*b].slots.contains(s)) {
                d.error(
                    &format!("parking.{b}.slots"),
                    format_args!("overlaps the slots of lot {a:?} — give each lot its own range"),
                );
            }
        }
    }
    for (name, members) in &groups {
        if members.is_empty() {
            d.error(
                &format!("pickup_groups.{name}"),
                "lists no user — expected user names, e.g. [\"1001\", \"1002\"]",
            );
        }
    }
    Parking {
        lots,
        pickup_groups: groups,
    }
}

/// "701-720" → "701", …, "720" (at most 1000 slots).
fn slot_range(s: &str) -> Result<Vec<String>, String> {
    let expect = || format!("{s:?} — expected a range of extensions such as \"701-720\"");
    let (lo, hi) = s.split_once('-').ok_or_else(expect)?;
    let (lo, hi) = (lo.trim(), hi.trim());
    let (Ok(a), Ok(b)) = (lo.parse::<u32>(), hi.parse::<u32>()) else {
        return Err(expect());
    };
    if a > b || b - a >= 1000 || lo.starts_with('0') {
        return Err(format!(
            "{s:?} — expected LOW-HIGH with LOW ≤ HIGH, at most 1000 slots, no leading zero"
        ));
    }
    Ok((a..=b).map(|n| n.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::slot_range;

    #[test]
    fn a_user_picks_up_the_calls_of_every_group_it_is_in() {
        let groups = [
            ("a", vec!["1", "2"]),
            ("b", vec!["2", "3", "1"]),
            ("c", vec!["4"]),
        ];
        let p = super::Parking {
            pickup_groups: groups
                .iter()
                .map(|(n, m)| (n.to_string(), m.iter().map(|u| u.to_string()).collect()))
                .collect(),
            ..Default::default()
        };
        assert_eq!(p.pickup_peers("2"), ["1", "3"]);
        assert_eq!(p.pickup_peers("4"), Vec::<&str>::new());
        assert_eq!(p.pickup_peers("9"), Vec::<&str>::new());
    }

    #[test]
    fn slot_ranges() {
        assert_eq!(slot_range("701-703").unwrap(), ["701", "702", "703"]);
        assert_eq!(slot_range("8 - 8").unwrap(), ["8"]);
        for bad in ["", "701", "720-701", "a-b", "0701-0720", "1-5000"] {
            assert!(slot_range(bad).is_err(), "{bad:?}");
        }
    }
}
