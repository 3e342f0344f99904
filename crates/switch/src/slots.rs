//! The process-wide call limit (`general.max_calls`), shared by every worker's engine.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Admission for new calls: one atomic counter, touched once when a call starts and once when
/// it ends, so the limit holds across workers without a lock.
#[derive(Debug)]
pub struct CallSlots {
    max: usize,
    used: AtomicUsize,
}

impl CallSlots {
    pub fn new(max: usize) -> CallSlots {
        CallSlots {
            max,
            used: AtomicUsize::new(0),
        }
    }

    /// Takes a slot for a new call, or says the switch is full.
    pub fn try_take(&self) -> bool {
        if self.used.fetch_add(1, Ordering::AcqRel) < self.max {
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
        self.max
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
}
