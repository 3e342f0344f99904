//! The main thread once the workers run: signals, the drain, and systemd's watchdog.
//!
//! - SIGHUP reloads the configuration (crate::reload).
//! - SIGTERM drains: every worker refuses new calls with 503 (`Input::Drain`) while calls in
//!   progress go on, until none is left or `general.drain_timeout_s` passes; then the stop flag
//!   is set and the workers hang up what is left (`Input::Shutdown`, BYE) and exit.
//! - SIGINT (Ctrl-C), or a second SIGTERM, stops at once, as SIGTERM did before drains.
//!
//! Signals reach this thread as values on a channel from signal-hook's iterator thread, so
//! nothing here runs in a signal handler.

use crate::notify;
use crate::reload::Reloader;
use crate::worker::{Envelope, Mailboxes};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a drain checks whether calls are left.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// How long the sweep waits for the workers to hand their caches of freed chunks back (they
/// answer between two turns of their loops).
const RELEASE_WAIT: Duration = Duration::from_millis(500);

/// The signals the process handles, registered before anything else starts so that an early
/// SIGHUP cannot kill it (its default action); they queue until [`Supervisor::run`] reads them.
pub fn signals() -> Result<Receiver<i32>, String> {
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM, SIGINT])
        .map_err(|e| format!("cannot handle signals: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for s in signals.forever() {
                if tx.send(s).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(rx)
}

pub struct Supervisor {
    pub signals: Receiver<i32>,
    pub reloader: Reloader,
    /// The calls in progress, all workers together.
    pub slots: Arc<switch::CallSlots>,
    pub mail: Arc<Mailboxes>,
    pub workers: usize,
    pub stop: Arc<AtomicBool>,
    /// Swept of lapsed registrations every `store::EXPIRE_EVERY_S` ([`Supervisor::expire`]).
    pub store: Arc<dyn store::Store>,
}

impl Supervisor {
    /// Until the workers must stop: then sets the stop flag, wakes them, and returns.
    pub fn run(self) {
        let watchdog = notify::watchdog_interval();
        let mut next_watchdog = Instant::now();
        let mut draining: Option<Instant> = None;
        let expire_every = Duration::from_secs(store::EXPIRE_EVERY_S);
        let mut next_expire = Instant::now() + expire_every;
        loop {
            let now = Instant::now();
            if now >= next_expire {
                self.expire();
                next_expire = now + expire_every;
            }
            if watchdog.is_some() && now >= next_watchdog {
                notify::notify("WATCHDOG=1");
                next_watchdog = now + watchdog.unwrap_or_default();
            }
            if let Some(until) = draining {
                let left = self.slots.in_use();
                if left == 0 {
                    tracing::info!("drained: no call left");
                    break;
                }
                if now >= until {
                    tracing::info!(
                        "general.drain_timeout_s passed: hanging up the {left} call(s) left"
                    );
                    break;
                }
            }
            let wait = [
                draining.map(|_| DRAIN_POLL),
                watchdog.map(|_| next_watchdog.saturating_duration_since(now)),
                Some(next_expire.saturating_duration_since(now)),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(3600));
            match self.signals.recv_timeout(wait) {
                Ok(SIGHUP) => {
                    let _ = self.reloader.reload_and_log();
                }
                Ok(SIGTERM) if draining.is_none() && !self.reloader.drain_timeout().is_zero() => {
                    draining = Some(self.drain());
                }
                Ok(s) => {
                    if draining.is_none() {
                        notify::notify("STOPPING=1");
                    }
                    let name = if s == SIGINT { "SIGINT" } else { "SIGTERM" };
                    tracing::info!("{name}: stopping now, hanging up every call");
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        for w in 0..self.workers {
            self.mail.wake(w);
        }
    }

    /// Forgets the registrations that lapsed, off the workers, so memory falls with the load,
    /// and hands the allocator's free pages back (crate::allocator). The forgetting runs on a
    /// thread that ends before the trim: glibc keeps chunks a thread frees in that thread's
    /// cache until it allocates them again or ends, and kept here they would pin pages of the
    /// heaps the bindings came from for good.
    fn expire(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let store = &*self.store;
        let gone = std::thread::scope(|s| {
            match std::thread::Builder::new()
                .name("expire".into())
                .spawn_scoped(s, || store.expire(now))
            {
                Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => store.expire(now),
            }
        });
        if gone > 0 {
            self.release_worker_caches();
        }
        crate::allocator::trim(gone > 0);
    }

    /// Has every worker hand its cache of freed chunks back to their heaps
    /// (crate::allocator::release_thread_cache), and waits for that, up to [`RELEASE_WAIT`],
    /// so the trim that follows gives back the pages the lapsed registrations' last chunks
    /// pinned in the workers' heaps: a worker that went quiet after they were made and
    /// dropped would keep them for good.
    fn release_worker_caches(&self) {
        let (back, threads) = std::sync::mpsc::channel();
        for w in 0..self.workers {
            self.mail.send(w, Envelope::ReleaseCache(back.clone()));
        }
        drop(back);
        let until = Instant::now() + RELEASE_WAIT;
        while let Ok(t) = threads.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let _ = t.join();
        }
    }

    /// Tells every worker to refuse new calls; returns when the drain ends at the latest.
    fn drain(&self) -> Instant {
        let timeout = self.reloader.drain_timeout();
        notify::notify("STOPPING=1\nSTATUS=Draining: new calls get 503");
        tracing::info!(
            "SIGTERM: draining — new calls get 503, the {} call(s) in progress may go on for up \
             to {} s (general.drain_timeout_s), then get BYE; SIGINT or a second SIGTERM ends \
             the wait",
            self.slots.in_use(),
            timeout.as_secs()
        );
        for w in 0..self.workers {
            self.mail.send(w, Envelope::Drain);
        }
        Instant::now() + timeout
    }
}
