//! The process-wide call limit (`general.max_calls`) and the per-user ones (a user's
//! `max_calls`), shared by every worker's engine.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Admission for new calls: one atomic counter, touched once when a call starts and once when
/// it ends, so the limit holds across workers without a lock. Beside it, the calls of each user
/// whose settings limit them: a user's calls hash to any worker (by Call-ID), so only a count
/// every worker sees can hold the limit.
#[derive(Debug)]
pub struct CallSlots {
    /// `general.max_calls`; a reload may change it (calls above a lowered limit go on).
    max: AtomicUsize,
    used: AtomicUsize,
    /// Calls in progress of the users with a `max_calls`, by user name. Only their calls take
    /// the lock (once at the start, once at the end), so trusted peers' calls, the public
    /// context's and unlimited users' never do; an entry goes when its count is back to 0.
    users: Mutex<FxHashMap<Box<str>, u32>>,
}

/// One call of a user with a `max_calls`: the user's count goes down when it is dropped (the
/// call ended, or failed before it started).
#[derive(Debug)]
pub struct UserSlot {
    slots: Arc<CallSlots>,
    user: Box<str>,
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut users = self.slots.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = users.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                users.remove(&self.user);
            }
        }
    }
}

impl CallSlots {
    pub fn new(max: usize) -> CallSlots {
        CallSlots {
            max: AtomicUsize::new(max),
            used: AtomicUsize::new(0),
            users: Mutex::default(),
        }
    }

    /// Takes one of `user`'s `max` calls, or says the user has that many already.
    pub fn try_take_user(self: &Arc<Self>, user: &str, max: u32) -> Option<UserSlot> {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let n = users.entry(user.into()).or_insert(0);
        if *n >= max {
            if *n == 0 {
                users.remove(user);
            }
            return None;
        }
        *n += 1;
        Some(UserSlot {
            slots: self.clone(),
            user: user.into(),
        })
    }

    /// Calls `user` has in progress (counted for users with a `max_calls` only).
    pub fn user_calls(&self, user: &str) -> u32 {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users.get(user).copied().unwrap_or(0)
    }

    /// Takes a slot for a new call, or says the switch is full.
    pub fn try_take(&self) -> bool {
        if self.used.fetch_add(1, Ordering::AcqRel) < self.max() {
            true
        } else {
            self.used.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    pub fn give_back(&self) {
        self.used.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_holds_and_frees() {
        let s = CallSlots::new(2);
        assert!(s.try_take() && s.try_take());
        assert!(!s.try_take());
        assert_eq!(s.in_use(), 2);
        s.give_back();
        assert!(s.try_take());
    }

    #[test]
    fn a_users_limit_holds_until_a_call_ends() {
        let s = Arc::new(CallSlots::new(10));
        let a = s.try_take_user("1001", 2).unwrap();
        let b = s.try_take_user("1001", 2).unwrap();
        assert!(s.try_take_user("1001", 2).is_none());
        assert!(s.try_take_user("1002", 2).is_some(), "per user");
        assert_eq!(s.user_calls("1001"), 2);
        drop(a);
        let c = s.try_take_user("1001", 2).unwrap();
        drop((b, c));
        assert_eq!(s.user_calls("1001"), 0);
        assert!(s.users.lock().unwrap().is_empty(), "no entry left behind");
    }
}
