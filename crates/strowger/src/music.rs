//! Loads the music-on-hold classes (`[moh.NAME]`) once at start, for every worker to share.

use media::Prompt;
use std::path::Path;
use std::sync::Arc;
use switch::moh::Music;

/// Every configured class's WAV files, by file name; a directory relative to `data_dir` unless
/// absolute. A file that does not load is skipped and a class left without any falls back to
/// the built-in tune, each with a warning that names the key to fix.
pub fn load(classes: &[switch::config::MusicClass], data_dir: &Path) -> Music {
    let mut music = Music::default();
    for class in classes {
        let dir = data_dir.join(&class.directory);
        let key = format!("moh.{}.directory", class.name);
        let mut files: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav")))
                .collect(),
            Err(e) => {
                tracing::warn!(
                    "{key}: cannot read {}: {e} — class {:?} plays the built-in tune (install \
                     asterisk-moh-opsound-wav or point {key} at a directory of WAV files)",
                    dir.display(),
                    class.name
                );
                continue;
            }
        };
        files.sort();
        let tracks: Vec<_> = files
            .iter()
            .filter_map(|p| match Prompt::load(p) {
                Ok(prompt) => Some(Arc::new(prompt)),
                Err(e) => {
                    tracing::warn!("{key}: skipping {}: {e}", p.display());
                    None
                }
            })
            .collect();
        if tracks.is_empty() {
            tracing::warn!(
                "{key}: no WAV file in {} — class {:?} plays the built-in tune",
                dir.display(),
                class.name
            );
            continue;
        }
        tracing::info!(
            "music on hold: class {:?}, {} track(s) from {}{}",
            class.name,
            tracks.len(),
            dir.display(),
            if class.shuffle { ", shuffled" } else { "" }
        );
        music.add(&class.name, tracks, class.shuffle);
    }
    music
}
