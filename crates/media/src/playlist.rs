//! Playlists: tracks played one after another forever, in order or shuffled — music on hold
//! from a class of several files, with no call logic between the tracks.

use std::sync::Arc;

use crate::Prompt;

/// A list of tracks, shared by every leg that plays it.
#[derive(Debug)]
pub struct Playlist {
    tracks: Vec<Arc<Prompt>>,
    shuffle: bool,
}

impl Playlist {
    /// None without a track.
    pub fn new(tracks: Vec<Arc<Prompt>>, shuffle: bool) -> Option<Playlist> {
        (!tracks.is_empty()).then_some(Playlist { tracks, shuffle })
    }

    pub fn tracks(&self) -> &[Arc<Prompt>] {
        &self.tracks
    }

    /// The track to start with: the first, or any when shuffled.
    pub(crate) fn first(&self, seed: u64) -> usize {
        if self.shuffle {
            (seed % self.tracks.len() as u64) as usize
        } else {
            0
        }
    }

    /// The track after `at`: the next in order, or another one at random (never the same one
    /// twice in a row when there is a choice).
    pub(crate) fn after(&self, at: usize, seed: &mut u64) -> usize {
        let n = self.tracks.len();
        if !self.shuffle || n < 2 {
            return (at + 1) % n;
        }
        // xorshift64: the leg's own sequence, so runs are reproducible with a seeded engine.
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (at + 1 + (*seed % (n as u64 - 1)) as usize) % n
    }
}

/// Where a leg is in its playlist.
pub(crate) struct Cursor {
    pub list: Arc<Playlist>,
    pub at: usize,
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(n: usize, shuffle: bool) -> Playlist {
        let tracks = (0..n)
            .map(|i| Arc::new(Prompt::from_pcm(format!("t{i}"), &[0; 160])))
            .collect();
        Playlist::new(tracks, shuffle).unwrap()
    }

    #[test]
    fn in_order_the_tracks_follow_each_other_and_wrap() {
        let l = list(3, false);
        let mut seed = 1;
        let order: Vec<_> = (0..4)
            .scan(l.first(7), |at, _| {
                *at = l.after(*at, &mut seed);
                Some(*at)
            })
            .collect();
        assert_eq!(order, [1, 2, 0, 1]);
    }

    #[test]
    fn shuffled_every_track_plays_and_none_twice_in_a_row() {
        let l = list(4, true);
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let mut at = l.first(seed);
        let mut seen = [0; 4];
        for _ in 0..400 {
            let next = l.after(at, &mut seed);
            assert_ne!(next, at);
            seen[next] += 1;
            at = next;
        }
        assert!(seen.iter().all(|&s| s > 50), "{seen:?}");
    }

    #[test]
    fn an_empty_list_is_none() {
        assert!(Playlist::new(Vec::new(), true).is_none());
    }
}
