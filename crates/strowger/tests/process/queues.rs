//! Call queues in the real process: SIPp agents registered as users 1001 and 1002 take the
//! calls of SIPp callers waiting in queue `support` in the order the callers came
//! (tests/configs/queues.toml), and a caller waiting hears music, then its position. And nodes
//! on one Redis: callers of two nodes wait in one queue; with Redis away each node serves its
//! own.

use crate::common;

use common::audio::{
    best_correlation, goertzel, read_wav, rms, tone, ulaw_decode_all, ulaw_encode,
};
use common::baresip::{account, Baresip};
use common::net::free_port;
use common::registrar::registered;
use common::servers::Server;
use common::sip::{Rtp, RtpPkt, PCMU};
use common::sipp::{Scenario, Sipp};
use common::switch::{config_path, Opts};
use common::Strowger;
use std::time::Duration;

fn start(label: &str) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config_path("queues.toml")),
            workers: Some(2),
            ..Opts::default()
        },
    )
}

/// Four callers 300 ms apart, two agents (round robin) who each talk a second and hang up:
/// the first two callers go to 1001 and 1002, the third to the agent free first (1001), the
/// fourth to 1002; every caller is hung up by the switch when its agent hangs up.
#[test]
fn sipp_callers_are_answered_in_arrival_order_by_sipp_agents() {
    let s = start("queues-order");
    let ports = [free_port(), free_port()];
    registered(&s, "1001", "secret-1001", ports[0]);
    registered(&s, "1002", "secret-1002", ports[1]);
    let agents: Vec<_> = ports
        .iter()
        .map(|&p| {
            Sipp::new(Scenario::File("uas_agent.xml"))
                .port(p)
                .calls(2, 10, 2)
                .spawn(None, s.dir.path())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // let them bind
    let mut callers = Vec::new();
    for _ in 0..4 {
        let c = Sipp::new(Scenario::File("switch_bye.xml"))
            .service("7000")
            .spawn(Some(s.sip), s.dir.path());
        callers.push(c);
        std::thread::sleep(Duration::from_millis(300));
    }
    let caller_ports: Vec<u16> = callers.iter().map(|c| c.addr.port()).collect();
    for c in callers {
        c.finish().assert_ok(1);
    }
    let mut taken = Vec::new();
    for a in agents {
        let r = a.finish();
        r.assert_ok(2);
        let from: Vec<usize> = r
            .received()
            .iter()
            .filter(|m| m.method() == Some("INVITE"))
            .map(|m| {
                let from = m.header("from").unwrap_or_default().to_string();
                caller_ports
                    .iter()
                    .position(|p| from.contains(&format!(":{p}>")))
                    .unwrap_or_else(|| panic!("INVITE from {from}, callers at {caller_ports:?}"))
            })
            .collect();
        taken.push(from);
    }
    assert_eq!(
        taken,
        [vec![0, 2], vec![1, 3]],
        "callers taken by 1001, 1002"
    );
    let cdrs = s.wait_cdrs(4);
    assert!(cdrs.iter().all(|c| c.str("exten") == "7000"), "{cdrs:?}");
    let log = s.stderr();
    assert!(
        log.contains("queue support: call with agent") && log.contains("answered 4"),
        "{}",
        common::tail(&log, 30)
    );
}

/// A caller of the agentless queue: answered at once, it hears the music class (RTP that is
/// not silence: the class's first file), after announce_s (2 s) "you are next" from the
/// sounds directory, then the music again; at max_wait_s (9 s) the next step hangs up.
#[test]
fn a_waiting_caller_hears_music_then_its_position_then_music() {
    let s = start("queues-music");
    let mut rtp = Rtp::bind();
    let uac = s.answered("7001", &[PCMU], &mut rtp);
    let pkts = rtp.recv_for(Duration::from_millis(8500));
    let pcm: Vec<i16> = pkts
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    assert!(pkts.len() > 400, "{} RTP packets in 8.5 s", pkts.len());
    let music = rms(&pcm[..8000 * 3 / 2]);
    assert!(
        music > 300.0,
        "music while waiting, not silence: rms {music:.0}"
    );
    // The music class's first file from its start: 1 s of it, 0.3 s in.
    let first = read_wav(std::path::Path::new(
        "/usr/share/asterisk/moh/macroform-cold_day.wav",
    ));
    let (c, lag) = best_correlation(&pcm, &first.samples, 2400, 8000, -4000..=4000);
    assert!(
        c > 0.9,
        "the default music class: correlation {c:.3} at lag {lag}"
    );
    let next = read_wav(std::path::Path::new(
        "/usr/share/asterisk/sounds/en_US_f_Allison/queue-youarenext.wav",
    ));
    // sig[i] ≈ next[i + lag]: the announcement starts 2 s after the answer, which is 1.5 s to
    // 3 s into what arrived.
    let (c, lag) = best_correlation(&pcm, &next.samples, 8000 * 5 / 2, 8000, -24000..=-12000);
    assert!(
        c > 0.8,
        "\"you are next\" after 2 s: correlation {c:.3} at lag {lag}"
    );
    // "You are next" lasts 5.4 s: then the music resumes for announce_s, no new announcement
    // right away (the start of one would match at 7.5 s), until max_wait_s (9 s).
    let resumed = rms(&pcm[8000 * 15 / 2..8000 * 8]);
    assert!(
        resumed > 300.0,
        "music after the announcement: rms {resumed:.0}"
    );
    let (c, _) = best_correlation(&pcm, &next.samples, 8000 * 15 / 2, 4000, -62000..=-50000);
    assert!(
        c < 0.5,
        "no second announcement at once: correlation {c:.3}"
    );
    let bye = uac.expect_request("BYE", Duration::from_secs(3));
    uac.respond(&bye, 200);
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("exten"), "7001");
}

/// Two baresips registered as the agents 1001 and 1002 (auto answer) take the calls of two
/// SIPp callers queued at 7000, one each (round robin).
#[test]
fn two_baresip_agents_take_queued_calls() {
    let s = start("queues-baresip");
    let demo = common::repo_root().join("assets/demo.wav");
    let agent = |user: &str| {
        let account = account(s.sip, user, &format!("secret-{user}"), ";answermode=auto");
        let b = Baresip::spawn(s.dir.path(), user, &account, &demo, &[], 12);
        b.wait_registered(user);
        b
    };
    let agents = [agent("1001"), agent("1002")];
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let c = Sipp::new(Scenario::Builtin("uac"))
                .service("7000")
                .duration_ms(3000)
                .spawn(Some(s.sip), s.dir.path());
            std::thread::sleep(Duration::from_millis(300));
            c
        })
        .collect();
    for c in callers {
        c.finish().assert_ok(1);
    }
    let cdrs = s.wait_cdrs(2);
    let mut bridged: Vec<&str> = cdrs.iter().map(|c| c.str("bridged_to")).collect();
    bridged.sort();
    assert!(
        bridged[0].starts_with("sip:1001-") && bridged[1].starts_with("sip:1002-"),
        "one call each to the agents' registered contacts: {cdrs:?}"
    );
    for (a, user) in agents.into_iter().zip(["1001", "1002"]) {
        a.finish(&format!("agent {user}"));
    }
    let log = s.stderr();
    for user in ["1001", "1002"] {
        assert!(
            log.contains(&format!("queue support: call with agent {user} ended")),
            "{}",
            common::tail(&log, 20)
        );
    }
}

/// Two callers of the agentless queue (on whichever workers their Call-IDs pick): the second
/// hears "there are", "2", "calls waiting" — its place in the order both workers share.
#[test]
fn the_second_caller_hears_its_position() {
    let s = start("queues-position");
    let answered = |exten: &str, rtp: &mut Rtp| s.answered(exten, &[PCMU], rtp);
    let mut first_rtp = Rtp::bind();
    let _first = answered("7001", &mut first_rtp);
    std::thread::sleep(Duration::from_millis(300));
    let mut rtp = Rtp::bind();
    let _second = answered("7001", &mut rtp);
    let pcm: Vec<i16> = rtp
        .recv_for(Duration::from_millis(5000))
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    let sounds = std::path::Path::new("/usr/share/asterisk/sounds/en_US_f_Allison");
    let there_are = read_wav(&sounds.join("queue-thereare.wav"));
    // The announcement starts 2 s after the answer (1.5 s to 3 s into what arrived).
    let (c, lag) = best_correlation(
        &pcm,
        &there_are.samples,
        8000 * 5 / 2,
        4000,
        -24000..=-12000,
    );
    assert!(
        c > 0.8,
        "\"there are\" after 2 s: correlation {c:.3} at lag {lag}"
    );
    // Then "2", right after "there are".
    let two = read_wav(&sounds.join("digits/2.wav"));
    let at = (-lag) as usize + there_are.samples.len() + 800;
    let (c, _) = best_correlation(
        &pcm,
        &two.samples,
        at,
        2400,
        -(at as isize) - 2000..=-(at as isize) + 2000,
    );
    assert!(c > 0.8, "\"2\" after \"there are\": correlation {c:.3}");
}

/// Nodes of a cluster: queue `desk` (7002) has no agent but those logged in with *45 (as users,
/// so challenged); `support` (7000) has agent 1001 configured. Callers reach the queues
/// unauthenticated (the public context), so a node bridging a caller to another needs no trust.
const CLUSTER: &str = r#"
[general]
log_level = "info"
[rtp]
media_timeout_s = 0
[registrar]
domain = "strowger"
[[users]]
user = "1001"
password = "secret-1001"
[moh.default]
directory = "/usr/share/asterisk/moh"
[queues.support]
members = ["1001"]
wrapup_s = 0
max_wait_s = 30
[queues.desk]
wrapup_s = 0
max_wait_s = 30
[dialplan]
default_context = "default"
[[dialplan.contexts.public.rules]]
exten = "7000"
steps = ["queue support", "hangup"]
[[dialplan.contexts.public.rules]]
exten = "7002"
steps = ["queue desk", "hangup"]
[[dialplan.contexts.default.rules]]
exten = "*45"
steps = ["queue_login desk", "hangup"]
"#;

/// A node of `CLUSTER` on `redis`, and the directory of its configuration.
fn node(label: &str, redis: &str) -> (Strowger, common::TempDir) {
    let dir = common::TempDir::new(&format!("{label}-config"));
    let path = dir.path().join("strowger.toml");
    std::fs::write(&path, CLUSTER).unwrap();
    let s = Strowger::with(
        label,
        Opts {
            config_file: Some(path),
            workers: Some(2),
            store: Some(redis.to_string()),
            ..Opts::default()
        },
    );
    (s, dir)
}

/// A caller of `exten` on `node`, answered by the queue at once, saying a `hz` tone for
/// `talk`: its SIP port, and then what it heard, after which the switch must have hung it up
/// (its agent did).
fn queued_caller(
    node: &Strowger,
    exten: &'static str,
    hz: f64,
    talk: Duration,
) -> (u16, std::thread::JoinHandle<Vec<RtpPkt>>) {
    let mut rtp = Rtp::bind();
    let uac = node.answered(exten, &[PCMU], &mut rtp);
    let frames: Vec<Vec<u8>> = tone(hz, 8 * talk.as_millis() as usize, 8000.0)
        .chunks(160)
        .map(|c| c.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    let port = uac.local.port();
    let talking = std::thread::spawn(move || {
        let heard = rtp.send_frames(&frames, Duration::ZERO);
        let bye = uac.expect_request("BYE", Duration::from_secs(3));
        uac.respond(&bye, 200);
        heard
    });
    (port, talking)
}

/// Whether a caller saying `hz` heard it back (the agent's echo) in some half second, louder
/// than anything the queue plays.
fn heard_its_echo(heard: &[RtpPkt], hz: f64) -> bool {
    let pcm: Vec<i16> = heard
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    pcm.chunks(4000)
        .any(|w| 2.0 * goertzel(w, hz).sqrt() > 3000.0)
}

/// The SIPp agent 1001 at `port` (echoing what it hears), answering `calls` calls, each for a
/// second.
fn echoing_agent(node: &Strowger, port: u16, calls: u32) -> common::sipp::SippProcess {
    let a = Sipp::new(Scenario::File("uas_agent.xml"))
        .port(port)
        .rtp_echo()
        .calls(calls, 10, calls)
        .spawn(None, node.dir.path());
    std::thread::sleep(Duration::from_millis(300)); // let it bind
    a
}

/// The From of each INVITE the agent received, in order (it names the caller).
fn callers_taken(agent: &common::sipp::SippResult) -> Vec<String> {
    agent
        .received()
        .iter()
        .filter(|m| m.method() == Some("INVITE"))
        .map(|m| m.header("from").unwrap_or_default().to_string())
        .collect()
}

/// Two nodes on one Redis. Agent 1001 registers through node b and logs in to `desk` there
/// (*45: the roster is Redis's); a caller of 7002 on node a, then one on node b: the queue is
/// node a's (its first caller), node b bridges its caller there, and the one agent answers
/// them in the order they came, each caller hearing its own voice echoed by the agent.
#[test]
fn callers_on_two_nodes_wait_in_one_queue_and_one_agent_answers_them_in_order() {
    let redis = Server::redis();
    let (a, _config_a) = node("queue-node-a", &redis.url);
    let (b, _config_b) = node("queue-node-b", &redis.url);
    let port = free_port();
    registered(&b, "1001", "secret-1001", port);
    Sipp::new(Scenario::File("uac_auth_switch_bye.xml"))
        .service("*45")
        .args(&["-au", "1001", "-ap", "secret-1001"])
        .run(b.sip, b.dir.path())
        .assert_ok(1);
    b.wait_log("1001 logged in to queue desk", 0);
    let agent = echoing_agent(&a, port, 2);
    let (first_port, first) = queued_caller(&a, "7002", 700.0, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let (second_port, second) = queued_caller(&b, "7002", 1300.0, Duration::from_secs(6));
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    let r = agent.finish();
    r.assert_ok(2);
    let bridged = format!("7002 is on node sip:{}: bridged there", a.sip);
    let log_b = b.stderr();
    assert!(log_b.contains(&bridged), "{}", common::tail(&log_b, 30));
    let from = callers_taken(&r);
    assert_eq!(from.len(), 2, "{from:?}");
    assert!(
        from[0].contains(&format!(":{first_port}>")),
        "the first caller first: {from:?} (callers at {first_port}, {second_port})"
    );
    assert!(
        heard_its_echo(&first, 700.0),
        "the first caller reached the agent"
    );
    assert!(
        heard_its_echo(&second, 1300.0),
        "the second caller reached the agent"
    );
    let log = a.stderr();
    let ended = log
        .matches("queue desk: call with agent 1001 ended")
        .count();
    assert_eq!(
        ended,
        2,
        "both in node a's queue\n{}",
        common::tail(&log, 30)
    );
}

/// Redis away: each node hosts `support` itself with its configured agent 1001 (registered
/// through both while Redis answered, so each node still knows where it is), says so once, and
/// serves its own caller; nobody is bridged to the other node.
#[test]
fn with_redis_away_each_node_serves_its_own_queue() {
    let mut redis = Server::redis();
    let (a, _config_a) = node("queue-away-a", &redis.url);
    let (b, _config_b) = node("queue-away-b", &redis.url);
    let port = free_port();
    registered(&a, "1001", "secret-1001", port);
    registered(&b, "1001", "secret-1001", port);
    redis.kill();
    for (n, hz) in [(&a, 700.0), (&b, 1300.0)] {
        let agent = echoing_agent(n, port, 1);
        let (_, caller) = queued_caller(n, "7000", hz, Duration::from_secs(3));
        let heard = caller.join().unwrap();
        agent.finish().assert_ok(1);
        assert!(
            heard_its_echo(&heard, hz),
            "{hz} Hz caller reached the agent"
        );
    }
    for n in [&a, &b] {
        let log = n.stderr();
        let away = "queues (with their configured members) and park slots stay on this node";
        assert_eq!(
            log.matches(away).count(),
            1,
            "logged once\n{}",
            common::tail(&log, 30)
        );
        assert!(!log.contains("bridged there"), "{}", common::tail(&log, 30));
        assert!(
            log.contains("queue support: call with agent 1001 ended"),
            "{}",
            common::tail(&log, 30)
        );
    }
}
