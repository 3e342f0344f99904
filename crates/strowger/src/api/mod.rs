//! The control API: HTTP routes under `/api/v1` and a WebSocket event stream, served by axum on
//! a thread of its own with a one-thread tokio runtime. It never touches a worker's state: it
//! posts commands to the workers' inboxes (`Envelope::Api`) and awaits their answers, and it
//! fans out the notices the workers publish to the [`Feed`] (docs/architecture.md).

mod call_commands;
mod calls;
mod cdrs;
mod console;
mod directory;
mod events;
mod feed;
mod https;
mod originate;
mod peers;
mod reload;
mod server;
mod token;
mod translation;

pub use feed::Feed;
pub use server::router;
pub use token::{load_or_create as token, TOKEN_FILE};

use crate::worker::{Counters, Mailboxes};
use std::sync::Arc;
use switch::config::Config;

/// What the routes share: the way to the workers, the event feed, the token.
pub struct Shared {
    pub mail: Arc<Mailboxes>,
    pub workers: usize,
    pub feed: Arc<Feed>,
    pub counters: Arc<Counters>,
    pub token: String,
    pub max_event_clients: usize,
    /// The store the registrar and `strowger user` use (directory.rs).
    pub store: Arc<dyn store::Store>,
    /// SIGHUP's reload (`POST /api/v1/reload`), and the configuration in force: routes read it
    /// from here on each request, so what a reload changed (users, contexts) shows at once.
    pub reloader: crate::reload::Reloader,
    /// What `/metrics` renders.
    pub metrics: Arc<crate::metrics::Source>,
}

/// What the API reaches in the rest of the process, handed over at start.
pub struct Links {
    pub mail: Arc<Mailboxes>,
    pub workers: usize,
    pub feed: Arc<Feed>,
    pub counters: Arc<Counters>,
    pub store: Arc<dyn store::Store>,
    pub reloader: crate::reload::Reloader,
    pub metrics: Arc<crate::metrics::Source>,
}

/// The send buffer of every API connection (inherited from the listening socket; the kernel
/// doubles it). Fixed rather than autotuned to megabytes: an event client that stops reading
/// then holds little kernel memory, and falls `api.event_backlog` events behind soon enough
/// to be closed.
const SEND_BUFFER: usize = 32 * 1024;

/// Binds `api.listen` and serves the API on a thread named `api`; returns its base URL. None:
/// the API is off (`api.listen = ""`), or its port is taken — logged as an error naming the
/// key, while the switch goes on taking calls: the management plane must not take the calls
/// down with it (and two switches started on one machine with the default configuration both
/// run). A certificate that cannot be read is an error: the API never falls back to plain HTTP.
pub fn start(cfg: &Config, links: Links) -> Result<Option<String>, String> {
    let Some(addr) = cfg.api.listen else {
        return Ok(None);
    };
    let token = match &cfg.api.token {
        Some(t) => t.clone(),
        None => token::load_or_create(&cfg.general.data_dir)?,
    };
    let tls = cfg
        .api
        .tls
        .as_ref()
        .map(crate::tls::server_config)
        .transpose()?;
    let listener = match std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .and_then(|l| {
            socket2::SockRef::from(&l)
                .set_send_buffer_size(SEND_BUFFER)
                .map(|_| l)
        }) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("no control API: cannot listen on tcp:{addr}: {e} — is another strowger running? (change api.listen or --api-listen, \"\" for no API)");
            return Ok(None);
        }
    };
    let Links {
        mail,
        workers,
        feed,
        counters,
        store,
        reloader,
        metrics,
    } = links;
    let shared = Arc::new(Shared {
        mail,
        workers,
        feed,
        counters,
        token,
        max_event_clients: cfg.api.max_event_clients,
        store,
        reloader,
        metrics,
    });
    let url = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
    std::thread::Builder::new()
        .name("api".into())
        .spawn(move || serve(listener, tls, shared))
        .map_err(|e| format!("cannot start the API thread: {e}"))?;
    Ok(Some(url))
}

fn serve(
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!("the API cannot start its runtime: {e}"),
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => return tracing::error!("the API cannot use its socket: {e}"),
        };
        let served = match tls {
            None => axum::serve(listener, router(shared)).await,
            Some(tls) => match https::HttpsListener::new(listener, tls) {
                Ok(l) => axum::serve(l, router(shared)).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = served {
            tracing::error!("the API stopped: {e}");
        }
    });
}
