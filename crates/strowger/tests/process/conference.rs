//! A conference room in the real process: five hand-written phones (two PCMU, two G.722, one
//! Opus) dial room 8000 of the default configuration, each sending its own tone; what each
//! receives, decoded, must hold the other four tones and not its own (Goertzel per tone). And
//! two nodes on one Redis: callers of room 8000 on either meet in one room.

use crate::common;

use codec::Format;
use common::audio::goertzel;
use common::servers::Server;
use common::sip::{sdp, sdp_audio, Rtp, RtpPkt, Uac, DTMF};
use common::switch::Opts;
use common::Strowger;
use std::time::{Duration, Instant};

/// The phones: codec, payload type and rtpmap offered, and the tone each says (Hz), away from
/// the room's join and leave cues (880 and 440 Hz).
const PHONES: [(Format, u8, &str, f64); 5] = [
    (Format::Pcmu, 0, "PCMU/8000", 500.0),
    (Format::Pcmu, 0, "PCMU/8000", 700.0),
    (Format::G722, 9, "G722/8000", 1100.0),
    (Format::G722, 9, "G722/8000", 1300.0),
    (Format::Opus, 111, "opus/48000/2", 1700.0),
];
/// How long each phone talks.
const TALK: Duration = Duration::from_secs(3);

/// Strowger with the default configuration, trusting 127.0.0.1, offering G.722 and Opus too,
/// its room 8000 mixing all five phones (`loudest = 5`).
fn start() -> (Strowger, common::TempDir) {
    start_on("conference", None)
}

/// `start`'s strowger as `label`, on the store `store` (None: its own local store).
fn start_on(label: &str, store: Option<&str>) -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new(&format!("{label}-config"));
    let default =
        common::switch::trusting_loopback(include_str!("../../../switch/src/default.toml"));
    let config = default.replace(
        "codecs = [\"PCMU\", \"PCMA\"]",
        "codecs = [\"PCMU\", \"PCMA\", \"G722\", \"opus\"]",
    ) + "\n[conferences.8000]\nloudest = 5\n";
    assert!(
        config.contains("\"G722\", \"opus\"]"),
        "default.toml's codecs line moved"
    );
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, config).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            store: store.map(str::to_string),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// `TALK` of a `hz` tone as packets of `format`, 20 ms each.
fn packets(format: Format, hz: f64) -> Vec<Vec<u8>> {
    let rate = format.pcm_rate();
    let n = (rate as u128 * TALK.as_millis() / 1000) as usize;
    let pcm: Vec<i16> = (0..n)
        .map(|i| (5000.0 * (std::f64::consts::TAU * hz * i as f64 / f64::from(rate)).sin()) as i16)
        .collect();
    codec::translate::encode_packets(format, &pcm)
}

/// Sends `frames` paced at 20 ms (timestamps `step` apart) while collecting what arrives.
fn talk(mut rtp: Rtp, pt: u8, step: u32, frames: Vec<Vec<u8>>) -> Vec<RtpPkt> {
    let start = Instant::now();
    let mut got = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        rtp.send(pt, i == 0, f, step);
        let due = start + Duration::from_millis(20 * (i as u64 + 1));
        got.extend(rtp.recv_for(due.saturating_duration_since(Instant::now())));
    }
    got
}

/// The packets of `pt` decoded with `format`, at 8 kHz.
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

#[test]
fn five_callers_in_three_codecs_each_hear_the_other_four_and_not_themselves() {
    let (s, _config) = start();
    let (mut uacs, mut rtps) = (Vec::new(), Vec::new());
    for &(format, pt, rtpmap, _) in &PHONES {
        let mut rtp = Rtp::bind();
        let mut uac = Uac::new(s.sip, "8000");
        let resp = uac.invite(&sdp(rtp.port, &[(pt, rtpmap), DTMF], "sendrecv"));
        assert_eq!(resp.status(), Some(200), "{format} caller: {resp:?}");
        let (addr, pts) = sdp_audio(&resp.body);
        assert_eq!(pts.first(), Some(&pt), "{format} answered: {}", resp.body);
        rtp.remote = Some(addr);
        uac.ack("");
        uacs.push(uac);
        rtps.push(rtp);
    }
    let talking: Vec<_> = rtps
        .into_iter()
        .zip(&PHONES)
        .map(|(rtp, &(format, pt, _, hz))| {
            let step = format.clock_units_in(20);
            let frames = packets(format, hz);
            std::thread::spawn(move || talk(rtp, pt, step, frames))
        })
        .collect();
    let heard: Vec<Vec<RtpPkt>> = talking.into_iter().map(|t| t.join().unwrap()).collect();
    for uac in &mut uacs {
        assert_eq!(uac.bye().status(), Some(200));
    }

    for (got, &(format, pt, _, own)) in heard.iter().zip(&PHONES) {
        let pcm = decode(got, pt, format);
        assert!(
            pcm.len() > 8000 * 2,
            "{own} Hz {format} caller got {} samples",
            pcm.len()
        );
        // The last second and a half: every phone talking, past the cues and the queues' priming.
        let tail = &pcm[pcm.len() - 12000..];
        let amplitude = |hz: f64| 2.0 * goertzel(tail, hz).sqrt();
        let all: Vec<(f64, f64)> = PHONES.iter().map(|p| (p.3, amplitude(p.3))).collect();
        println!("{own} Hz {format} caller hears {all:?}");
        for &(hz, a) in &all {
            match hz == own {
                true => assert!(a < 250.0, "{own} Hz {format} caller hears itself: {all:?}"),
                false => assert!(a > 2000.0, "{own} Hz {format} caller misses {hz}: {all:?}"),
            }
        }
    }
}

/// A caller of room 8000 on `first`, then one on `second` (PCMU, 500 and 1300 Hz): each
/// hears the other and not itself.
fn two_callers_hear_each_other(first: &Strowger, second: &Strowger) {
    let callers = [(first, 500.0), (second, 1300.0)];
    let (mut uacs, mut rtps) = (Vec::new(), Vec::new());
    for &(node, _) in &callers {
        let mut rtp = Rtp::bind();
        let uac = node.answered("8000", &[(0, "PCMU/8000"), DTMF], &mut rtp);
        uacs.push(uac);
        rtps.push(rtp);
    }
    let talking: Vec<_> = rtps
        .into_iter()
        .zip(callers.map(|c| c.1))
        .map(|(rtp, hz)| {
            let frames = packets(Format::Pcmu, hz);
            std::thread::spawn(move || talk(rtp, 0, 160, frames))
        })
        .collect();
    let heard: Vec<Vec<RtpPkt>> = talking.into_iter().map(|t| t.join().unwrap()).collect();
    for uac in &mut uacs {
        assert_eq!(uac.bye().status(), Some(200));
    }
    for (got, (own, other)) in heard.iter().zip([(500.0, 1300.0), (1300.0, 500.0)]) {
        let pcm = decode(got, 0, Format::Pcmu);
        assert!(
            pcm.len() > 8000 * 2,
            "{own} Hz caller got {} samples",
            pcm.len()
        );
        let tail = &pcm[pcm.len() - 12000..];
        let amplitude = |hz: f64| 2.0 * goertzel(tail, hz).sqrt();
        let (mine, theirs) = (amplitude(own), amplitude(other));
        println!("{own} Hz caller hears itself at {mine:.0}, the other at {theirs:.0}");
        assert!(mine < 250.0, "{own} Hz caller hears itself: {mine}");
        assert!(
            theirs > 2000.0,
            "{own} Hz caller misses {other} Hz: {theirs}"
        );
    }
}

/// Two nodes on one Redis, each with its own caller of room 8000: the room lives on the node
/// reached first, the other node bridges its caller there, and each caller hears the other.
/// Without the room's claim in Redis each node would open a room of its own, and each caller
/// would hear nobody.
#[test]
fn callers_on_two_nodes_meet_in_one_room() {
    let redis = Server::redis();
    let (a, _config_a) = start_on("conference-node-a", Some(&redis.url));
    let (b, _config_b) = start_on("conference-node-b", Some(&redis.url));
    two_callers_hear_each_other(&a, &b);
    let hosted = format!("8000 is on node sip:{}: bridged there", a.sip);
    assert!(
        b.stderr().contains(&hosted),
        "node b bridges to node a\n{}",
        common::tail(&b.stderr(), 30)
    );
}

/// Redis away: a node hosts the room itself, as a single node does (its two callers meet), and
/// says so once; Redis back, the next room is claimed there again (logged).
#[test]
fn with_redis_away_a_node_hosts_its_rooms_itself() {
    let mut redis = Server::redis();
    let (a, _config) = start_on("conference-redis-away", Some(&redis.url));
    redis.kill();
    two_callers_hear_each_other(&a, &a);
    let away = "stay on this node until the store answers again";
    assert_eq!(
        a.stderr().matches(away).count(),
        1,
        "logged once\n{}",
        common::tail(&a.stderr(), 30)
    );
    redis.start();
    two_callers_hear_each_other(&a, &a);
    a.wait_log("cluster: the store answers again", 0);
}
