//! Any bytes into the SDP parser and, when it parses, through the offer/answer code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(offer) = sdp::SessionDescription::parse(data) else { return };
    let _ = offer.to_string();
    let caps = sdp::Caps::default();
    let mut local = sdp::LocalSession::new(1, "127.0.0.1".parse().unwrap());
    if let Ok((answer, _)) = local.answer(&offer, &caps, 10000) {
        let reparsed = sdp::SessionDescription::parse(answer.to_string().as_bytes());
        assert!(reparsed.is_ok(), "strowger's own answer must parse");
    }
    let _ = sdp::accept_answer(&local.offer(&caps, 10000), &offer);
});
