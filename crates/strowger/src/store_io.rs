//! The store threads: workers hand them location/credential operations, which may block on
//! Redis or Memcached, and get the results back through their inbox, so no worker ever waits
//! on the network.

use crate::worker::{Envelope, Mailboxes};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use switch::registrar::{StoreOp, StoreResult};

struct Job {
    worker: usize,
    token: u64,
    op: StoreOp,
}

/// A worker's handle on the store threads.
pub struct StoreQueue {
    worker: usize,
    tx: Sender<Job>,
}

impl StoreQueue {
    /// Queues `op`; its result arrives later as `Envelope::Store`.
    pub fn submit(&self, token: u64, op: StoreOp) -> Option<StoreResult> {
        let job = Job {
            worker: self.worker,
            token,
            op,
        };
        match self.tx.send(job) {
            Ok(()) => None,
            Err(_) => Some(Err("the store threads have stopped".into())),
        }
    }
}

/// Starts `threads` store threads over `store`; returns a factory of per-worker queues.
pub fn start(
    store: Arc<dyn store::Store>,
    mail: Arc<Mailboxes>,
    threads: usize,
) -> impl Fn(usize) -> StoreQueue {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..threads.max(1) {
        let (store, mail, rx) = (store.clone(), mail.clone(), rx.clone());
        let _ = std::thread::Builder::new()
            .name(format!("store-{i}"))
            .spawn(move || serve(&*store, &mail, &rx));
    }
    move |worker| StoreQueue {
        worker,
        tx: tx.clone(),
    }
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
