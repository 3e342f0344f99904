//! The local store's bindings, packed: every AOR of a shard and its bindings are encoded one
//! after another in one buffer, and a hash table says where each AOR's record starts.
//!
//! Held as `Binding`s, an AOR with one binding cost six allocations (the key, the list and its
//! strings, some 420 bytes) scattered among the short-lived allocations of the REGISTER that made
//! it: once a burst's transactions ended, nearly every page they had used still held a binding,
//! so the allocator could give none back (20,000 bindings kept some 18 MB of free memory
//! resident). A record here is about a hundred bytes in a buffer of its own, and the pages the
//! transactions used come free whole. A record rewritten or removed leaves a hole, and the buffer
//! is compacted when holes are over half of it.
//!
//! A record: `u32` its length, the AOR (`u32` length and bytes), `u32` the number of bindings,
//! each binding's `expires_at` (`u64`), then each binding's other fields (`Body`). Little-endian.

use crate::Binding;
use hashbrown::HashTable;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Holes are left until they are this many bytes at least (and over half the buffer): a copy
/// of the rest then costs at most as much as the holes took to make.
const MIN_COMPACT: usize = 4096;

#[derive(Default)]
pub(crate) struct Packed {
    /// Where each AOR's record starts in `bytes`. Keyed (`hasher`): anyone may choose an AOR.
    index: HashTable<usize>,
    hasher: RandomState,
    bytes: Vec<u8>,
    /// Bytes of `bytes` that no record uses any more.
    holes: usize,
}

/// One AOR's record, borrowed from the buffer.
#[derive(Clone, Copy)]
pub(crate) struct Record<'a> {
    b: &'a [u8],
}

const REG_ID: u8 = 1;
const INSTANCE: u8 = 2;
const V6: u8 = 4;

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

/// The AOR of the record at `off`, as hashed and compared.
fn key_at(bytes: &[u8], off: usize) -> &[u8] {
    let n = u32_at(bytes, off + 4);
    &bytes[off + 8..off + 8 + n]
}

fn record_at(bytes: &[u8], off: usize) -> Record<'_> {
    Record {
        b: &bytes[off..off + u32_at(bytes, off)],
    }
}

impl Packed {
    /// How many AORs have a record.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn get(&self, aor: &str) -> Option<Record<'_>> {
        let hash = self.hasher.hash_one(aor.as_bytes());
        let bytes = &self.bytes;
        self.index
            .find(hash, |&off| key_at(bytes, off) == aor.as_bytes())
            .map(|&off| record_at(bytes, off))
    }

    /// Makes `list` the AOR's bindings (none: forgets the AOR).
    pub(crate) fn put(&mut self, aor: &str, list: &[Binding]) {
        let hash = self.hasher.hash_one(aor.as_bytes());
        let bytes = &self.bytes;
        if let Ok(e) = self
            .index
            .find_entry(hash, |&off| key_at(bytes, off) == aor.as_bytes())
        {
            let (off, _) = e.remove();
            self.holes += u32_at(&self.bytes, off);
        }
        if list.is_empty() {
            self.compact_if_due(0);
            return;
        }
        let need = encoded_len(aor, list);
        if self.bytes.len() + need > self.bytes.capacity() {
            self.compact_if_due(need);
        }
        let off = self.bytes.len();
        encode(&mut self.bytes, aor, list, need);
        let Packed {
            index,
            hasher,
            bytes,
            ..
        } = self;
        index.insert_unique(hash, off, |&o| hasher.hash_one(key_at(bytes, o)));
    }

    /// Keeps the records `keep` says; how many went. Gives back the room of what went.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(Record<'_>) -> bool) -> usize {
        let before = self.index.len();
        let Packed {
            index,
            hasher,
            bytes,
            holes,
        } = self;
        index.retain(|&mut off| {
            let r = record_at(bytes, off);
            let kept = keep(r);
            if !kept {
                *holes += r.b.len();
            }
            kept
        });
        if index.capacity() > 64 && index.len() < index.capacity() / 4 {
            index.shrink_to(index.len() * 2, |&o| hasher.hash_one(key_at(bytes, o)));
        }
        self.compact_if_due(0);
        before - self.index.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Record<'_>> {
        self.index.iter().map(|&off| record_at(&self.bytes, off))
    }

    /// Bytes held: the buffer's and the table's room.
    #[cfg(test)]
    pub(crate) fn room(&self) -> usize {
        self.bytes.capacity() + self.index.capacity() * (std::mem::size_of::<usize>() + 1)
    }

    /// Copies the records into a new buffer without the holes (with room for `need` more
    /// bytes and a quarter) when the holes are over half the buffer; the old one is freed whole.
    fn compact_if_due(&mut self, need: usize) {
        let used = self.bytes.len();
        if self.holes < MIN_COMPACT.min(used) || self.holes * 2 < used {
            if self.index.is_empty() {
                *self = Packed {
                    hasher: std::mem::take(&mut self.hasher),
                    ..Packed::default()
                };
            }
            return;
        }
        let live = used - self.holes;
        let mut bytes = Vec::with_capacity((live + need) + (live + need) / 4);
        for off in self.index.iter_mut() {
            let r = record_at(&self.bytes, *off);
            *off = bytes.len();
            bytes.extend_from_slice(r.b);
        }
        self.bytes = bytes;
        self.holes = 0;
    }
}

impl<'a> Record<'a> {
    pub(crate) fn aor(&self) -> &'a str {
        let n = u32_at(self.b, 4);
        std::str::from_utf8(&self.b[8..8 + n]).expect("written from a str")
    }

    fn count(&self) -> usize {
        u32_at(self.b, 8 + u32_at(self.b, 4))
    }

    /// The bindings' lapse times.
    fn expiries(&self) -> impl Iterator<Item = u64> + 'a {
        let at = 12 + u32_at(self.b, 4);
        self.b[at..at + 8 * self.count()]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
    }

    /// When the last of its bindings lapses.
    pub(crate) fn lapses(&self) -> u64 {
        self.expiries().max().unwrap_or(0)
    }

    /// How many of its bindings are valid at `now`.
    pub(crate) fn live_count(&self, now: u64) -> usize {
        self.expiries().filter(|&e| e > now).count()
    }

    /// Every binding, lapsed or not.
    pub(crate) fn bindings(&self) -> Vec<Binding> {
        self.live(0)
    }

    /// The bindings valid at `now`.
    pub(crate) fn live(&self, now: u64) -> Vec<Binding> {
        let mut r = Reader {
            b: self.b,
            at: 12 + u32_at(self.b, 4) + 8 * self.count(),
        };
        let mut out = Vec::with_capacity(self.live_count(now));
        for expires_at in self.expiries() {
            let b = r.binding(expires_at);
            if expires_at > now {
                out.push(b);
            }
        }
        out
    }
}

/// A record's length: see the module's doc.
fn encoded_len(aor: &str, list: &[Binding]) -> usize {
    let s = |s: &str| 4 + s.len();
    12 + aor.len()
        + list
            .iter()
            .map(|b| {
                let addr = if b.received.is_ipv6() { 26 } else { 6 };
                8 + 2
                    + 4
                    + 1
                    + b.reg_id.map_or(0, |_| 4)
                    + addr
                    + s(&b.contact)
                    + s(&b.transport)
                    + s(&b.call_id)
                    + b.instance.as_deref().map_or(0, s)
                    + 4
                    + b.path.iter().map(|p| s(p)).sum::<usize>()
            })
            .sum::<usize>()
}

fn encode(out: &mut Vec<u8>, aor: &str, list: &[Binding], len: usize) {
    let start = out.len();
    let n = |n: usize| u32::try_from(n).expect("under 4 GiB").to_le_bytes();
    let put_str = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&n(s.len()));
        out.extend_from_slice(s.as_bytes());
    };
    out.extend_from_slice(&n(len));
    put_str(out, aor);
    out.extend_from_slice(&n(list.len()));
    for b in list {
        out.extend_from_slice(&b.expires_at.to_le_bytes());
    }
    for b in list {
        out.extend_from_slice(&b.q.to_le_bytes());
        out.extend_from_slice(&b.cseq.to_le_bytes());
        let flags = b.reg_id.map_or(0, |_| REG_ID)
            | b.instance.as_ref().map_or(0, |_| INSTANCE)
            | if b.received.is_ipv6() { V6 } else { 0 };
        out.push(flags);
        if let Some(r) = b.reg_id {
            out.extend_from_slice(&r.to_le_bytes());
        }
        match b.received {
            SocketAddr::V4(a) => out.extend_from_slice(&a.ip().octets()),
            SocketAddr::V6(a) => {
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.flowinfo().to_le_bytes());
                out.extend_from_slice(&a.scope_id().to_le_bytes());
            }
        }
        out.extend_from_slice(&b.received.port().to_le_bytes());
        put_str(out, &b.contact);
        put_str(out, &b.transport);
        put_str(out, &b.call_id);
        if let Some(i) = &b.instance {
            put_str(out, i);
        }
        out.extend_from_slice(&n(b.path.len()));
        for p in &b.path {
            put_str(out, p);
        }
    }
    debug_assert_eq!(out.len() - start, len);
}

/// Reads a binding's fields in the order `encode` wrote them.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let a = self.b[self.at..self.at + N].try_into().unwrap();
        self.at += N;
        a
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn string(&mut self) -> String {
        let n = self.u32() as usize;
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        String::from_utf8(s.to_vec()).expect("written from a str")
    }

    fn binding(&mut self, expires_at: u64) -> Binding {
        let q = u16::from_le_bytes(self.take());
        let cseq = self.u32();
        let [flags] = self.take();
        let reg_id = (flags & REG_ID != 0).then(|| self.u32());
        let received = if flags & V6 != 0 {
            let ip = Ipv6Addr::from(self.take::<16>());
            let (flow, scope) = (self.u32(), self.u32());
            let port = u16::from_le_bytes(self.take());
            SocketAddr::V6(SocketAddrV6::new(ip, port, flow, scope))
        } else {
            let ip = Ipv4Addr::from(self.take::<4>());
            SocketAddr::V4(SocketAddrV4::new(ip, u16::from_le_bytes(self.take())))
        };
        let contact = self.string();
        let transport = self.string();
        let call_id = self.string();
        let instance = (flags & INSTANCE != 0).then(|| self.string());
        let path = (0..self.u32()).map(|_| self.string()).collect();
        Binding {
            contact,
            expires_at,
            q,
            received,
            transport,
            path,
            instance,
            reg_id,
            call_id,
            cseq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::tests::binding;

    fn full(contact: &str, expires_at: u64) -> Binding {
        Binding {
            received: "[fe80::1%3]:5062".parse().unwrap(),
            path: vec!["<sip:edge1;lr>".into(), "<sip:edge2;lr>".into()],
            instance: Some("<urn:uuid:00000000-0000-1000-8000-000a95a0e128>".into()),
            reg_id: Some(2),
            transport: "tcp".into(),
            q: 500,
            cseq: 77,
            ..binding(contact, expires_at)
        }
    }

    #[test]
    fn records_read_back_as_written_through_rewrites_removals_and_compaction() {
        let mut p = Packed::default();
        let both = vec![binding("sip:a@1.2.3.4", 200), full("sip:b@[fe80::1]", 150)];
        p.put("alice@x", &both);
        assert_eq!(p.get("alice@x").unwrap().bindings(), both);
        assert_eq!(p.get("alice@x").unwrap().live(160), vec![both[0].clone()]);
        assert_eq!(p.get("alice@x").unwrap().lapses(), 200);
        assert!(p.get("bob@x").is_none());
        // Enough rewrites and removals for several compactions; the others stay as they were.
        for i in 0..20_000u64 {
            let aor = format!("u{}@x", i % 500);
            p.put(&aor, &[binding(&format!("sip:{i}@h"), 1_000 + i)]);
            if i % 7 == 0 {
                p.put(&format!("u{}@x", (i + 3) % 500), &[]);
            }
        }
        assert_eq!(p.get("alice@x").unwrap().bindings(), both);
        let l = p.get("u499@x").unwrap().bindings();
        assert_eq!(l[0].contact, "sip:19999@h");
        // Compacted on the way: 20,000 records were written, 500 are left.
        let live: usize = p.iter().map(|r| r.b.len()).sum();
        assert!(p.bytes.capacity() <= 4 * live + 2 * MIN_COMPACT);
        assert_eq!(p.iter().filter(|r| r.aor() == "alice@x").count(), 1);
        p.put("alice@x", &[]);
        assert!(p.get("alice@x").is_none());
        let n = p.len();
        assert_eq!(p.retain(|r| r.lapses() > 20_000), n - p.len());
        assert!(p.iter().all(|r| r.lapses() > 20_000));
    }

    /// What the registrar benchmark registers: one binding of a typical length per AOR.
    #[test]
    fn a_binding_takes_about_a_hundred_bytes_and_gives_them_back_when_it_goes() {
        let mut p = Packed::default();
        let n = 20_000;
        for i in 0..n {
            let b = Binding {
                call_id: format!("reg1-{}", 100_000 + i),
                ..binding(&format!("sip:{}@127.0.0.1:5070", 100_000 + i), 200)
            };
            p.put(&format!("{}@strowger", 100_000 + i), &[b]);
        }
        let per = p.room() / n;
        assert!(per <= 200, "{per} bytes per binding");
        assert_eq!(p.retain(|r| r.lapses() > 200), n);
        assert!(p.room() < 1024, "room left: {}", p.room());
    }
}
