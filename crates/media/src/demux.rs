//! Which leg a datagram belongs to when many legs share one socket, told by its source.
//!
//! A shell that serves many legs from one port (strowger's `rtp.shared_ports`) cannot tell legs
//! apart by the socket a packet arrived on, so the engine keeps each leg's far-end address here:
//! RTP from the address a leg sends to is that leg's, and RTCP is the leg's whose RTP comes from
//! the port below. Far ends must then use an address of their own per call and send from the
//! address their SDP gives (trunks, phones on the LAN); a phone behind NAT, whose packets come
//! from an address nobody announced, needs a port per call.

use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use crate::LegId;

#[derive(Default)]
pub(crate) struct Demux {
    by_remote: FxHashMap<SocketAddr, LegId>,
}

impl Demux {
    /// Leg `id`'s far end moved from `from` to `to`. Of two legs with one far end (a far end
    /// that serves many calls from one port, a call looped back to this switch) the first keeps
    /// the entry: a shell gives a port it shares only to a leg whose address nobody has yet, so
    /// the later one has a port of its own and needs no entry.
    pub(crate) fn moved(&mut self, id: LegId, from: Option<SocketAddr>, to: Option<SocketAddr>) {
        if from == to {
            return;
        }
        if let Some(a) = from {
            if self.by_remote.get(&a) == Some(&id) {
                self.by_remote.remove(&a);
            }
        }
        if let Some(a) = to {
            self.by_remote.entry(a).or_insert(id);
        }
    }

    pub(crate) fn rtp(&self, src: SocketAddr) -> Option<LegId> {
        self.by_remote.get(&src).copied()
    }

    pub(crate) fn rtcp(&self, mut src: SocketAddr) -> Option<LegId> {
        src.set_port(src.port().checked_sub(1)?);
        self.rtp(src)
    }
}
