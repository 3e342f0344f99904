//! RTP on a shared port from sources no leg announced, and which unheard legs they move onto a
//! pair of their own.
//!
//! A shared port (`rtp.shared_ports`) takes a leg's RTP from the address its far end announced
//! alone: anything else is dropped, so a source spraying the port cannot take a call over (RTP
//! bleed). A far end that sends from another address than its SDP names (a phone behind NAT
//! with a static external address, an RTP stack that is not symmetric) is then never heard
//! there. Each shared port keeps the last few such sources here, counted; a leg answered
//! [`SILENCE`] ago that has heard nothing, while a source at its far end's IP address (the
//! announced one, or the one it signals from) keeps sending, is moved onto a pair of its own by
//! a re-INVITE, where it latches to its first source as on any own pair. A stray source is
//! never given a shared-port leg. Moves are rate-limited ([`BURST`] at once, one per
//! [`REFILL`] after), so packets spoofed from a far end's address cannot have every call
//! re-INVITEd at once.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use sip::Message;

use crate::call::LegRef;
use crate::engine::Engine;
use crate::io::Event;

/// How long an answered leg may hear nothing before a stray source at its far end's address
/// moves it (phones send their first packet within a frame or two of the answer).
pub(crate) const SILENCE: Duration = Duration::from_millis(1500);
/// A source counts while it is still sending: last heard within this.
const FRESH: Duration = Duration::from_millis(500);
/// Packets from a source before it counts: a stream (200 ms of audio), not the stragglers of a
/// call that just ended.
const STREAM: u32 = 10;
/// Sources remembered per shared port; a new one replaces the one heard from longest ago.
const SLOTS: usize = 8;
/// Moves allowed at once, and the time that earns one more.
pub(crate) const BURST: u32 = 4;
pub(crate) const REFILL: Duration = Duration::from_millis(500);
/// How often unheard legs are looked for while some source counts.
const CHECK: Duration = Duration::from_millis(250);
/// Far ends remembered by the media addresses they answer with.
const PEERS: usize = 64;

#[derive(Clone, Copy)]
struct Stray {
    src: SocketAddr,
    packets: u32,
    last: Instant,
}

#[derive(Default)]
pub(crate) struct Strays {
    ports: Vec<(u16, [Option<Stray>; SLOTS])>,
    /// Moves that may start now, and when the last one was earned (None: none asked yet).
    tokens: u32,
    earned: Option<Instant>,
    /// When to look for unheard legs next: set while a source counts.
    check_at: Option<Instant>,
    /// Far ends strowger called, by signalling address: the media address of their last answer,
    /// and whether they answer calls from addresses of their own (two answers differed). Only
    /// those are offered a shared port: one that serves many calls from one port (SIPp, another
    /// strowger with shared ports) would need a re-INVITE for each. The latest [`PEERS`].
    peers: std::collections::VecDeque<(SocketAddr, SocketAddr, bool)>,
}

impl Strays {
    /// An RTP datagram from `src` on shared port `port`, where no leg announced `src`.
    pub(crate) fn note(&mut self, port: u16, src: SocketAddr, now: Instant) {
        let i = match self.ports.iter().position(|(p, _)| *p == port) {
            Some(i) => i,
            None => {
                self.ports.push((port, [None; SLOTS]));
                self.ports.len() - 1
            }
        };
        let slots = &mut self.ports[i].1;
        let stray = match slots.iter().position(|s| s.is_some_and(|s| s.src == src)) {
            Some(j) => slots[j].as_mut(),
            None => {
                let j = slots
                    .iter()
                    .position(Option::is_none)
                    .or_else(|| (0..SLOTS).min_by_key(|&j| slots[j].map(|s| s.last)))
                    .unwrap_or(0);
                Some(slots[j].insert(Stray {
                    src,
                    packets: 0,
                    last: now,
                }))
            }
        };
        if let Some(s) = stray {
            s.packets = s.packets.saturating_add(1);
            s.last = now;
            if s.packets >= STREAM && self.check_at.is_none() {
                self.check_at = Some(now);
            }
        }
    }

    /// Whether unheard legs are to be looked for now (a source counts, and the last look was
    /// [`CHECK`] ago); when none counts any more, the next look waits for one that does.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if self.check_at.is_none_or(|t| now < t) {
            return false;
        }
        let mut strays = self.ports.iter().flat_map(|(_, s)| s.iter().flatten());
        let any = strays.any(|s| counting(s, now));
        self.check_at = any.then_some(now + CHECK);
        any
    }

    /// The source on shared port `port` that a leg whose far end is at one of `ips` is not
    /// hearing: one still sending a stream from one of those addresses (the busiest).
    pub(crate) fn source_for(
        &self,
        port: u16,
        ips: [IpAddr; 2],
        now: Instant,
    ) -> Option<SocketAddr> {
        let (_, slots) = self.ports.iter().find(|(p, _)| *p == port)?;
        slots
            .iter()
            .flatten()
            .filter(|s| counting(s, now) && ips.contains(&s.src.ip()))
            .max_by_key(|s| s.packets)
            .map(|s| s.src)
    }

    /// Whether a leg may be moved now (rate limit); if so, the move is counted against it.
    pub(crate) fn allow_move(&mut self, now: Instant) -> bool {
        match self.earned {
            None => {
                self.tokens = BURST;
                self.earned = Some(now);
            }
            Some(at) => {
                let more = now.saturating_duration_since(at).as_nanos() / REFILL.as_nanos();
                let more = u32::try_from(more).unwrap_or(u32::MAX);
                if more > 0 {
                    self.tokens = self.tokens.saturating_add(more).min(BURST);
                    self.earned = Some(match self.tokens {
                        BURST => now,
                        _ => at + REFILL * more,
                    });
                }
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// Far end `peer` answered an outbound leg with media address `media`; `crowded`: another
    /// leg has that address (the far end is offered pairs again).
    pub(crate) fn answered(&mut self, peer: SocketAddr, media: SocketAddr, crowded: bool) {
        match self.peers.iter_mut().find(|(p, ..)| *p == peer) {
            Some(e) => {
                e.2 = !crowded && (e.2 || e.1 != media);
                e.1 = media;
            }
            None => {
                if self.peers.len() == PEERS {
                    self.peers.pop_front();
                }
                self.peers.push_back((peer, media, false));
            }
        }
    }

    /// Whether far end `peer` is known to answer each call from an address of its own.
    pub(crate) fn distinct(&self, peer: SocketAddr) -> bool {
        self.peers.iter().any(|&(p, _, d)| p == peer && d)
    }

    /// Source `src` on port `port` was given to the leg just moved: it counts no more there.
    pub(crate) fn forget(&mut self, port: u16, src: SocketAddr) {
        if let Some((_, slots)) = self.ports.iter_mut().find(|(p, _)| *p == port) {
            for s in slots.iter_mut().filter(|s| s.is_some_and(|s| s.src == src)) {
                *s = None;
            }
        }
    }
}

impl Engine {
    /// Moves the legs on shared ports that hear nothing while a source at their far end's
    /// address keeps sending there, as many as the rate limit allows.
    pub(crate) fn move_unheard(&mut self, now: Instant) {
        let mut found = Vec::new();
        for call in self.calls.ids() {
            let c = &self.calls[call];
            if c.answered_at
                .is_none_or(|t| now.saturating_duration_since(t) < SILENCE)
            {
                continue;
            }
            for (leg, l) in c.legs() {
                let (Some(m), Some(neg)) = (l.media, l.negotiated.as_ref()) else {
                    continue;
                };
                if l.moving || l.held || !self.ports.is_shared(l.port) {
                    continue;
                }
                let ips = [neg.remote.ip(), l.peer_addr().ip()];
                let Some(src) = self.strays.source_for(l.port, ips, now) else {
                    continue;
                };
                if self.media.stats(m).is_some_and(|s| s.packets_received == 0) {
                    found.push((LegRef { call, leg }, l.port, src));
                }
            }
        }
        for (at, port, src) in found {
            if !self.strays.allow_move(now) {
                return;
            }
            if self.move_leg(at, now) {
                self.strays.forget(port, src);
            }
        }
    }

    /// An outbound leg's answer: the far end's media address is remembered (`distinct`), and a
    /// leg on a shared port whose answer names an address it cannot be told apart by (another
    /// leg's, or a private one of another host than it signals from) is moved.
    pub(crate) fn move_if_indistinct(&mut self, at: LegRef, now: Instant) {
        let Some(l) = self.calls.get(at.call).and_then(|c| c.leg(at.leg)) else {
            return;
        };
        let (Some(m), Some(neg)) = (l.media, l.negotiated.as_ref()) else {
            return;
        };
        if neg.webrtc.is_some() {
            return;
        }
        let (remote, peer, shared) = (neg.remote, l.peer_addr(), self.ports.is_shared(l.port));
        let crowded = self.media.rtp_leg_from(remote) != Some(m);
        self.strays.answered(peer, remote, crowded);
        if shared && (crowded || crate::apps::behind_nat(remote.ip(), peer.ip())) {
            self.move_leg(at, now);
        }
    }

    /// Gives leg `at` a pair of its own in place of its shared port and offers it to the far end
    /// in a re-INVITE; false when no pair is spare (the leg stays as it is).
    fn move_leg(&mut self, at: LegRef, now: Instant) -> bool {
        let Some(l) = self.calls.get(at.call).and_then(|c| c.leg(at.leg)) else {
            return false;
        };
        let Some(m) = l.media.filter(|_| l.dialog().is_some()) else {
            return false;
        };
        let ip = self.s.media.for_remote(l.sdp.addr()).bind;
        let shared = l.port;
        let Some(place) = self.ports.take(false, ip.is_ipv6()) else {
            return false;
        };
        self.ports.release(shared);
        self.events.push_back(Event::MediaOpen {
            leg: m.index(),
            port: place.port,
            shared: false,
            first: true,
            ip,
        });
        let caps = self.s.caps.clone();
        let Some(l) = self.calls[at.call].leg_mut(at.leg) else {
            return false;
        };
        l.port = place.port;
        l.moving = true;
        l.our_offer = Some(l.sdp.offer(&caps, place.port));
        self.metrics.leg_moved();
        self.send_invite(at.call, at.leg, None, now);
        true
    }

    /// Whether leg `at` waits for the answer to the re-INVITE that moves it.
    pub(crate) fn moving(&self, at: LegRef) -> bool {
        self.calls
            .get(at.call)
            .and_then(|c| c.leg(at.leg))
            .is_some_and(|l| l.moving)
    }

    /// A response to the re-INVITE that moves leg `at`: a 2xx is ACKed and its answer taken.
    pub(crate) fn moved_response(&mut self, at: LegRef, msg: &Message, status: u16, now: Instant) {
        if status < 200 {
            return;
        }
        if status >= 300 {
            return self.move_failed(at, status);
        }
        let Some(l) = self.calls[at.call].leg_mut(at.leg) else {
            return;
        };
        l.moving = false;
        l.invite_tx = None;
        let Some(cseq) = l.dialog().map(|d| d.local_cseq) else {
            return;
        };
        self.ack_answer(at.call, at.leg, cseq);
        if let Err(e) = self.accept_answer(at.call, at.leg, msg.body(), now) {
            self.warn_call(
                at.call,
                format!("the answer to the re-INVITE that gave a leg its own RTP port cannot be taken ({e}): the leg keeps its old media"),
            );
        }
    }

    /// The far end refused (or never answered) the re-INVITE that moves leg `at`: it keeps
    /// sending where it did, and the leg, unheard there, stays so.
    pub(crate) fn move_failed(&mut self, at: LegRef, status: u16) {
        let Some(l) = self.calls.get_mut(at.call).and_then(|c| c.leg_mut(at.leg)) else {
            return;
        };
        l.moving = false;
        l.invite_tx = None;
        l.our_offer = None;
        self.warn_call(
            at.call,
            format!("a far end that sends RTP from another address than its SDP names refused ({status}) the re-INVITE that gave its leg an RTP port of its own: it is not heard (turn rtp.shared_ports off for such far ends)"),
        );
    }
}

fn counting(s: &Stray, now: Instant) -> bool {
    s.packets >= STREAM && now.saturating_duration_since(s.last) <= FRESH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ips(s: &str) -> [IpAddr; 2] {
        let ip: IpAddr = s.parse().unwrap();
        [ip, ip]
    }

    #[test]
    fn a_stream_counts_a_few_stragglers_do_not_and_a_silent_source_stops_counting() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        let nat = addr("198.51.100.7:40000");
        for i in 0..STREAM - 1 {
            s.note(30000, nat, t0 + Duration::from_millis(20 * u64::from(i)));
        }
        let t = t0 + Duration::from_millis(200);
        assert!(!s.due(t), "nine packets are stragglers, not a stream");
        assert_eq!(s.source_for(30000, ips("198.51.100.7"), t), None);
        s.note(30000, nat, t);
        assert!(s.due(t));
        assert!(
            !s.due(t + Duration::from_millis(100)),
            "checked every 250 ms"
        );
        assert_eq!(s.source_for(30000, ips("198.51.100.7"), t), Some(nat));
        assert_eq!(
            s.source_for(30000, ips("198.51.100.8"), t),
            None,
            "only a leg whose far end is at that address"
        );
        assert_eq!(
            s.source_for(30002, ips("198.51.100.7"), t),
            None,
            "only a leg on that port"
        );
        let later = t + FRESH + Duration::from_millis(1);
        assert_eq!(s.source_for(30000, ips("198.51.100.7"), later), None);
        assert!(s.due(t + CHECK));
        assert!(!s.due(later + CHECK), "nothing counts: no more checks");
    }

    #[test]
    fn a_spray_from_many_addresses_keeps_a_few_and_none_of_them_counts() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        for i in 0..10_000u32 {
            let src =
                SocketAddr::from(([10, (i >> 8) as u8, i as u8, 1], 1024 + (i % 50_000) as u16));
            s.note(30000, src, t0 + Duration::from_micros(u64::from(i)));
        }
        assert_eq!(s.ports[0].1.iter().flatten().count(), SLOTS);
        assert!(!s.due(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn moves_come_in_a_burst_then_one_per_refill() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        let allowed = (0..10).filter(|_| s.allow_move(t0)).count();
        assert_eq!(allowed, BURST as usize);
        assert!(!s.allow_move(t0 + REFILL / 2));
        assert!(s.allow_move(t0 + REFILL));
        assert!(!s.allow_move(t0 + REFILL));
        let much_later = t0 + REFILL * 100;
        let allowed = (0..10).filter(|_| s.allow_move(much_later)).count();
        assert_eq!(
            allowed, BURST as usize,
            "a quiet while earns a burst, no more"
        );
    }

    #[test]
    fn a_far_end_is_distinct_once_two_answers_differ_and_no_more_once_one_collides() {
        let mut s = Strays::default();
        let (peer, m1, m2) = (
            addr("192.0.2.1:5060"),
            addr("192.0.2.1:4000"),
            addr("192.0.2.1:4002"),
        );
        s.answered(peer, m1, false);
        s.answered(peer, m1, false);
        assert!(!s.distinct(peer), "one port for every call");
        s.answered(peer, m2, false);
        assert!(s.distinct(peer));
        assert!(!s.distinct(addr("192.0.2.2:5060")));
        s.answered(peer, m1, true);
        assert!(!s.distinct(peer), "an answer that collided");
    }

    #[test]
    fn a_source_given_to_a_leg_is_forgotten() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        let nat = addr("198.51.100.7:40000");
        for _ in 0..STREAM {
            s.note(30000, nat, t0);
        }
        s.forget(30000, nat);
        assert_eq!(s.source_for(30000, ips("198.51.100.7"), t0), None);
    }
}
