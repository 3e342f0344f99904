//! The event feed: what the workers publish for the event stream, fanned out to its clients
//! by a bounded broadcast channel. Publishing never waits: a client that falls more than
//! `api.event_backlog` events behind loses them and is closed (events.rs). It keeps which
//! types some client subscribes to, so a worker does no work for an event nobody wants.

use serde::Serialize;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use switch::control::{kind_bit, Notice, KINDS, OVERLOAD};
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
    /// Clients connected, and how many subscribe to each type of `KINDS` (changed only as
    /// clients come and go).
    clients: Mutex<(usize, [usize; KINDS.len()])>,
    /// The types some client subscribes to (bits of `KINDS`): one load and a branch on a worker.
    mask: AtomicU8,
}

impl Feed {
    /// A feed whose clients may fall `backlog` events behind before they are dropped.
    pub fn new(backlog: usize) -> Feed {
        Feed {
            tx: broadcast::channel(backlog).0,
            clients: Mutex::new((0, [0; KINDS.len()])),
            mask: AtomicU8::new(0),
        }
    }

    /// Hands a worker's notice to the clients (a worker calls it; it never blocks). The engine
    /// makes most only when asked; a peer's reachability it tells regardless (rare).
    pub fn notice(&self, n: Notice) {
        let kind = n.kind();
        if self.mask.load(Ordering::Relaxed) & kind_bit(kind) != 0 {
            self.publish(kind, Body::Notice(n));
        }
    }

    /// Worker `worker` entered (`on`) or left overload.
    pub fn overload(&self, worker: usize, on: bool) {
        if self.mask.load(Ordering::Relaxed) & OVERLOAD == 0 {
            return;
        }
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

    /// A client subscribed to the types `mask` (bits of `KINDS`) comes (`add`) or goes; `tell`
    /// gets the new mask of all clients' types when it changed (called under the lock, so the
    /// workers are told the masks in order).
    pub fn subscribed(&self, mask: u8, add: bool, tell: impl FnOnce(u8)) {
        let mut c = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        c.0 = if add { c.0 + 1 } else { c.0 - 1 };
        let mut all = 0;
        for (i, n) in c.1.iter_mut().enumerate() {
            if mask & 1 << i != 0 {
                *n = if add { *n + 1 } else { *n - 1 };
            }
            if *n > 0 {
                all |= 1 << i;
            }
        }
        if self.mask.swap(all, Ordering::Relaxed) != all {
            tell(all);
        }
    }

    pub fn clients(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switch::control::{CALL, DTMF, REGISTRATION};

    /// The workers are told the union of the clients' types, and only when it changes.
    #[test]
    fn the_mask_is_the_union_of_the_clients_types() {
        let feed = Feed::new(4);
        let mut told = Vec::new();
        feed.subscribed(CALL | DTMF, true, |m| told.push(m));
        feed.subscribed(CALL, true, |m| told.push(m));
        feed.subscribed(CALL | DTMF, false, |m| told.push(m));
        feed.subscribed(REGISTRATION, true, |m| told.push(m));
        assert_eq!(feed.clients(), 2);
        feed.subscribed(CALL, false, |m| told.push(m));
        feed.subscribed(REGISTRATION, false, |m| told.push(m));
        assert_eq!(
            told,
            [CALL | DTMF, CALL, CALL | REGISTRATION, REGISTRATION, 0]
        );
        assert_eq!(feed.clients(), 0);
    }

    /// A notice of a type nobody wants is dropped before it is stamped or sent.
    #[test]
    fn a_notice_nobody_wants_is_not_sent() {
        let feed = Feed::new(4);
        let mut rx = feed.subscribe();
        feed.subscribed(DTMF, true, |_| {});
        feed.notice(Notice::Answered {
            call_id: "a".into(),
            contact: None,
        });
        feed.overload(0, true);
        feed.notice(Notice::Dtmf {
            call_id: "a".into(),
            digit: '5',
        });
        assert_eq!(rx.try_recv().map(|i| i.kind).ok(), Some("dtmf"));
        assert!(rx.try_recv().is_err());
    }
}
