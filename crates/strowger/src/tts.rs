//! Prompts spoken by a speech engine: a `tts:TEXT` prompt is rendered by the command of
//! `[sounds] tts` (espeak-ng by default; a program strowger runs, never a library it links),
//! converted by sox to the prompt format (8 kHz, 16-bit, mono WAV) and kept in
//! `DATA_DIR/tts/`, named by a hash of the command line and the text, so each text is rendered
//! once per voice. Rendering takes a while, so it runs on a thread of its own and the prompt
//! goes back to the worker that asked (`Envelope::Prompt`).

use crate::worker::{Envelope, Mailboxes};
use media::Prompt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// Texts waiting for the speech engine at most: past it a prompt fails at once (and the call
/// goes on without it) rather than queueing work no caller will wait for.
const QUEUE: usize = 64;

/// The longest text spoken, in bytes: a dialplan that speaks what callers send cannot make the
/// engine render pages.
const MAX_TEXT: usize = 1024;

/// Rendered prompts kept in `DATA_DIR/tts` at most: past it the oldest goes for each new one,
/// so texts built from call variables cannot fill the disk.
const MAX_CACHED: usize = 10_000;

struct Job {
    worker: usize,
    token: u64,
    text: String,
}

/// The workers' handle on the speech thread.
#[derive(Clone)]
pub struct Tts {
    tx: SyncSender<Job>,
}

impl Tts {
    /// Starts the speech thread: `command` renders into `data_dir/tts`.
    pub fn start(
        command: Vec<String>,
        data_dir: &Path,
        mail: Arc<Mailboxes>,
    ) -> Result<Tts, String> {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let dir = data_dir.join("tts");
        std::thread::Builder::new()
            .name("tts".into())
            .spawn(move || {
                for job in rx {
                    let result = render(&command, &dir, &job.text)
                        .and_then(|path| Prompt::load(&path).map_err(|e| e.to_string()))
                        .map(Arc::new);
                    let token = job.token;
                    mail.send(job.worker, Envelope::Prompt { token, result });
                }
            })
            .map_err(|e| format!("cannot start the speech thread: {e}"))?;
        Ok(Tts { tx })
    }

    /// Renders `text` for `worker`; the prompt comes back as `Envelope::Prompt`.
    pub fn submit(&self, worker: usize, token: u64, text: &str) -> Result<(), String> {
        if text.len() > MAX_TEXT {
            return Err(format!(
                "a text of {} bytes is more than the {MAX_TEXT} a tts: prompt may have",
                text.len()
            ));
        }
        let text = text.to_string();
        self.tx
            .try_send(Job {
                worker,
                token,
                text,
            })
            .map_err(|e| match e {
                TrySendError::Full(_) => {
                    format!("{QUEUE} texts already wait for the speech engine")
                }
                TrySendError::Disconnected(_) => "the speech thread has stopped".to_string(),
            })
    }
}

/// The prompt file of `text` in `dir`: rendered and converted unless it is there already.
pub fn render(command: &[String], dir: &Path, text: &str) -> Result<PathBuf, String> {
    let key = command.iter().map(String::as_str).chain([text]);
    let file = dir.join(format!("{:016x}.wav", fnv1a(key)));
    if file.exists() {
        return Ok(file);
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "{}: {e} (check general.data_dir is writable)",
            dir.display()
        )
    })?;
    evict_oldest(dir, MAX_CACHED - 1);
    let spoken = file.with_extension("spoken.wav");
    let converted = file.with_extension("8k.wav");
    let out = spoken.display().to_string();
    let args: Vec<String> = command
        .iter()
        .map(|a| a.replace("{out}", &out).replace("{text}", text))
        .collect();
    let (program, args) = args.split_first().ok_or("sounds.tts is empty")?;
    run(Command::new(program).args(args)).map_err(|e| {
        format!("speech engine {program}: {e} (install it, or set sounds.tts in the configuration)")
    })?;
    let converted_arg = converted.display().to_string();
    run(Command::new("sox").args([&out, "-r", "8000", "-c", "1", "-b", "16", &converted_arg]))
        .map_err(|e| format!("sox: {e} (install sox: it converts the speech to 8 kHz prompts)"))?;
    let _ = std::fs::remove_file(&spoken);
    std::fs::rename(&converted, &file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(file)
}

/// Removes the least recently written prompts of `dir` until at most `keep` are left.
fn evict_oldest(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.metadata().ok()?.modified().ok()?, e.path()))
        })
        .collect();
    if files.len() <= keep {
        return;
    }
    files.sort_unstable();
    for (_, path) in &files[..files.len() - keep] {
        let _ = std::fs::remove_file(path);
    }
}

/// Runs a command to its end: its error output when it fails.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(format!("{} {}", out.status, err.trim()))
}

/// FNV-1a over the parts, each ended by a zero byte: a file name that stays the same across
/// builds and versions, unlike the standard hasher's.
fn fnv1a<'a>(parts: impl Iterator<Item = &'a str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.flat_map(|p| p.bytes().chain([0])) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// espeak-ng and sox as the default configuration runs them (both installed by
    /// scripts/setup.sh): a prompt of speech, rendered once.
    #[test]
    fn text_becomes_a_cached_prompt() {
        let cmd = switch::config::Config::embedded().ivr.tts;
        let dir = std::env::temp_dir().join(format!("strowger-tts-{}", std::process::id()));
        let file = render(&cmd, &dir, "one two three").unwrap();
        let prompt = Prompt::load(&file).unwrap();
        let pcm = prompt.linear(8000);
        assert!(pcm.len() > 4000, "{} samples", pcm.len());
        assert!(
            pcm.iter().any(|s| s.unsigned_abs() > 1000),
            "speech, not silence"
        );
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        assert_eq!(render(&cmd, &dir, "one two three").unwrap(), file);
        assert_eq!(
            std::fs::metadata(&file).unwrap().modified().unwrap(),
            modified,
            "not rendered again"
        );
        assert_ne!(render(&cmd, &dir, "four").unwrap(), file);
        // A text that looks like an option is spoken, not obeyed.
        let last = render(&cmd, &dir, "-w /nonexistent/x.wav").unwrap();
        evict_oldest(&dir, 1);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, [last], "the newest prompt is the one kept");
        let e = render(&["no-such-speech-engine".into()], &dir, "x").unwrap_err();
        assert!(e.contains("set sounds.tts"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
