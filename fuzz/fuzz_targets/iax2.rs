//! Any datagram as an IAX2 frame, its information elements and trunk entries, then into an
//! endpoint (call tokens on and off): nothing may panic, and parsed parts stay inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    match iax2::Frame::parse(data) {
        Ok(iax2::Frame::Full(f)) => {
            assert!(f.payload.len() <= data.len());
            if let Ok(ies) = iax2::ie::Ies::parse(f.payload) {
                for (_, d) in ies.iter() {
                    assert!(d.len() <= f.payload.len());
                }
                let _ = ies.addr(iax2::ie::APPARENT_ADDR);
            }
        }
        Ok(iax2::Frame::Trunk(t)) => {
            let total: usize = t.entries().map(|e| e.payload.len()).sum();
            assert!(total <= data.len());
        }
        _ => {}
    }
    let now = Instant::now();
    let from = "192.0.2.1:4569".parse().unwrap();
    for tokens in [true, false] {
        let cfg = iax2::Config {
            call_tokens: tokens,
            ..Default::default()
        };
        let mut ep = iax2::Endpoint::with_seed(cfg, [3; 16], now);
        ep.handle(from, data, now);
        ep.handle(from, data, now + Duration::from_millis(1));
        ep.handle_timeout(now + Duration::from_secs(30));
        while ep.poll_transmit().is_some() {}
        while ep.poll_event().is_some() {}
    }
});
