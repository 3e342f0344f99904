//! Music on hold: the classes (a directory of WAV files each, played in order or shuffled, or
//! the built-in tune) and starting and stopping them on a leg. The shell loads the files once
//! at start and every worker shares them; a leg plays its class as a media playlist, so the
//! tracks follow each other in the media engine with no call logic between them.

use crate::call::LegIdx;
use crate::engine::Engine;
use media::{Playlist, Prompt};
use rustc_hash::FxHashMap;
use std::f64::consts::TAU;
use std::sync::{Arc, OnceLock};

/// The class a call's music comes from unless its `MOH` variable names another.
pub const DEFAULT_CLASS: &str = "default";

/// Every music class, by name. `default` always exists: the built-in tune unless configured.
#[derive(Debug)]
pub struct Music {
    classes: FxHashMap<String, Arc<Playlist>>,
}

impl Default for Music {
    /// Only the built-in tune, as the default class.
    fn default() -> Self {
        let mut classes = FxHashMap::default();
        classes.insert(DEFAULT_CLASS.to_string(), builtin());
        Music { classes }
    }
}

/// The built-in tune as a one-track playlist, made once per process: every engine shares it
/// and the packets encoded from it for each codec.
fn builtin() -> Arc<Playlist> {
    static TUNE: OnceLock<Arc<Playlist>> = OnceLock::new();
    TUNE.get_or_init(|| {
        let tune = Arc::new(Prompt::from_pcm("moh:built-in", &tune()));
        Arc::new(Playlist::new(vec![tune], false).expect("one track"))
    })
    .clone()
}

impl Music {
    /// Adds (or replaces) class `name`; a class without tracks is left out, so its calls get
    /// the default class.
    pub fn add(&mut self, name: &str, tracks: Vec<Arc<Prompt>>, shuffle: bool) {
        if let Some(list) = Playlist::new(tracks, shuffle) {
            self.classes.insert(name.to_string(), Arc::new(list));
        }
    }

    /// Class `name`, or the default class when there is none of that name.
    pub fn class(&self, name: &str) -> Arc<Playlist> {
        self.classes
            .get(name)
            .or_else(|| self.classes.get(DEFAULT_CLASS))
            .cloned()
            .expect("the default class always exists")
    }
}

impl Engine {
    /// Plays the call's music class (its `MOH` variable, else `default`) on leg `at` until
    /// something else plays there or `stop_moh` (nothing for a leg without media).
    pub(crate) fn start_moh(&mut self, call: usize, at: LegIdx) {
        let Some(c) = self.calls.get(call) else {
            return;
        };
        let Some(m) = c.leg(at).and_then(|l| l.media) else {
            return;
        };
        let class = c.vars.get("MOH").unwrap_or(DEFAULT_CLASS);
        let list = self.s.music.class(class);
        self.media.play_list(m, list);
    }

    /// Stops the music on leg `at`: the leg goes quiet until something else plays there.
    pub(crate) fn stop_moh(&mut self, call: usize, at: LegIdx) {
        if let Some(m) = self
            .calls
            .get(call)
            .and_then(|c| c.leg(at))
            .and_then(|l| l.media)
        {
            self.media.unbridge(m);
        }
    }
}

/// The built-in tune, for a switch with no music files: eight bars of broken chords
/// (C, G, A minor, F) in soft plucked notes, 8 kHz, about 6.4 seconds, looping cleanly.
fn tune() -> Vec<i16> {
    const RATE: f64 = 8000.0;
    const NOTE_S: f64 = 0.2;
    // MIDI notes: four arpeggios of eight notes each.
    const NOTES: [u8; 32] = [
        60, 64, 67, 72, 67, 64, 60, 64, // C
        55, 59, 62, 67, 62, 59, 55, 59, // G
        57, 60, 64, 69, 64, 60, 57, 60, // Am
        53, 57, 60, 65, 60, 57, 53, 57, // F
    ];
    let len = (NOTE_S * RATE) as usize;
    let mut pcm = Vec::with_capacity(len * NOTES.len());
    for note in NOTES {
        let hz = 440.0 * 2f64.powf((f64::from(note) - 69.0) / 12.0);
        for i in 0..len {
            let t = i as f64 / RATE;
            // 5 ms attack, then an exponential decay: no click between notes.
            let envelope = (t / 0.005).min(1.0) * (-t * 9.0).exp();
            let wave = (TAU * hz * t).sin() + 0.3 * (TAU * 2.0 * hz * t).sin();
            pcm.push((wave * envelope * 7000.0) as i16);
        }
    }
    pcm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_tune_is_audible_and_starts_and_ends_quietly() {
        let pcm = tune();
        assert_eq!(pcm.len(), 32 * 1600);
        let rms =
            (pcm.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / pcm.len() as f64).sqrt();
        assert!(rms > 1000.0, "rms {rms}");
        assert!(pcm[0].abs() < 100 && pcm[pcm.len() - 1].abs() < 500);
    }

    #[test]
    fn an_unknown_or_empty_class_falls_back_to_the_default() {
        let mut m = Music::default();
        m.add("empty", Vec::new(), false);
        let d = m.class(DEFAULT_CLASS);
        assert!(Arc::ptr_eq(&m.class("empty"), &d));
        assert!(Arc::ptr_eq(&m.class("jazz"), &d));
        let track = Arc::new(Prompt::from_pcm("x", &[0; 160]));
        m.add("jazz", vec![track], true);
        assert!(!Arc::ptr_eq(&m.class("jazz"), &d));
    }
}
