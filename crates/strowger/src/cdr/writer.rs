//! The CDR writer's decisions, apart from its thread and its database: when a batch is due,
//! when CDRs go to the spool instead, when to try the database again. Time comes in as an
//! argument, so the tests drive it with a fake clock and a [`Sink`] that fails on demand.

use std::time::{Duration, Instant};

use super::spool::Spool;

/// Where batches go: a database.
pub trait Sink {
    /// Stores `cdrs` (JSON objects with an `id`) in one transaction, skipping those whose id
    /// is stored already. Connects first if it must; after an error it connects anew.
    fn insert(&mut self, cdrs: &[String]) -> Result<(), String>;
}

/// The first wait after the database fails, doubled at each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// Short enough that a database back after a restart has its spool within seconds.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub struct Writer<S> {
    sink: S,
    spool: Spool,
    rows: usize,
    wait: Duration,
    /// CDRs for the next batch, and when the oldest came.
    held: Vec<String>,
    since: Option<Instant>,
    /// The spool has CDRs: new ones go after them, and the spool is replayed first.
    spooling: bool,
    /// The database failed: not tried again before `retry_at`.
    down: Option<Down>,
}

struct Down {
    retry_at: Instant,
    backoff: Duration,
}

impl<S: Sink> Writer<S> {
    pub fn new(sink: S, spool: Spool, rows: usize, wait: Duration) -> Writer<S> {
        let spooling = spool.pending();
        Writer {
            sink,
            spool,
            rows,
            wait,
            held: Vec::new(),
            since: None,
            spooling,
            down: None,
        }
    }

    /// A CDR from a worker.
    pub fn take(&mut self, cdr: String, now: Instant) {
        if self.spooling {
            self.spool_all(vec![cdr]);
        } else {
            self.held.push(cdr);
            self.since.get_or_insert(now);
        }
    }

    /// Does what is due at `now`; returns when it should be called again (None: only when a
    /// CDR comes).
    pub fn tick(&mut self, now: Instant) -> Option<Instant> {
        if let Some(d) = &self.down {
            if now < d.retry_at {
                return Some(d.retry_at);
            }
        }
        if !self.spooling && self.spool.pending() {
            // A worker spooled CDRs (the queue was full): ours go after them.
            self.spooling = true;
            let held = std::mem::take(&mut self.held);
            self.spool_all(held);
        }
        if self.spooling {
            return self.replay(now);
        }
        let due = self.since.map(|s| s + self.wait);
        if self.held.len() < self.rows && due.is_none_or(|t| now < t) {
            return due;
        }
        let n = self.held.len().min(self.rows);
        let mut batch: Vec<String> = self.held.drain(..n).collect();
        self.since = (!self.held.is_empty()).then_some(now);
        match self.sink.insert(&batch) {
            Ok(()) => self.up(),
            Err(e) => {
                batch.append(&mut self.held);
                self.since = None;
                self.spool_all(batch);
                self.failed(&e, now);
                return self.down.as_ref().map(|d| d.retry_at);
            }
        }
        // What is left is due at once if it fills a batch.
        let full = self.held.len() >= self.rows;
        self.since.map(|s| if full { s } else { s + self.wait })
    }

    /// One batch from the spool; when it went in, the next is due at once.
    fn replay(&mut self, now: Instant) -> Option<Instant> {
        let batch = match self.spool.next(self.rows) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(
                    "cdr.database: cannot read the spool {}: {e} (check general.data_dir)",
                    self.spool.path().display()
                );
                return self.failed_at(now);
            }
        };
        if batch.is_empty() {
            self.spooling = false;
            return None;
        }
        match self.sink.insert(&batch) {
            Ok(()) => {
                self.spool.committed();
                self.up();
                Some(now)
            }
            Err(e) => {
                if let Err(e) = self.spool.rewind() {
                    tracing::error!("cdr.database: cannot rewind the spool: {e}");
                }
                self.failed(&e, now);
                self.down.as_ref().map(|d| d.retry_at)
            }
        }
    }

    /// On stop: what is held goes to the spool, which `tick` then replays while time allows.
    pub fn hold_nothing(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.since = None;
        if !held.is_empty() {
            self.spooling = true;
            self.spool_all(held);
        }
    }

    /// Nothing held, nothing spooled.
    pub fn idle(&self) -> bool {
        self.held.is_empty() && !self.spool.pending()
    }

    fn spool_all(&mut self, cdrs: Vec<String>) {
        if cdrs.is_empty() {
            return;
        }
        self.spooling = true;
        if let Err(e) = self.spool.append(&cdrs) {
            tracing::error!(
                "cdr.database: cannot spool {} CDRs to {}: {e} — they are only in the CDR file (general.cdr); check the free space and permissions of general.data_dir",
                cdrs.len(),
                self.spool.path().display()
            );
        }
    }

    fn up(&mut self) {
        if self.down.take().is_some() {
            tracing::info!("cdr.database: writing again; replaying the spooled CDRs");
        }
    }

    fn failed(&mut self, error: &str, now: Instant) {
        let retry = self.failed_at(now);
        tracing::warn!(
            "cdr.database: {error} — CDRs are spooled to {} until it takes them (next try in {} ms)",
            self.spool.path().display(),
            retry.map_or(0, |t| t.duration_since(now).as_millis())
        );
    }

    fn failed_at(&mut self, now: Instant) -> Option<Instant> {
        let backoff = self
            .down
            .as_ref()
            .map_or(MIN_BACKOFF, |d| (d.backoff * 2).min(MAX_BACKOFF));
        let retry_at = now + backoff;
        self.down = Some(Down { retry_at, backoff });
        Some(retry_at)
    }
}

#[cfg(test)]
mod tests {
    use super::super::spool::tests::{cdrs, tempdir};
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A database that is up or down, and remembers every row it stored, once per id.
    #[derive(Clone, Default)]
    struct Table(Rc<RefCell<TableState>>);

    #[derive(Default)]
    struct TableState {
        down: bool,
        rows: Vec<String>,
        batches: Vec<usize>,
    }

    impl Sink for Table {
        fn insert(&mut self, cdrs: &[String]) -> Result<(), String> {
            let mut t = self.0.borrow_mut();
            if t.down {
                return Err("connection refused".into());
            }
            t.batches.push(cdrs.len());
            for c in cdrs {
                if !t.rows.contains(c) {
                    t.rows.push(c.clone());
                }
            }
            Ok(())
        }
    }

    impl Table {
        fn set_down(&self, down: bool) {
            self.0.borrow_mut().down = down;
        }
        fn rows(&self) -> Vec<String> {
            self.0.borrow().rows.clone()
        }
        fn batches(&self) -> Vec<usize> {
            self.0.borrow().batches.clone()
        }
    }

    const WAIT: Duration = Duration::from_millis(200);

    fn writer(rows: usize) -> (Writer<Table>, Table) {
        let table = Table::default();
        let w = Writer::new(table.clone(), Spool::new(&tempdir()), rows, WAIT);
        (w, table)
    }

    /// Calls `tick` as the writer's thread does, until nothing is due before `until`.
    fn run(w: &mut Writer<Table>, mut now: Instant, until: Instant) -> Instant {
        while let Some(t) = w.tick(now) {
            if t > until {
                break;
            }
            now = now.max(t);
        }
        now
    }

    #[test]
    fn a_batch_goes_when_full_or_when_its_oldest_has_waited() {
        let (mut w, table) = writer(3);
        let t0 = Instant::now();
        for c in cdrs(0..4) {
            w.take(c, t0);
        }
        assert_eq!(w.tick(t0), Some(t0 + WAIT), "a full batch goes at once");
        assert_eq!(table.batches(), [3]);
        let t1 = t0 + Duration::from_millis(10);
        w.take(cdrs(4..5).remove(0), t1);
        assert_eq!(w.tick(t1), Some(t0 + WAIT), "the rest waits its time");
        assert_eq!(
            w.tick(t0 + WAIT - Duration::from_millis(1)),
            Some(t0 + WAIT)
        );
        assert_eq!(w.tick(t0 + WAIT), None);
        assert_eq!(table.batches(), [3, 2]);
        assert_eq!(table.rows(), cdrs(0..5));
    }

    #[test]
    fn while_the_database_is_down_cdrs_are_spooled_then_replayed_once_in_order() {
        let (mut w, table) = writer(2);
        let t0 = Instant::now();
        w.take(cdrs(0..1).remove(0), t0);
        w.tick(t0 + WAIT);
        table.set_down(true);
        for c in cdrs(1..4) {
            w.take(c, t0 + WAIT);
        }
        // The failed batch is spooled, and the next try waits its backoff.
        let retry = w.tick(t0 + WAIT).unwrap();
        assert_eq!(retry, t0 + WAIT + MIN_BACKOFF);
        assert!(w.spooling);
        for c in cdrs(4..6) {
            w.take(c, retry);
        }
        // Still down: the backoff doubles.
        assert_eq!(w.tick(retry), Some(retry + 2 * MIN_BACKOFF));
        table.set_down(false);
        let later = retry + 2 * MIN_BACKOFF;
        run(&mut w, later, later + Duration::from_secs(10));
        assert_eq!(table.rows(), cdrs(0..6), "every CDR once, in order");
        assert!(w.idle());
        // New CDRs go straight to batches again.
        w.take(cdrs(6..7).remove(0), later);
        assert!(!w.spooling);
        assert_eq!(w.tick(later + WAIT), None);
        assert_eq!(table.rows(), cdrs(0..7));
    }

    #[test]
    fn a_replay_that_fails_halfway_stores_no_row_twice() {
        let (mut w, table) = writer(2);
        let t0 = Instant::now();
        table.set_down(true);
        for c in cdrs(0..6) {
            w.take(c, t0);
        }
        let retry = w.tick(t0).unwrap();
        table.set_down(false);
        assert_eq!(
            w.tick(retry),
            Some(retry),
            "one batch in, the next due at once"
        );
        table.set_down(true);
        let again = w.tick(retry).unwrap();
        table.set_down(false);
        run(&mut w, again, again + Duration::from_secs(10));
        assert_eq!(table.rows(), cdrs(0..6));
        assert_eq!(table.batches(), [2, 2, 2], "no batch was sent twice");
    }

    #[test]
    fn stopping_spools_what_is_held_for_the_next_start() {
        let dir = tempdir();
        let table = Table::default();
        table.set_down(true);
        let mut w = Writer::new(table.clone(), Spool::new(&dir), 10, WAIT);
        let t0 = Instant::now();
        for c in cdrs(0..3) {
            w.take(c, t0);
        }
        w.hold_nothing();
        w.tick(t0);
        assert!(!w.idle());
        drop(w);
        table.set_down(false);
        let mut next = Writer::new(table.clone(), Spool::new(&dir), 10, WAIT);
        run(&mut next, t0, t0 + Duration::from_secs(1));
        assert_eq!(table.rows(), cdrs(0..3));
        assert!(next.idle());
    }

    #[test]
    fn cdrs_a_worker_spooled_go_before_those_held() {
        let dir = tempdir();
        let (table, t0) = (Table::default(), Instant::now());
        let mut w = Writer::new(table.clone(), Spool::new(&dir), 10, WAIT);
        w.take(cdrs(1..2).remove(0), t0);
        super::super::spool::append(&dir.join(super::super::spool::SPOOL), &cdrs(0..1)).unwrap();
        run(&mut w, t0, t0 + Duration::from_secs(1));
        assert_eq!(table.rows(), cdrs(0..2));
    }
}
