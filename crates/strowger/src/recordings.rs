//! The writer of whole-call recordings (`switch::Event::RecordCall`): a thread per worker
//! that drains each recording's blocks into its file, so a slow or full disk never holds up
//! the worker's media. The media path only fills the recording's bounded channel; a file that
//! cannot be written is logged and marked incomplete (the CDR says so), and its audio is
//! drained and dropped until the call ends. The thread runs at its worker's priority (it
//! inherits the worker's nice value and scheduling policy): at a lower one a busy host starved
//! it, the recordings' channels filled and most files came out incomplete. It mostly sleeps in
//! write(2), so it takes little of the core it shares. Every recording that ends incomplete is
//! logged by its file name and counted (`strowger_recordings_incomplete_total`).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use media::{CallFile, CallRecording, FileFormat};

/// How often the thread looks at its recordings' channels, which hold 2 s of audio each in
/// blocks of 500 ms.
const POLL: Duration = Duration::from_millis(100);
/// A file's buffer (for the headers and Ogg's small pages): smaller than what a WAV file
/// writes at once (16 KB, `media::callfile`), which so goes to the file in one write(2).
const FILE_BUFFER: usize = 4096;
/// How long a stopping worker waits for its writer to complete the files of the calls it
/// ended, so the last recordings are whole; a stuck disk cannot hold the exit up for longer.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// A worker's handle on its writer thread.
pub struct Recordings {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
    incomplete: Arc<AtomicU64>,
}

struct Job {
    path: PathBuf,
    format: FileFormat,
    recording: CallRecording,
}

impl Recordings {
    /// Started from the worker's thread, so it takes the worker's priority. `incomplete`
    /// counts the recordings that end incomplete (the process's counter).
    pub fn spawn(worker: usize, incomplete: Arc<AtomicU64>) -> std::io::Result<Recordings> {
        let (jobs, rx) = mpsc::channel();
        let counter = incomplete.clone();
        let thread = thread::Builder::new()
            .name(format!("recordings-{worker}"))
            .spawn(move || run(rx, &counter))?;
        Ok(Recordings {
            jobs,
            thread,
            incomplete,
        })
    }

    /// At shutdown, once the worker's calls have ended (their taps handed over their last
    /// audio): takes no more recordings and waits up to `limit` for the thread to complete
    /// every file. False if it had not by then.
    pub fn close(self, limit: Duration) -> bool {
        let Recordings { jobs, thread, .. } = self;
        drop(jobs);
        let end = Instant::now() + limit;
        while !thread.is_finished() {
            if Instant::now() >= end {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        thread.join().is_ok()
    }

    /// Writes `recording` to `path` until its channel disconnects (the tap is gone).
    pub fn start(&self, path: PathBuf, format: FileFormat, recording: CallRecording) {
        let job = Job {
            path,
            format,
            recording,
        };
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            failed(
                &job.path,
                &job.recording,
                "the recordings thread has stopped",
            );
            ended(&job.path, &job.recording, &self.incomplete);
        }
    }
}

fn run(jobs: Receiver<Job>, incomplete: &AtomicU64) {
    let mut open: Vec<Open> = Vec::new();
    let mut accepting = true;
    loop {
        if accepting {
            let wait = if open.is_empty() {
                Duration::from_secs(3600)
            } else {
                POLL
            };
            match jobs.recv_timeout(wait) {
                Ok(job) => open.push(Open::start(job)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => accepting = false,
            }
            while let Ok(job) = jobs.try_recv() {
                open.push(Open::start(job));
            }
        } else if open.is_empty() {
            return;
        } else {
            thread::sleep(POLL);
        }
        open.retain_mut(|o| o.drain(incomplete));
    }
}

/// A recording being written: `file` is None once writing failed.
struct Open {
    path: PathBuf,
    file: Option<CallFile<BufWriter<File>>>,
    recording: CallRecording,
}

impl Open {
    fn start(job: Job) -> Open {
        let Job {
            path,
            format,
            recording,
        } = job;
        let created = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| File::create(&path))
            .and_then(|f| {
                CallFile::new(
                    BufWriter::with_capacity(FILE_BUFFER, f),
                    format,
                    recording.mix,
                )
            });
        let file = match created {
            Ok(f) => Some(f),
            Err(e) => {
                failed(&path, &recording, &e.to_string());
                None
            }
        };
        Open {
            path,
            file,
            recording,
        }
    }

    /// Writes what has come; false once the recording ended (and its file is complete).
    fn drain(&mut self, incomplete: &AtomicU64) -> bool {
        loop {
            match self.recording.blocks.try_recv() {
                Ok(block) => {
                    let Some(file) = &mut self.file else {
                        continue;
                    };
                    if let Err(e) = file.write(&block) {
                        self.file = None;
                        failed(&self.path, &self.recording, &e.to_string());
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => {
                    if let Some(Err(e)) = self.file.take().map(CallFile::finish) {
                        failed(&self.path, &self.recording, &e.to_string());
                    }
                    ended(&self.path, &self.recording, incomplete);
                    return false;
                }
            }
        }
    }
}

fn failed(path: &std::path::Path, recording: &CallRecording, why: &str) {
    recording.status.mark_incomplete();
    tracing::error!(
        "recording {}: {why} — check the free space and permissions of general.data_dir; \
         the CDR marks the recording incomplete",
        path.display()
    );
}

/// The writer is done with a recording (its tap is gone, or the thread could not take it): one
/// that is incomplete — audio the tap dropped because this thread fell behind, a write that
/// failed — is counted and named in the log.
fn ended(path: &std::path::Path, recording: &CallRecording, incomplete: &AtomicU64) {
    if recording.status.complete() {
        return;
    }
    incomplete.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        "recording {} is incomplete: audio was dropped or could not be written — a disk too \
         slow or too full under general.data_dir, or a host too busy for the recordings thread",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use media::Mix;

    /// `close` returns once the file of a recording whose call ended is complete: its WAV
    /// header counts every sample handed over.
    #[test]
    fn close_waits_until_every_file_is_complete() {
        let dir = std::env::temp_dir().join(format!("strowger-recordings-{}", std::process::id()));
        let path = dir.join("calls/a.wav");
        let (tx, blocks) = mpsc::sync_channel(32);
        let recording = CallRecording {
            blocks,
            mix: Mix::Stereo,
            status: Default::default(),
        };
        let incomplete = Arc::new(AtomicU64::new(0));
        let r = Recordings::spawn(0, incomplete.clone()).unwrap();
        r.start(path.clone(), FileFormat::Wav, recording);
        // 2 s of stereo in 100 ms blocks, then the call ends (its tap is gone).
        for _ in 0..20 {
            tx.send(vec![7i16; 1600]).unwrap();
        }
        drop(tx);
        assert!(r.close(CLOSE_WITHIN));
        assert_eq!(incomplete.load(Ordering::Relaxed), 0);
        let wav = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let word = |at: usize| u32::from_le_bytes(wav[at..at + 4].try_into().unwrap());
        // RIFF size, the data chunk's size (2 s × 8,000 × 2 channels × 2 bytes), the samples.
        assert_eq!(wav.len(), 44 + 64_000);
        assert_eq!((word(4), word(40)), (36 + 64_000, 64_000));
    }

    /// A recording whose tap dropped a block (the writer fell behind) is counted once it ends.
    #[test]
    fn a_recording_that_lost_audio_is_counted_when_it_ends() {
        let dir = std::env::temp_dir().join(format!("strowger-lost-{}", std::process::id()));
        let (tx, blocks) = mpsc::sync_channel(32);
        let recording = CallRecording {
            blocks,
            mix: Mix::Mono,
            status: Default::default(),
        };
        let status = recording.status.clone();
        let incomplete = Arc::new(AtomicU64::new(0));
        let r = Recordings::spawn(0, incomplete.clone()).unwrap();
        r.start(dir.join("a.wav"), FileFormat::Wav, recording);
        tx.send(vec![7i16; 800]).unwrap();
        status.mark_incomplete();
        drop(tx);
        assert!(r.close(CLOSE_WITHIN));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(incomplete.load(Ordering::Relaxed), 1);
    }
}
