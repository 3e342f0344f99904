//! Starts the workers: sockets, mailboxes, the RTP port slices; then hands the main thread to
//! the supervisor (signals, reload, drain) until they stop.

use crate::host::Host;
use crate::rtp_io::MediaSockets;
use crate::worker::{self, Counters, Crew, Mailboxes, Sockets, Worker};
use mio::{Poll, Token, Waker};
use sip::transaction::Transport;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use switch::config::Config;
use switch::{Engine, Settings};

/// Runs the server with `cfg`, loaded from `launch` (read again on reload), until it stops.
pub fn run(cfg: Config, launch: crate::launch::Launch) -> Result<(), String> {
    crate::allocator::fix_thresholds();
    let signals = crate::supervisor::signals()?;
    // Before any thread starts: growing the table later stalls a worker (crate::fds).
    let fds = crate::fds::wanted(cfg.rtp.ports.pairs(), crate::fds::limit());
    if let Err(e) = crate::fds::reserve(fds) {
        tracing::warn!("cannot make room for {fds} file descriptors up front: {e}");
    }
    let workers = match cfg.general.workers {
        // One per core, up to the 64 a worker's wake-up mask holds.
        0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(64)),
        n => n,
    };
    let listen: Vec<(Transport, SocketAddr)> = cfg
        .sip
        .listen
        .iter()
        .map(|l| (l.transport.into(), l.addr))
        .collect();
    let udp: Vec<SocketAddr> = listen
        .iter()
        .filter(|(t, _)| *t == Transport::Udp)
        .map(|(_, a)| *a)
        .collect();
    // TCP and TLS listeners: TLS connections are TCP connections wrapped in rustls.
    let tcp: Vec<(Transport, SocketAddr)> = listen
        .iter()
        .filter(|(t, _)| t.is_stream())
        .copied()
        .collect();
    // SO_REUSEPORT would let a second strowger share the port and take half the traffic:
    // a plain bind first proves no other process holds it.
    for a in &udp {
        std::net::UdpSocket::bind(a).map_err(|e| {
            format!("cannot listen for SIP on udp:{a}: {e} — is another strowger running? (change sip.listen or --sip-listen)")
        })?;
    }
    let media_ip = udp
        .first()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip());
    let data_dir = cfg.general.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|e| {
        format!(
            "cannot create data directory {}: {e} (set general.data_dir or --data-dir)",
            data_dir.display()
        )
    })?;
    let cdr_path = data_dir.join(&cfg.general.cdr);
    if let Some(name) = &cfg.general.security_log {
        let path = data_dir.join(name);
        crate::logging::open_security_log(&path).map_err(|e| {
            format!(
                "cannot open the security log {}: {e} (set general.security_log, \"\" for none)",
                path.display()
            )
        })?;
    }
    let (cdr_db, cdr_writer) = crate::cdr::start(&cfg.cdr, &data_dir)?.unzip();
    // Calls a killed run left up get their CDRs before this run's workers start their journals.
    let mut recovery = Host::new(data_dir.clone(), cdr_path.clone()).with_cdr_db(cdr_db.clone());
    crate::journal_io::recover_left_open(&cdr_path, |cdr| recovery.cdr(cdr));
    drop(recovery);
    let dialplan = Arc::new(cfg.dialplan.clone());
    let music = Arc::new(crate::music::load(&cfg.music, &data_dir));
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let slots = Arc::new(switch::CallSlots::new(cfg.general.max_calls as usize));
    let rendezvous = Arc::new(switch::Rendezvous::default());
    let board = Arc::new(switch::queues::Board::new(&cfg.queues));

    let (lo, hi) = (cfg.rtp.ports.lo, cfg.rtp.ports.hi);
    // Each worker gets an even-aligned slice of the RTP range.
    let per = (cfg.rtp.ports.pairs() / workers) as u32;
    if per == 0 {
        return Err(format!(
            "rtp.ports {lo}-{hi} is too small for {workers} workers"
        ));
    }

    let mut polls = Vec::new();
    let mut senders = Vec::new();
    let mut inboxes = Vec::new();
    let mut wakers = Vec::new();
    for _ in 0..workers {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        wakers.push(Arc::new(
            Waker::new(poll.registry(), Token(0)).map_err(|e| e.to_string())?,
        ));
        polls.push(poll);
        let (tx, rx) = mpsc::channel();
        senders.push(tx);
        inboxes.push(rx);
    }
    let mail = Arc::new(Mailboxes::new(senders, wakers));
    let feed = Arc::new(crate::api::Feed::new(cfg.api.event_backlog));
    let store = store::open_with_cache(&cfg.registrar.store, cfg.registrar.cache_entries)
        .map_err(|e| format!("registrar.store: {e}"))?;
    let supervisor_store = store.clone();
    let cluster = match cfg.cluster.node(&cfg.registrar.store, &listen) {
        Ok(Some(node)) => {
            tracing::info!("cluster: conference rooms, call queues and park slots are claimed in the shared store as node {node}, queue logins kept there");
            Some(node)
        }
        Ok(None) if cfg.cluster.node_uri.is_some() => {
            tracing::warn!("cluster.node_uri is set but registrar.store is not Redis: conference rooms, call queues and park slots stay on this node");
            None
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!("{e}");
            None
        }
    };
    if cluster.is_some() && cfg.voicemail.store.is_none() {
        tracing::warn!("cluster: voicemail.store is \"data_dir\": each node keeps its own voicemail boxes; set voicemail.store = \"redis://HOST:PORT\" to share them between the nodes");
    }
    load_users(&*store, &cfg.users)?;
    let backend = match cfg.registrar.store.parse::<store::StoreUrl>() {
        Ok(store::StoreUrl::Local(_)) => "local",
        Ok(store::StoreUrl::Memcached(..)) => "memcached",
        _ => "redis",
    };
    let inline = backend == "local";
    let metrics = Arc::new(crate::metrics::Board::new(workers, backend));
    let source = Arc::new(crate::metrics::Source {
        board: metrics.clone(),
        counters: counters.clone(),
        store: store.clone(),
    });
    let api_store = store.clone();
    let queues = crate::store_io::start(
        store.clone(),
        inline,
        mail.clone(),
        STORE_THREADS,
        metrics.clone(),
    );
    let registrar = switch::registrar::Registrar::new(&cfg.registrar, secret()?);
    // Trunk hosts that are names are resolved on a DNS thread (RFC 3263), started whatever the
    // trunks at start are: a reload may add one by name (the resolver is made at its first use).
    let dns = Some(crate::dns::Dns::start(
        cfg.general.dns_server,
        mail.clone(),
    )?);
    let tts = crate::tts::Tts::start(cfg.ivr.tts.clone(), &cfg.general.data_dir, mail.clone())?;
    let boxes =
        store::voicemail::Mailboxes::new(&cfg.general.data_dir, cfg.voicemail.store.as_deref())
            .map_err(|e| format!("voicemail.store: {e}"))?;
    let voicemail = crate::voicemail_io::VoicemailIo::start(boxes, workers, mail.clone())?;
    let sounds = std::path::Path::new(&cfg.ivr.sounds_dir);
    if !sounds.join("digits").is_dir() {
        tracing::warn!(
            "sounds.dir {} has no digits/: `say` will be silent — install asterisk-core-sounds-en-wav or set sounds.dir in the configuration",
            sounds.display()
        );
    }
    let iax = cfg
        .iax2
        .listen
        .map(|a| (a, switch::iax::Shared::new(cfg.iax2.clone())));
    // The IAX2 port: worker 0 reads it; every worker answers the calls peers open from it.
    let iax_port = match &iax {
        Some((addr, _)) => {
            let sock = iax_socket(*addr).map_err(|e| {
                format!("cannot listen for IAX2 on udp:{addr}: {e} — is another IAX2 server running? (change iax2.listen or --iax-listen)")
            })?;
            Some(sock)
        }
        None => None,
    };

    // Codec costs on this machine, for the cheapest transcoding paths: measured now, so no call
    // waits for them.
    codec::set_speex_quality(cfg.rtp.speex_quality);
    codec::set_opus_options(cfg.rtp.opus);
    let measured = std::time::Instant::now();
    codec::translate::Graph::global();
    let measured = measured.elapsed();

    // TCP connections may take what the RTP sockets leave of the descriptor limit.
    let limit = crate::fds::limit();
    let rtp_fds = crate::fds::rtp_fds(
        cfg.rtp.ports.pairs(),
        cfg.general.max_calls as usize,
        workers,
        worker::SPARE_PAIRS,
    );
    let tcp_max = crate::fds::tcp_cap(cfg.security.tcp_max as usize, rtp_fds, limit);
    if tcp_max < cfg.security.tcp_max as usize && !tcp.is_empty() {
        tracing::warn!(
            "at most {tcp_max} TCP connections (security.tcp_max is {}): the file descriptor \
             limit {limit} must also hold {rtp_fds} RTP sockets — raise it (ulimit -n, \
             LimitNOFILE=) or narrow rtp.ports",
            cfg.security.tcp_max
        );
    }
    let tcp_limits = crate::sip_io::TcpLimits::new(&cfg, tcp_max);
    let tls_listen = tcp
        .iter()
        .any(|(t, _)| matches!(t, Transport::Tls | Transport::Wss));
    let tls = Arc::new(crate::sip_io::tls::Tls::new(
        &cfg.sip, &data_dir, tls_listen,
    )?);
    let priority = cfg.general.realtime_priority;
    let mut handles = Vec::new();
    for (id, (poll, inbox)) in polls.into_iter().zip(inboxes).enumerate() {
        let mut settings = Settings::new(
            &cfg,
            &listen,
            media_ip,
            slots.clone(),
            registrar.clone(),
            id,
            workers,
        );
        settings.rendezvous = rendezvous.clone();
        settings.cluster = cluster.clone();
        settings.queues = board.clone();
        settings.music = music.clone();
        let udp_socks = worker::udp_sockets(&udp).map_err(|e| {
            format!("cannot listen for SIP on UDP {udp:?}: {e} (change sip.listen or --sip-listen)")
        })?;
        let listeners = if id == 0 {
            tcp.iter()
                .map(|(t, a)| crate::sip_io::tcp_listener(*a).map(|l| (l, *a, *t)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cannot listen for SIP on TCP {tcp:?}: {e} (change sip.listen or --sip-listen)"))?
        } else {
            Vec::new()
        };
        let slice_lo = lo + (id as u32 * per * 2) as u16;
        let slice_hi = slice_lo + (per * 2) as u16;
        let mut engine = Engine::new(
            settings,
            dialplan.clone(),
            std::time::Instant::now(),
            std::time::SystemTime::now(),
        );
        let (iax_sock, iax_reply) = match (&iax, &iax_port) {
            (Some((addr, shared)), Some(port)) => {
                // Worker 0 reads the IAX2 port (peers call and register there) and hands each
                // datagram to the worker of its call; the others place their calls from an
                // ephemeral port of the same address, and answer the calls they were handed
                // from a clone of the IAX2 port.
                let clone = || port.try_clone().map_err(|e| format!("IAX2 port: {e}"));
                let (sock, reply) = if id == 0 {
                    (clone()?, None)
                } else {
                    let bind = SocketAddr::new(addr.ip(), 0);
                    let sock = iax_socket(bind).map_err(|e| {
                        format!("cannot bind an IAX2 socket on udp:{bind}: {e} (change iax2.listen or --iax-listen)")
                    })?;
                    (sock, Some(clone()?))
                };
                let now = std::time::Instant::now();
                engine.enable_iax2(switch::iax::Iax::new(
                    shared.clone(),
                    id as u16,
                    workers as u16,
                    now,
                ));
                (Some(mio::net::UdpSocket::from_std(sock)), reply)
            }
            _ => (None, None),
        };
        let host = Host::new(data_dir.clone(), cdr_path.clone())
            .with_store(queues(id, poll.registry()))
            .with_dns(dns.clone())
            .with_tts(tts.clone())
            .with_voicemail(voicemail.clone())
            .with_cdr_db(cdr_db.clone())
            .with_journal(crate::journal_io::path(&cdr_path, id));
        engine.keep_journal();
        let crew = Crew {
            id,
            workers,
            inbox,
            mail: mail.clone(),
            stop: stop.clone(),
            counters: counters.clone(),
            board: metrics.clone(),
            feed: feed.clone(),
        };
        let sockets = Sockets {
            udp: udp_socks,
            listeners,
            iax: iax_sock,
            iax_reply,
        };
        let media = MediaSockets::new(media_ip, slice_lo, slice_hi);
        let mut w = Worker::new(crew, poll, sockets, engine, media, host, &cfg.sip)
            .map_err(|e| e.to_string())?;
        w.tcp = tcp_limits;
        w.tls = Some(tls.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || {
                    realtime(id, priority);
                    w.run()
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let reloader = crate::reload::Reloader::new(launch, cfg.clone(), mail.clone(), workers, store);
    // After the workers: a command posted before a worker runs would only wait in its inbox.
    let api = crate::api::start(
        &cfg,
        crate::api::Links {
            mail: mail.clone(),
            workers,
            feed,
            counters: counters.clone(),
            store: api_store,
            reloader: reloader.clone(),
            metrics: source,
        },
    )?;
    tracing::info!(
        "strowger {}: {workers} worker(s); SIP on {}; RTP {lo}-{hi};{}{} data in {}; codec costs measured in {} ms",
        env!("CARGO_PKG_VERSION"),
        listen
            .iter()
            .map(|(t, a)| format!("{}:{a}", crate::logging::transport_name(*t)))
            .collect::<Vec<_>>()
            .join(", "),
        iax.as_ref()
            .map_or(String::new(), |(a, _)| format!(" IAX2 on udp:{a};")),
        api.map_or(String::new(), |a| format!(" API on {a};")),
        data_dir.display(),
        measured.as_millis()
    );
    crate::notify::notify("READY=1\nSTATUS=Taking calls");
    crate::supervisor::Supervisor {
        signals,
        reloader,
        slots,
        mail,
        workers,
        stop,
        store: supervisor_store,
    }
    .run();
    // The workers hold the only other handles on the CDR writer: it finishes once they stop.
    drop(cdr_db);
    for h in handles {
        let _ = h.join();
    }
    if let Some(w) = cdr_writer {
        w.stop();
    }
    tracing::info!(
        "stopped ({} unparseable datagrams dropped, {} dropped from banned or flooding sources, {} TCP connections refused, {} TLS handshakes cut)",
        counters.dropped_unparseable.load(Ordering::Relaxed),
        counters.dropped_guard.load(Ordering::Relaxed),
        counters.tcp_refused.load(Ordering::Relaxed),
        counters.tls_handshakes_cut.load(Ordering::Relaxed)
    );
    Ok(())
}

/// A non-blocking IAX2 socket. The IAX2 port carries every call's media: 1,000 calls are 50,000
/// datagrams a second, which overflowed the default receive buffer (≈ 200 kB) between two reads
/// and lost a third of the audio; 4 MiB holds 80 ms of that.
fn iax_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(addr)?;
    sock.set_nonblocking(true)?;
    let s = socket2::SockRef::from(&sock);
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(sock)
}

/// Store threads for Redis and Memcached. Each waits on one round trip at a time, so their number
/// bounds the store operations in flight; with 2, REGISTERs queued for seconds past ~5,000/s on
/// Memcached (bench/RESULTS.md). Threads idle for `store_pool::IDLE` end.
const STORE_THREADS: usize = 8;

/// `[[users]]` from the configuration, written to the store (as HA1s) before calls are taken,
/// and again on reload.
pub fn load_users(s: &dyn store::Store, users: &[switch::config::User]) -> Result<(), String> {
    for u in users {
        let mut c = switch::registrar::user_credentials(u);
        // Forwarding is set from the phones, not the file: a restart keeps it.
        if let Ok(Some(old)) = s.user(&u.user, &u.domain) {
            c.forward = old.forward;
        }
        s.put_user(&c).map_err(|e| {
            format!(
                "cannot load [[users]] {}@{} into the store: {e}",
                u.user, u.domain
            )
        })?;
    }
    Ok(())
}

/// The per-process secret that signs digest nonces.
pub fn secret() -> Result<[u8; 32], String> {
    use std::io::Read;
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .map_err(|e| format!("cannot read /dev/urandom for the nonce secret: {e}"))?;
    Ok(k)
}

/// Puts the calling worker thread under SCHED_FIFO at `priority` (0: leaves it alone), so its
/// media ticks run when due even when other programs keep every core busy.
fn realtime(worker: usize, priority: u8) {
    if priority == 0 {
        return;
    }
    let param = libc::sched_param {
        sched_priority: priority.into(),
    };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid parameter block.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(
            "worker {worker}: cannot take real-time priority {priority} (SCHED_FIFO): {} \
             — run strowger as root or with CAP_SYS_NICE, or set general.realtime_priority = 0",
            std::io::Error::last_os_error()
        );
    }
}
