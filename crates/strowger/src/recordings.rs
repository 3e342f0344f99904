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
use std::thread;
use std::time::Duration;

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

/// A worker's handle on its writer thread.
pub struct Recordings {
    jobs: Sender<Job>,
}

struct Job {
    path: PathBuf,
    format: FileFormat,
    recording: CallRecording,
}

impl Recordings {
    pub fn spawn(worker: usize) -> std::io::Result<Recordings> {
        let (jobs, rx) = mpsc::channel();
        thread::Builder::new()
            .name(format!("recordings-{worker}"))
            .spawn(move || {
                // SAFETY: a plain syscall. Linux keeps nice per thread, and `who` 0 is the
                // calling one; a failure leaves it at the workers' priority, only less polite.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
                run(rx)
            })?;
        Ok(Recordings { jobs })
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
