//! What a worker does for its engine's events (`switch::Event`): prompt files, recordings, the
//! CDR file and database, state files and the location store.

use media::Prompt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a worker keeps between calls: the open CDR file and the store connection.
pub struct Host {
    data_dir: PathBuf,
    cdr: Option<File>,
    cdr_path: PathBuf,
    /// Store operations go to the store threads (results come back through the inbox) or over
    /// the worker's store connection (results from `store_ready`).
    store: Option<crate::store_io::StoreQueue>,
    /// The DNS thread, when a trunk's host needs DNS.
    dns: Option<crate::dns::Dns>,
    /// The speech thread that renders `tts:` prompts.
    tts: Option<crate::tts::Tts>,
    /// The writer thread of whole-call recordings, started with the first one.
    recordings: Option<crate::recordings::Recordings>,
    /// The thread that keeps the voicemail boxes.
    voicemail: Option<crate::voicemail_io::VoicemailIo>,
    /// The CDR database's writer (`[cdr] database`).
    cdr_db: Option<crate::cdr::Queue>,
    /// The journal of this worker's calls in progress (journal_io.rs).
    journal: Option<crate::journal_io::JournalFile>,
}

/// The embedded announcement behind the dialplan's `demo` prompt.
const DEMO_WAV: &[u8] = include_bytes!("../../../assets/demo.wav");

impl Host {
    pub fn new(data_dir: PathBuf, cdr_path: PathBuf) -> Host {
        Host {
            data_dir,
            cdr: None,
            cdr_path,
            store: None,
            dns: None,
            tts: None,
            recordings: None,
            voicemail: None,
            cdr_db: None,
            journal: None,
        }
    }

    pub fn with_journal(mut self, path: PathBuf) -> Host {
        self.journal = Some(crate::journal_io::JournalFile::new(path));
        self
    }

    /// Writes what the engine's journal of calls in progress has to write.
    pub fn journal(&mut self, w: switch::journal::Write) {
        if let Some(j) = self.journal.as_mut() {
            j.write(w);
        }
    }

    pub fn with_voicemail(mut self, v: crate::voicemail_io::VoicemailIo) -> Host {
        self.voicemail = Some(v);
        self
    }

    fn voicemail_io(&self) -> Result<&crate::voicemail_io::VoicemailIo, String> {
        self.voicemail
            .as_ref()
            .ok_or_else(|| "no voicemail thread was started".to_string())
    }

    /// Starts reading a voicemail box's message or greeting (`voicemail/…`) for `worker`: it
    /// comes back through the inbox.
    pub fn box_audio(&self, worker: usize, token: u64, path: &str) -> Result<(), String> {
        self.voicemail_io()?.audio(worker, token, path.to_string())
    }

    /// Starts an operation on a user's voicemail box for `worker`: its answer comes back
    /// through the inbox.
    pub fn voicemail(
        &self,
        worker: usize,
        token: u64,
        user: String,
        op: store::voicemail::MailboxOp,
    ) -> Result<(), String> {
        self.voicemail_io()?.submit(worker, token, user, op)
    }

    pub fn with_cdr_db(mut self, q: Option<crate::cdr::Queue>) -> Host {
        self.cdr_db = q;
        self
    }

    pub fn with_tts(mut self, tts: crate::tts::Tts) -> Host {
        self.tts = Some(tts);
        self
    }

    /// Starts rendering `text` as a prompt for `worker`: it comes back through the inbox.
    pub fn speak(&self, worker: usize, token: u64, text: &str) -> Result<(), String> {
        match &self.tts {
            Some(t) => t.submit(worker, token, text),
            None => Err("no speech thread was started".into()),
        }
    }

    pub fn with_dns(mut self, dns: Option<crate::dns::Dns>) -> Host {
        self.dns = dns;
        self
    }

    /// Starts a DNS lookup for `worker`: its answer comes back through the inbox.
    pub fn lookup(
        &self,
        worker: usize,
        token: u64,
        query: switch::trunks::DnsQuery,
    ) -> Result<(), String> {
        match &self.dns {
            Some(d) => d.submit(worker, token, query),
            None => Err("no DNS resolver was started".into()),
        }
    }

    pub fn with_store(mut self, q: crate::store_io::StoreQueue) -> Host {
        self.store = Some(q);
        self
    }

    /// The store connection's readiness (or the worker's loop, to time it out): the operations
    /// it finished.
    pub fn store_ready(
        &mut self,
        now: std::time::Instant,
    ) -> Vec<(u64, switch::registrar::StoreResult)> {
        self.store.as_mut().map_or_else(Vec::new, |q| q.ready(now))
    }

    /// Writes out what this worker's last requests queued for the store, before their replies
    /// leave (`StoreQueue::flush`).
    pub fn store_flush(&mut self) {
        if let Some(Err(e)) = self.store.as_mut().map(|q| q.flush()) {
            tracing::warn!("location store: {e}");
        }
    }

    /// Gives back the room the store connection's buffers grew to (`StoreQueue::shrink`).
    pub fn shrink_store(&mut self) {
        if let Some(q) = self.store.as_mut() {
            q.shrink();
        }
    }

    /// Whether a reply on the store connection is overdue (`store_ready` then breaks it).
    pub fn store_overdue(&self, now: std::time::Instant) -> bool {
        self.store.as_ref().is_some_and(|q| q.overdue(now))
    }

    fn resolve(&self, name: &str) -> PathBuf {
        let p = Path::new(name);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.data_dir.join(p)
        }
    }
}

impl Host {
    /// A prompt by name: `demo` (embedded), or a WAV file relative to the data directory. The
    /// engine keeps the configured ones, so each is read once.
    pub fn prompt(&self, name: &str) -> Result<Arc<Prompt>, String> {
        let prompt = if name == "demo" {
            Prompt::from_wav_bytes(DEMO_WAV).map_err(|e| e.to_string())?
        } else {
            Prompt::load(&self.resolve(name)).map_err(|e| e.to_string())?
        };
        Ok(Arc::new(prompt))
    }

    /// Creates a recording file (relative to the data directory), buffered: the media pass
    /// writes to it.
    pub fn recording(&self, name: &str) -> Result<Box<dyn media::RecordSink>, String> {
        let path = self.resolve(name);
        let file = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| File::create(&path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Box::new(io::BufWriter::new(file)))
    }

    /// Hands a whole-call recording (relative to the data directory) to worker `worker`'s writer
    /// thread, which counts the incomplete ones in `incomplete`.
    pub fn record_call(
        &mut self,
        worker: usize,
        incomplete: &Arc<std::sync::atomic::AtomicU64>,
        name: &str,
        format: media::FileFormat,
        recording: media::CallRecording,
    ) {
        let path = self.resolve(name);
        if self.recordings.is_none() {
            match crate::recordings::Recordings::spawn(worker, incomplete.clone()) {
                Ok(r) => self.recordings = Some(r),
                Err(e) => {
                    recording.status.mark_incomplete();
                    incomplete.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return tracing::error!(
                        "recording {}: cannot start the recordings thread: {e}",
                        path.display()
                    );
                }
            }
        }
        if let Some(r) = &self.recordings {
            r.start(path, format, recording);
        }
    }

    /// At shutdown, after the worker's calls ended: waits (bounded) for the recordings' writer to
    /// complete their files, so the process does not exit in the middle of one.
    pub fn close_recordings(&mut self, worker: usize) {
        let Some(r) = self.recordings.take() else {
            return;
        };
        let limit = crate::recordings::CLOSE_WITHIN;
        if !r.close(limit) {
            tracing::error!(
                "worker {worker} at shutdown: the recordings thread did not complete its files within {} s \
                 (a slow or stuck disk under general.data_dir); the recordings of the last calls are incomplete",
                limit.as_secs()
            );
        }
    }

    /// Replaces a small state file in the data directory (`strowger show peers` reads it).
    pub fn state(&self, name: &str, contents: &str) {
        // Written aside and renamed over the old one, so a reader never sees half a file; the
        // temporary name is the thread's, as workers may write the same state at once.
        let path = self.data_dir.join(name);
        let tmp = self
            .data_dir
            .join(format!(".{name}.{:?}", std::thread::current().id()));
        if let Err(e) = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, &path)) {
            tracing::warn!(
                "cannot write {}: {e} (check general.data_dir)",
                path.display()
            );
        }
    }

    /// Runs a store operation off the worker; a result it has at once is returned, the others
    /// come back through the inbox or `store_ready`.
    pub fn store(
        &mut self,
        token: u64,
        op: switch::registrar::StoreOp,
    ) -> Option<switch::registrar::StoreResult> {
        match &mut self.store {
            Some(q) => q.submit(token, op),
            None => Some(Err("no location store configured".into())),
        }
    }

    /// Appends one CDR line, and hands it to the database's writer.
    pub fn cdr(&mut self, line: String) {
        if self.cdr.is_none() {
            if let Some(dir) = self.cdr_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            self.cdr = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.cdr_path)
                .ok();
        }
        if let Some(f) = self.cdr.as_mut() {
            // One write(2) per record on an O_APPEND file: whole lines from every worker, and in
            // the kernel before the call is forgotten, so a killed process loses no finished call.
            let mut rec = String::with_capacity(line.len() + 1);
            rec.push_str(&line);
            rec.push('\n');
            if f.write_all(rec.as_bytes()).is_err() {
                tracing::error!("cannot append CDR to {}", self.cdr_path.display());
            }
        }
        if let Some(q) = &self.cdr_db {
            q.send(line);
        }
    }
}
