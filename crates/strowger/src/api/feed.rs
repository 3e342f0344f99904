//! The event feed: what the workers publish for the event stream, fanned out to its clients
//! by a bounded broadcast channel. Publishing never waits: a client that falls more than
//! `api.event_backlog` events behind loses them and is closed (events.rs).

use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use switch::control::Notice;
use tokio::sync::broadcast;

/// One event as clients receive it: `{"type", "time", "event", ...}`.
#[derive(Debug, Serialize)]
pub struct Item {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Unix seconds (millisecond precision).
    pub time: f64,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Body {
    Notice(Notice),
    /// A worker's media ticks run late (refusing new calls), or caught up again.
    Overload {
        event: &'static str,
        worker: usize,
    },
}

pub struct Feed {
    tx: broadcast::Sender<Arc<Item>>,
    /// Event-stream clients connected (the workers make notices only while there are some).
    clients: AtomicUsize,
}

impl Feed {
    /// A feed whose clients may fall `backlog` events behind before they are dropped.
    pub fn new(backlog: usize) -> Feed {
        Feed {
            tx: broadcast::channel(backlog).0,
            clients: AtomicUsize::new(0),
        }
    }

    /// Hands a worker's notice to the clients (a worker calls it; it never blocks).
    pub fn notice(&self, n: Notice) {
        self.publish(n.kind(), Body::Notice(n));
    }

    /// Worker `worker` entered (`on`) or left overload.
    pub fn overload(&self, worker: usize, on: bool) {
        let event = if on { "on" } else { "off" };
        self.publish("overload", Body::Overload { event, worker });
    }

    fn publish(&self, kind: &'static str, body: Body) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let time = switch::cdr::unix_seconds(SystemTime::now());
        let _ = self.tx.send(Arc::new(Item { kind, time, body }));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Item>> {
        self.tx.subscribe()
    }

    /// One more client; the count before.
    pub fn join(&self) -> usize {
        self.clients.fetch_add(1, Ordering::AcqRel)
    }

    /// One client fewer; the count after.
    pub fn leave(&self) -> usize {
        self.clients.fetch_sub(1, Ordering::AcqRel) - 1
    }

    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }
}
