//! The store threads' pool: as many threads as the work needs, up to a bound. A thread idle for
//! [`IDLE`] ends, the last one too, and a submit that finds no thread idle starts one. glibc
//! gives a thread's cache of freed chunks (its tcache) back only when the thread ends, so store
//! threads that stayed after a burst kept pages of their heaps resident (bench/RESULTS.md); a
//! thread started for the first job after a quiet spell costs tens of microseconds.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a store thread waits for work before it ends.
pub const IDLE: Duration = Duration::from_secs(10);

/// A submitter's handle on the pool; clones share the threads.
pub struct Pool<J> {
    tx: Sender<J>,
    shared: Arc<Shared<J>>,
}

impl<J> Clone for Pool<J> {
    fn clone(&self) -> Self {
        Pool {
            tx: self.tx.clone(),
            shared: self.shared.clone(),
        }
    }
}

struct Shared<J> {
    rx: Mutex<Receiver<J>>,
    run: Box<dyn Fn(J) + Send + Sync>,
    name: String,
    max: usize,
    idle_for: Duration,
    /// Threads running, or about to.
    alive: AtomicUsize,
    /// Threads waiting for a job (on the receiver or its lock).
    idle: AtomicUsize,
}

impl<J: Send + 'static> Pool<J> {
    /// A pool of up to `max` threads named `name` running `run` on each job, a thread ending
    /// after `idle_for` without one; one thread starts now.
    pub fn start(
        name: &str,
        max: usize,
        idle_for: Duration,
        run: impl Fn(J) + Send + Sync + 'static,
    ) -> Pool<J> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            run: Box::new(run),
            name: name.to_string(),
            max: max.max(1),
            idle_for,
            alive: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
        });
        grow(&shared);
        Pool { tx, shared }
    }

    /// Queues `job` for a thread, starting one when none is idle and there is room; the job
    /// back when the threads have stopped. With a thread idle this adds one atomic load to the
    /// send.
    pub fn submit(&self, job: J) -> Result<(), J> {
        self.tx.send(job).map_err(|e| e.0)?;
        if self.shared.idle.load(SeqCst) == 0 {
            grow(&self.shared);
        }
        Ok(())
    }

    #[cfg(test)]
    fn alive(&self) -> usize {
        self.shared.alive.load(SeqCst)
    }
}

/// Starts a thread if fewer than `max` are alive.
fn grow<J: Send + 'static>(shared: &Arc<Shared<J>>) {
    let room = |a: usize| (a < shared.max).then_some(a + 1);
    if shared.alive.fetch_update(SeqCst, SeqCst, room).is_err() {
        return;
    }
    let s = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(shared.name.clone())
        .spawn(move || serve(&s));
    if spawned.is_err() {
        // The next submit that finds none idle tries again.
        shared.alive.fetch_sub(1, SeqCst);
    }
}

/// A thread's loop: jobs until it has waited `idle_for` for one, or every submitter is gone.
fn serve<J>(s: &Shared<J>) {
    let mut since = Instant::now();
    loop {
        s.idle.fetch_add(1, SeqCst);
        let Ok(rx) = s.rx.lock() else {
            s.idle.fetch_sub(1, SeqCst);
            break;
        };
        // Counted from when this thread became idle, not from when it got the lock: the idle
        // threads queued on the lock end together rather than one per `idle_for`.
        let got = rx.recv_timeout((since + s.idle_for).saturating_duration_since(Instant::now()));
        s.idle.fetch_sub(1, SeqCst);
        let job = match got {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                s.alive.fetch_sub(1, SeqCst);
                // A job sent after the wait timed out but before `idle` fell counted this
                // thread as idle and started none: this thread takes it and stays. (A thread
                // started meanwhile may make one more than `max`, until it idles out.)
                match rx.try_recv() {
                    Ok(job) => {
                        s.alive.fetch_add(1, SeqCst);
                        job
                    }
                    Err(_) => {
                        drop(rx);
                        crate::allocator::thread_ending();
                        return;
                    }
                }
            }
        };
        drop(rx);
        (s.run)(job);
        since = Instant::now();
    }
    s.alive.fetch_sub(1, SeqCst);
}

#[cfg(test)]
mod tests {
    use super::Pool;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// Waits up to 5 s for `pool` to have `n` threads alive.
    fn until_alive<J: Send + 'static>(pool: &Pool<J>, n: usize) {
        let end = Instant::now() + Duration::from_secs(5);
        while pool.alive() != n {
            assert!(
                Instant::now() < end,
                "{} threads alive, not {n}",
                pool.alive()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A job that says it started, then waits for its release, then says it is done.
    type Held = (usize, mpsc::Receiver<()>);

    fn held_pool(
        max: usize,
        idle: Duration,
    ) -> (Pool<Held>, mpsc::Receiver<usize>, mpsc::Receiver<usize>) {
        let (started_tx, started) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let pool = Pool::start("test-store", max, idle, move |(n, release): Held| {
            started_tx.send(n).unwrap();
            let _ = release.recv();
            done_tx.send(n).unwrap();
        });
        (pool, started, done)
    }

    /// Submits `n` held jobs, each started before the next is sent; their releases.
    fn burst(
        pool: &Pool<Held>,
        started: &mpsc::Receiver<usize>,
        n: usize,
    ) -> Vec<mpsc::Sender<()>> {
        (0..n)
            .map(|i| {
                let (release, held) = mpsc::channel();
                assert!(pool.submit((i, held)).is_ok());
                let got = started.recv_timeout(Duration::from_secs(5));
                assert_eq!(got, Ok(i), "job {i} started on a thread of its own");
                release
            })
            .collect()
    }

    #[test]
    fn threads_end_when_idle_and_start_again_under_a_burst() {
        let (pool, started, done) = held_pool(4, Duration::from_millis(100));
        assert_eq!(pool.alive(), 1, "one thread at start");
        for round in 0..2 {
            let releases = burst(&pool, &started, 4);
            assert_eq!(pool.alive(), 4, "round {round}: grown to the bound");
            // A fifth job waits for a thread (none is started past the bound), then runs.
            let (release, held) = mpsc::channel();
            assert!(pool.submit((4, held)).is_ok());
            assert_eq!(pool.alive(), 4, "round {round}: no thread past the bound");
            drop(releases);
            drop(release);
            let mut finished: Vec<usize> = (0..5)
                .map(|_| done.recv_timeout(Duration::from_secs(5)).unwrap())
                .collect();
            finished.sort();
            assert_eq!(finished, [0, 1, 2, 3, 4], "round {round}: every job ran");
            assert_eq!(
                started.try_iter().collect::<Vec<_>>(),
                [4],
                "once a thread was free"
            );
            until_alive(&pool, 0);
        }
    }

    #[test]
    fn a_job_submitted_as_a_thread_ends_runs_without_waiting_for_a_busy_one() {
        // One thread is held busy for the whole test; the other idles out after 2 ms, and jobs
        // are sent around that moment. A job left queued for a thread that had just ended
        // would wait behind the busy one, past the 2 s allowed.
        let (tx, done) = mpsc::channel();
        let pool = Pool::start(
            "test-store",
            2,
            Duration::from_millis(2),
            move |job: Option<mpsc::Receiver<()>>| match job {
                Some(held) => drop(held.recv()),
                None => tx.send(()).unwrap(),
            },
        );
        let (release, held) = mpsc::channel();
        assert!(pool.submit(Some(held)).is_ok());
        for i in 0..500u64 {
            std::thread::sleep(Duration::from_micros(1_500 + (i * 37) % 1_000));
            assert!(pool.submit(None).is_ok());
            assert!(
                done.recv_timeout(Duration::from_secs(2)).is_ok(),
                "job {i} ran while the other thread was busy"
            );
        }
        drop(release);
    }
}
