//! The store threads: workers hand them location/credential operations, which may block on
//! Redis or Memcached, and get the results back through their inbox, so no worker ever waits
//! on the network. The local store never waits (memory, and a journal append that the kernel
//! buffers): its operations run on the worker itself, sparing two thread hand-offs per
//! REGISTER; so do the answers a network store has without I/O (recent credentials).

use crate::worker::{Envelope, Mailboxes};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use switch::registrar::{StoreOp, StoreResult};

pub struct Job {
    worker: usize,
    token: u64,
    op: StoreOp,
}

/// A worker's handle on the store.
pub enum StoreQueue {
    Threads {
        worker: usize,
        tx: Sender<Job>,
        /// For what it answers without I/O (`answer_now`).
        store: Arc<dyn store::Store>,
    },
    Inline(Arc<dyn store::Store>),
}

impl StoreQueue {
    /// Runs `op` now (inline), or queues it: its result arrives later as `Envelope::Store`.
    pub fn submit(&self, token: u64, op: StoreOp) -> Option<StoreResult> {
        let (worker, tx, store) = match self {
            StoreQueue::Inline(store) => return Some(switch::registrar::run(&**store, op)),
            StoreQueue::Threads { worker, tx, store } => (*worker, tx, store),
        };
        if let Some(r) = switch::registrar::answer_now(&**store, &op) {
            return Some(r);
        }
        match tx.send(Job { worker, token, op }) {
            Ok(()) => None,
            Err(_) => Some(Err("the store threads have stopped".into())),
        }
    }
}

/// Starts `threads` store threads over `store` (none when `inline`); returns a factory of
/// per-worker queues.
pub fn start(
    store: Arc<dyn store::Store>,
    inline: bool,
    mail: Arc<Mailboxes>,
    threads: usize,
) -> Box<dyn Fn(usize) -> StoreQueue> {
    if inline {
        return Box::new(move |_| StoreQueue::Inline(store.clone()));
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..threads.max(1) {
        let (store, mail, rx) = (store.clone(), mail.clone(), rx.clone());
        let _ = std::thread::Builder::new()
            .name(format!("store-{i}"))
            .spawn(move || serve(&*store, &mail, &rx));
    }
    Box::new(move |worker| StoreQueue::Threads {
        worker,
        tx: tx.clone(),
        store: store.clone(),
    })
}

fn serve(store: &dyn store::Store, mail: &Mailboxes, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let result = switch::registrar::run(store, job.op);
        mail.send(
            job.worker,
            Envelope::Store {
                token: job.token,
                result,
            },
        );
    }
}
