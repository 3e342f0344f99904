//! Call parking and pickup against the real process with two workers, so that the caller who
//! retrieves or picks up lands on another worker than the call it joins about half the time
//! (random Call-IDs): park at 700 and retrieve by dialling the slot (the retriever hears the
//! parked caller), a parked call that times out rings back its parker (a SIPp phone), directed
//! and group pickup of a call ringing a SIPp phone registered as a user, and an INVITE with
//! Replaces reaching the worker of the dialog it replaces. And two nodes on one Redis: a call
//! parked on one is retrieved from the other.

use crate::common;

use common::audio::{
    best_correlation, dominant_freq, read_wav, tone, ulaw_decode_all, ulaw_encode,
};
use common::net::free_port;
use common::registrar::registered;
use common::servers::{RedisCluster, Server};
use common::sip::{sdp, sdp_audio, Rtp, Uac, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::{Opts, OVERLOAD_RETRIES};
use common::Strowger;
use std::path::Path;
use std::time::Duration;

/// Debian's asterisk-core-sounds-en-wav digits, which tell a parking slot.
const DIGITS: &str = "/usr/share/asterisk/sounds/en_US_f_Allison/digits";

/// Trusted loopback callers (they call as "tester"), user 1001 (the phone that rings) and 1003
/// (the parker a timed-out call rings back); park at 700, a short lot at 799.
const CONFIG: &str = r#"
[general]
log_level = "debug"
[security]
trusted = ["127.0.0.1"]
[rtp]
media_timeout_s = 0
[registrar]
domain = "strowger"
store = "local:strowger-data/store.snap"
[[users]]
user = "1001"
password = "secret-1001"
[[users]]
user = "1003"
password = "secret-1003"
[parking.default]
slots = "701-720"
timeout_s = 600
[parking.short]
slots = "731-732"
timeout_s = 3
[pickup_groups]
desk = ["1001", "tester"]
[dialplan]
default_context = "default"
[[dialplan.contexts.default.rules]]
exten = "700"
steps = ["park"]
[[dialplan.contexts.default.rules]]
exten = "799"
steps = ["set PARKER=user/1003", "park short"]
[[dialplan.contexts.default.rules]]
regex = "^7(0[1-9]|[1-3][0-9])$"
steps = ["retrieve"]
[[dialplan.contexts.default.rules]]
regex = "^\\*8(\\d+)$"
steps = ["pickup ${1}"]
[[dialplan.contexts.default.rules]]
exten = "*8"
steps = ["pickup"]
[[dialplan.contexts.default.rules]]
regex = "^1[0-9]{3}$"
steps = ["bridge user/${EXTEN} timeout=20"]
"#;

/// Calls retried until both kinds were seen this many times (or `MAX_CALLS` calls).
const EACH_KIND: usize = 3;
const MAX_CALLS: usize = 20;

/// strowger with `CONFIG` and two workers (the config file lives in the returned directory).
fn start(label: &str) -> (Strowger, common::TempDir) {
    start_on(label, None)
}

/// `start`'s strowger on the store `store` (None: its own local store).
fn start_on(label: &str, store: Option<&str>) -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new(label);
    let path = dir.path().join("parking.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            workers: Some(2),
            store: store.map(str::to_string),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// A call from a hand-written client to `exten`, answered, its RTP pointed at the answer.
fn answered_call(s: &Strowger, exten: &str) -> (Uac, Rtp) {
    let mut rtp = Rtp::bind();
    (s.answered(exten, &[PCMU], &mut rtp), rtp)
}

/// A call to `exten` that rings (180), tried again while refused as overloaded.
fn ringing_call(s: &Strowger, exten: &str, rtp: &Rtp) -> Uac {
    for _ in 0..OVERLOAD_RETRIES {
        let mut uac = Uac::new(s.sip, exten);
        uac.send_invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
        let got = uac.recv_all(Duration::from_millis(500));
        if got.iter().any(|m| m.status() == Some(180)) {
            return uac;
        }
        match got.iter().find(|m| m.status() == Some(503)) {
            Some(refused) => uac.invite_answered(refused),
            None => panic!("INVITE to {exten}: no 180 but {got:?}"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("INVITE to {exten}: refused as overloaded {OVERLOAD_RETRIES} times");
}

/// `from` sends a second of a 1 kHz tone; `to` must hear it.
fn assert_heard(from: &mut Rtp, to: &Rtp, what: &str) {
    to.recv_for(Duration::from_millis(50));
    let frames: Vec<Vec<u8>> = tone(1000.0, 8000, 8000.0)
        .chunks(160)
        .map(|c| c.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    from.send_frames(&frames, Duration::from_millis(100));
    let heard: Vec<u8> = to
        .recv_for(Duration::from_millis(200))
        .into_iter()
        .flat_map(|p| p.payload)
        .collect();
    assert!(
        heard.len() >= 4000,
        "{what}: {} bytes of audio",
        heard.len()
    );
    let f = dominant_freq(&ulaw_decode_all(&heard));
    assert!((f - 1000.0).abs() < 50.0, "{what}: heard {f} Hz, not 1 kHz");
}

/// Whether strowger's log says it handed the call `call_id` to another worker.
fn handed_off(s: &Strowger, call_id: &str) -> bool {
    s.stderr()
        .lines()
        .any(|l| l.contains("handed to worker") && l.contains(call_id))
}

/// Repeats `one` (which returns its joining call's Call-ID) until it has run on the other
/// call's worker and on another worker `EACH_KIND` times each; each run must succeed.
fn both_ways(s: &Strowger, mut one: impl FnMut(usize) -> String) {
    let (mut same, mut cross) = (0, 0);
    for i in 0..MAX_CALLS {
        let call_id = one(i);
        match handed_off(s, &call_id) {
            true => cross += 1,
            false => same += 1,
        }
        if same >= EACH_KIND && cross >= EACH_KIND {
            break;
        }
    }
    assert!(
        same > 0 && cross > 0,
        "{same} calls on the same worker and {cross} handed over: both kinds wanted"
    );
}

#[test]
fn a_call_parked_at_700_is_retrieved_by_dialling_its_slot_from_either_worker() {
    let (s, _config) = start("park-retrieve");
    both_ways(&s, |i| {
        let (parked, mut parked_rtp) = answered_call(&s, "700");
        // The slot is told, then music: the parked caller hears something.
        let heard = parked_rtp.recv_for(Duration::from_millis(1500));
        assert!(
            heard.len() > 25,
            "call {i}: {} packets to the parked caller",
            heard.len()
        );
        let (mut retriever, retriever_rtp) = answered_call(&s, "701");
        assert_heard(&mut parked_rtp, &retriever_rtp, "the retriever");
        let bye = retriever.bye();
        assert_eq!(bye.status(), Some(200));
        parked.expect_request("BYE", Duration::from_secs(5));
        retriever.call_id
    });
    // An empty slot.
    let (_, resp) = s.invite("705", &[PCMU], &Rtp::bind());
    assert_eq!(resp.status(), Some(404), "{resp:?}");
}

/// Two nodes on the store `store`: a call parked at 700 on node a takes slot 701, so a call
/// parked on node b takes 702; dialling 701 on node b reaches the call parked on node a (node
/// b bridges the retriever there) and the retriever hears it; an empty slot is 404 on either
/// node.
fn parked_on_one_node_retrieved_from_another(label: &str, store: &str) {
    let (a, _config_a) = start_on(&format!("{label}-a"), Some(store));
    let (b, _config_b) = start_on(&format!("{label}-b"), Some(store));
    // The slot is taken once the call is answered: each node logs it.
    let (parked, mut parked_rtp) = answered_call(&a, "700");
    a.wait_log("parked in slot 701 of lot default", 0);
    let (mut parked_b, _rtp_b) = answered_call(&b, "700");
    // 701 is node a's: node b takes the next.
    b.wait_log("parked in slot 702 of lot default", 0);
    let (mut retriever, retriever_rtp) = answered_call(&b, "701");
    assert_heard(&mut parked_rtp, &retriever_rtp, "the retriever on node b");
    assert_eq!(retriever.bye().status(), Some(200));
    parked.expect_request("BYE", Duration::from_secs(5));
    assert_eq!(parked_b.bye().status(), Some(200));
    for s in [&a, &b] {
        let (_, resp) = s.invite("705", &[PCMU], &Rtp::bind());
        assert_eq!(resp.status(), Some(404), "{resp:?}");
    }
}

#[test]
fn a_call_parked_on_one_node_is_retrieved_from_another() {
    let redis = Server::redis();
    parked_on_one_node_retrieved_from_another("park-node", &redis.url);
}

/// The same on a Redis Cluster of three masters: a lot's slots are one hash, on one of them.
#[test]
fn a_call_parked_on_one_node_is_retrieved_from_another_on_a_redis_cluster() {
    let dir = common::TempDir::new("park-redis-cluster");
    let cluster = RedisCluster::start(dir.path());
    parked_on_one_node_retrieved_from_another("park-cluster-node", &cluster.url);
}

#[test]
fn a_parked_call_that_times_out_rings_its_parker_back() {
    let (s, _config) = start("park-timeout");
    let port = free_port();
    registered(&s, "1003", "secret-1003", port);
    let phone = Sipp::new(Scenario::Builtin("uas"))
        .port(port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300));
    let (mut parked, _rtp) = answered_call(&s, "799");
    // The lot's 3 s pass: the phone of 1003 rings and answers; then the parked caller hangs up.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(parked.bye().status(), Some(200));
    phone.finish().assert_ok(1);
    let cdrs = s.wait_cdrs(1);
    let c = &cdrs[0];
    assert_eq!(c.str("exten"), "799");
    assert_eq!(
        c.str("bridged_to"),
        format!("sip:1003@127.0.0.1:{port}"),
        "{c:?}"
    );
}

/// Calls ringing the SIPp phone of 1001 are picked up by dialling `exten` (`*81001`, `*8`):
/// the caller is answered and heard by the picker, the phone gets a CANCEL.
fn pickups(label: &str, exten: &'static str) {
    let (s, _config) = start(label);
    let port = free_port();
    registered(&s, "1001", "secret-1001", port);
    both_ways(&s, |i| {
        let phone = Sipp::new(Scenario::File("uas_ring_cancel.xml"))
            .port(port)
            .spawn(None, s.dir.path());
        std::thread::sleep(Duration::from_millis(300));
        let mut rtp = Rtp::bind();
        // The phone rings (180 relayed), then someone picks up.
        let mut caller = ringing_call(&s, "1001", &rtp);
        let (mut picker, picker_rtp) = answered_call(&s, exten);
        let resp = caller.final_response("INVITE", Duration::from_secs(5));
        assert_eq!(resp.status(), Some(200), "call {i}: the caller is answered");
        caller.invite_answered(&resp);
        caller.ack("");
        rtp.remote = Some(sdp_audio(&resp.body).0);
        assert_heard(&mut rtp, &picker_rtp, "the picker");
        assert_eq!(picker.bye().status(), Some(200));
        caller.expect_request("BYE", Duration::from_secs(5));
        // The phone stopped ringing: CANCEL, 487, ACK.
        phone.finish().assert_ok(1);
        picker.call_id
    });
}

#[test]
fn star_8_and_an_extension_picks_up_the_call_ringing_it_from_either_worker() {
    pickups("pickup-directed", "*81001");
}

#[test]
fn star_8_picks_up_a_call_ringing_the_pickup_group_from_either_worker() {
    pickups("pickup-group", "*8");
}

/// The embedded configuration (trusting loopback): 700 parks in 701 and says so — the parked
/// caller first hears Allison's "seven" — and 701 retrieves it.
#[test]
fn the_default_configuration_parks_at_700_tells_the_slot_and_retrieves_at_701() {
    let dir = common::TempDir::new("park-default");
    let config = common::switch::default_config_trusting_loopback(dir.path());
    let s = Strowger::with(
        "park-default",
        Opts {
            config_file: Some(config),
            workers: Some(2),
            ..Opts::default()
        },
    );
    let (parked, mut parked_rtp) = answered_call(&s, "700");
    let heard: Vec<u8> = parked_rtp
        .recv_for(Duration::from_millis(1500))
        .into_iter()
        .flat_map(|p| p.payload)
        .collect();
    let heard = ulaw_decode_all(&heard);
    let seven = read_wav(Path::new(DIGITS).join("7.wav").as_path()).samples;
    let len = 2400.min(seven.len() - 800);
    assert!(
        heard.len() >= 800 + len + 4000,
        "{} samples heard",
        heard.len()
    );
    let (c, lag) = best_correlation(&seven, &heard, 800, len, 0..=4000);
    assert!(
        c > 0.8,
        "the slot's first digit: correlation {c:.2} at lag {lag}"
    );
    let (mut retriever, retriever_rtp) = answered_call(&s, "701");
    assert_heard(&mut parked_rtp, &retriever_rtp, "the retriever");
    assert_eq!(retriever.bye().status(), Some(200));
    parked.expect_request("BYE", Duration::from_secs(5));
}

/// An INVITE with Replaces (RFC 3891) from a new phone takes over a parked caller's dialog,
/// whichever of the two workers holds it: dispatch sends it to the replaced dialog's worker.
/// Eight times with random Call-IDs (a missed routing would be 481 about half the time).
#[test]
fn an_invite_with_replaces_takes_over_a_call_whichever_worker_holds_it() {
    let (s, _config) = start("replaces");
    for i in 0..8 {
        let (old, _old_rtp) = answered_call(&s, "700");
        let rtp = Rtp::bind();
        let offer = sdp(rtp.port, &[PCMU], "sendrecv");
        let replaces = format!("Replaces: {}\r\n", old.replaces());
        let (mut new, ok) = (0..OVERLOAD_RETRIES)
            .find_map(|_| {
                let mut new = Uac::new(s.sip, "700");
                new.send_request("INVITE", &replaces, &offer);
                let ok = new.final_response("INVITE", Duration::from_secs(5));
                if ok.status() != Some(503) {
                    return Some((new, ok));
                }
                new.invite_answered(&ok);
                std::thread::sleep(Duration::from_millis(500));
                None
            })
            .expect("refused as overloaded every time");
        assert_eq!(ok.status(), Some(200), "call {i}: {ok:?}");
        new.invite_answered(&ok);
        new.ack("");
        old.expect_request("BYE", Duration::from_secs(5));
        assert_eq!(new.bye().status(), Some(200));
    }
}
