//! Ring groups: several targets dialled by one `bridge`, all at once or one after another.
//! Named groups come from `[ring_groups.NAME]` and are dialled as `group/NAME`; a `bridge`
//! may also list its targets joined by `&`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::raw::RawRingGroup;
use crate::config::Diagnostics;

/// How a ring group's members are rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// All at once; the first to answer wins and the others are cancelled.
    RingAll,
    /// One after another in the order listed, each for `member_timeout`.
    Sequential,
    /// Like sequential, but each call starts one member further than the last one did.
    RoundRobin,
}

impl Strategy {
    pub(crate) const NAMES: &'static str = "ringall, sequential, roundrobin";

    pub fn parse(name: &str) -> Result<Strategy, String> {
        match name {
            "ringall" => Ok(Strategy::RingAll),
            "sequential" => Ok(Strategy::Sequential),
            "roundrobin" => Ok(Strategy::RoundRobin),
            _ => Err(format!(
                "unknown strategy {name:?} — expected {}",
                Self::NAMES
            )),
        }
    }
}

/// Where the next round-robin hunt starts: one counter per group (or per `bridge` step), shared
/// by every worker so they take turns together.
#[derive(Clone, Debug, Default)]
pub struct Turn(Arc<AtomicUsize>);

impl Turn {
    /// The member this hunt of `n` members starts at.
    pub fn take(&self, n: usize) -> usize {
        self.0.fetch_add(1, Ordering::Relaxed) % n.max(1)
    }
}

/// Steps compare equal whatever their counters say.
impl PartialEq for Turn {
    fn eq(&self, _: &Turn) -> bool {
        true
    }
}

/// A `[ring_groups.NAME]`.
#[derive(Clone, Debug)]
pub struct RingGroup {
    /// Each a bridge target: `user/NAME` or a SIP URI.
    pub members: Vec<String>,
    pub strategy: Strategy,
    pub member_timeout: Duration,
    pub turn: Turn,
}

/// Whether `target` may be one of several rung together: a user (all its phones) or a SIP URI.
pub(crate) fn member_kind_ok(target: &str) -> bool {
    target.starts_with("user/") || target.starts_with("sip:") || target.starts_with("sips:")
}

pub(crate) const MEMBER_HELP: &str = "a member is user/NAME or a SIP URI (sip:user@IP[:port])";

pub(crate) fn compile(
    raw: &BTreeMap<String, RawRingGroup>,
    d: &mut Diagnostics,
) -> BTreeMap<String, RingGroup> {
    raw.iter()
        .filter_map(|(name, g)| {
            let key = format!("ring_groups.{name}");
            if g.members.is_empty() {
                d.error(
                    &format!("{key}.members"),
                    "needs at least one member, e.g. [\"user/1001\", \"user/1002\"]",
                );
            }
            for (i, m) in g.members.iter().enumerate() {
                if !member_kind_ok(m) {
                    d.error(
                        &format!("{key}.members[{i}]"),
                        format_args!("{m:?}: {MEMBER_HELP}"),
                    );
                }
            }
            let strategy = Strategy::parse(&g.strategy)
                .map_err(|e| d.error(&format!("{key}.strategy"), e))
                .ok();
            if !(1..=3600).contains(&g.member_timeout_s) {
                d.error(
                    &format!("{key}.member_timeout_s"),
                    "must be 1 to 3600 seconds",
                );
            }
            Some((
                name.clone(),
                RingGroup {
                    members: g.members.clone(),
                    strategy: strategy?,
                    member_timeout: Duration::from_secs(g.member_timeout_s),
                    turn: Turn::default(),
                },
            ))
        })
        .collect()
}
