use std::net::{IpAddr, SocketAddr};

use sdp::{Caps, Codec, Direction, LocalSession, NegotiationError, SessionDescription};

const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));

fn sdp(text: &str) -> SessionDescription {
    text.parse().unwrap()
}

fn answer(offer: &str) -> Result<(SessionDescription, sdp::Negotiated), NegotiationError> {
    LocalSession::new(42, LOCAL).answer(&sdp(offer), &Caps::default(), 10000)
}

/// SIPp's built-in uac scenario (also what `-rtp_echo` runs against).
const SIPP_UAC: &str = "v=0\r\n\
o=user1 53655765 2353687637 IN IP4 127.0.0.1\r\n\
s=-\r\n\
c=IN IP4 127.0.0.1\r\n\
t=0 0\r\n\
m=audio 6000 RTP/AVP 0\r\n\
a=rtpmap:0 PCMU/8000\r\n";

#[test]
fn sipp_uac_offer() {
    let (answer, n) = answer(SIPP_UAC).unwrap();
    assert_eq!(n.pt, 0);
    assert_eq!(n.codec, Codec::PCMU);
    assert_eq!(n.dtmf_pt, None, "not offered");
    assert_eq!(n.remote, "127.0.0.1:6000".parse::<SocketAddr>().unwrap());
    assert_eq!(
        n.remote_rtcp,
        "127.0.0.1:6001".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(n.direction, Direction::SendRecv);
    assert_eq!(n.ptime, 20);
    assert_eq!(
        answer.to_string(),
        "v=0\r\n\
o=strowger 42 42 IN IP4 127.0.0.1\r\n\
s=strowger\r\n\
c=IN IP4 127.0.0.1\r\n\
t=0 0\r\n\
m=audio 10000 RTP/AVP 0\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=ptime:20\r\n\
a=sendrecv\r\n"
    );
}

#[test]
fn static_payload_type_without_rtpmap() {
    let offer = SIPP_UAC
        .replace("a=rtpmap:0 PCMU/8000\r\n", "")
        .replace("RTP/AVP 0", "RTP/AVP 18 8");
    let (_, n) = answer(&offer).unwrap();
    assert_eq!((n.pt, n.codec), (8, Codec::PCMA));
}

/// baresip-style: many codecs, telephone-event at two clocks, ptime, rtcp-mux-ish extras.
const BARESIP: &str = "v=0\r\n\
o=- 1215 3960 IN IP4 192.0.2.10\r\n\
s=-\r\n\
c=IN IP4 192.0.2.10\r\n\
t=0 0\r\n\
m=audio 10278 RTP/AVP 96 9 8 0 102 100\r\n\
b=AS:128\r\n\
a=rtpmap:96 opus/48000/2\r\n\
a=fmtp:96 stereo=1;sprop-stereo=1\r\n\
a=rtpmap:9 G722/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:102 telephone-event/48000\r\n\
a=rtpmap:100 telephone-event/8000\r\n\
a=fmtp:100 0-15\r\n\
a=rtcp:10279\r\n\
a=ptime:30\r\n\
a=sendrecv\r\n\
a=label:1\r\n";

#[test]
fn baresip_offer_uses_local_preference_and_offerers_dtmf_pt() {
    let (answer, n) = answer(BARESIP).unwrap();
    assert_eq!(
        (n.pt, n.codec),
        (0, Codec::PCMU),
        "PCMU is first in our caps"
    );
    assert_eq!(n.dtmf_pt, Some(100), "offerer's number, 8 kHz clock");
    assert_eq!(n.ptime, 30);
    assert_eq!(
        n.remote_rtcp,
        "192.0.2.10:10279".parse::<SocketAddr>().unwrap()
    );
    let m = &answer.media[0];
    assert_eq!(m.formats, ["0", "100"]);
    assert_eq!(m.encoding(100), Some(("telephone-event", 8000)));
    assert_eq!(m.fmtp(100), Some("0-15"));

    let pcma_first = Caps {
        codecs: vec![Codec::PCMA, Codec::PCMU],
        dtmf_pt: None,
    };
    let (answer, n) = LocalSession::new(1, LOCAL)
        .answer(&sdp(BARESIP), &pcma_first, 10000)
        .unwrap();
    assert_eq!((n.pt, n.dtmf_pt), (8, None));
    assert_eq!(answer.media[0].formats, ["8"]);
}

#[test]
fn hold_offers_mirror_direction() {
    let cases = [
        ("a=sendonly\r\n", "127.0.0.1", Direction::RecvOnly),
        ("a=recvonly\r\n", "127.0.0.1", Direction::SendOnly),
        ("a=inactive\r\n", "127.0.0.1", Direction::Inactive),
        ("", "0.0.0.0", Direction::RecvOnly),
        ("a=recvonly\r\n", "0.0.0.0", Direction::Inactive),
    ];
    for (attr, addr, ours) in cases {
        let offer = format!(
            "{}{attr}",
            SIPP_UAC.replace("IP4 127.0.0.1\r\nt", &format!("IP4 {addr}\r\nt"))
        );
        let (answer, n) = self::answer(&offer).unwrap();
        assert_eq!(n.direction, ours, "{attr:?} {addr}");
        assert_eq!(answer.media[0].direction(&answer), ours);
        assert_eq!(
            answer.connection,
            Some(LOCAL),
            "we never answer with 0.0.0.0"
        );
    }
}

#[test]
fn ipv6_offer() {
    let offer = "v=0\r\n\
o=bob 280744730 28977631 IN IP6 host.example.com\r\n\
s= \r\n\
c=IN IP6 2001:db8::9:1\r\n\
t=0 0\r\n\
m=audio 22334 RTP/AVP 0\r\n";
    let local: IpAddr = "::1".parse().unwrap();
    let (answer, n) = LocalSession::new(7, local)
        .answer(&sdp(offer), &Caps::default(), 10002)
        .unwrap();
    assert_eq!(
        n.remote,
        "[2001:db8::9:1]:22334".parse::<SocketAddr>().unwrap()
    );
    let text = answer.to_string();
    assert!(text.contains("o=strowger 7 7 IN IP6 ::1\r\n"), "{text}");
    assert!(text.contains("c=IN IP6 ::1\r\n"), "{text}");
}

#[test]
fn other_streams_refused_with_port_zero() {
    let offer = format!(
        "{SIPP_UAC}m=video 6002 RTP/AVP 31\r\na=rtpmap:31 H261/90000\r\nm=audio 0 RTP/AVP 0\r\n"
    );
    let offer = offer.replacen("m=audio 6000", "m=audio 0 RTP/AVP 8\r\nm=audio 6000", 1);
    let (answer, n) = answer(&offer).unwrap();
    assert_eq!(n.remote.port(), 6000);
    let ports: Vec<_> = answer
        .media
        .iter()
        .map(|m| (m.kind.as_str(), m.port))
        .collect();
    assert_eq!(
        ports,
        [("audio", 0), ("audio", 10000), ("video", 0), ("audio", 0)]
    );
    assert_eq!(answer.media[2].formats, ["31"]);
    assert!(answer.media[2].attributes.is_empty());
}

/// An SDES offer with an RTP fallback stream to a session without SDES (clear-text
/// signalling): the SAVP stream and its key are refused, and no key comes back in the answer.
#[test]
fn sdes_stream_refused_while_rtp_fallback_is_answered() {
    let offer = SIPP_UAC.replacen(
        "m=audio 6000",
        "m=audio 7000 RTP/SAVP 0\r\n\
         a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\n\
         m=audio 6000",
        1,
    );
    assert_eq!(sdp(&offer).media[0].crypto().count(), 1);
    let (answer, n) = answer(&offer).unwrap();
    assert_eq!(n.remote.port(), 6000);
    assert_eq!(
        (answer.media[0].proto.as_str(), answer.media[0].port),
        ("RTP/SAVP", 0)
    );
    assert!(answer.media.iter().all(|m| m.crypto().next().is_none()));
    assert!(!answer.to_string().contains("crypto"));
}

#[test]
fn no_common_codec() {
    let offer = SIPP_UAC
        .replace("RTP/AVP 0", "RTP/AVP 96 18")
        .replace("0 PCMU/8000", "96 opus/48000/2");
    assert_eq!(answer(&offer).unwrap_err(), NegotiationError::NoCommonCodec);
    let srtp = SIPP_UAC.replace("RTP/AVP", "RTP/SAVP");
    assert_eq!(answer(&srtp).unwrap_err(), NegotiationError::Srtp);
    let no_c = SIPP_UAC.replace("c=IN IP4 127.0.0.1\r\n", "");
    assert_eq!(
        answer(&no_c).unwrap_err(),
        NegotiationError::NoConnectionAddress
    );
}

#[test]
fn offer_then_answer_in_ack() {
    let mut session = LocalSession::new(1000, LOCAL);
    let offer = session.offer(&Caps::default(), 12000);
    assert_eq!(
        offer.to_string(),
        "v=0\r\n\
o=strowger 1000 1000 IN IP4 127.0.0.1\r\n\
s=strowger\r\n\
c=IN IP4 127.0.0.1\r\n\
t=0 0\r\n\
m=audio 12000 RTP/AVP 0 8 101\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-16\r\n\
a=ptime:20\r\n\
a=sendrecv\r\n"
    );
    // The remote is another strowger preferring PCMA.
    let caps = Caps {
        codecs: vec![Codec::PCMA, Codec::PCMU],
        dtmf_pt: Some(101),
    };
    let (their_answer, theirs) = LocalSession::new(5, "192.0.2.5".parse().unwrap())
        .answer(&offer, &caps, 30000)
        .unwrap();
    assert_eq!(
        theirs.remote,
        "127.0.0.1:12000".parse::<SocketAddr>().unwrap()
    );
    let ours = accept_answer(&offer, &their_answer).unwrap();
    assert_eq!(
        (ours.pt, ours.codec, ours.dtmf_pt),
        (8, Codec::PCMA, Some(101))
    );
    assert_eq!(
        ours.remote,
        "192.0.2.5:30000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(ours.direction, Direction::SendRecv);

    let refused = their_answer
        .to_string()
        .replace("m=audio 30000", "m=audio 0");
    assert_eq!(
        accept_answer(&offer, &sdp(&refused)).unwrap_err(),
        NegotiationError::NoCommonCodec
    );
}

#[test]
fn version_increments_only_when_sdp_changes() {
    let mut session = LocalSession::new(9, LOCAL);
    let first = session.offer(&Caps::default(), 12000);
    let refresh = session.offer(&Caps::default(), 12000);
    assert_eq!(
        refresh.origin.session_version, 9,
        "unchanged re-offer keeps version"
    );
    let moved = session.offer(&Caps::default(), 12002);
    assert_eq!(moved.origin.session_version, 10);
    assert_eq!(moved.origin.session_id, first.origin.session_id);
    let (answer, _) = session
        .answer(&sdp(SIPP_UAC), &Caps::default(), 12002)
        .unwrap();
    assert_eq!(answer.origin.session_version, 11);
    assert_eq!(session.version(), 11);
}

/// Every codec the media engine has: static numbers where RFC 3551 gives one, dynamic ones
/// from 96 (skipping telephone-event's) with rtpmap channels and fmtp; an answer to another
/// strowger picks the first it prefers and both sides agree on the numbers.
#[test]
fn offer_with_dynamic_codecs() {
    let caps = Caps {
        codecs: vec![
            Codec::OPUS,
            Codec::SPEEX16,
            Codec::SPEEX,
            Codec::G722,
            Codec::G726_32,
            Codec::L16,
            Codec::GSM,
            Codec::PCMU,
        ],
        dtmf_pt: Some(97),
    };
    let offer = LocalSession::new(1, LOCAL).offer(&caps, 12000).to_string();
    for line in [
        "m=audio 12000 RTP/AVP 96 98 99 9 100 101 3 0 97\r\n",
        "a=rtpmap:96 opus/48000/2\r\n",
        "a=fmtp:96 useinbandfec=1; maxplaybackrate=16000; sprop-maxcapturerate=16000\r\n",
        "a=rtpmap:98 speex/16000\r\na=fmtp:98 vbr=off\r\n",
        "a=rtpmap:99 speex/8000\r\n",
        "a=rtpmap:9 G722/8000\r\n",
        "a=rtpmap:100 G726-32/8000\r\n",
        "a=rtpmap:101 L16/8000\r\n",
        "a=rtpmap:3 GSM/8000\r\n",
        "a=rtpmap:97 telephone-event/8000\r\n",
    ] {
        assert!(offer.contains(line), "{line:?} missing from:\n{offer}");
    }
    // A GSM-only peer (static 3 without rtpmap) gets GSM back.
    let gsm_only = SIPP_UAC.replace("RTP/AVP 0\r\na=rtpmap:0 PCMU/8000", "RTP/AVP 3");
    let (ans, n) = LocalSession::new(2, LOCAL)
        .answer(&sdp(&gsm_only), &caps, 10000)
        .unwrap();
    assert_eq!((n.pt, n.codec), (3, Codec::GSM));
    assert!(ans.to_string().contains("a=rtpmap:3 GSM/8000\r\n"));
    // A peer preferring Speex wideband answers with our dynamic number, which we accept.
    let peer = Caps {
        codecs: vec![Codec::SPEEX16, Codec::PCMU],
        dtmf_pt: None,
    };
    let offer_sdp = LocalSession::new(3, LOCAL).offer(&caps, 12000);
    let (their_answer, _) = LocalSession::new(4, LOCAL)
        .answer(&offer_sdp, &peer, 30000)
        .unwrap();
    let ours = accept_answer(&offer_sdp, &their_answer).unwrap();
    assert_eq!((ours.pt, ours.codec), (98, Codec::SPEEX16));
    assert_eq!(Codec::by_name("SPEEX/16000"), Some(Codec::SPEEX16));
    assert_eq!(Codec::by_name("speex"), Some(Codec::SPEEX));
}

/// RFC 3952 §5: iLBC's `mode` tells 20 ms from 30 ms frames; no `mode` means 30.
#[test]
fn ilbc_mode_is_negotiated_from_fmtp() {
    let caps = Caps {
        codecs: vec![Codec::ILBC20, Codec::ILBC30, Codec::GSM],
        dtmf_pt: None,
    };
    let offer = |fmtp: &str| {
        SIPP_UAC.replace(
            "m=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
            &format!("m=audio 6000 RTP/AVP 97\r\na=rtpmap:97 iLBC/8000\r\n{fmtp}"),
        )
    };
    let answer = |o: &str| {
        LocalSession::new(1, LOCAL)
            .answer(&sdp(o), &caps, 10000)
            .unwrap()
    };

    let (a, n) = answer(&offer("a=fmtp:97 mode=20\r\n"));
    assert_eq!((n.pt, n.codec, n.ptime), (97, Codec::ILBC20, 20));
    assert!(a
        .to_string()
        .contains("a=rtpmap:97 iLBC/8000\r\na=fmtp:97 mode=20\r\na=ptime:20\r\n"));

    let (a, n) = answer(&offer(""));
    assert_eq!((n.codec, n.ptime), (Codec::ILBC30, 30));
    assert!(a
        .to_string()
        .contains("a=fmtp:97 mode=30\r\na=ptime:30\r\n"));

    // A ptime that is not a whole number of frames is rounded up to one.
    let (_, n) = answer(&offer("a=fmtp:97 mode=30\r\na=ptime:20\r\n"));
    assert_eq!((n.codec, n.ptime), (Codec::ILBC30, 30));

    // Only 20 ms configured, 30 ms offered: no common codec.
    let only20 = Caps {
        codecs: vec![Codec::ILBC20],
        dtmf_pt: None,
    };
    let r =
        LocalSession::new(1, LOCAL).answer(&sdp(&offer("a=fmtp:97 mode=30\r\n")), &only20, 10000);
    assert_eq!(r.unwrap_err(), NegotiationError::NoCommonCodec);

    // Our offer leads with iLBC 30: its ptime is 30; the answer's mode decides.
    let mut s = LocalSession::new(7, LOCAL);
    let ours = s.offer(
        &Caps {
            codecs: vec![Codec::ILBC30, Codec::ILBC20],
            dtmf_pt: None,
        },
        10000,
    );
    let text = ours.to_string();
    assert!(
        text.contains("a=rtpmap:96 iLBC/8000\r\na=fmtp:96 mode=30\r\n"),
        "{text}"
    );
    assert!(
        text.contains("a=rtpmap:97 iLBC/8000\r\na=fmtp:97 mode=20\r\na=ptime:30\r\n"),
        "{text}"
    );
    let theirs = sdp(&offer("a=fmtp:97 mode=20\r\n"));
    let n = accept_answer(&ours, &theirs).unwrap();
    assert_eq!((n.pt, n.codec), (97, Codec::ILBC20));
}

const RFC_KEY: &str = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";

fn sdes_offer(proto: &str, crypto: &str) -> String {
    SIPP_UAC
        .replace("RTP/AVP", proto)
        .replace("a=rtpmap:0", &format!("{crypto}a=rtpmap:0"))
}

fn secure(require: bool) -> LocalSession {
    let s = LocalSession::new(42, LOCAL).with_sdes(&[7; 30]);
    match require {
        true => s.requiring_srtp(),
        false => s,
    }
}

/// What a session without SDES or WebRTC makes of `answer` to `offer`.
fn accept_answer(
    offer: &SessionDescription,
    answer: &SessionDescription,
) -> Result<sdp::Negotiated, NegotiationError> {
    LocalSession::new(1, LOCAL).accept_answer(offer, answer)
}

#[test]
fn sdes_offer_is_answered_with_our_key_in_the_same_suite_and_tag() {
    use sdp::CryptoSuite;
    let offer = sdes_offer(
        "RTP/SAVP",
        &format!(
            "a=crypto:3 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}|2^20|1:4\r\n\
             a=crypto:5 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}\r\n"
        ),
    );
    let (answer, n) = secure(false)
        .answer(&sdp(&offer), &Caps::default(), 10000)
        .unwrap();
    let m = &answer.media[0];
    assert_eq!(m.proto, "RTP/SAVP");
    // The line with an MKI is passed over; ours answers tag 5 with our own key.
    let ours: Vec<_> = m.crypto().collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(
        (ours[0].tag, ours[0].suite),
        (5, CryptoSuite::AesCm128HmacSha1_32)
    );
    assert_eq!(ours[0].key, [7; 30]);
    let keys = n.srtp.unwrap();
    assert_eq!(keys.suite, CryptoSuite::AesCm128HmacSha1_32);
    assert_eq!(keys.local, [7; 30]);
    assert_eq!(
        keys.remote,
        sdp(&offer).media[0].crypto().nth(1).unwrap().key
    );
    assert!(!format!("{keys:?}").contains('7'), "keys stay out of logs");
}

#[test]
fn best_effort_offer_on_rtp_avp_is_keyed_or_plain() {
    let keyed = sdes_offer(
        "RTP/AVP",
        &format!("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}\r\n"),
    );
    let (answer, n) = secure(false)
        .answer(&sdp(&keyed), &Caps::default(), 10000)
        .unwrap();
    assert_eq!(answer.media[0].proto, "RTP/AVP");
    assert!(n.srtp.is_some() && answer.media[0].crypto().count() == 1);
    // Plain offers: answered plainly, unless SRTP is required.
    let (_, n) = secure(false)
        .answer(&sdp(SIPP_UAC), &Caps::default(), 10000)
        .unwrap();
    assert!(n.srtp.is_none());
    let refused = secure(true).answer(&sdp(SIPP_UAC), &Caps::default(), 10000);
    assert_eq!(refused.unwrap_err(), NegotiationError::Srtp);
    // Without SDES the keys of a best-effort offer are ignored, not answered.
    let (answer, n) = self::answer(&keyed).unwrap();
    assert!(n.srtp.is_none() && answer.media[0].crypto().next().is_none());
}

#[test]
fn our_sdes_offer_and_its_answer_agree_on_keys() {
    use sdp::CryptoSuite;
    let mut ours = secure(true);
    let offer = ours.offer(&Caps::default(), 10000);
    let m = &offer.media[0];
    assert_eq!(m.proto, "RTP/SAVP");
    assert_eq!(
        m.crypto().map(|c| c.suite).collect::<Vec<_>>(),
        CryptoSuite::ALL
    );
    assert_eq!(
        m.crypto().last().unwrap().key,
        [7; 28],
        "GCM takes 28 bytes"
    );
    // The far end answers from our offer with a key of its own.
    let mut theirs = LocalSession::new(9, LOCAL).with_sdes(&[9; 30]);
    let (answer, their_neg) = theirs.answer(&offer, &Caps::default(), 20000).unwrap();
    let neg = ours.accept_answer(&offer, &answer).unwrap();
    let keys = neg.srtp.unwrap();
    assert_eq!(keys.suite, CryptoSuite::AesCm128HmacSha1_80);
    assert_eq!(
        (keys.local.as_slice(), keys.remote.as_slice()),
        (&[7; 30][..], &[9; 30][..])
    );
    let back = their_neg.srtp.unwrap();
    assert_eq!((back.local, back.remote), (keys.remote, keys.local));
    // An answer without keys to an RTP/SAVP offer, or naming a line we never offered, fails.
    let mut plain = answer.clone();
    plain.media[0]
        .attributes
        .retain(|a| !matches!(a, sdp::Attribute::Crypto(_)));
    assert_eq!(
        ours.accept_answer(&offer, &plain).unwrap_err(),
        NegotiationError::Srtp
    );
    let forged = answer.to_string().replace("crypto:1 ", "crypto:9 ");
    let forged = sdp(&forged);
    assert_eq!(
        ours.accept_answer(&offer, &forged).unwrap_err(),
        NegotiationError::Srtp
    );
}
