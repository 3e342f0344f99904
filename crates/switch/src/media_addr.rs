//! Which address family a leg's media uses and the address strowger announces for it.
//!
//! As a B2BUA strowger ends each leg's session itself (RFC 6157 §3.2): a leg's SDP carries one
//! `c=` of its far end's family, the IPv4 one to an IPv4 far end and the IPv6 one to an IPv6
//! far end, and the bridge relays between them; no ANAT (RFC 4091, deprecated) alternatives.
//! A far end of a family strowger has no media address of gets the other family.

use crate::config::Rtp;
use sip::transaction::Transport;
use std::net::{IpAddr, SocketAddr};

/// Per family: the address the RTP sockets bind on and the one SDP, Contact and Via announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    pub bind: IpAddr,
    pub announce: IpAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaAddrs {
    pub v4: Option<Family>,
    pub v6: Option<Family>,
}

impl MediaAddrs {
    /// The first UDP listen address of each family (`sip.listen`), announced as
    /// `rtp.advertise_ipv4` / `rtp.advertise_ipv6` when set; `fallback` when nothing listens
    /// on UDP.
    pub fn new(listen: &[(Transport, SocketAddr)], rtp: &Rtp, fallback: IpAddr) -> MediaAddrs {
        let first = |v6: bool| {
            listen
                .iter()
                .find(|(t, a)| *t == Transport::Udp && a.is_ipv6() == v6)
                .map(|(_, a)| a.ip())
                .or((fallback.is_ipv6() == v6).then_some(fallback))
        };
        let family = |v6: bool, advertise: Option<IpAddr>| {
            first(v6).map(|bind| Family {
                bind,
                announce: advertise.unwrap_or(bind),
            })
        };
        MediaAddrs {
            v4: family(false, rtp.advertise_ipv4),
            v6: family(true, rtp.advertise_ipv6),
        }
    }

    /// The family of a leg whose far end is at `remote`: the same one if strowger has it.
    pub fn for_remote(&self, remote: IpAddr) -> Family {
        let (same, other) = match remote.is_ipv6() && !is_v4_mapped(remote) {
            true => (self.v6, self.v4),
            false => (self.v4, self.v6),
        };
        same.or(other).expect("strowger has a media address")
    }

    /// The address to announce for `bind` (a local address strowger uses), if it is one of the
    /// media families' (`rtp.advertise_*` for a server behind NAT).
    pub fn announce(&self, bind: IpAddr) -> IpAddr {
        [self.v4, self.v6]
            .into_iter()
            .flatten()
            .find(|f| f.bind == bind)
            .map_or(bind, |f| f.announce)
    }
}

fn is_v4_mapped(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Where a far end's media is, from its SDP: the audio stream's `c=` or the session's, unless
/// it is the unspecified address of a hold (RFC 3264 §8.4), which says nothing of the family.
pub fn offered_addr(sdp: &sdp::SessionDescription) -> Option<IpAddr> {
    let audio = sdp.media.iter().find(|m| m.kind == "audio");
    audio
        .and_then(|m| m.connection)
        .or(sdp.connection)
        .filter(|a| !a.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtp(advertise_ipv4: Option<&str>) -> Rtp {
        Rtp {
            advertise_ipv4: advertise_ipv4.map(ip),
            ..crate::config::Config::embedded().rtp
        }
    }

    fn listen(addrs: &[&str]) -> Vec<(Transport, SocketAddr)> {
        let mut l: Vec<_> = addrs
            .iter()
            .map(|a| (Transport::Udp, a.parse().unwrap()))
            .collect();
        l.insert(0, (Transport::Tcp, "192.0.2.9:5060".parse().unwrap()));
        l
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_far_end_gets_its_own_family_and_a_lone_family_serves_both() {
        let both = MediaAddrs::new(
            &listen(&["127.0.0.1:5060", "[::1]:5060"]),
            &rtp(None),
            ip("127.0.0.1"),
        );
        assert_eq!(both.for_remote(ip("::1")).bind, ip("::1"));
        assert_eq!(both.for_remote(ip("127.0.0.2")).bind, ip("127.0.0.1"));
        assert_eq!(
            both.for_remote(ip("::ffff:127.0.0.2")).bind,
            ip("127.0.0.1"),
            "an IPv4-mapped address is IPv4"
        );
        let v4 = MediaAddrs::new(&listen(&["127.0.0.1:5060"]), &rtp(None), ip("127.0.0.1"));
        assert_eq!(v4.for_remote(ip("::1")).bind, ip("127.0.0.1"));
        let v6 = MediaAddrs::new(&listen(&["[::1]:5060"]), &rtp(None), ip("::1"));
        assert_eq!(v6.for_remote(ip("127.0.0.1")).bind, ip("::1"));
    }

    #[test]
    fn advertised_addresses_are_announced_for_their_family_only() {
        let m = MediaAddrs::new(
            &listen(&["10.0.0.5:5060", "[fd00::5]:5060"]),
            &rtp(Some("203.0.113.7")),
            ip("10.0.0.5"),
        );
        let v4 = m.for_remote(ip("198.51.100.1"));
        assert_eq!((v4.bind, v4.announce), (ip("10.0.0.5"), ip("203.0.113.7")));
        let v6 = m.for_remote(ip("2001:db8::1"));
        assert_eq!((v6.bind, v6.announce), (ip("fd00::5"), ip("fd00::5")));
        assert_eq!(m.announce(ip("10.0.0.5")), ip("203.0.113.7"));
        assert_eq!(m.announce(ip("fd00::5")), ip("fd00::5"));
        assert_eq!(m.announce(ip("192.0.2.1")), ip("192.0.2.1"), "not ours");
    }

    #[test]
    fn the_offer_s_audio_address_wins_over_the_session_s_and_a_hold_says_nothing() {
        let sdp = |body: &str| sdp::SessionDescription::parse(body.as_bytes()).unwrap();
        let head = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n";
        let both = sdp(&format!(
            "{head}c=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\nc=IN IP6 ::1\r\n"
        ));
        assert_eq!(offered_addr(&both), Some(ip("::1")));
        let hold = sdp(&format!(
            "{head}c=IN IP4 0.0.0.0\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n"
        ));
        assert_eq!(offered_addr(&hold), None);
    }
}
