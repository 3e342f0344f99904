//! The RTP ports of one worker's slice of `rtp.ports`: which are free, which are in use, and
//! which are set aside because another program on the host holds them.
//!
//! Free ports wait in a FIFO queue, so a port is reused as late as possible (a late packet of an
//! ended call must not land in a new one) and taking one costs O(1) however full the range is.
//! A port whose pair cannot be bound is set aside rather than put back in the queue: on a shared
//! host another program may hold thousands of ports of the range, and a taker that gave up after
//! a few of them refused calls while most of the range was free. A set-aside port is tried again
//! after [`SET_ASIDE`], or at once when the queue runs dry, so a port the other program lets go
//! comes back. The binding itself is the caller's (`bind`), which keeps this logic testable.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

/// How long a port another program held stays out of the queue before it is tried again.
pub const SET_ASIDE: Duration = Duration::from_secs(30);

pub struct PortPool {
    free: VecDeque<u16>,
    /// Ports whose pair could not be bound, with when they were last tried (oldest first).
    aside: VecDeque<(u16, Instant)>,
    in_use: usize,
}

impl PortPool {
    /// The even ports of `lo..hi` (lo even, hi exclusive); each stands for it and the next one.
    pub fn new(lo: u16, hi: u16) -> PortPool {
        PortPool {
            free: (lo..hi.saturating_sub(1)).step_by(2).collect(),
            aside: VecDeque::new(),
            in_use: 0,
        }
    }

    /// The first free port `bind` succeeds on, with what it bound. Ports it fails on are set
    /// aside; None only when every port is in use or held elsewhere.
    pub fn take<T>(
        &mut self,
        now: Instant,
        mut bind: impl FnMut(u16) -> io::Result<T>,
    ) -> Option<(u16, T)> {
        while let Some(&(port, at)) = self.aside.front() {
            if now < at + SET_ASIDE {
                break;
            }
            self.aside.pop_front();
            self.free.push_back(port);
        }
        // The queue first, then (dry) every set-aside port once: the other program may be gone.
        for from_aside in [false, true] {
            let tries = if from_aside {
                self.aside.len()
            } else {
                self.free.len()
            };
            for _ in 0..tries {
                let port = match from_aside {
                    false => self.free.pop_front(),
                    true => self.aside.pop_front().map(|(p, _)| p),
                }?;
                match bind(port) {
                    Ok(bound) => {
                        self.in_use += 1;
                        return Some((port, bound));
                    }
                    Err(_) => self.aside.push_back((port, now)),
                }
            }
        }
        None
    }

    /// A port [`PortPool::take`] gave is free again (its sockets are closed).
    pub fn give_back(&mut self, port: u16) {
        self.in_use = self.in_use.saturating_sub(1);
        self.free.push_back(port);
    }

    /// Pairs bound by this worker (legs' and spare ones).
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Pairs another program held when last tried.
    pub fn set_aside(&self) -> usize {
        self.aside.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A bind that fails on the ports in `held`.
    fn bind_unless(held: &HashSet<u16>) -> impl FnMut(u16) -> io::Result<()> + '_ {
        move |p| match held.contains(&p) {
            true => Err(io::ErrorKind::AddrInUse.into()),
            false => Ok(()),
        }
    }

    #[test]
    fn a_third_of_the_range_held_elsewhere_costs_only_those_ports() {
        // 60 pairs; another program holds the first 20 (a run no small number of tries crosses).
        let (lo, t0) = (10_000u16, Instant::now());
        let mut pool = PortPool::new(lo, lo + 120);
        let held: HashSet<u16> = (0..20).map(|i| lo + 2 * i).collect();
        let mut got = Vec::new();
        while let Some((port, ())) = pool.take(t0, bind_unless(&held)) {
            got.push(port);
        }
        assert_eq!(got.len(), 40, "every pair no one else holds");
        assert!(got.iter().all(|p| !held.contains(p)));
        assert_eq!((pool.in_use(), pool.set_aside()), (40, 20));
    }

    #[test]
    fn set_aside_ports_come_back_when_the_queue_runs_dry_or_after_a_while() {
        let (lo, t0) = (10_000u16, Instant::now());
        let mut pool = PortPool::new(lo, lo + 6);
        let mut held: HashSet<u16> = [lo].into();
        assert_eq!(pool.take(t0, bind_unless(&held)).map(|t| t.0), Some(lo + 2));
        assert_eq!(pool.set_aside(), 1);
        // Not tried while the queue still has ports.
        held.clear();
        assert_eq!(pool.take(t0, bind_unless(&held)).map(|t| t.0), Some(lo + 4));
        // Dry: the set-aside port is tried, and the other program has let it go.
        assert_eq!(pool.take(t0, bind_unless(&held)).map(|t| t.0), Some(lo));
        assert_eq!(pool.take(t0, bind_unless(&held)), None, "all in use");

        // Given back, then held by another program: set aside until SET_ASIDE has passed.
        pool.give_back(lo + 2);
        pool.give_back(lo + 4);
        held.insert(lo + 2);
        assert_eq!(pool.take(t0, bind_unless(&held)).map(|t| t.0), Some(lo + 4));
        held.clear();
        pool.give_back(lo + 4);
        let later = t0 + SET_ASIDE;
        assert_eq!(
            pool.take(later, bind_unless(&held)).map(|t| t.0),
            Some(lo + 4),
            "the queue keeps its order"
        );
        assert_eq!(
            pool.take(later, bind_unless(&held)).map(|t| t.0),
            Some(lo + 2),
            "back in the queue after SET_ASIDE"
        );
        assert_eq!((pool.in_use(), pool.set_aside()), (3, 0));
    }

    #[test]
    fn a_range_held_entirely_elsewhere_gives_nothing_and_counts_it() {
        let (lo, t0) = (10_000u16, Instant::now());
        let mut pool = PortPool::new(lo, lo + 8);
        let held: HashSet<u16> = (lo..lo + 8).collect();
        assert!(pool.take(t0, bind_unless(&held)).is_none());
        assert!(pool.take(t0, bind_unless(&held)).is_none());
        assert_eq!((pool.in_use(), pool.set_aside()), (0, 4));
    }
}
