//! The trunk hosts' DNS (RFC 3263 §4), off the workers: one thread runs a small tokio runtime
//! with hickory's resolver, whose cache keeps every record for its TTL. A worker's
//! `Event::Resolve` becomes a task there; its answer goes back to that worker's inbox
//! (`Envelope::Resolved`), so no worker ever waits on the network.
//!
//! The procedure: a host with a port is looked up by A/AAAA only; otherwise NAPTR (unless the
//! trunk names its transport) picks the SRV names of the services strowger speaks, or, without
//! NAPTR records, `_sip._udp` then `_sip._tcp` (just the trunk's transport's, when it names one);
//! the first SRV name with records gives the servers, by priority and weighted at random within
//! one (`switch::trunks::dns::order_srv`), each looked up by A/AAAA; with no SRV records at all,
//! the host's own A/AAAA on port 5060.

use crate::worker::{Envelope, Mailboxes};
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use sip::transaction::Transport;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switch::trunks::dns::{self as rfc3263, default_port, Naptr, Srv};
use switch::trunks::{DnsQuery, Resolved};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// An answer without records or TTL (a name given as an address) holds this long.
const DEFAULT_TTL: Duration = Duration::from_secs(300);

struct Job {
    worker: usize,
    token: u64,
    query: DnsQuery,
}

/// The workers' handle on the DNS thread.
#[derive(Clone)]
pub struct Dns {
    tx: UnboundedSender<Job>,
}

impl Dns {
    /// Starts the DNS thread: `server` answers the queries (None: the name servers of
    /// /etc/resolv.conf); answers go to the workers' inboxes.
    pub fn start(server: Option<SocketAddr>, mail: Arc<Mailboxes>) -> Result<Dns, String> {
        let (tx, rx) = unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the DNS thread's runtime: {e}"))?;
        std::thread::Builder::new()
            .name("dns".into())
            .spawn(move || runtime.block_on(serve(server, rx, mail)))
            .map_err(|e| format!("cannot start the DNS thread: {e}"))?;
        Ok(Dns { tx })
    }

    /// Looks `query` up for `worker`; the answer comes back as `Envelope::Resolved`.
    pub fn submit(&self, worker: usize, token: u64, query: DnsQuery) -> Result<(), String> {
        self.tx
            .send(Job {
                worker,
                token,
                query,
            })
            .map_err(|_| "the DNS thread has stopped".to_string())
    }
}

/// The resolver: `server`'s, or the system's.
fn resolver(server: Option<SocketAddr>) -> Result<TokioResolver, String> {
    let (config, mut opts) = match server {
        Some(addr) => {
            let mut udp = ConnectionConfig::udp();
            udp.port = addr.port();
            let mut tcp = ConnectionConfig::tcp();
            tcp.port = addr.port();
            let ns = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
            (
                ResolverConfig::from_name_servers(vec![ns]),
                ResolverOpts::default(),
            )
        }
        None => hickory_resolver::system_conf::read_system_conf().map_err(|e| {
            format!("cannot read /etc/resolv.conf: {e} (or set general.dns_server)")
        })?,
    };
    opts.timeout = Duration::from_secs(2);
    opts.attempts = 2;
    let mut b = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
    *b.options_mut() = opts;
    b.build()
        .map_err(|e| format!("cannot start the DNS resolver: {e}"))
}

async fn serve(server: Option<SocketAddr>, mut rx: UnboundedReceiver<Job>, mail: Arc<Mailboxes>) {
    // Made at the first lookup: a switch whose trunks are all given by address never needs it.
    let mut made = None;
    while let Some(job) = rx.recv().await {
        let resolver = made
            .get_or_insert_with(|| {
                let r = resolver(server).map(Arc::new);
                if let Err(e) = &r {
                    tracing::error!("{e}");
                }
                r
            })
            .clone();
        let mail = mail.clone();
        tokio::spawn(async move {
            let result = match resolver {
                Ok(r) => resolve(&r, &job.query).await,
                Err(e) => Err(e),
            };
            let token = job.token;
            mail.send(job.worker, Envelope::Resolved { token, result });
        });
    }
}

/// One lookup outside the workers' DNS thread, waiting for the answer (for tests and tools).
pub fn lookup_once(server: Option<SocketAddr>, query: &DnsQuery) -> Result<Resolved, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let r = resolver(server)?;
        resolve(&r, query).await
    })
}

/// A name as an absolute one, so no search domain is tried.
fn fqdn(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

/// The RFC 3263 procedure for one trunk host.
pub async fn resolve(r: &TokioResolver, q: &DnsQuery) -> Result<Resolved, String> {
    let mut until = Instant::now() + DEFAULT_TTL;
    let transport = q.transport.unwrap_or(Transport::Udp);
    if let Some(port) = q.port {
        let (targets, valid) = addresses(r, &q.name, port, transport).await?;
        return Ok(Resolved {
            targets,
            valid_until: valid,
        });
    }
    // NAPTR, unless the trunk names its transport (RFC 3263 §4.1).
    let mut services = Vec::new();
    if q.transport.is_none() {
        if let Ok(l) = r.lookup(fqdn(&q.name), RecordType::NAPTR).await {
            until = until.min(l.valid_until());
            let records: Vec<Naptr> = l
                .answers()
                .iter()
                .filter_map(|rec| match &rec.data {
                    RData::NAPTR(n) => Some(Naptr {
                        order: n.order,
                        preference: n.preference,
                        flags: String::from_utf8_lossy(&n.flags).into_owned(),
                        service: String::from_utf8_lossy(&n.services).into_owned(),
                        replacement: n.replacement.to_string(),
                    }),
                    _ => None,
                })
                .collect();
            services = rfc3263::naptr_services(&records, None);
        }
    }
    if services.is_empty() {
        services = rfc3263::srv_names(&q.name, q.transport);
    }
    for (transport, name) in services {
        let Ok(l) = r.lookup(fqdn(&name), RecordType::SRV).await else {
            continue;
        };
        let records: Vec<Srv> = l
            .answers()
            .iter()
            .filter_map(|rec| match &rec.data {
                RData::SRV(s) => Some(Srv {
                    priority: s.priority,
                    weight: s.weight,
                    port: s.port,
                    target: s.target.to_string().trim_end_matches('.').to_string(),
                }),
                _ => None,
            })
            .collect();
        if records.is_empty() {
            continue;
        }
        until = until.min(l.valid_until());
        let mut random = |n: u32| fastrand::u32(1..=n);
        let mut targets = Vec::new();
        for s in rfc3263::order_srv(records, &mut random) {
            if let Ok((mut found, valid)) = addresses(r, &s.target, s.port, transport).await {
                until = until.min(valid);
                targets.append(&mut found);
            }
        }
        if targets.is_empty() {
            return Err(format!("the SRV targets of {name} do not resolve"));
        }
        targets.dedup();
        return Ok(Resolved {
            targets,
            valid_until: until,
        });
    }
    // No SRV records: the host itself on its transport's default port (RFC 3263 §4.2).
    let (targets, valid) = addresses(r, &q.name, default_port(transport), transport).await?;
    Ok(Resolved {
        targets,
        valid_until: until.min(valid),
    })
}

/// A host's A/AAAA records as servers on `port`.
async fn addresses(
    r: &TokioResolver,
    host: &str,
    port: u16,
    transport: Transport,
) -> Result<(Vec<sip::transaction::Peer>, Instant), String> {
    let ips = r
        .lookup_ip(fqdn(host))
        .await
        .map_err(|e| format!("{host}: {e}"))?;
    let list: Vec<std::net::IpAddr> = ips.iter().collect();
    if list.is_empty() {
        return Err(format!("{host}: no A or AAAA records"));
    }
    Ok((rfc3263::peers(&list, port, transport), ips.valid_until()))
}
