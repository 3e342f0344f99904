//! The worker's side of `switch::Host`: media sockets, prompt files, recordings and the CDR file.

use crate::rtp_io::MediaSockets;
use media::Prompt;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a worker keeps between calls: loaded prompts and the open CDR file.
pub struct Host {
    data_dir: PathBuf,
    prompts: HashMap<String, Arc<Prompt>>,
    cdr: Option<File>,
    cdr_path: PathBuf,
    /// Store operations go to the store threads (results come back through the inbox) or over
    /// the worker's store connection (results from `store_ready`).
    store: Option<crate::store_io::StoreQueue>,
}

/// The embedded announcement behind the dialplan's `demo` prompt.
const DEMO_WAV: &[u8] = include_bytes!("../../../assets/demo.wav");

impl Host {
    pub fn new(data_dir: PathBuf, cdr_path: PathBuf) -> Host {
        Host {
            data_dir,
            prompts: HashMap::new(),
            cdr: None,
            cdr_path,
            store: None,
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

/// Borrows a worker's media sockets and host state for one engine call.
pub struct HostIo<'a> {
    media: &'a mut MediaSockets,
    host: &'a mut Host,
}

impl<'a> HostIo<'a> {
    pub fn new(media: &'a mut MediaSockets, host: &'a mut Host) -> HostIo<'a> {
        HostIo { media, host }
    }
}

impl switch::Host for HostIo<'_> {
    fn open_media(&mut self, leg: usize, shareable: bool) -> Option<u16> {
        self.media.open(leg, shareable)
    }

    fn close_media(&mut self, leg: usize) {
        self.media.close(leg);
    }

    fn prompt(&mut self, name: &str, cache: bool) -> Result<Arc<Prompt>, String> {
        if let Some(p) = self.host.prompts.get(name) {
            return Ok(p.clone());
        }
        let prompt = if name == "demo" {
            Prompt::from_wav_bytes(DEMO_WAV).map_err(|e| e.to_string())?
        } else {
            let path = self.host.resolve(name);
            Prompt::load(&path).map_err(|e| e.to_string())?
        };
        let prompt = Arc::new(prompt);
        // Recordings change between calls; only configured prompts are worth keeping.
        if cache {
            self.host.prompts.insert(name.to_string(), prompt.clone());
        }
        Ok(prompt)
    }

    fn recording(&mut self, name: &str) -> io::Result<File> {
        let path = self.host.resolve(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        File::create(path)
    }

    fn log(&mut self, msg: &str) {
        // The engine's messages are for the operator: problems it met and worked around.
        tracing::warn!("{msg}");
    }

    fn state(&mut self, name: &str, contents: &str) {
        // Written aside and renamed over the old one, so a reader never sees half a file; the
        // temporary name is the thread's, as workers may write the same state at once.
        let path = self.host.data_dir.join(name);
        let tmp = self
            .host
            .data_dir
            .join(format!(".{name}.{:?}", std::thread::current().id()));
        if let Err(e) = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, &path)) {
            tracing::warn!(
                "cannot write {}: {e} (check general.data_dir)",
                path.display()
            );
        }
    }

    fn store(
        &mut self,
        token: u64,
        op: switch::registrar::StoreOp,
    ) -> Option<switch::registrar::StoreResult> {
        match &mut self.host.store {
            Some(q) => q.submit(token, op),
            None => Some(Err("no location store configured".into())),
        }
    }

    fn cdr(&mut self, line: &str) {
        if self.host.cdr.is_none() {
            if let Some(dir) = self.host.cdr_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            self.host.cdr = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.host.cdr_path)
                .ok();
        }
        if let Some(f) = self.host.cdr.as_mut() {
            // One write(2) per record on an O_APPEND file: whole lines from every worker, and in
            // the kernel before the call is forgotten, so a killed process loses no finished call.
            let mut rec = String::with_capacity(line.len() + 1);
            rec.push_str(line);
            rec.push('\n');
            if f.write_all(rec.as_bytes()).is_err() {
                tracing::error!("cannot append CDR to {}", self.host.cdr_path.display());
            }
        }
    }
}
