//! The metrics the process shares with `/metrics`: each worker's engine counts in a table of
//! its own and copies it here once a second ([`Board::publish`], relaxed atomic stores), with
//! its thread's CPU time; store operations add their latency as they finish (two relaxed
//! atomic adds per operation). A scrape reads the atomics and renders
//! (`switch::metrics::Scrape`): nothing on a packet's or a message's path waits for it or
//! takes a lock. `GET /metrics` is one of the control API's routes ([`routes`]).

use crate::worker::Counters;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switch::metrics::{Counts, Scrape, LEN, STORE_LATENCY};

/// What every worker published last, and the store's latency.
pub struct Board {
    workers: Vec<Published>,
    pub store: StoreLatency,
}

struct Published {
    counts: Box<[AtomicU64]>,
    cpu_ns: AtomicU64,
}

impl Board {
    /// A board for `workers` workers of a store of kind `backend` ("local", "redis",
    /// "memcached").
    pub fn new(workers: usize, backend: &'static str) -> Board {
        let published = (0..workers).map(|_| Published {
            counts: (0..LEN).map(|_| AtomicU64::new(0)).collect(),
            cpu_ns: AtomicU64::new(0),
        });
        Board {
            workers: published.collect(),
            store: StoreLatency {
                backend,
                table: (0..STORE_LATENCY.table_len())
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            },
        }
    }

    /// Worker `id`'s counts and its thread's CPU time so far.
    pub fn publish(&self, id: usize, counts: &Counts, cpu: Duration) {
        let Some(p) = self.workers.get(id) else {
            return;
        };
        for (a, v) in p.counts.iter().zip(counts.0.iter()) {
            a.store(*v, Relaxed);
        }
        p.cpu_ns.store(cpu.as_nanos() as u64, Relaxed);
    }

    /// The scrape of what was published, with the process's own counters and the bindings
    /// the location store holds (if it can count them).
    pub fn scrape(&self, counters: &Counters, bindings: Option<u64>) -> Scrape {
        let load = |table: &[AtomicU64]| table.iter().map(|a| a.load(Relaxed)).collect::<Vec<_>>();
        let workers = self.workers.iter().map(|p| {
            let mut counts = Counts::default();
            for (v, a) in counts.0.iter_mut().zip(p.counts.iter()) {
                *v = a.load(Relaxed);
            }
            (counts, p.cpu_ns.load(Relaxed) as f64 / 1e9)
        });
        Scrape {
            workers: workers.collect(),
            unparseable: counters.dropped_unparseable.load(Relaxed),
            refused: counters.dropped_guard.load(Relaxed),
            recordings_incomplete: counters.recordings_incomplete.load(Relaxed),
            bindings,
            store: vec![(self.store.backend, load(&self.store.table))],
            nodes: Vec::new(),
        }
    }
}

/// What a scrape reads: the board, the process's counters, the location store (for its
/// count of bindings). Held by the HTTP server that serves `/metrics`.
pub struct Source {
    pub board: Arc<Board>,
    pub counters: Arc<Counters>,
    pub store: Arc<dyn store::Store>,
}

impl Source {
    /// `/metrics`' body: Prometheus text (OpenMetrics 1.0, [`CONTENT_TYPE`]); the dispatch
    /// nodes are labelled as `cfg` (the configuration in force) names them.
    pub fn render(&self, cfg: &switch::config::Config) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let bindings = self.store.bindings(now.as_secs());
        let mut scrape = self.board.scrape(&self.counters, bindings);
        scrape.nodes = cfg
            .dispatch
            .iter()
            .flat_map(|s| s.nodes.iter().map(|n| (s.name.clone(), n.uri.clone())))
            .collect();
        scrape.render()
    }
}

/// `GET /metrics`, merged into the API's router behind its bearer token: Prometheus sends the
/// token (`authorization: credentials:`), so the traffic figures are no one else's to read.
pub fn routes() -> Router<Arc<crate::api::Shared>> {
    Router::new().route("/metrics", get(scrape))
}

async fn scrape(State(s): State<Arc<crate::api::Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        s.metrics.render(&s.reloader.config()),
    )
        .into_response()
}

/// The media type of [`Source::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Store operations' latency ([`STORE_LATENCY`]), for one backend.
pub struct StoreLatency {
    backend: &'static str,
    table: Box<[AtomicU64]>,
}

impl StoreLatency {
    pub fn observe(&self, took: Duration) {
        let (bucket, sum, add) = STORE_LATENCY.slots(took.as_secs_f64());
        self.table[bucket].fetch_add(1, Relaxed);
        self.table[sum].fetch_add(add, Relaxed);
    }
}

/// CPU time (user and system) the calling thread has used: `getrusage(RUSAGE_THREAD)`.
pub fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage the call may write.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}
