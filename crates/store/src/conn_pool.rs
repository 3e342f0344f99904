//! The connections a network store keeps open between operations, up to a bound, each closed
//! once it has gone unused for [`IDLE`]. A burst opens one per store thread; kept for good,
//! each would hold its buffers (grown to the burst's largest reply) on the heap of the thread
//! that made it, a thread that has since ended, and the process would stay that much larger
//! after the load is gone (bench/RESULTS.md). Sans-IO: the caller gives the time.

use std::time::{Duration, Instant};

/// How long a pooled connection may go unused before [`ConnPool::close_idle`] closes it.
pub const IDLE: Duration = Duration::from_secs(10);

pub struct ConnPool<C> {
    /// Least recently returned first: connections are taken from the end, so a lighter load
    /// keeps reusing the same few and the rest age at the front.
    conns: Vec<(C, Instant)>,
    max: usize,
}

impl<C> ConnPool<C> {
    /// A pool keeping up to `max` connections.
    pub fn new(max: usize) -> ConnPool<C> {
        ConnPool {
            conns: Vec::new(),
            max,
        }
    }

    /// The connection returned last, if any.
    pub fn take(&mut self) -> Option<C> {
        self.conns.pop().map(|(c, _)| c)
    }

    /// Keeps `conn`, returned at `now`, unless the pool is full (then it closes).
    pub fn give(&mut self, conn: C, now: Instant) {
        if self.conns.len() < self.max {
            self.conns.push((conn, now));
        }
    }

    /// Closes every connection (a restarted server left them all dead).
    pub fn clear(&mut self) {
        self.conns = Vec::new();
    }

    /// Closes the connections unused for [`IDLE`] at `now`; how many.
    pub fn close_idle(&mut self, now: Instant) -> usize {
        let stale = self
            .conns
            .iter()
            .take_while(|(_, at)| now.saturating_duration_since(*at) >= IDLE)
            .count();
        self.conns.drain(..stale);
        if self.conns.is_empty() {
            self.conns = Vec::new();
        }
        stale
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnPool, IDLE};
    use std::time::{Duration, Instant};

    #[test]
    fn connections_unused_for_the_idle_time_close_and_the_ones_in_use_stay() {
        let t0 = Instant::now();
        let mut pool = ConnPool::new(8);
        // A burst: eight connections in use at once, returned over a second.
        for n in 0..8 {
            pool.give(n, t0 + Duration::from_millis(100 * n));
        }
        // Then a lighter load, one operation at a time, every 2 s for 20 s: it keeps reusing
        // the connection returned last.
        let mut used = Vec::new();
        for i in 1..=10 {
            let at = t0 + Duration::from_secs(2 * i);
            let conn = pool.take().expect("a pooled connection");
            used.push(conn);
            pool.give(conn, at);
            pool.close_idle(at);
        }
        assert!(used.iter().all(|&c| c == 7), "the last returned is reused");
        assert_eq!(pool.len(), 1, "the seven left unused have closed");
        assert_eq!(pool.take(), Some(7));
        pool.give(7, t0 + Duration::from_secs(20));

        // No load at all: the last one closes once it has been unused for IDLE, not before.
        let end = t0 + Duration::from_secs(20);
        assert_eq!(pool.close_idle(end + IDLE - Duration::from_millis(1)), 0);
        assert_eq!(pool.close_idle(end + IDLE), 1);
        assert_eq!(
            pool.take(),
            None,
            "an empty pool: the next operation connects"
        );
    }

    #[test]
    fn a_full_pool_closes_what_is_returned_to_it() {
        let now = Instant::now();
        let mut pool = ConnPool::new(2);
        for n in 0..3 {
            pool.give(n, now);
        }
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.take(), Some(1));
        assert_eq!(pool.take(), Some(0));
        assert_eq!(pool.take(), None);
        pool.give(5, now);
        pool.clear();
        assert_eq!(pool.take(), None, "cleared");
    }
}
