//! Any bytes into the SIP parser, as a datagram and as a stream, then every typed view and the
//! request checks: nothing may panic, a parsed message must re-read its own headers, its kept
//! fields must read as the headers parsed directly, and a proxy's splice of it must not panic.
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
        for _ in 0..2 {
            if let Some(v) = m.header(HeaderName::Via) {
                assert_eq!(m.top_via(), Via::parse(v));
            }
            if let Some(v) = m.header(HeaderName::From) {
                assert_eq!(m.from_addr(), NameAddr::parse(v));
            }
            if let Some(v) = m.header(HeaderName::To) {
                assert_eq!(m.to_addr(), NameAddr::parse(v));
            }
            if let Some(v) = m.header(HeaderName::CSeq) {
                assert_eq!(m.cseq().cloned(), CSeq::parse(v));
            }
            if let Some(u) = m.request_uri() {
                assert_eq!(m.uri(), Uri::parse(u));
            }
        }
        let mut w = sip::Rewrite::new(&m);
        w.remove(HeaderName::Via, 0);
        w.remove(HeaderName::Route, 0);
        w.replace(HeaderName::MaxForwards, 0, "69");
        w.remove_all(HeaderName::ProxyAuthorization);
        w.top().push_str("Via: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK-f\r\n");
        let _ = Message::parse(&w.finish(), datagram);
        let _ = sip::dtmf_info::parse(m.header(HeaderName::ContentType).unwrap_or_default(), m.body());
        let src = "127.0.0.1:5060".parse().unwrap();
        let _ = sip::ResponseBuilder::new(&m, 400, "Bad Request", Some(src), Some("t")).finish(None);
    }
});
