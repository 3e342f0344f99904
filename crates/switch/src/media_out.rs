//! Media packets a pass produced, kept in one reusable buffer until the shell takes them with
//! `Engine::poll_output`. Copying a voice frame is cheaper than the system call that sends it,
//! and the buffer keeps its capacity, so the media path allocates nothing once warm.

use media::{LegId, Transmit};
use std::net::SocketAddr;

#[derive(Default)]
pub(crate) struct MediaQueue {
    buf: Vec<u8>,
    items: Vec<Item>,
    next: usize,
}

struct Item {
    leg: LegId,
    rtcp: bool,
    pinned: bool,
    dst: SocketAddr,
    start: usize,
    end: usize,
}

impl MediaQueue {
    pub(crate) fn push(&mut self, t: Transmit<'_>) {
        let start = self.buf.len();
        self.buf.extend_from_slice(t.payload);
        self.items.push(Item {
            leg: t.leg,
            rtcp: t.rtcp,
            pinned: t.pinned,
            dst: t.dst,
            start,
            end: self.buf.len(),
        });
    }

    /// Whether a packet waits; once all were taken the queue empties, keeping its capacity.
    pub(crate) fn has_more(&mut self) -> bool {
        if self.next < self.items.len() {
            return true;
        }
        self.items.clear();
        self.buf.clear();
        self.next = 0;
        false
    }

    /// The next packet (after `has_more` said there is one).
    pub(crate) fn pop(&mut self) -> Option<Transmit<'_>> {
        let i = self.items.get(self.next)?;
        self.next += 1;
        Some(Transmit {
            leg: i.leg,
            rtcp: i.rtcp,
            dst: i.dst,
            pinned: i.pinned,
            payload: &self.buf[i.start..i.end],
        })
    }
}
