//! The park lots' slots, shared by the workers: which call holds each slot and on which worker
//! it lives, so that whoever dials a slot is handed to that worker. Touched when a call is
//! parked, retrieved or given up — never per packet.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A parked call as the other workers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parked {
    pub worker: usize,
    /// The parked party's Call-ID (its leg on `worker`).
    pub call_id: Box<str>,
}

/// Slot (its extension, e.g. "701") → the call parked there.
#[derive(Default, Debug)]
pub struct ParkLots {
    /// Calls parked: dispatch of a new INVITE looks no further while it is 0.
    count: AtomicUsize,
    slots: Mutex<FxHashMap<Box<str>, Parked>>,
}

impl ParkLots {
    /// Parks `call_id` of `worker` in the first free slot of `slots` (a lot's), or None when
    /// all are taken.
    pub fn take<'a>(
        &self,
        mut slots: impl Iterator<Item = &'a str>,
        worker: usize,
        call_id: &str,
    ) -> Option<&'a str> {
        let mut map = self.lock();
        let slot = slots.find(|s| !map.contains_key(*s))?;
        let parked = Parked {
            worker,
            call_id: call_id.into(),
        };
        map.insert(slot.into(), parked);
        self.count.fetch_add(1, Ordering::Relaxed);
        Some(slot)
    }

    /// The call parked in `slot`.
    pub fn find(&self, slot: &str) -> Option<Parked> {
        if self.is_empty() {
            return None;
        }
        self.lock().get(slot).cloned()
    }

    /// Frees `slot` if `call_id` still holds it (a slot given up twice, or taken since by
    /// another call, stays as it is).
    pub fn release(&self, slot: &str, call_id: &str) -> bool {
        let mut map = self.lock();
        if map.get(slot).is_some_and(|p| &*p.call_id == call_id) {
            map.remove(slot);
            self.count.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Box<str>, Parked>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Vec<String> {
        (701..=703).map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_first_free_slot_is_taken_and_freed_by_its_call_only() {
        let lots = ParkLots::default();
        let slots = range();
        let it = || slots.iter().map(String::as_str);
        assert!(lots.is_empty());
        assert_eq!(lots.take(it(), 0, "a"), Some("701"));
        assert_eq!(lots.take(it(), 1, "b"), Some("702"));
        assert_eq!(lots.take(it(), 1, "c"), Some("703"));
        assert_eq!(lots.take(it(), 0, "d"), None, "the lot is full");
        let b = lots.find("702").unwrap();
        assert_eq!((b.worker, &*b.call_id), (1, "b"));
        assert!(!lots.release("702", "a"), "not a's slot");
        assert!(lots.release("702", "b"));
        assert!(!lots.release("702", "b"), "freed once");
        assert_eq!(lots.find("702"), None);
        assert_eq!(lots.take(it(), 0, "d"), Some("702"), "reused");
        for (s, c) in [("701", "a"), ("702", "d"), ("703", "c")] {
            assert!(lots.release(s, c));
        }
        assert!(lots.is_empty());
    }
}
