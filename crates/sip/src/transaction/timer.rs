//! One timer queue for every transaction: a binary heap with lazy deletion.
//!
//! Re-arming or ending a transaction never searches the heap; each transaction remembers the
//! deadline it currently wants per slot (`Armed`) and a popped entry that no longer matches is
//! simply dropped. That keeps arming O(log n) with no allocation per timer.

use super::Life;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The two timers a transaction can have running at once: a retransmission timer (A, E, G, or
/// the 2xx retransmission) and the timer that ends the state it is in (B, D, F, H, I, J, K, L, M).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Slot {
    Retransmit = 0,
    End = 1,
}

#[derive(Default)]
pub(super) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u64, Slot)>>,
}

impl TimerQueue {
    pub fn next(&self) -> Option<(Instant, u64, Slot)> {
        self.heap.peek().map(|e| e.0)
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, u64, Slot)> {
        let next = self.next().filter(|e| e.0 <= now)?;
        self.pop();
        Some(next)
    }

    /// Drops the earliest entry (a stale one, found by the caller). A heap left under a quarter
    /// full gives back half its room: a flood's timers would otherwise hold their peak for
    /// the life of the process. Halving only below a quarter keeps it amortised O(1).
    pub fn pop(&mut self) {
        self.heap.pop();
        if self.heap.capacity() > 1024 && self.heap.len() < self.heap.capacity() / 4 {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }
}

/// The deadlines a transaction currently wants; heap entries not matching these are stale.
pub(super) struct Armed {
    id: u64,
    at: [Option<Instant>; 2],
}

impl Armed {
    pub fn new(id: u64) -> Armed {
        Armed { id, at: [None; 2] }
    }

    pub fn arm(&mut self, queue: &mut TimerQueue, slot: Slot, at: Instant) {
        self.at[slot as usize] = Some(at);
        queue.heap.push(Reverse((at, self.id, slot)));
    }

    /// Arms the End slot `d` from `now`; zero (timers D, I, J, K on reliable transports) means
    /// the transaction ends at once.
    pub fn end_after(&mut self, queue: &mut TimerQueue, d: Duration, now: Instant) -> Life {
        if d.is_zero() {
            return Life::Dead;
        }
        self.arm(queue, Slot::End, now + d);
        Life::Live
    }

    pub fn disarm(&mut self, slot: Slot) {
        self.at[slot as usize] = None;
    }

    /// No timer armed: the transaction waits on its user or its peer alone.
    pub fn idle(&self) -> bool {
        self.at == [None; 2]
    }

    pub fn is(&self, slot: Slot, at: Instant) -> bool {
        self.at[slot as usize] == Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_queue_gives_its_room_back_and_keeps_its_order() {
        let mut q = TimerQueue::default();
        let t0 = Instant::now();
        for i in 0..100_000u64 {
            q.heap
                .push(Reverse((t0 + Duration::from_millis(i % 977), i, Slot::End)));
        }
        let peak = q.heap.capacity();
        let mut last = t0;
        for _ in 0..99_990 {
            let (at, _, _) = q.pop_due(t0 + Duration::from_secs(1)).unwrap();
            assert!(at >= last, "earliest first");
            last = at;
        }
        assert_eq!(q.heap.len(), 10);
        assert!(q.heap.capacity() <= 1024 && q.heap.capacity() < peak / 64);
    }
}
