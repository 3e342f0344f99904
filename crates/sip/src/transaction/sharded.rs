//! A hash map cut into [`SHARDS`] maps by a hash of the key, so that no insert resizes more than
//! a small fraction of the whole.
//!
//! A hash map grows by moving every entry into a table twice the size, in one insert. Completed
//! non-INVITE server transactions live on for timer J (32 s over UDP): under a flood of calls at
//! 5,000 answered a second a worker holds some 160,000 of them, and growing one map past about
//! 115,000 entries took 17 ms (the rehash, then page faults on the new table), during which the
//! worker's media ticks waited and every call's frames went out late. Sharded, a resize moves a
//! 64th of the entries (well under a millisecond at that size); the total work is the same.

use rustc_hash::{FxBuildHasher, FxHashMap};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// Shards per map: a power of two.
pub(super) const SHARDS: usize = 64;

pub(super) struct Sharded<K, V> {
    shards: Box<[FxHashMap<K, V>]>,
}

impl<K: Hash + Eq, V> Default for Sharded<K, V> {
    fn default() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
        }
    }
}

/// The shard of a key: the top bits of its hash, multiplied by an odd constant first so that the
/// shard does not fix the bits each shard's own table indexes and tags its buckets with.
fn shard<Q: Hash + ?Sized>(key: &Q) -> usize {
    let h = FxBuildHasher.hash_one(key);
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros())) as usize
}

impl<K: Hash + Eq, V> Sharded<K, V> {
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[shard(key)].get(key)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[shard(key)].get_mut(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[shard(key)].contains_key(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.shards[shard(&key)].insert(key, value)
    }

    /// Removes `key`; a shard left under a quarter full gives back half its room, and an empty
    /// one all of it, so the memory a flood's transactions took returns once they have
    /// lingered out (a map keeps its largest size otherwise; 64 small tables left behind were
    /// most of what registrations that had all expired still held). A shard is a 64th of the
    /// map: shrinking it is quick, and one goes empty only when the worker is nearly idle.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = &mut self.shards[shard(key)];
        let v = map.remove(key);
        if map.is_empty() && map.capacity() > 0 {
            *map = FxHashMap::default();
        } else if map.capacity() > 64 && map.len() < map.capacity() / 4 {
            map.shrink_to(map.len() * 2);
        }
        v
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.shards.iter().flat_map(|s| s.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn behaves_as_one_map_and_spreads_keys_over_every_shard() {
        let mut m: Sharded<Arc<str>, u64> = Sharded::default();
        for i in 0..10_000u64 {
            let key: Arc<str> = format!("z9hG4bK{i}/INVITE").into();
            assert_eq!(m.insert(key, i), None);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get("z9hG4bK42/INVITE"), Some(&42));
        assert!(m.contains_key("z9hG4bK9999/INVITE"));
        assert!(!m.contains_key("z9hG4bK10000/INVITE"));
        *m.get_mut("z9hG4bK7/INVITE").unwrap() = 70;
        assert_eq!(m.insert("z9hG4bK7/INVITE".into(), 7), Some(70));
        assert_eq!(m.remove("z9hG4bK7/INVITE"), Some(7));
        assert_eq!(m.remove("z9hG4bK7/INVITE"), None);
        assert_eq!(m.len(), 9_999);
        // Sequential ids (how transactions are numbered) and strings both fill every shard
        // evenly, so no shard's resize is much more than a 64th of the whole.
        let mut ids: Sharded<u64, ()> = Sharded::default();
        for i in 0..64_000u64 {
            ids.insert(i, ());
        }
        for counts in [
            m.shards.iter().map(|s| s.len()).collect::<Vec<_>>(),
            ids.shards.iter().map(|s| s.len()).collect(),
        ] {
            let mean = counts.iter().sum::<usize>() / SHARDS;
            assert!(
                counts.iter().all(|&n| n > mean * 3 / 4 && n < mean * 5 / 4),
                "{counts:?}"
            );
        }
        let room =
            |m: &Sharded<Arc<str>, u64>| m.shards.iter().map(|s| s.capacity()).sum::<usize>();
        let full = room(&m);
        for i in 100..10_000u64 {
            m.remove(format!("z9hG4bK{i}/INVITE").as_str());
        }
        assert!(room(&m) < full / 3, "emptied shards give their room back");
        assert_eq!(m.get("z9hG4bK42/INVITE"), Some(&42));
        for i in 0..100u64 {
            m.remove(format!("z9hG4bK{i}/INVITE").as_str());
        }
        assert_eq!((m.len(), room(&m)), (0, 0), "an emptied map holds no table");
    }
}
