//! CDRs in a database (`[cdr] database`): a writer thread per process takes them from the
//! workers through a bounded queue and inserts them in batches. A worker never waits on it:
//! when the queue is full the worker spools the CDR itself. See docs/architecture.md.

mod spool;
mod sql;
mod tls;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use switch::config::{Cdr, CdrDatabase};
use writer::{Sink, Writer};

/// A worker's way to the writer.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<String>,
    spool: PathBuf,
    /// Spooling by a worker is logged once.
    spilled: Arc<AtomicBool>,
}

impl Queue {
    pub fn send(&self, cdr: String) {
        let cdr = match self.tx.try_send(cdr) {
            Ok(()) => return,
            Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => c,
        };
        if !self.spilled.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cdr.queue is full: CDRs are spooled to {} until the writer catches up (raise cdr.queue, or check cdr.database)",
                self.spool.display()
            );
        }
        if let Err(e) = spool::append(&self.spool, &[cdr]) {
            tracing::error!(
                "cannot spool a CDR to {}: {e} — it is only in the CDR file (general.cdr)",
                self.spool.display()
            );
        }
    }
}

/// The writer thread; dropping every [`Queue`] lets it finish.
pub struct Running {
    done: Receiver<()>,
    wait: Duration,
}

impl Running {
    /// Waits for the writer to put what it held in the database (`cdr.shutdown_s`, and a
    /// moment to close): what it could not stays in the spool.
    pub fn stop(self) {
        let _ = self.done.recv_timeout(self.wait + Duration::from_secs(1));
    }
}

/// Starts the writer if `cfg.database` names one.
pub fn start(cfg: &Cdr, data_dir: &Path) -> Result<Option<(Queue, Running)>, String> {
    let sink: Box<dyn Sink + Send> = match &cfg.database {
        None => return Ok(None),
        Some(CdrDatabase::Postgres(url)) => Box::new(sql::Postgres::new(
            url,
            Duration::from_millis(cfg.timeout_ms),
        )?),
        Some(CdrDatabase::Sqlite(path)) => Box::new(sql::Sqlite::new(data_dir.join(path))),
    };
    let spool = spool::Spool::new(data_dir);
    let (tx, rx) = mpsc::sync_channel(cfg.queue);
    let queue = Queue {
        tx,
        spool: spool.path().to_path_buf(),
        spilled: Arc::default(),
    };
    let (done_tx, done) = mpsc::channel();
    let writer = Writer::new(
        sink,
        spool,
        cfg.batch_rows,
        Duration::from_millis(cfg.batch_ms),
    );
    let wait = Duration::from_secs(cfg.shutdown_s);
    thread::Builder::new()
        .name("cdr-writer".into())
        .spawn(move || {
            run(writer, rx, wait);
            let _ = done_tx.send(());
        })
        .map_err(|e| format!("cannot start the CDR writer thread: {e}"))?;
    Ok(Some((queue, Running { done, wait })))
}

impl Sink for Box<dyn Sink + Send> {
    fn insert(&mut self, cdrs: &[String]) -> Result<(), String> {
        (**self).insert(cdrs)
    }
}

fn run<S: Sink>(mut w: Writer<S>, rx: Receiver<String>, wait: Duration) {
    loop {
        let now = Instant::now();
        let got = match w.tick(now) {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(cdr) => {
                let now = Instant::now();
                w.take(cdr, now);
                while let Ok(cdr) = rx.try_recv() {
                    w.take(cdr, now);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    // Stopping: what is held is spooled first, so a stop cut short loses nothing.
    w.hold_nothing();
    let deadline = Instant::now() + wait;
    while !w.idle() {
        let now = Instant::now();
        if now >= deadline {
            tracing::warn!(
                "cdr.database: stopping with CDRs in the spool; the next start stores them"
            );
            break;
        }
        if let Some(t) = w.tick(now) {
            thread::sleep(t.min(deadline).saturating_duration_since(now));
        }
    }
}
