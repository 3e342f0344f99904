//! `strowger-load call …`: places calls with RTP against a SIP server and reports what it saw;
//! `strowger-load register …` registers users; `strowger-load iax2 …` places IAX2 calls;
//! `strowger-load floor …` / `floor-echo …` measure the kernel's own cost for held calls' packets,
//! `floor-relay …` for a proxied call's;
//! `strowger-load flood …` sends attack traffic (unauthenticated INVITEs, wrong digests).

use clap::{Parser, Subcommand, ValueEnum};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strowger_load::floor::Sockets;
use strowger_load::report::{process_cpu, Progress, Report};
use strowger_load::run::{Addressing, Config, RtpMode, Share, Thread};

#[derive(Parser)]
#[command(name = "strowger-load", version, about = "SIP/RTP load generator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Rtp {
    Echo,
    Send,
    None,
}

#[derive(Subcommand)]
enum Cmd {
    /// Place calls: INVITE (SDP offer of one codec) → 200 → ACK → hold → BYE.
    Call {
        /// The server, HOST:PORT (an IP literal).
        #[arg(long)]
        target: SocketAddr,
        /// The extension dialled (the Request-URI's user part).
        #[arg(long)]
        ext: String,
        /// Calls to place in all.
        #[arg(long, default_value_t = 1)]
        calls: u64,
        /// New calls per second.
        #[arg(long, default_value_t = 10.0)]
        rate: f64,
        /// Seconds each call is held before the BYE (fractions allowed; 0: BYE right after ACK).
        #[arg(long, default_value_t = 0.0)]
        hold: f64,
        /// What to do with RTP: echo what arrives, send 50 packets/s, or nothing.
        #[arg(long, value_enum, default_value_t = Rtp::Echo)]
        rtp: Rtp,
        /// The one codec offered, in 20 ms packets on an 8 kHz clock: pcmu, pcma, gsm, g722,
        /// g726, speex, ilbc20.
        #[arg(long, default_value = "pcmu")]
        codec: String,
        /// Print the final report as one JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// Local address for SIP and RTP sockets.
        #[arg(long, default_value = "127.0.0.1")]
        local: IpAddr,
        /// Load threads, each with its own SIP socket and its share of calls and rate.
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Most calls up at once (0: no limit), like SIPp's -l.
        #[arg(long, default_value_t = 0)]
        limit: u64,
        /// RTP port range LO-HI: each load thread binds the first free even port of its share
        /// and all its calls use it (packets are told apart by the server port they come from).
        #[arg(long, default_value = "40000-59999")]
        rtp_ports: String,
        /// A socket (an even port of the thread's share) per call instead: each call then has an
        /// address of its own, as phones and trunks do, for a server that tells calls apart by
        /// their far end's address (strowger's rtp.shared_ports).
        #[arg(long, conflicts_with = "address_per_call")]
        socket_per_call: bool,
        /// An address per call without a socket per call: the thread's one RTP socket is bound
        /// to the wildcard address on the loopback device and each call offers its
        /// own loopback address, 127.(16+thread).x.y (--local must be 127.0.0.1 or another IPv4
        /// loopback address).
        #[arg(long)]
        address_per_call: bool,
        /// Give up after this many seconds; calls still up count as failed ("unfinished").
        #[arg(long, default_value_t = 3600.0)]
        max_time: f64,
        /// SIP over TLS (RFC 3261 §26), one connection per load thread that carries all its
        /// calls, trusting the server certificates in this PEM file (for strowger's self-signed
        /// demo certificate: its data_dir/tls/cert.pem). --target is then the TLS listener.
        #[arg(long, value_name = "CA_PEM")]
        tls_ca: Option<std::path::PathBuf>,
        /// SDES-SRTP (RFC 4568, needs --tls-ca): offer RTP/SAVP with an AES_CM_128_HMAC_SHA1_80
        /// key per call, protect what is sent and authenticate and decrypt what arrives.
        #[arg(long, requires = "tls_ca")]
        srtp: bool,
        /// No progress line on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Register users FIRST, FIRST+1, … once each (unique addresses of record), answering
    /// digest challenges with --auth; reports the rate, failures and latency percentiles.
    Register {
        /// The registrar, HOST:PORT (an IP literal).
        #[arg(long)]
        target: SocketAddr,
        /// How many users (one REGISTER each).
        #[arg(long, default_value_t = 1)]
        users: u64,
        /// REGISTERs begun per second.
        #[arg(long, default_value_t = 100.0)]
        rate: f64,
        /// Every user's password (answers 401/407); without it a challenge counts as a failure.
        #[arg(long, value_name = "PASSWORD")]
        auth: Option<String>,
        /// The first user name (a number; the others count up from it).
        #[arg(long, default_value_t = 100_000)]
        first: u64,
        /// The registrar's domain (Request-URI sip:DOMAIN, To sip:USER@DOMAIN).
        #[arg(long, default_value = "strowger")]
        domain: String,
        /// Expires asked for, seconds.
        #[arg(long, default_value_t = 3600)]
        expires: u32,
        /// Local address to register from.
        #[arg(long, default_value = "127.0.0.1")]
        local: IpAddr,
        /// Local port (0: any). A run repeated from the same port refreshes its contacts, as a
        /// phone does, instead of adding new ones.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Give up after this many seconds; registrations under way count as "unfinished".
        #[arg(long, default_value_t = 600.0)]
        max_time: f64,
        /// Print the report as one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Place IAX2 calls: NEW (call token, MD5) → ANSWER → 20 ms µ-law voice → HANGUP.
    Iax2 {
        /// The server, HOST:PORT (an IP literal).
        #[arg(long)]
        target: SocketAddr,
        #[arg(long)]
        ext: String,
        /// Peer name to authenticate as.
        #[arg(long)]
        username: Option<String>,
        #[arg(long)]
        secret: Option<String>,
        #[arg(long, default_value_t = 1)]
        calls: u64,
        #[arg(long, default_value_t = 10.0)]
        rate: f64,
        /// Seconds of voice per call before the HANGUP.
        #[arg(long, default_value_t = 0.0)]
        hold: f64,
        /// Voice in meta trunk frames.
        #[arg(long)]
        trunk: bool,
        #[arg(long, default_value_t = 3600.0)]
        max_time: f64,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        quiet: bool,
    },
    /// The packets of held playback+echo calls and nothing else, for the kernel's own cost:
    /// a connected UDP socket per call (or one for all, or one with an address per call),
    /// 50 packets/s each to --peer, echoes read back. Prints what it sent and got back, as JSON.
    Floor {
        /// The echo (`strowger-load floor-echo`), HOST:PORT.
        #[arg(long)]
        peer: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        calls: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// One socket for all calls, echoes read 64 at a time.
        #[arg(long)]
        one_socket: bool,
        /// One socket for all calls, each call's packets from a 127/8 address of its own: the
        /// echo then sees what a server with shared RTP ports does.
        #[arg(long, conflicts_with = "one_socket")]
        address_per_call: bool,
    },
    /// Attack traffic from many loopback addresses (127.2.x.y) for --seconds: unauthenticated
    /// INVITEs and REGISTERs with wrong digests; prints what was sent and answered, as JSON.
    Flood {
        /// The server, HOST:PORT (a loopback address).
        #[arg(long)]
        target: SocketAddr,
        /// The user the INVITEs call and the digests guess the password of.
        #[arg(long, default_value = "1001")]
        user: String,
        #[arg(long, default_value_t = 20_000)]
        invites: u32,
        #[arg(long, default_value_t = 5_000)]
        digests: u32,
        /// Source addresses the requests rotate over.
        #[arg(long, default_value_t = 1000)]
        sources: u32,
        /// At most 120.
        #[arg(long, default_value_t = 15.0)]
        seconds: f64,
        /// Send only the INVITE stream, from this one address (a source the server banned).
        #[arg(long)]
        from: Option<std::net::Ipv4Addr>,
    },
    /// A proxy's floor: passes every datagram arriving at --listen on to --to, and those from
    /// --to back to the last other source, unread, for --seconds; prints how many each way.
    FloorRelay {
        #[arg(long)]
        listen: SocketAddr,
        /// The callee, HOST:PORT.
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
    /// Sends every datagram arriving at --listen back to its source, for --seconds.
    FloorEcho {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
}

fn main() {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Flood {
            target,
            user,
            invites,
            digests,
            sources,
            seconds,
            from,
        } => {
            let f = strowger_load::flood::Flood {
                target,
                user,
                invites_per_s: invites,
                digests_per_s: digests,
                sources,
                seconds,
                from,
            };
            match strowger_load::flood::run(&f) {
                Ok(o) => println!("{}", o.to_json()),
                Err(e) => {
                    eprintln!("strowger-load: flood: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Floor {
            peer,
            calls,
            seconds,
            one_socket,
            address_per_call,
        } => match strowger_load::floor::play(
            peer,
            calls,
            seconds,
            match (one_socket, address_per_call) {
                (_, true) => Sockets::AddressPerCall,
                (true, false) => Sockets::One,
                (false, false) => Sockets::PerCall,
            },
        ) {
            Ok(o) => println!(r#"{{"sent": {}, "received": {}}}"#, o.sent, o.received),
            Err(e) => {
                eprintln!("strowger-load: floor: cannot open {calls} sockets to {peer}: {e}");
                std::process::exit(1);
            }
        },
        Cmd::FloorRelay {
            listen,
            to,
            seconds,
        } => match strowger_load::floor::relay(listen, to, seconds) {
            Ok(r) => println!(
                r#"{{"to_callee": {}, "to_caller": {}}}"#,
                r.to_callee, r.to_caller
            ),
            Err(e) => {
                eprintln!("strowger-load: floor-relay: cannot listen on {listen}: {e}");
                std::process::exit(1);
            }
        },
        Cmd::FloorEcho { listen, seconds } => match strowger_load::floor::echo(listen, seconds) {
            Ok(n) => println!(r#"{{"echoed": {n}}}"#),
            Err(e) => {
                eprintln!("strowger-load: floor-echo: cannot listen on {listen}: {e}");
                std::process::exit(1);
            }
        },
        Cmd::Register {
            target,
            users,
            rate,
            auth,
            first,
            domain,
            expires,
            local,
            port,
            max_time,
            json,
        } => {
            let p = strowger_load::register::Params {
                target,
                local: SocketAddr::new(local, port),
                domain,
                first,
                users,
                rate,
                password: auth,
                expires,
            };
            match strowger_load::register::run(p, Duration::from_secs_f64(max_time.max(0.001))) {
                Ok(mut o) if json => println!("{}", o.json()),
                Ok(mut o) => println!("{}", o.text()),
                Err(e) => {
                    eprintln!("strowger-load: cannot register from {local}: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Iax2 {
            target,
            ext,
            username,
            secret,
            calls,
            rate,
            hold,
            trunk,
            max_time,
            json,
            quiet,
        } => iax2_calls(
            strowger_load::iax::Params {
                target,
                ext,
                username,
                secret,
                calls,
                rate,
                hold: Duration::from_secs_f64(hold.max(0.0)),
                trunk,
                max_time: Duration::from_secs_f64(max_time.max(0.001)),
                quiet,
            },
            json,
        ),
        Cmd::Call {
            target,
            ext,
            calls,
            rate,
            hold,
            rtp,
            codec,
            json,
            local,
            threads,
            limit,
            rtp_ports,
            socket_per_call,
            address_per_call,
            max_time,
            tls_ca,
            srtp,
            quiet,
        } => {
            let Some(ports) = parse_range(&rtp_ports) else {
                eprintln!("strowger-load: --rtp-ports wants LO-HI with LO < HI");
                std::process::exit(2);
            };
            let Some(codec) = codec::Format::from_name(&codec)
                .filter(|f| f.packet_ms() == 20 && f.rtp_clock() == 8000)
            else {
                eprintln!(
                    "strowger-load: --codec {codec}: not a codec with 20 ms packets on an 8 kHz \
                     clock; use pcmu, pcma, gsm, g722, g726, speex or ilbc20"
                );
                std::process::exit(2);
            };
            let cfg = Config {
                target,
                ext,
                calls,
                rate,
                hold: Duration::from_secs_f64(hold.max(0.0)),
                rtp: match rtp {
                    Rtp::Echo => RtpMode::Echo,
                    Rtp::Send => RtpMode::Send,
                    Rtp::None => RtpMode::None,
                },
                codec,
                local_ip: local,
                limit,
                rtp_ports: ports,
                addressing: match (socket_per_call, address_per_call) {
                    (true, _) => Addressing::SocketPerCall,
                    (_, true) => Addressing::AddressPerCall,
                    _ => Addressing::Shared,
                },
                max_time: Duration::from_secs_f64(max_time.max(0.001)),
                tls_ca,
                srtp,
            };
            let mut report = call(cfg, threads.max(1), quiet);
            if json {
                println!("{}", report.json());
            } else {
                println!("{}", report.text());
            }
        }
    }
}

fn iax2_calls(p: strowger_load::iax::Params, json: bool) {
    match strowger_load::iax::run(&p) {
        Ok(o) if json => println!("{}", o.json()),
        Ok(o) => println!("{o:?}"),
        Err(e) => {
            eprintln!("strowger-load: cannot open a UDP socket for IAX2: {e}");
            std::process::exit(1);
        }
    }
}

fn parse_range(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.split_once('-')?;
    let (lo, hi): (u16, u16) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let lo = (lo + 1) & !1;
    (lo + 2 <= hi).then_some((lo, hi))
}

fn call(cfg: Config, threads: u32, quiet: bool) -> Report {
    let run = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
        % 1_000_000_000) as u32
        ^ std::process::id();
    let run = run % 1_000_000_000;
    let stop = Arc::new(AtomicBool::new(false));
    let t = threads as u64;
    let span = ((cfg.rtp_ports.1 - cfg.rtp_ports.0) / threads as u16) & !1;
    let mut handles = Vec::new();
    let mut progress = Vec::new();
    for i in 0..threads {
        let share = Share {
            thread: i,
            run,
            calls: cfg.calls / t + u64::from((i as u64) < cfg.calls % t),
            rate: cfg.rate / t as f64,
            limit: if cfg.limit == 0 {
                0
            } else {
                (cfg.limit / t).max(1)
            },
            ports: (
                cfg.rtp_ports.0 + span * i as u16,
                cfg.rtp_ports.0 + span * (i as u16 + 1),
            ),
        };
        let p = Arc::new(Progress::default());
        progress.push(p.clone());
        let th = match Thread::new(cfg.clone(), share, p) {
            Ok(th) => th,
            Err(e) => {
                let what = match cfg.tls_ca {
                    Some(_) => format!("connect over TLS from {} to {}", cfg.local_ip, cfg.target),
                    None => format!("open its SIP and RTP sockets on {}", cfg.local_ip),
                };
                eprintln!("strowger-load: cannot {what}: {e}");
                std::process::exit(1);
            }
        };
        let stop = stop.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("load-{i}"))
                .spawn(move || th.run(&stop))
                .expect("spawn load thread"),
        );
    }
    let start = Instant::now();
    let mut last = (start, 0u64, 0u64, 0u64);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        if now - last.0 < Duration::from_secs(1) {
            continue;
        }
        let sum = |f: fn(&Progress) -> u64| progress.iter().map(|p| f(p)).sum::<u64>();
        let attempted = sum(|p| p.attempted.load(Ordering::Relaxed));
        let rx = sum(|p| p.rtp_rx.load(Ordering::Relaxed));
        let tx = sum(|p| p.rtp_tx.load(Ordering::Relaxed));
        let dt = (now - last.0).as_secs_f64();
        if !quiet {
            eprintln!(
                "[{:6.1} s] calls: attempted {attempted} up {} completed {} failed {} | {:.0} calls/s | \
                 rtp rx {:.0}/s tx {:.0}/s | retransmissions {}",
                (now - start).as_secs_f64(),
                sum(|p| p.up.load(Ordering::Relaxed)),
                sum(|p| p.completed.load(Ordering::Relaxed)),
                sum(|p| p.failed.load(Ordering::Relaxed)),
                (attempted - last.1) as f64 / dt,
                (rx - last.2) as f64 / dt,
                (tx - last.3) as f64 / dt,
                sum(|p| p.retransmissions.load(Ordering::Relaxed)),
            );
        }
        last = (now, attempted, rx, tx);
    }
    let mut report = Report::default();
    for h in handles {
        if let Ok(r) = h.join() {
            report.merge(r);
        }
    }
    report.cpu = process_cpu();
    report
}
