//! Call-IDs pinned to a worker other than the one they hash to (`owner`): a new call that must
//! join a call living on another worker (a parked call's retrieval, a pickup, an INVITE with
//! Replaces) runs there, and its retransmissions, CANCEL and in-dialog requests follow it.
//! Shared by every worker's dispatch; see docs/architecture.md, "Calls that join a call on
//! another worker".

use crate::engine::owner;
use rustc_hash::FxHasher;
use sip::header::HeaderName;
use sip::{Message, Method};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 16;

type Map = HashMap<Box<str>, usize, BuildHasherDefault<FxHasher>>;

/// Call-ID → worker. Dispatch asks it for every message, so the common case — nothing pinned
/// — costs one relaxed atomic load and no lock; with pins, one lock of one of 16 shards.
#[derive(Default, Debug)]
pub struct Pins {
    count: AtomicUsize,
    shards: [Mutex<Map>; SHARDS],
}

impl Pins {
    /// The worker `call_id` is pinned to, if any.
    pub fn get(&self, call_id: &str) -> Option<usize> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.shard(call_id).get(call_id).copied()
    }

    /// Pins `call_id` to `worker` (moving it if it was pinned elsewhere).
    pub fn pin(&self, call_id: &str, worker: usize) {
        if self.shard(call_id).insert(call_id.into(), worker).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn unpin(&self, call_id: &str) {
        if self.shard(call_id).remove(call_id).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where dispatch sends `msg` when its Call-ID's hash does not decide: the worker its
    /// Call-ID is pinned to, or for an initial INVITE with Replaces (RFC 3891) the worker of
    /// the dialog it replaces — its Call-ID's pin or hash, every strowger dialog living there —
    /// to which its own Call-ID is then pinned. None: the hash decides.
    pub fn route(&self, msg: &Message, workers: usize) -> Option<usize> {
        let invite = msg.method() == Some(&Method::Invite);
        if workers <= 1 || (!invite && self.is_empty()) {
            return None;
        }
        let call_id = msg.header(HeaderName::CallId).unwrap_or_default();
        if let Some(w) = self.get(call_id) {
            return Some(w);
        }
        if !invite {
            return None;
        }
        let replaced = replaced_call_id(msg)?;
        let w = self
            .get(replaced)
            .unwrap_or_else(|| owner(replaced, workers));
        if w == owner(call_id, workers) {
            return None;
        }
        self.pin(call_id, w);
        Some(w)
    }

    fn shard(&self, call_id: &str) -> std::sync::MutexGuard<'_, Map> {
        let mut h = FxHasher::default();
        call_id.hash(&mut h);
        // The low bits: `owner` uses the high ones.
        let i = h.finish() as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The Call-ID of the dialog a request's Replaces header names (RFC 3891 §6.1:
/// `Replaces: call-id;to-tag=…;from-tag=…`).
pub fn replaced_call_id(msg: &Message) -> Option<&str> {
    let v = msg.header_named("Replaces")?;
    let id = v.split(';').next()?.trim();
    (!id.is_empty()).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite(call_id: &str, replaces: Option<&str>) -> Message {
        let replaces = replaces.map_or(String::new(), |r| format!("Replaces: {r}\r\n"));
        let text = format!(
            "INVITE sip:1001@127.0.0.1 SIP/2.0\r\n\
             Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-1\r\n\
             From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:1001@127.0.0.1>\r\n\
             Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n{replaces}\
             Content-Length: 0\r\n\r\n"
        );
        Message::parse(text.as_bytes(), true).unwrap()
    }

    #[test]
    fn pins_come_and_go_and_nothing_pinned_costs_no_lock() {
        let p = Pins::default();
        assert_eq!(p.get("a@x"), None);
        p.pin("a@x", 3);
        p.pin("a@x", 2);
        assert_eq!(p.len(), 1, "a second pin moves the first");
        assert_eq!(p.get("a@x"), Some(2));
        assert_eq!(p.get("b@x"), None);
        p.unpin("a@x");
        p.unpin("a@x");
        assert!(p.is_empty());
        assert_eq!(p.get("a@x"), None);
    }

    #[test]
    fn a_pinned_call_id_goes_to_its_worker() {
        let p = Pins::default();
        let m = invite("c@x", None);
        assert_eq!(p.route(&m, 4), None, "nothing pinned: the hash decides");
        let other = (owner("c@x", 4) + 1) % 4;
        p.pin("c@x", other);
        assert_eq!(p.route(&m, 4), Some(other));
        assert_eq!(p.route(&m, 1), None, "one worker: nothing to route");
    }

    #[test]
    fn an_invite_with_replaces_goes_to_the_replaced_dialogs_worker_and_pins_itself_there() {
        let p = Pins::default();
        // A Call-ID for the new INVITE that hashes elsewhere than the replaced dialog's.
        let replaced = "dialog-1@x";
        let there = owner(replaced, 4);
        let own = (0..)
            .map(|i| format!("new-{i}@y"))
            .find(|c| owner(c, 4) != there)
            .unwrap();
        let m = invite(&own, Some(&format!("{replaced};to-tag=a;from-tag=b")));
        assert_eq!(p.route(&m, 4), Some(there));
        assert_eq!(p.get(&own), Some(there), "its CANCEL and ACK follow it");
        // The replaced dialog itself pinned elsewhere: its pin wins over its hash.
        let moved = (there + 1) % 4;
        p.pin(replaced, moved);
        p.unpin(&own);
        let same = owner(&own, 4);
        assert_eq!(p.route(&m, 4), (moved != same).then_some(moved));
    }
}
