//! Keep-alives towards registered phones behind NAT.
//!
//! A NAT drops a UDP mapping that sees no traffic for a while (often 30–60 s), and then calls to
//! the phone no longer reach it. A phone is taken to be behind NAT when its REGISTER came from
//! another address than its Contact names; such a binding gets a packet every period, sent to
//! the address the REGISTER came from, until the binding lapses or is removed. This module only
//! keeps the schedule (sans-IO, time passed in); the engine builds and sends the packets.

use sip::transaction::Peer;
use sip::Uri;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};
use store::Binding;

struct Target {
    contact: String,
    peer: Peer,
    /// When the binding lapses (after that no more keep-alives).
    until: Instant,
    id: u64,
}

pub struct KeepAlives {
    period: Duration,
    /// AOR → its NATed bindings registered through this worker.
    by_aor: HashMap<String, Vec<Target>>,
    /// (when, target id, AOR); entries whose target was replaced or removed are skipped.
    due: BinaryHeap<Reverse<(Instant, u64, String)>>,
    next_id: u64,
}

/// Whether a binding is behind NAT: its Contact does not name the address its REGISTER came
/// from (or names no address at all). Phones behind an edge proxy (Path) are the proxy's care.
pub fn behind_nat(b: &Binding) -> bool {
    if !b.path.is_empty() {
        return false;
    }
    let named = Uri::parse(&b.contact)
        .ok()
        .and_then(|u| Some((u.ip()?, u.port.unwrap_or(5060))));
    named != Some((b.received.ip(), b.received.port()))
}

impl KeepAlives {
    pub fn new(period: Duration) -> KeepAlives {
        KeepAlives {
            period,
            by_aor: HashMap::new(),
            due: BinaryHeap::new(),
            next_id: 0,
        }
    }

    /// An AOR's bindings after a REGISTER (all that remain, as the store returned them):
    /// NATed ones are kept alive from `now` on, the others and removed ones no longer.
    pub fn update(&mut self, aor: &str, bindings: &[Binding], now: Instant, unix_now: u64) {
        let mut targets = Vec::new();
        for b in bindings.iter().filter(|b| behind_nat(b)) {
            self.next_id += 1;
            targets.push(Target {
                contact: b.contact.clone(),
                peer: crate::registrar::source_of(b),
                until: now + Duration::from_secs(b.remaining(unix_now)),
                id: self.next_id,
            });
            self.due
                .push(Reverse((now + self.period, self.next_id, aor.to_string())));
        }
        if targets.is_empty() {
            self.by_aor.remove(aor);
        } else {
            self.by_aor.insert(aor.to_string(), targets);
        }
    }

    /// When `poll` next has something to send.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The keep-alives due at `now`: (where to send, the Contact URI); each is scheduled again
    /// one period later while its binding lasts.
    pub fn poll(&mut self, now: Instant) -> Vec<(Peer, String)> {
        let mut out = Vec::new();
        while let Some(Reverse((t, id, _))) = self.due.peek() {
            if *t > now {
                break;
            }
            let id = *id;
            let Some(Reverse((_, _, aor))) = self.due.pop() else {
                break;
            };
            let Some(list) = self.by_aor.get_mut(&aor) else {
                continue;
            };
            let Some(i) = list.iter().position(|x| x.id == id) else {
                continue;
            };
            if list[i].until <= now {
                list.swap_remove(i);
                if list.is_empty() {
                    self.by_aor.remove(&aor);
                }
                continue;
            }
            out.push((list[i].peer, list[i].contact.clone()));
            self.due.push(Reverse((now + self.period, id, aor)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(contact: &str, received: &str, expires_at: u64) -> Binding {
        Binding {
            contact: contact.into(),
            expires_at,
            q: 1000,
            received: received.parse().unwrap(),
            transport: "udp".into(),
            path: Vec::new(),
            instance: None,
            reg_id: None,
            call_id: "c".into(),
            cseq: 1,
        }
    }

    #[test]
    fn nat_is_a_contact_that_is_not_the_source() {
        assert!(!behind_nat(&binding(
            "sip:a@127.0.0.1:5070",
            "127.0.0.1:5070",
            9
        )));
        assert!(!behind_nat(&binding(
            "sip:a@127.0.0.1",
            "127.0.0.1:5060",
            9
        )));
        assert!(behind_nat(&binding(
            "sip:a@192.168.1.20:5060",
            "127.0.0.1:40000",
            9
        )));
        assert!(behind_nat(&binding(
            "sip:a@phone.invalid",
            "127.0.0.1:5060",
            9
        )));
        let mut via_proxy = binding("sip:a@192.168.1.20", "127.0.0.1:5060", 9);
        via_proxy.path = vec!["<sip:127.0.0.1:5090;lr>".into()];
        assert!(!behind_nat(&via_proxy));
    }

    #[test]
    fn every_period_until_the_binding_lapses_or_goes() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut k = KeepAlives::new(s(30));
        let nat = binding("sip:a@192.168.1.20:5060", "127.0.0.1:40000", 1000 + 100);
        let direct = binding("sip:a@127.0.0.1:5070", "127.0.0.1:5070", 1000 + 100);
        k.update("a@x", &[nat.clone(), direct], t0, 1000);
        assert_eq!(k.next_deadline(), Some(t0 + s(30)));
        assert!(k.poll(t0 + s(29)).is_empty());
        let sent = k.poll(t0 + s(30));
        assert_eq!(sent.len(), 1, "only the NATed contact");
        assert_eq!(sent[0].0.addr, nat.received);
        assert_eq!(sent[0].1, nat.contact);
        assert_eq!(k.poll(t0 + s(60)).len(), 1);
        assert_eq!(k.poll(t0 + s(90)).len(), 1);
        // The binding lapses at +100 s: nothing at +120 s, and nothing is scheduled after.
        assert!(k.poll(t0 + s(120)).is_empty());
        assert_eq!(k.next_deadline(), None);

        // A re-REGISTER without the NATed contact stops its keep-alives at once.
        k.update("a@x", &[nat], t0, 1000);
        k.update("a@x", &[], t0 + s(10), 1010);
        assert!(k.poll(t0 + s(40)).is_empty());
    }

    #[test]
    fn a_refresh_reschedules_instead_of_doubling() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut k = KeepAlives::new(s(30));
        let nat = binding("sip:a@192.168.1.20:5060", "127.0.0.1:40000", 5000);
        k.update("a@x", std::slice::from_ref(&nat), t0, 1000);
        k.update("a@x", std::slice::from_ref(&nat), t0 + s(10), 1010);
        assert!(
            k.poll(t0 + s(30)).is_empty(),
            "the first schedule was replaced"
        );
        assert_eq!(k.poll(t0 + s(40)).len(), 1);
    }
}
