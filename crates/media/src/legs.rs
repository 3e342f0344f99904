//! The engine's legs by index, indices reused after removal: a slab whose storage address for an
//! index is known without reading it, so that a shell can start loading the legs of a batch of
//! packets before handling the first (see [`crate::Engine::prefetch`]).

use crate::leg::Leg;

#[derive(Default)]
pub(crate) struct Legs {
    entries: Vec<Option<Leg>>,
    /// Vacant indices, the most recently freed last.
    free: Vec<usize>,
}

impl Legs {
    pub(crate) fn insert(&mut self, leg: Leg) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.entries[i] = Some(leg);
                i
            }
            None => {
                self.entries.push(Some(leg));
                self.entries.len() - 1
            }
        }
    }

    pub(crate) fn try_remove(&mut self, i: usize) -> Option<Leg> {
        let leg = self.entries.get_mut(i)?.take()?;
        self.free.push(i);
        Some(leg)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Leg> {
        self.entries.iter().flatten()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Leg> {
        self.entries.get(i)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Leg> {
        self.entries.get_mut(i)?.as_mut()
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.get(i).is_some()
    }

    /// Two distinct legs at once (a bridge's two sides).
    pub(crate) fn get2_mut(&mut self, a: usize, b: usize) -> Option<(&mut Leg, &mut Leg)> {
        if a == b {
            return None;
        }
        let (lo, hi) = (a.min(b), a.max(b));
        let (head, tail) = self.entries.split_at_mut(hi);
        let (x, y) = (head.get_mut(lo)?.as_mut()?, tail.first_mut()?.as_mut()?);
        Some(if a < b { (x, y) } else { (y, x) })
    }

    /// One past the highest index ever used.
    pub(crate) fn end(&self) -> usize {
        self.entries.len()
    }

    /// Starts loading the cache lines at `offsets` into leg `i`'s storage, without reading it
    /// (a read would wait for the very miss the prefetch is for).
    pub(crate) fn prefetch(&self, i: usize, offsets: &[usize]) {
        #[cfg(target_arch = "x86_64")]
        if i < self.entries.len() {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // A leg's fields lie at their offsets within the entry (the entry's `None` is a
            // niche in the leg); were they not, a prefetch would only miss its mark.
            let p = self.entries.as_ptr().wrapping_add(i).cast::<i8>();
            for &off in offsets {
                // SAFETY: a prefetch is a hint that never faults, here within the vector.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
            }
        }
    }
}
