//! The writer of whole-call recordings (`switch::Event::RecordCall`): a thread per worker
//! that drains each recording's blocks into its file, so a slow or full disk never holds up
//! the worker's media. The media path only fills the recording's bounded channel; a file that
//! cannot be written is logged and marked incomplete (the CDR says so), and its audio is
//! drained and dropped until the call ends. The thread runs at a lower priority than the
//! workers (nice 10), so its disk writes never compete with media for a core.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use media::{CallFile, CallRecording, FileFormat};

/// How often the thread looks at its recordings' channels, which hold 2 s of audio each in
/// blocks of 500 ms.
const POLL: Duration = Duration::from_millis(100);
/// A file's buffer (for the headers and Ogg's small pages): smaller than a WAV block (8 or
/// 16 KB), which so goes to the file in one write(2) as soon as it comes — a full disk shows in
/// the CDR of the call that filled it.
const FILE_BUFFER: usize = 4096;
/// The thread's nice value: below the workers, which run at 0.
const NICE: libc::c_int = 10;

/// How long a stopping worker waits for its writer to complete the files of the calls it
/// ended, so the last recordings are whole; a stuck disk cannot hold the exit up for longer.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// A worker's handle on its writer thread.
pub struct Recordings {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
}

struct Job {
    path: PathBuf,
    format: FileFormat,
    recording: CallRecording,
}

impl Recordings {
    pub fn spawn(worker: usize) -> std::io::Result<Recordings> {
        let (jobs, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name(format!("recordings-{worker}"))
            .spawn(move || {
                // SAFETY: a plain syscall. Linux keeps nice per thread, and `who` 0 is the
                // calling one; a failure leaves it at the workers' priority, only less polite.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
                run(rx)
            })?;
        Ok(Recordings { jobs, thread })
    }

    /// At shutdown, once the worker's calls have ended (their taps handed over their last
    /// audio): takes no more recordings and waits up to `limit` for the thread to complete
    /// every file. False if it had not by then.
    pub fn close(self, limit: Duration) -> bool {
        let Recordings { jobs, thread } = self;
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
        }
    }
}

fn run(jobs: Receiver<Job>) {
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
        open.retain_mut(Open::drain);
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
    fn drain(&mut self) -> bool {
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
        let r = Recordings::spawn(0).unwrap();
        r.start(path.clone(), FileFormat::Wav, recording);
        // 2 s of stereo in 100 ms blocks, then the call ends (its tap is gone).
        for _ in 0..20 {
            tx.send(vec![7i16; 1600]).unwrap();
        }
        drop(tx);
        assert!(r.close(CLOSE_WITHIN));
        let wav = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let word = |at: usize| u32::from_le_bytes(wav[at..at + 4].try_into().unwrap());
        // RIFF size, the data chunk's size (2 s × 8,000 × 2 channels × 2 bytes), the samples.
        assert_eq!(wav.len(), 44 + 64_000);
        assert_eq!((word(4), word(40)), (36 + 64_000, 64_000));
    }
}
