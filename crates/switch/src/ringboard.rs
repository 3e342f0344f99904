//! The calls ringing a user, shared by the workers, so a pickup (`*8EXT`, or a pickup group's
//! `*8`) finds the ringing call and is handed to its worker. Touched when a call starts and
//! stops ringing a user — never per packet.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A ringing call as the other workers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    pub worker: usize,
    /// The caller's Call-ID (the call's caller leg on `worker`).
    pub call_id: Box<str>,
    /// Order of arrival: a group pickup takes the call that has rung longest.
    seq: u64,
}

#[derive(Default, Debug)]
pub struct RingBoard {
    count: AtomicUsize,
    inner: Mutex<Inner>,
}

#[derive(Default, Debug)]
struct Inner {
    /// User dialled → the calls ringing it, oldest first.
    by_user: FxHashMap<Box<str>, Vec<Ring>>,
    seq: u64,
}

impl RingBoard {
    /// Call `call_id` of `worker` rings `user`.
    pub fn ring(&self, user: &str, worker: usize, call_id: &str) {
        let mut inner = self.lock();
        inner.seq += 1;
        let ring = Ring {
            worker,
            call_id: call_id.into(),
            seq: inner.seq,
        };
        inner.by_user.entry(user.into()).or_default().push(ring);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Call `call_id` no longer rings `user` (answered, failed, picked up or ended).
    pub fn stop(&self, user: &str, call_id: &str) {
        let mut inner = self.lock();
        let Some(list) = inner.by_user.get_mut(user) else {
            return;
        };
        let before = list.len();
        list.retain(|r| &*r.call_id != call_id);
        let gone = before - list.len();
        if list.is_empty() {
            inner.by_user.remove(user);
        }
        self.count.fetch_sub(gone, Ordering::Relaxed);
    }

    /// The call that has rung longest among those ringing any of `users`.
    pub fn oldest<'a>(&self, users: impl IntoIterator<Item = &'a str>) -> Option<Ring> {
        if self.is_empty() {
            return None;
        }
        let inner = self.lock();
        users
            .into_iter()
            .filter_map(|u| inner.by_user.get(u)?.first())
            .min_by_key(|r| r.seq)
            .cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_ringing_call_of_a_user_or_group_is_found_until_it_stops() {
        let b = RingBoard::default();
        assert!(b.is_empty() && b.oldest(["1001"]).is_none());
        b.ring("1002", 1, "x");
        b.ring("1001", 0, "y");
        b.ring("1001", 1, "z");
        let found = b.oldest(["1001"]).unwrap();
        assert_eq!((found.worker, &*found.call_id), (0, "y"));
        let group = b.oldest(["1001", "1002"]).unwrap();
        assert_eq!(&*group.call_id, "x", "the group's longest ringing");
        b.stop("1001", "y");
        b.stop("1001", "y");
        assert_eq!(&*b.oldest(["1001"]).unwrap().call_id, "z");
        b.stop("1002", "x");
        b.stop("1001", "z");
        assert!(b.is_empty());
        assert!(b.oldest(["1001", "1002"]).is_none());
    }
}
