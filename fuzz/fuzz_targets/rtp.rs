//! Any datagram as RTP, as an RFC 4733 event payload and as an RTCP compound: nothing may panic,
//! and a packet that parses must report a payload inside the datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = rtp::RtpPacket::parse(data) {
        assert!(p.payload().len() <= data.len());
        let _ = rtp::TelephoneEvent::parse(p.payload());
    }
    for packet in rtp::rtcp::parse_compound(data) {
        let _ = packet;
    }
});
