//! Call queues in the real process: SIPp agents registered as users 1001 and 1002 take the
//! calls of SIPp callers waiting in queue `support` in the order the callers came
//! (tests/configs/queues.toml), and a caller waiting hears music, then its position.

use crate::common;

use common::audio::{best_correlation, read_wav, rms, ulaw_decode_all};
use common::baresip::{account, Baresip};
use common::net::free_port;
use common::registrar::registered;
use common::sip::{sdp, sdp_audio, Rtp, Uac, PCMU};
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
    let mut uac = Uac::new(s.sip, "7001");
    let resp = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
    assert_eq!(resp.status(), Some(200), "{resp:?}");
    rtp.remote = Some(sdp_audio(&resp.body).0);
    uac.ack("");
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
    let answered = |exten: &str, rtp: &mut Rtp| {
        let mut uac = Uac::new(s.sip, exten);
        let resp = uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv"));
        assert_eq!(resp.status(), Some(200), "{resp:?}");
        rtp.remote = Some(sdp_audio(&resp.body).0);
        uac.ack("");
        uac
    };
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
