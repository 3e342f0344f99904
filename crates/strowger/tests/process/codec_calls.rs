//! Codecs in real calls: a hand-written client offering only GSM, Speex, Opus or iLBC calls the
//! demo announcement (44444) and must get that codec in the 200's SDP and an RTP stream that
//! decodes (with the codec crate) to assets/demo.wav; the same for the announcement stored as a
//! raw GSM file (44445: encoded once per format and cached; 44446: transcoded per call); and a
//! PCMU caller bridged to a GSM-only callee (a hand-written UAS) must hear the callee and be
//! heard, through the media engine's translator.

use crate::common;

use codec::Format;
use common::audio::{
    best_correlation, dominant_freq, read_wav, tone, ulaw_decode_all, ulaw_encode,
};
use common::sip::{sdp, sdp_audio, Rtp, RtpPkt, Uac, Uas, DTMF, PCMU};
use common::switch::Opts;
use common::Strowger;
use std::net::SocketAddr;
use std::time::Duration;

/// Strowger with the default dialplan offering every codec, and `bridge_target` set; 44445 and
/// 44446 play demo.gsm from the data directory, cached and transcoded per call. The test's
/// phones call from a trusted address (in the default context, unchallenged).
fn start(label: &str, bridge_target: Option<SocketAddr>) -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new(&format!("{label}-config"));
    let default =
        common::switch::trusting_loopback(include_str!("../../../switch/src/default.toml"));
    let config = default
        .replace(
            "codecs = [\"PCMU\", \"PCMA\"]",
            "codecs = [\"PCMU\", \"PCMA\", \"GSM\", \"speex\", \"opus\", \"iLBC30\"]",
        )
        .replace(
            "# Echo test.",
            "[[dialplan.contexts.default.rules]]\nexten = \"44445\"\n\
             steps = [\"answer\", \"playback demo.gsm loop=true\"]\n\n\
             [[dialplan.contexts.default.rules]]\nexten = \"44446\"\n\
             steps = [\"answer\", \"playback demo.gsm loop=true cache=false\"]\n\n# Echo test.",
        );
    assert_eq!(
        config.matches("44445").count() + config.matches("iLBC30\"]").count(),
        2,
        "default.toml's codecs line or echo rule moved"
    );
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, config).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            vars: bridge_target
                .map(|t| vec![("bridge_target".to_string(), t.to_string())])
                .unwrap_or_default(),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// The `a=rtpmap` of payload type `pt` in an SDP body.
fn rtpmap(body: &str, pt: u8) -> Option<String> {
    let prefix = format!("a=rtpmap:{pt} ");
    body.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix).map(str::to_string))
}

/// Decodes each packet of `pt` with a fresh decoder of `format`, resampled to 8 kHz.
fn decode(pkts: &[RtpPkt], pt: u8, format: Format) -> Vec<i16> {
    let mut dec = format.decoder();
    let mut pcm = Vec::new();
    let mut buf = vec![0i16; 5760];
    for p in pkts.iter().filter(|p| p.pt == pt) {
        let n = dec.decode(&p.payload, &mut buf).expect("payload decodes");
        pcm.extend_from_slice(&buf[..n]);
    }
    codec::resample::resample(&pcm, format.pcm_rate(), 8000)
}

/// demo.wav as raw GSM 06.10 frames (a `.gsm` prompt file).
fn demo_gsm() -> Vec<u8> {
    let demo = read_wav(&common::repo_root().join("assets/demo.wav"));
    codec::translate::encode_packets(Format::Gsm, &demo.samples).concat()
}

/// Calls `exten` offering only `format` as `pt`; checks the answer, the stream's timestamps and
/// that ~3 s of it decode to demo.wav (correlation > `min`). Returns the packets.
fn demo_in(format: Format, pt: u8, rtpmap_line: &str, exten: &str, min: f64) -> Vec<RtpPkt> {
    let (s, _config) = start(&format!("codec-demo-{format}-{exten}"), None);
    std::fs::write(s.data_dir().join("demo.gsm"), demo_gsm()).unwrap();
    let mut rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    let resp = uac.invite(&sdp(rtp.port, &[(pt, rtpmap_line), DTMF], "sendrecv"));
    assert_eq!(
        resp.status(),
        Some(200),
        "INVITE offering {format}: {resp:?}"
    );
    let (addr, pts) = sdp_audio(&resp.body);
    assert_eq!(pts.first(), Some(&pt), "{format} answered: {}", resp.body);
    let answered = rtpmap(&resp.body, pt).unwrap_or_default();
    assert!(
        answered.eq_ignore_ascii_case(rtpmap_line),
        "answer's rtpmap {answered:?}, offered {rtpmap_line:?}:\n{}",
        resp.body
    );
    rtp.remote = Some(addr);
    uac.ack("");
    let pkts = rtp.recv_for(Duration::from_millis(3200));
    assert_eq!(uac.bye().status(), Some(200));

    let audio: Vec<&RtpPkt> = pkts.iter().filter(|p| p.pt == pt).collect();
    assert!(audio.len() > 100, "only {} {format} packets", audio.len());
    let step = format.clock_units_in(format.packet_ms());
    // Timestamps advance one frame a packet; a media pass more than five frames late (a stalled
    // test machine) skips the frames it missed, and the timestamp jumps by whole frames with it.
    let mut skips = 0;
    for w in audio.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "sequence after {}",
            w[0].seq
        );
        let advance = w[1].ts.wrapping_sub(w[0].ts);
        assert!(
            advance >= step && advance % step == 0,
            "timestamp at {} advanced {advance}, not whole frames of {step}",
            w[1].seq
        );
        skips += usize::from(advance > step);
    }
    assert!(
        skips * 50 <= audio.len(),
        "{skips} skips in {} packets",
        audio.len()
    );
    if format == Format::Gsm {
        assert!(
            audio.iter().all(|p| p.payload.len() == 33),
            "33-byte GSM frames"
        );
    }
    let got = decode(&pkts, pt, format);
    let demo = read_wav(&common::repo_root().join("assets/demo.wav"));
    let (c, lag) = best_correlation(&got, &demo.samples, 4000, 16000, -4000..=4000);
    println!(
        "{exten} in {format}: {} packets, {} bytes each, correlation {c:.3} at lag {lag}",
        audio.len(),
        audio[0].payload.len()
    );
    assert!(
        c > min,
        "{format} audio from {exten} vs assets/demo.wav: best correlation {c:.3} at lag {lag} samples"
    );
    pkts
}

#[test]
fn demo_in_gsm() {
    demo_in(Format::Gsm, 3, "GSM/8000", "44444", 0.8);
}

#[test]
fn demo_in_speex() {
    demo_in(Format::Speex, 97, "speex/8000", "44444", 0.8);
}

#[test]
fn demo_in_opus() {
    demo_in(Format::Opus, 111, "opus/48000/2", "44444", 0.8);
}

#[test]
fn demo_in_ilbc() {
    demo_in(Format::Ilbc30, 98, "iLBC/8000", "44444", 0.8);
}

/// A prompt stored as GSM reaches an iLBC caller (30 ms packets from 20 ms frames) and a Speex
/// caller, pre-encoded or transcoded per call; a GSM caller gets the file's own frames.
#[test]
fn gsm_file_to_ilbc_speex_and_gsm_callers() {
    for exten in ["44445", "44446"] {
        demo_in(Format::Ilbc30, 98, "iLBC/8000", exten, 0.7);
        demo_in(Format::Speex, 97, "speex/8000", exten, 0.7);
    }
    let file = demo_gsm();
    let pkts = demo_in(Format::Gsm, 3, "GSM/8000", "44445", 0.8);
    let first = &pkts.iter().find(|p| p.pt == 3).unwrap().payload;
    let at = file
        .chunks(33)
        .position(|f| f == &first[..])
        .expect("the first GSM packet is a frame of demo.gsm");
    for (p, f) in pkts
        .iter()
        .filter(|p| p.pt == 3)
        .zip(file.chunks(33).cycle().skip(at))
    {
        assert_eq!(
            &p.payload[..],
            f,
            "packet {} is not the file's frame",
            p.seq
        );
    }
}

/// One GSM frame per 20 ms of `pcm`.
fn gsm_frames(pcm: &[i16]) -> Vec<Vec<u8>> {
    let mut enc = Format::Gsm.encoder();
    pcm.chunks_exact(160)
        .map(|c| {
            let mut out = vec![0; 33];
            let n = enc.encode(c, &mut out).unwrap();
            out.truncate(n);
            out
        })
        .collect()
}

/// PCMU caller → 2000 (bridged to bridge_target) → a callee that answers only GSM: the offer
/// strowger sends carries GSM, the callee's GSM tone reaches the caller as PCMU and the caller's
/// PCMU tone reaches the callee as GSM.
#[test]
fn bridge_pcmu_caller_to_gsm_callee() {
    let uas = Uas::bind();
    let (s, _config) = start("codec-bridge-gsm", Some(uas.addr()));
    let mut caller_rtp = Rtp::bind();
    let mut callee_rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, "2000");
    uac.send_invite(&sdp(caller_rtp.port, &[PCMU, DTMF], "sendrecv"));

    let offer = uas.answer(&sdp(callee_rtp.port, &[(3, "GSM/8000")], "sendrecv"));
    assert!(
        offer.body.contains("a=rtpmap:3 GSM/8000"),
        "strowger's offer to the callee lacks GSM:\n{}",
        offer.body
    );
    let (callee_remote, _) = sdp_audio(&offer.body);
    callee_rtp.remote = Some(callee_remote);

    let resp = uac.final_response("INVITE", Duration::from_secs(10));
    assert_eq!(resp.status(), Some(200), "caller's INVITE: {resp:?}");
    uac.invite_answered(&resp);
    let (caller_remote, pts) = sdp_audio(&resp.body);
    assert_eq!(pts.first(), Some(&0), "caller keeps PCMU: {}", resp.body);
    caller_rtp.remote = Some(caller_remote);
    uac.ack("");
    // Let the ACK reach strowger's callee leg before media flows.
    uas.serve(Duration::from_millis(300));

    // Both sides talk at once: the callee a 1 kHz tone in GSM, the caller 440 Hz in PCMU.
    let from_callee = gsm_frames(&tone(1000.0, 8000 * 2, 8000.0));
    let from_caller: Vec<Vec<u8>> = tone(440.0, 8000 * 2, 8000.0)
        .chunks(160)
        .map(|c| c.iter().map(|&s| ulaw_encode(s)).collect())
        .collect();
    let callee_thread = std::thread::spawn(move || {
        let mut got = Vec::new();
        for (i, f) in from_callee.iter().enumerate() {
            callee_rtp.send(3, i == 0, f, 160);
            got.extend(callee_rtp.recv_for(Duration::from_millis(20)));
        }
        got.extend(callee_rtp.recv_for(Duration::from_millis(300)));
        got
    });
    let at_caller = caller_rtp.send_frames(&from_caller, Duration::from_millis(300));
    let at_callee = callee_thread.join().unwrap();
    assert_eq!(uac.bye().status(), Some(200));
    uas.serve(Duration::from_millis(300));

    let gsm: Vec<&RtpPkt> = at_callee.iter().filter(|p| p.pt == 3).collect();
    assert!(gsm.len() > 50, "callee got {} GSM packets", gsm.len());
    assert!(
        gsm.iter().all(|p| p.payload.len() == 33),
        "33-byte GSM frames"
    );
    let heard_by_callee = decode(&at_callee, 3, Format::Gsm);
    let ulaw: Vec<i16> = at_caller
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert!(ulaw.len() > 8000, "caller got {} samples", ulaw.len());
    let (f_callee, f_caller) = (dominant_freq(&heard_by_callee), dominant_freq(&ulaw));
    println!(
        "bridge PCMU↔GSM: callee got {} GSM packets ({f_callee} Hz), caller {} PCMU packets ({f_caller} Hz)",
        gsm.len(),
        ulaw.len() / 160
    );
    assert_eq!(f_callee, 440.0, "the callee hears the caller's tone");
    assert_eq!(f_caller, 1000.0, "the caller hears the callee's tone");
}
