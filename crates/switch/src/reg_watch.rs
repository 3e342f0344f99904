//! What registration events are made from: the contacts registered through this worker while
//! an event-stream client listens, and when each lapses. A REGISTER's bindings are told as
//! `added` (a contact not held), `refreshed` (held, with a later lapse) or `removed` (held, now
//! gone); a contact whose time passes with no refresh is told as `expired`. Kept only while
//! watched, so a REGISTER costs one branch more when nobody listens; a contact registered
//! before is told as added at its first refresh. Sans-IO: time is passed in.

use crate::control::Notice;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct RegWatch {
    /// AOR → contact → when it lapses.
    by_aor: HashMap<String, HashMap<String, Instant>>,
    /// (when, AOR, contact); entries whose contact was refreshed or removed since are skipped.
    due: BinaryHeap<Reverse<(Instant, String, String)>>,
}

/// A lapse moved by no more than this is the same one (the store keeps whole seconds).
const SAME: Duration = Duration::from_secs(1);

impl RegWatch {
    /// An AOR's bindings after a REGISTER, as (contact, seconds left): the changes to tell.
    pub(crate) fn stored(
        &mut self,
        aor: &str,
        bound: &[(String, u64)],
        now: Instant,
    ) -> Vec<Notice> {
        let held = self.by_aor.remove(aor).unwrap_or_default();
        let mut notices = Vec::new();
        let mut kept = HashMap::with_capacity(bound.len());
        for (contact, left) in bound {
            let lapse = now + Duration::from_secs(*left);
            let refreshed = match held.get(contact) {
                None => false,
                Some(&was) if lapse > was + SAME => true,
                Some(&was) => {
                    kept.insert(contact.clone(), was);
                    continue;
                }
            };
            let (a, c, expires_in) = (aor.to_string(), contact.clone(), *left);
            notices.push(match refreshed {
                false => Notice::Added {
                    aor: a,
                    contact: c,
                    expires_in,
                },
                true => Notice::Refreshed {
                    aor: a,
                    contact: c,
                    expires_in,
                },
            });
            self.due
                .push(Reverse((lapse, aor.to_string(), contact.clone())));
            kept.insert(contact.clone(), lapse);
        }
        for contact in held.into_keys().filter(|c| !kept.contains_key(c)) {
            notices.push(Notice::Removed {
                aor: aor.to_string(),
                contact,
            });
        }
        if !kept.is_empty() {
            self.by_aor.insert(aor.to_string(), kept);
        }
        notices
    }

    /// The AOR's contacts were removed elsewhere (the API told it): they will not expire.
    pub(crate) fn forget(&mut self, aor: &str) {
        self.by_aor.remove(aor);
    }

    /// When [`RegWatch::expired`] next has something to tell.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The contacts whose time has passed with no refresh.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<Notice> {
        let mut notices = Vec::new();
        while let Some(Reverse((t, _, _))) = self.due.peek() {
            if *t > now {
                break;
            }
            let Some(Reverse((t, aor, contact))) = self.due.pop() else {
                break;
            };
            let Some(contacts) = self.by_aor.get_mut(&aor) else {
                continue;
            };
            if contacts.get(&contact) != Some(&t) {
                continue;
            }
            contacts.remove(&contact);
            if contacts.is_empty() {
                self.by_aor.remove(&aor);
            }
            notices.push(Notice::Expired { aor, contact });
        }
        notices
    }

    /// Nobody listens any more: nothing is held.
    pub(crate) fn clear(&mut self) {
        if !self.due.is_empty() {
            *self = RegWatch::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: &[Notice]) -> Vec<String> {
        n.iter()
            .map(|n| match n {
                Notice::Added { contact, .. } => format!("added {contact}"),
                Notice::Refreshed { contact, .. } => format!("refreshed {contact}"),
                Notice::Removed { contact, .. } => format!("removed {contact}"),
                Notice::Expired { contact, .. } => format!("expired {contact}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn added_refreshed_untouched_removed_and_expired() {
        let t0 = Instant::now();
        let mut w = RegWatch::default();
        let a = |s: &str, left: u64| (s.to_string(), left);
        assert_eq!(events(&w.stored("1@d", &[a("x", 60)], t0)), ["added x"]);
        let t1 = t0 + Duration::from_secs(30);
        // x refreshed; y new; then y's REGISTER leaves x's lapse as it was.
        assert_eq!(
            events(&w.stored("1@d", &[a("x", 60), a("y", 20)], t1)),
            ["refreshed x", "added y"]
        );
        assert_eq!(
            events(&w.stored("1@d", &[a("x", 60), a("y", 20)], t1)),
            Vec::<String>::new()
        );
        // y lapses at t1+20; x's first lapse (t0+60) was replaced by t1+60.
        assert_eq!(w.next_deadline(), Some(t1 + Duration::from_secs(20)));
        assert!(w.expired(t1 + Duration::from_secs(19)).is_empty());
        assert_eq!(
            events(&w.expired(t1 + Duration::from_secs(40))),
            ["expired y"]
        );
        assert_eq!(
            events(&w.stored("1@d", &[], t1 + Duration::from_secs(41))),
            ["removed x"]
        );
        assert!(w.expired(t1 + Duration::from_secs(100)).is_empty());
        w.stored("2@d", &[a("z", 60)], t1);
        w.forget("2@d");
        assert!(w.expired(t1 + Duration::from_secs(100)).is_empty());
    }
}
