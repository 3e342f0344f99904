//! Any bytes into the SDP parser and, when it parses, through the offer/answer code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(offer) = sdp::SessionDescription::parse(data) else {
        return;
    };
    let _ = offer.to_string();
    // A typed a=crypto: line must serialize back to the same key and suite.
    for c in offer.media.iter().flat_map(|m| m.crypto()) {
        let reparsed = sdp::SessionDescription::parse(
            format!("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 1 RTP/SAVP 0\r\na={c}\r\n").as_bytes(),
        )
        .expect("a typed crypto line re-parses");
        assert_eq!(reparsed.media[0].crypto().next(), Some(c));
    }
    let caps = sdp::Caps::default();
    let mut local = sdp::LocalSession::new(1, "127.0.0.1".parse().unwrap());
    if let Ok((answer, _)) = local.answer(&offer, &caps, 10000) {
        let reparsed = sdp::SessionDescription::parse(answer.to_string().as_bytes());
        assert!(reparsed.is_ok(), "strowger's own answer must parse");
    }
    let ours = local.offer(&caps, 10000);
    let _ = local.accept_answer(&ours, &offer);
});
