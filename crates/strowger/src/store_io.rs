//! The store threads: workers hand them location/credential operations, which may block on
//! Redis or Memcached, and get the results back through their inbox, so no worker ever waits
//! on the network. The local store never waits (memory, and a journal append that the kernel
//! buffers): its operations run on the worker itself, sparing two thread hand-offs per
//! REGISTER; so do the answers a network store has without I/O (recent credentials). A store
//! with a pipe (Memcached) also takes the common operations straight from each worker over the
//! worker's own connection (`PipeConn`), and the store threads only see the rest.

use crate::metrics::Board;
use crate::store_pool::{Pool, IDLE};
use crate::worker::{Envelope, Mailboxes};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use store::pipe::{self, Pending};
use switch::registrar::{Flow, Next, StoreOp, StoreResult};

/// The worker's poll token of its store connection.
pub const PIPE: Token = Token(998);
/// A reply not back within this long breaks the connection (the store threads' timeout).
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a broken or refused connection rests before the next try.
const RECONNECT: Duration = Duration::from_secs(1);

pub struct Job {
    worker: usize,
    token: u64,
    op: StoreOp,
}

/// A worker's handle on the store.
pub enum StoreQueue {
    Threads {
        worker: usize,
        pool: Pool<Job>,
        /// For what it answers without I/O (`answer_now`).
        store: Arc<dyn store::Store>,
        /// The worker's own connection, when the store has a pipe (boxed: the variants stay
        /// near in size).
        pipe: Option<Box<PipeConn>>,
    },
    Inline(Arc<dyn store::Store>, Arc<Board>),
}

impl StoreQueue {
    /// Runs `op` now (inline), or starts it: its result comes later, as `Envelope::Store` from
    /// a store thread or from [`StoreQueue::ready`].
    pub fn submit(&mut self, token: u64, op: StoreOp) -> Option<StoreResult> {
        let (worker, pool, store, pipe) = match self {
            StoreQueue::Inline(store, board) => return Some(timed(&**store, op, board)),
            StoreQueue::Threads {
                worker,
                pool,
                store,
                pipe,
            } => (*worker, pool, store, pipe),
        };
        if let Some(p) = pipe.as_mut().filter(|p| !p.connected) {
            p.connect(Instant::now());
        }
        let op = match pipe.as_mut().filter(|p| p.connected) {
            Some(pipe) => match switch::registrar::drive(&**store, op) {
                Next::Done(r) => return Some(r),
                // Sent, or back for the store threads.
                Next::Ask(ask, flow) => pipe.queue(&**store, token, &ask, flow, Instant::now())?,
                Next::Threads(op) => op,
            },
            None => match switch::registrar::answer_now(&**store, &op) {
                Some(r) => return Some(r),
                None => op,
            },
        };
        match pool.submit(Job { worker, token, op }) {
            Ok(()) => None,
            Err(_) => Some(Err("the store threads have stopped".into())),
        }
    }

    /// The store connection is ready (or its time is up): the operations it finished. Those it
    /// cannot finish go to the store threads.
    pub fn ready(&mut self, now: Instant) -> Vec<(u64, StoreResult)> {
        let StoreQueue::Threads {
            worker,
            pool,
            store,
            pipe: Some(pipe),
        } = self
        else {
            return Vec::new();
        };
        let (done, rest) = pipe.ready(&**store, now);
        for (token, op) in rest {
            let _ = pool.submit(Job {
                worker: *worker,
                token,
                op,
            });
        }
        done
    }

    /// Writes out what the operations started on this worker queued, once per loop turn
    /// rather than once each: the local store's journal lines (`LocationStore::commit`, before
    /// the replies leave) or the pipe's requests (one write, one wake-up of the backend, for a
    /// batch of REGISTERs).
    pub fn flush(&mut self) -> Result<(), String> {
        match self {
            StoreQueue::Inline(store, _) => store.commit().map_err(|e| e.to_string()),
            StoreQueue::Threads {
                pipe: Some(pipe), ..
            } => {
                pipe.flush();
                Ok(())
            }
            StoreQueue::Threads { .. } => Ok(()),
        }
    }

    /// Gives back the room the pipe's buffers grew to in a burst (at the 30 s sweep, before the
    /// worker's freed chunks are released: `Envelope::ReleaseCache`).
    pub fn shrink(&mut self) {
        if let StoreQueue::Threads {
            pipe: Some(pipe), ..
        } = self
        {
            pipe.out.shrink_to_fit();
            pipe.inbuf.shrink_to_fit();
            pipe.waiting.shrink_to_fit();
        }
    }

    /// Whether a reply on the pipe is overdue (`ready` then breaks the connection).
    pub fn overdue(&self, now: Instant) -> bool {
        matches!(self, StoreQueue::Threads { pipe: Some(p), .. } if p.overdue(now))
    }
}

/// Operations (by token) the pipe hands to the store threads.
type ForThreads = Vec<(u64, StoreOp)>;

/// An ask sent on the pipe whose reply is awaited.
struct Waiting {
    token: u64,
    flow: Flow,
    pending: Pending,
    sent: Instant,
}

/// A worker's connection to a store's pipe: requests are written as operations start and
/// replies read when the worker's poll reports the socket readable; they come back in order.
/// A connection that fails hands what it was waiting for to the store threads (which redo it
/// or fail it as the backend allows) and is tried again after [`RECONNECT`].
pub struct PipeConn {
    addr: SocketAddr,
    board: Arc<Board>,
    registry: Registry,
    stream: Option<TcpStream>,
    connected: bool,
    retry_at: Instant,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    waiting: VecDeque<Waiting>,
}

impl PipeConn {
    fn new(addr: SocketAddr, registry: Registry, board: Arc<Board>) -> PipeConn {
        PipeConn {
            addr,
            board,
            registry,
            stream: None,
            connected: false,
            retry_at: Instant::now(),
            out: Vec::new(),
            inbuf: Vec::new(),
            waiting: VecDeque::new(),
        }
    }

    /// Starts connecting when there is no connection and it is time to; asks go out once it
    /// is up (`ready` sees it writable).
    fn connect(&mut self, now: Instant) {
        if self.stream.is_none() && now >= self.retry_at {
            self.retry_at = now + RECONNECT;
            if let Ok(mut s) = TcpStream::connect(self.addr) {
                let _ = s.set_nodelay(true);
                let both = Interest::READABLE | Interest::WRITABLE;
                if self.registry.register(&mut s, PIPE, both).is_ok() {
                    self.stream = Some(s);
                }
            }
        }
    }

    /// Queues the request for `ask` (written by the next `write`), its reply awaited from
    /// `now`; the operation back when the pipe cannot take it.
    fn queue(
        &mut self,
        store: &dyn store::Store,
        token: u64,
        ask: &pipe::Ask,
        flow: Flow,
        now: Instant,
    ) -> Option<StoreOp> {
        let Some(pending) = store.pipe().and_then(|p| p.begin(ask, &mut self.out)) else {
            return Some(flow.fallback());
        };
        self.waiting.push_back(Waiting {
            token,
            flow,
            pending,
            sent: now,
        });
        None
    }

    /// Writes the queued requests, if any. A failed write is left for `ready`, which hands what
    /// waits to the store threads once the poll reports the broken connection.
    fn flush(&mut self) {
        if !self.out.is_empty() && self.write().is_err() {
            self.retry_at = Instant::now();
        }
    }

    /// Whether the oldest ask has waited for its reply past [`REPLY_TIMEOUT`].
    fn overdue(&self, now: Instant) -> bool {
        self.waiting
            .front()
            .is_some_and(|w| now.saturating_duration_since(w.sent) > REPLY_TIMEOUT)
    }

    /// Writes what is queued, as far as the socket takes it.
    fn write(&mut self) -> std::io::Result<()> {
        let Some(s) = self.stream.as_mut() else {
            return Err(ErrorKind::NotConnected.into());
        };
        while !self.out.is_empty() {
            match s.write(&self.out) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads and finishes what came back: the results, and the operations for the store
    /// threads (asks the pipe could not finish, or all that waited when the connection broke).
    fn ready(
        &mut self,
        store: &dyn store::Store,
        now: Instant,
    ) -> (Vec<(u64, StoreResult)>, ForThreads) {
        let (mut done, mut rest) = (Vec::new(), Vec::new());
        let Some(s) = self.stream.as_mut() else {
            return (done, rest);
        };
        if !self.connected && s.peer_addr().is_ok() {
            self.connected = true;
        }
        let mut broken = s.take_error().ok().flatten().is_some();
        let mut buf = [0u8; 16 * 1024];
        while !broken {
            match s.read(&mut buf) {
                Ok(0) => broken = true,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&buf[..n]);
                    // A short read took all there was: what comes later raises a new edge, so
                    // the read that would only say WouldBlock is spared.
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => broken = true,
            }
        }
        let mut at = 0;
        while let Some((reply, n)) = pipe::reply(&self.inbuf[at..]) {
            at += n;
            let Some(w) = self.waiting.pop_front() else {
                broken = true;
                break;
            };
            self.board
                .store
                .observe(now.saturating_duration_since(w.sent));
            // After an error line the replies may no longer pair with the requests: this one
            // goes to the store threads, and the connection starts over.
            let failed = matches!(reply, pipe::Reply::Failed(_));
            let answer = store.pipe().and_then(|p| p.finish(w.pending, reply));
            let next = match answer {
                Some(a) => w.flow.resume(a),
                None => Next::Threads(w.flow.fallback()),
            };
            match next {
                Next::Done(r) => done.push((w.token, r)),
                Next::Threads(op) => rest.push((w.token, op)),
                Next::Ask(ask, flow) => {
                    if let Some(op) = self.queue(store, w.token, &ask, flow, now) {
                        rest.push((w.token, op));
                    }
                }
            }
            if failed {
                broken = true;
                break;
            }
        }
        self.inbuf.drain(..at);
        broken |= self.overdue(now);
        broken |= self.write().is_err();
        if broken {
            if let Some(mut s) = self.stream.take() {
                let _ = self.registry.deregister(&mut s);
            }
            self.connected = false;
            self.retry_at = now + RECONNECT;
            self.out.clear();
            self.inbuf.clear();
            rest.extend(self.waiting.drain(..).map(|w| (w.token, w.flow.fallback())));
        }
        (done, rest)
    }
}

/// Makes a worker's queue, given the worker and its poll registry (for its pipe connection).
pub type Queues = Box<dyn Fn(usize, &Registry) -> StoreQueue>;

/// Starts the store threads over `store`, up to `threads` of them as the work needs (none when
/// `inline`); returns a factory of per-worker queues.
pub fn start(
    store: Arc<dyn store::Store>,
    inline: bool,
    mail: Arc<Mailboxes>,
    threads: usize,
    board: Arc<Board>,
) -> Queues {
    if inline {
        return Box::new(move |_, _| StoreQueue::Inline(store.clone(), board.clone()));
    }
    let pipe_addr = store
        .pipe()
        .and_then(|p| p.addr().to_socket_addrs().ok()?.next());
    let pool = {
        let (store, board) = (store.clone(), board.clone());
        Pool::start("store", threads, IDLE, move |job| {
            serve(&*store, &mail, &board, job)
        })
    };
    Box::new(move |worker, registry| StoreQueue::Threads {
        worker,
        pool: pool.clone(),
        store: store.clone(),
        pipe: pipe_addr.and_then(|a| {
            let registry = registry.try_clone().ok()?;
            Some(Box::new(PipeConn::new(a, registry, board.clone())))
        }),
    })
}

/// Runs `op` on the store, its latency counted for the metrics.
fn timed(store: &dyn store::Store, op: StoreOp, board: &Board) -> StoreResult {
    let start = Instant::now();
    let result = switch::registrar::run(store, op);
    board.store.observe(start.elapsed());
    result
}

/// Runs a job on a store thread and mails its result to its worker.
fn serve(store: &dyn store::Store, mail: &Mailboxes, board: &Board, job: Job) {
    let result = timed(store, job.op, board);
    let result = match store.commit() {
        Ok(()) => result,
        Err(e) => Err(e.to_string()),
    };
    mail.send(
        job.worker,
        Envelope::Store {
            token: job.token,
            result,
        },
    );
}
