//! RTP port pairs for media legs, from the bound pairs the shell hands in: a leg takes a spare
//! pair of its own, or with `rtp.shared_ports` a place on a pair shared by up to
//! [`SHARED_LEGS`] legs (a spare pair becomes shared when every shared pair is full). The shell
//! binds the sockets ahead and tops the spares up; the engine decides who gets which, so the
//! SDP it writes and the socket the packets use cannot disagree.

use std::collections::VecDeque;

/// Legs per shared pair: at 50 packets a second each, 256 legs queue about 64 datagrams in the
/// socket between two 5 ms passes, and a pass 20 ms late finds 256, within the receive buffer.
pub const SHARED_LEGS: usize = 256;

#[derive(Default)]
pub(crate) struct Ports {
    spare: VecDeque<u16>,
    /// Shared pairs by port with their legs and whether they are IPv6, when `rtp.shared_ports`
    /// is on: a leg shares only a pair of its own family.
    shared: Option<Vec<(u16, usize, bool)>>,
}

/// A leg's place: the RTP port, whether it is shared, whether the pair was spare until now.
pub(crate) struct Place {
    pub port: u16,
    pub shared: bool,
    pub first: bool,
}

impl Ports {
    pub(crate) fn new(shared: bool) -> Ports {
        Ports {
            spare: VecDeque::new(),
            shared: shared.then(Vec::new),
        }
    }

    pub(crate) fn add_spare(&mut self, ports: &[u16]) {
        self.spare.extend(ports);
    }

    pub(crate) fn spare(&self) -> usize {
        self.spare.len()
    }

    /// A place for a new leg; `shareable`: its far end can be told apart by its address; `v6`:
    /// its media is IPv6.
    pub(crate) fn take(&mut self, shareable: bool, v6: bool) -> Option<Place> {
        let Some(shared) = self.shared.as_mut().filter(|_| shareable) else {
            let port = self.spare.pop_front()?;
            return Some(Place {
                port,
                shared: false,
                first: true,
            });
        };
        let roomy = shared
            .iter_mut()
            .filter(|(_, legs, six)| *legs < SHARED_LEGS && *six == v6);
        if let Some((port, legs, _)) = roomy.min_by_key(|(_, legs, _)| *legs) {
            *legs += 1;
            return Some(Place {
                port: *port,
                shared: true,
                first: false,
            });
        }
        let port = self.spare.pop_front()?;
        shared.push((port, 1, v6));
        Some(Place {
            port,
            shared: true,
            first: true,
        })
    }

    /// Whether `port` is a shared pair's.
    pub(crate) fn is_shared(&self, port: u16) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| s.iter().any(|(p, _, _)| *p == port))
    }

    /// A leg left `port`: a shared pair has a place more; an own pair is the shell's to close.
    pub(crate) fn release(&mut self, port: u16) {
        if let Some(s) = self
            .shared
            .as_mut()
            .and_then(|s| s.iter_mut().find(|(p, _, _)| *p == port))
        {
            s.1 = s.1.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pairs_come_from_the_spares_in_order_and_run_out() {
        let mut p = Ports::new(false);
        p.add_spare(&[10, 12]);
        let t = p.take(true, false).unwrap();
        assert_eq!((t.port, t.shared, t.first), (10, false, true));
        assert_eq!(p.take(true, false).map(|t| t.port), Some(12));
        assert!(p.take(true, false).is_none(), "no spare left");
    }

    #[test]
    fn shared_legs_fill_one_pair_before_the_next_and_others_get_their_own() {
        let mut p = Ports::new(true);
        p.add_spare(&[10, 12, 14]);
        let first = p.take(true, false).unwrap();
        assert_eq!((first.port, first.shared, first.first), (10, true, true));
        for _ in 1..SHARED_LEGS {
            let t = p.take(true, false).unwrap();
            assert_eq!((t.port, t.shared, t.first), (10, true, false));
        }
        let own = p.take(false, false).unwrap();
        assert_eq!(
            (own.port, own.shared),
            (12, false),
            "a leg that cannot share"
        );
        let next = p.take(true, false).unwrap();
        assert_eq!(
            (next.port, next.first),
            (14, true),
            "a full pair opens the next"
        );
        p.release(10);
        assert_eq!(
            p.take(true, false).map(|t| t.port),
            Some(14),
            "the least used pair"
        );
        p.release(12);
        assert!(
            p.take(false, false).is_none(),
            "an own pair is not reused by the engine"
        );
    }

    #[test]
    fn a_leg_shares_only_a_pair_of_its_own_family() {
        let mut p = Ports::new(true);
        p.add_spare(&[10, 12]);
        let v4 = p.take(true, false).unwrap();
        let v6 = p.take(true, true).unwrap();
        assert_eq!((v4.port, v6.port, v6.first), (10, 12, true));
        let v4 = p.take(true, false).unwrap();
        let v6 = p.take(true, true).unwrap();
        assert_eq!(
            (v4.port, v4.first, v6.port, v6.first),
            (10, false, 12, false)
        );
    }
}
