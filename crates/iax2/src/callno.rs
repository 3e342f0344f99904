//! Call number allocation: numbers are drawn at random from the whole 15-bit space (2..=32767;
//! 0 means "none" on the wire and 1 is kept for stateless replies), each in O(1) by picking a
//! random slot of a free list and swapping it out. A released number rests for a hold time
//! before it can be drawn again, so late frames of an ended call do not reach a new one.
//! Endpoints that share one port (one per worker) each draw from their own share of the space
//! (numbers n with n mod count = index), so a frame's destination number names its endpoint.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// First number handed to calls; 1 is the source of stateless replies (CALLTOKEN, POKE).
pub const FIRST: u16 = 2;
/// Numbers available to calls.
pub const CAPACITY: usize = (crate::frame::MAX_CALL_NUMBER - FIRST + 1) as usize;

/// xoshiro-style 64-bit generator (splitmix64): fast, seeded by the caller.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0), by rejection.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}

pub struct CallNumbers {
    free: Vec<u16>,
    resting: VecDeque<(Instant, u16)>,
    hold: Duration,
}

impl CallNumbers {
    /// The numbers n with n mod `share.0` = `share.1` (all of them for (1, 0)).
    pub fn new(hold: Duration, share: (u16, u16)) -> CallNumbers {
        let (count, index) = (share.0.max(1), share.1);
        CallNumbers {
            free: (FIRST..=crate::frame::MAX_CALL_NUMBER)
                .filter(|n| n % count == index)
                .collect(),
            resting: VecDeque::new(),
            hold,
        }
    }

    /// A random free number, or None when all are in use or resting.
    pub fn alloc(&mut self, rng: &mut Rng, now: Instant) -> Option<u16> {
        while let Some(&(at, n)) = self.resting.front() {
            if at > now {
                break;
            }
            self.resting.pop_front();
            self.free.push(n);
        }
        if self.free.is_empty() {
            return None;
        }
        let i = rng.below(self.free.len() as u64) as usize;
        Some(self.free.swap_remove(i))
    }

    pub fn release(&mut self, n: u16, now: Instant) {
        self.resting.push_back((now + self.hold, n));
    }

    pub fn available(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn draws_whole_space_without_repeats_and_rests_released_numbers() {
        let now = Instant::now();
        let mut rng = Rng::new(42);
        let mut nums = CallNumbers::new(Duration::from_secs(10), (1, 0));
        let mut seen = HashSet::new();
        let mut first_hundred = Vec::new();
        while let Some(n) = nums.alloc(&mut rng, now) {
            assert!((FIRST..=0x7fff).contains(&n));
            assert!(seen.insert(n), "{n} drawn twice");
            if first_hundred.len() < 100 {
                first_hundred.push(n);
            }
        }
        assert_eq!(seen.len(), CAPACITY);
        // Random, not lowest-first: the first draws spread over the space.
        assert!(first_hundred.iter().any(|&n| n > 0x4000));
        assert!(first_hundred.iter().any(|&n| n < 0x4000));
        nums.release(1234, now);
        assert_eq!(nums.alloc(&mut rng, now + Duration::from_secs(9)), None);
        assert_eq!(
            nums.alloc(&mut rng, now + Duration::from_secs(10)),
            Some(1234)
        );
    }

    #[test]
    fn a_share_draws_only_its_numbers() {
        let now = Instant::now();
        let mut rng = Rng::new(7);
        let mut nums = CallNumbers::new(Duration::from_secs(10), (3, 1));
        let mut n = 0;
        while let Some(c) = nums.alloc(&mut rng, now) {
            assert_eq!(c % 3, 1);
            n += 1;
        }
        assert_eq!(n, (FIRST..=0x7fff).filter(|c| c % 3 == 1).count());
    }
}
