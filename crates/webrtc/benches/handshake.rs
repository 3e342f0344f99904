//! `cargo bench -p webrtc --bench handshake`: what a WebRTC call's set-up costs strowger — the
//! server side of a DTLS-SRTP handshake (strowger answers a browser's actpass with passive),
//! and the ICE check before it. Both ends run in this process; only the server's calls are
//! timed (with the thread's CPU clock), so the figure is set-ups per second per core.

use std::time::{Duration, Instant};

use webrtc::{stun, Certificate, Dtls, DtlsState, IceCredentials, IceLite, Role};

/// CPU time of this thread.
fn cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let n: u32 = std::env::var("HANDSHAKES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let (browser, ours) = (Certificate::generate().unwrap(), Certificate::process());
    let now = Instant::now();
    let src = "192.0.2.1:50000".parse().unwrap();
    let (mut server_cpu, mut client_cpu) = (Duration::ZERO, Duration::ZERO);
    for i in 0..n {
        let t = cpu();
        // strowger's side: the leg's agent and DTLS server, as `Engine::set_webrtc` makes them.
        let local = IceCredentials::random();
        let mut ice = IceLite::new(local.clone(), Some("brws".into()));
        let mut server =
            Dtls::new(&ours, Role::Server, browser.fingerprint().clone(), now).unwrap();
        server_cpu += cpu() - t;

        let t = cpu();
        let check = stun::binding_request(
            &[i as u8; 12],
            &format!("{}:brws", local.ufrag),
            true,
            &local.pwd,
        );
        let mut client =
            Dtls::new(&browser, Role::Client, ours.fingerprint().clone(), now).unwrap();
        client_cpu += cpu() - t;

        let t = cpu();
        ice.on_stun(&check, src).unwrap();
        server_cpu += cpu() - t;
        for _ in 0..4 {
            let mut to_server = Vec::new();
            let t = cpu();
            while let Some(d) = client.poll_transmit() {
                to_server.push(d);
            }
            client_cpu += cpu() - t;
            let t = cpu();
            for d in &to_server {
                server.handle(d, now);
            }
            let mut to_client = Vec::new();
            while let Some(d) = server.poll_transmit() {
                to_client.push(d);
            }
            server_cpu += cpu() - t;
            let t = cpu();
            for d in &to_client {
                client.handle(d, now);
            }
            client_cpu += cpu() - t;
        }
        assert!(matches!(server.state(), DtlsState::Connected(_)));
        assert!(matches!(client.state(), DtlsState::Connected(_)));
    }
    let per = |d: Duration| d.as_secs_f64() / f64::from(n);
    println!(
        "{n} DTLS-SRTP set-ups (ICE check + handshake, ECDHE P-256, ECDSA P-256 certificates)\n\
         server side (strowger): {:.0} µs CPU each, {:.0} set-ups per second per core\n\
         client side (the browser's part, for comparison): {:.0} µs CPU each",
        per(server_cpu) * 1e6,
        1.0 / per(server_cpu),
        per(client_cpu) * 1e6,
    );
}
