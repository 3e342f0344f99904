//! `[queues.NAME]`: call queues (ACD). Callers of `queue NAME` wait with music and
//! announcements until an agent (a member user's phone) answers; `queue_login` and
//! `queue_logout` let users join and leave as agents.

use std::time::Duration;

use super::raw::{RawDialplan, RawQueue};
use super::{bounded, Diagnostics};
use crate::dialplan::Step;

/// Which free agent a waiting caller rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every free agent at once; the first to answer takes the call.
    RingAll,
    /// The next agent after the one rung last, in member order.
    RoundRobin,
    /// The agent whose last queue call ended longest ago.
    LeastRecent,
    /// The agent who took the fewest calls of this queue.
    FewestCalls,
}

impl Strategy {
    const NAMES: [(&'static str, Strategy); 4] = [
        ("ringall", Strategy::RingAll),
        ("roundrobin", Strategy::RoundRobin),
        ("leastrecent", Strategy::LeastRecent),
        ("fewestcalls", Strategy::FewestCalls),
    ];
}

/// One `[queues.NAME]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    pub name: String,
    /// Static agents: user names, rung as the phones registered as those users.
    pub members: Vec<String>,
    pub strategy: Strategy,
    /// How long an agent rings before the caller is offered to the next.
    pub member_timeout: Duration,
    /// After a queue call an agent gets no other for this long.
    pub wrapup: Duration,
    /// A busy or unreachable agent is not rung again for this long.
    pub retry: Duration,
    /// The caller leaves the queue (QUEUESTATUS=TIMEOUT, or EMPTY with no agent logged in)
    /// and its program goes on after this long.
    pub max_wait: Duration,
    /// The music class (`[moh.NAME]`) callers hear while they wait, unless their context
    /// chose one (`set MOH=...`).
    pub music: String,
    /// Position and expected wait are announced after this much music (from joining, then
    /// from the end of the last announcement); None: never.
    pub announce: Option<Duration>,
    /// Where the announcement prompts are (queue-thereare.wav, digits/N.wav, ...).
    pub sounds_dir: String,
}

pub(crate) fn queues(
    raw: std::collections::BTreeMap<String, RawQueue>,
    d: &mut Diagnostics,
) -> Vec<Queue> {
    raw.into_iter()
        .map(|(name, q)| {
            let key = |k: &str| format!("queues.{name}.{k}");
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                d.error(
                    &format!("queues.{name}"),
                    "a queue name is letters, digits, - and _, e.g. [queues.support]",
                );
            }
            for (i, m) in q.members.iter().enumerate() {
                if m.is_empty() || m.contains([' ', '"', ':', '/']) {
                    d.error(
                        &format!("{}[{i}]", key("members")),
                        format_args!("{m:?} — expected a user name such as \"1001\""),
                    );
                }
            }
            let strategy = Strategy::NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&q.strategy))
                .map(|(_, s)| *s)
                .unwrap_or_else(|| {
                    let names: Vec<_> = Strategy::NAMES.iter().map(|(n, _)| *n).collect();
                    d.error(
                        &key("strategy"),
                        format_args!("{:?} — expected one of {}", q.strategy, names.join(", ")),
                    );
                    Strategy::RingAll
                });
            let secs = |d: &mut Diagnostics, k: &str, v: u64, lo: u64| {
                Duration::from_secs(bounded(d, &key(k), v, lo, 86_400))
            };
            let announce = secs(d, "announce_s", q.announce_s, 0);
            if q.music.is_empty() {
                d.error(&key("music"), "must not be empty — e.g. \"default\"");
            }
            if q.sounds_dir.is_empty() {
                d.error(
                    &key("sounds_dir"),
                    "must not be empty — e.g. \"/usr/share/asterisk/sounds/en_US_f_Allison\"",
                );
            }
            Queue {
                members: q.members,
                strategy,
                member_timeout: secs(d, "member_timeout_s", q.member_timeout_s, 1),
                wrapup: secs(d, "wrapup_s", q.wrapup_s, 0),
                retry: secs(d, "retry_s", q.retry_s, 1),
                max_wait: secs(d, "max_wait_s", q.max_wait_s, 1),
                music: q.music,
                announce: (!announce.is_zero()).then_some(announce),
                sounds_dir: q.sounds_dir,
                name,
            }
        })
        .collect()
}

/// A queue's music class must be one of `[moh.NAME]` (or `default`, which always exists).
pub(crate) fn check_music(queues: &[Queue], classes: &[super::MusicClass], d: &mut Diagnostics) {
    for q in queues {
        let known =
            q.music == crate::moh::DEFAULT_CLASS || classes.iter().any(|c| c.name == q.music);
        if !known {
            let names: Vec<&str> = std::iter::once(crate::moh::DEFAULT_CLASS)
                .chain(classes.iter().map(|c| c.name.as_str()))
                .collect();
            d.error(
                &format!("queues.{}.music", q.name),
                format_args!(
                    "no music class {:?} — defined: {} (add a [moh.{}] table)",
                    q.music,
                    names.join(", "),
                    q.music
                ),
            );
        }
    }
}

/// Every `queue`, `queue_login` and `queue_logout` step must name a configured queue.
pub(crate) fn check_dialplan(queues: &[Queue], raw: &RawDialplan, d: &mut Diagnostics) {
    let names: Vec<_> = queues.iter().map(|q| q.name.as_str()).collect();
    let named = |step| match step {
        Step::Queue { queue } | Step::QueueLogin { queue } | Step::QueueLogout { queue } => {
            Some(queue)
        }
        _ => None,
    };
    super::check_named(raw, ("queue", "queues"), &names, named, d);
}
