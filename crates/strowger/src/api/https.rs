//! The API's listener when it speaks HTTPS: TCP connections are accepted here and their TLS
//! handshakes run each in a task of its own, so a client that stalls its handshake holds up
//! nobody else; axum gets the finished streams. Handshakes under way and their time are
//! bounded: a port open to a network must not let a crowd of half-open clients pile up.

use axum::serve::Listener;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Handshakes under way at once; more connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 64;
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct HttpsListener {
    done: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl HttpsListener {
    /// Starts accepting on `tcp` (call inside the API's runtime).
    pub fn new(tcp: TcpListener, tls: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, done) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = TlsAcceptor::from(tls);
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!("API: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            drop(slot);
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!("API: TLS handshake with {peer}: {e}"),
                        Err(_) => tracing::debug!("API: TLS handshake with {peer} timed out"),
                    }
                });
            }
        });
        Ok(HttpsListener { done, local })
    }
}

impl Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.done.recv().await {
            Some(c) => c,
            // The accepting task ended (its runtime is stopping): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
