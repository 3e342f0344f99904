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
    /// IPv4 far ends (nearly all), each address and port packed into one word ([`packed`]).
    by_v4: FxHashMap<u64, LegId>,
    by_v6: FxHashMap<SocketAddr, LegId>,
}

/// An IPv4 address and port as one word: a lookup per packet then hashes one integer, and the
/// table is small enough to stay in the cache between passes. None for IPv6.
fn packed(a: SocketAddr) -> Option<u64> {
    match a {
        SocketAddr::V4(a) => Some(u64::from(a.ip().to_bits()) << 16 | u64::from(a.port())),
        SocketAddr::V6(_) => None,
    }
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
        if let Some(a) = from.filter(|&a| self.rtp(a) == Some(id)) {
            match packed(a) {
                Some(k) => self.by_v4.remove(&k),
                None => self.by_v6.remove(&a),
            };
        }
        if let Some(a) = to {
            match packed(a) {
                Some(k) => self.by_v4.entry(k).or_insert(id),
                None => self.by_v6.entry(a).or_insert(id),
            };
        }
    }

    pub(crate) fn rtp(&self, src: SocketAddr) -> Option<LegId> {
        match packed(src) {
            Some(k) => self.by_v4.get(&k).copied(),
            None => self.by_v6.get(&src).copied(),
        }
    }

    pub(crate) fn rtcp(&self, mut src: SocketAddr) -> Option<LegId> {
        src.set_port(src.port().checked_sub(1)?);
        self.rtp(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_ends_differing_in_address_port_or_family_are_different_legs() {
        let v4 = |ip: [u8; 4], port| SocketAddr::from((ip, port));
        let v6 = |port| SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
        let mut d = Demux::default();
        let legs = [
            v4([127, 16, 0, 1], 4000),
            v4([127, 16, 0, 2], 4000),
            v4([127, 16, 0, 1], 4002),
            v6(4000),
        ];
        for (i, &a) in legs.iter().enumerate() {
            d.moved(LegId::from_index(i), None, Some(a));
        }
        for (i, &a) in legs.iter().enumerate() {
            assert_eq!(d.rtp(a), Some(LegId::from_index(i)), "{a}");
        }
        assert_eq!(d.rtcp(v6(4001)), Some(LegId::from_index(3)));
        assert_eq!(d.rtp(v4([127, 0, 0, 1], 4000)), None, "nobody's address");
        assert_eq!(d.rtp(v6(4002)), None);

        // A move takes the old entry away in either family, and only the leg's own.
        d.moved(LegId::from_index(3), Some(v6(4000)), Some(v6(5000)));
        d.moved(LegId::from_index(0), Some(legs[1]), None);
        assert_eq!(
            (d.rtp(v6(4000)), d.rtp(v6(5000))),
            (None, Some(LegId::from_index(3)))
        );
        assert_eq!(d.rtp(legs[1]), Some(LegId::from_index(1)));
    }
}
