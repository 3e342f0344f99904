//! `strowger-load iax2`: IAX2 calls with 20 ms µ-law voice from one endpoint (crates/iax2) on
//! one UDP socket: NEW (call token, MD5) → ANSWER → voice for `hold` → HANGUP. Counts the
//! voice frames sent and received per call so an echo extension shows what came back.

use iax2::{format, CallId, Config, Endpoint, Event, NewCall};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

pub struct Params {
    pub target: SocketAddr,
    pub ext: String,
    pub username: Option<String>,
    pub secret: Option<String>,
    pub calls: u64,
    pub rate: f64,
    pub hold: Duration,
    /// Voice in meta trunk frames.
    pub trunk: bool,
    pub max_time: Duration,
    pub quiet: bool,
}

#[derive(Default, Debug)]
pub struct Outcome {
    pub attempted: u64,
    pub answered: u64,
    pub completed: u64,
    pub failed: u64,
    pub frames_sent: u64,
    pub frames_received: u64,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn json(&self) -> String {
        format!(
            "{{\"attempted\":{},\"answered\":{},\"completed\":{},\"failed\":{},\"frames_sent\":{},\"frames_received\":{},\"elapsed_s\":{:.3}}}",
            self.attempted,
            self.answered,
            self.completed,
            self.failed,
            self.frames_sent,
            self.frames_received,
            self.elapsed.as_secs_f64()
        )
    }
}

/// One µ-law frame of a 1 kHz tone.
fn frame() -> Vec<u8> {
    (0..160)
        .map(|i| {
            let x = (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 8000.0).sin() * 8000.0;
            codec::G711::Pcmu.encode_sample(x as i16)
        })
        .collect()
}

pub fn run(p: &Params) -> std::io::Result<Outcome> {
    let sock = UdpSocket::bind(SocketAddr::new(
        if p.target.is_ipv6() {
            "::1".parse().unwrap()
        } else {
            "127.0.0.1".parse().unwrap()
        },
        0,
    ))?;
    let s2 = socket2::SockRef::from(&sock);
    let _ = s2.set_recv_buffer_size(8 << 20);
    let _ = s2.set_send_buffer_size(8 << 20);
    sock.set_nonblocking(true)?;
    let start = Instant::now();
    let mut ep = Endpoint::new(
        Config {
            trunk: p.trunk,
            max_calls_per_ip: usize::MAX,
            ..Config::default()
        },
        start,
    );
    let voice = frame();
    let mut out = Outcome::default();
    // Answered calls and when each hangs up.
    let mut up: HashMap<CallId, Instant> = HashMap::new();
    let mut pending: HashMap<CallId, ()> = HashMap::new();
    let mut next_call = start;
    let gap = Duration::from_secs_f64(1.0 / p.rate.max(0.001));
    let mut next_frame = start;
    let mut next_report = start + Duration::from_secs(1);
    let mut buf = [0u8; 2048];
    loop {
        let now = Instant::now();
        if now - start > p.max_time {
            out.failed += (up.len() + pending.len()) as u64;
            break;
        }
        while out.attempted < p.calls && now >= next_call {
            let c = NewCall {
                called_number: p.ext.clone(),
                calling_number: Some("7000".into()),
                username: p.username.clone(),
                secret: p.secret.clone(),
                format: format::ULAW,
                capability: format::ULAW,
                ..NewCall::default()
            };
            match ep.call(p.target, &c, now) {
                Ok(id) => {
                    pending.insert(id, ());
                }
                Err(_) => out.failed += 1,
            }
            out.attempted += 1;
            next_call += gap;
        }
        // Every call's frame, once per 20 ms.
        if now >= next_frame {
            for id in up.keys() {
                if ep.send_voice(*id, format::ULAW, &voice, now).is_ok() {
                    out.frames_sent += 1;
                }
            }
            ep.flush_trunks();
            next_frame += Duration::from_millis(20);
            if next_frame < now {
                next_frame = now + Duration::from_millis(20);
            }
        }
        let ending: Vec<CallId> = up
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(c, _)| *c)
            .collect();
        for id in ending {
            up.remove(&id);
            if ep.hangup(id, 16, now).is_ok() {
                out.completed += 1;
            }
        }
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            ep.handle(from, &buf[..n], now);
        }
        ep.handle_timeout(now);
        while let Some(e) = ep.poll_event() {
            match e {
                Event::Answered { call } if pending.remove(&call).is_some() => {
                    out.answered += 1;
                    up.insert(call, now + p.hold);
                }
                Event::Voice { .. } => out.frames_received += 1,
                Event::Hangup { call, .. }
                    if pending.remove(&call).is_some() || up.remove(&call).is_some() =>
                {
                    out.failed += 1;
                }
                _ => {}
            }
        }
        while let Some(t) = ep.poll_transmit() {
            let _ = sock.send_to(&t.bytes, t.to);
        }
        if out.attempted >= p.calls && up.is_empty() && pending.is_empty() {
            // Let the last HANGUPs be acknowledged.
            let end = Instant::now() + Duration::from_millis(300);
            while Instant::now() < end {
                while let Ok((n, from)) = sock.recv_from(&mut buf) {
                    ep.handle(from, &buf[..n], Instant::now());
                }
                ep.handle_timeout(Instant::now());
                while let Some(t) = ep.poll_transmit() {
                    let _ = sock.send_to(&t.bytes, t.to);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            break;
        }
        if !p.quiet && now >= next_report {
            eprintln!(
                "[{:6.1} s] iax2 calls: attempted {} up {} completed {} failed {} | frames tx {} rx {}",
                (now - start).as_secs_f64(),
                out.attempted,
                up.len(),
                out.completed,
                out.failed,
                out.frames_sent,
                out.frames_received
            );
            next_report += Duration::from_secs(1);
        }
        let wake = [
            Some(next_frame),
            ep.poll_timeout(),
            (out.attempted < p.calls).then_some(next_call),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_millis(5));
        let nap = wake
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(2));
        if !nap.is_zero() {
            std::thread::sleep(nap);
        }
    }
    out.elapsed = start.elapsed();
    Ok(out)
}
