//! Any bytes into the SIP parser, as a datagram and as a stream, then every typed view and the
//! request checks: nothing may panic, and a parsed message must re-read its own headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sip::header::{HeaderName, NameAddr};
use sip::{CSeq, Message, Uri, Via};

fuzz_target!(|data: &[u8]| {
    for datagram in [true, false] {
        let Ok(m) = Message::parse(data, datagram) else { continue };
        assert!(m.consumed <= data.len());
        if m.is_request() {
            let _ = sip::validate::check_request(&m, &["timer"]);
            if let Some(u) = m.request_uri() {
                let _ = Uri::parse(u).map(|u| u.ip());
            }
        } else {
            let _ = sip::validate::check_response(&m);
        }
        for v in m.all(HeaderName::Via) {
            let _ = Via::parse(v).map(|v| (v.branch(), v.wants_rport()));
        }
        for h in [HeaderName::From, HeaderName::To, HeaderName::Contact, HeaderName::RecordRoute] {
            for v in m.all(h) {
                let _ = NameAddr::parse(v).map(|n| n.tag());
            }
        }
        let _ = m.header(HeaderName::CSeq).map(CSeq::parse);
        let _ = sip::dtmf_info::parse(m.header(HeaderName::ContentType).unwrap_or_default(), m.body());
        let src = "127.0.0.1:5060".parse().unwrap();
        let _ = sip::ResponseBuilder::new(&m, 400, "Bad Request", Some(src), Some("t")).finish(None);
    }
});
