//! What `/metrics` shows of the engines after calls and a registration on the simulated
//! network: the rendered text parses as the exposition format, and its series hold the
//! counts of what happened.

use crate::net;

use net::*;
use std::collections::HashMap;

/// The samples of a rendered scrape by series (`name{labels}`), every line checked to be a
/// comment of the format or a sample of ours, and no series twice.
pub fn samples(text: &str) -> HashMap<String, f64> {
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics ends with # EOF:\n{text}"
    );
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let known = ["HELP strowger_", "TYPE strowger_", "EOF"];
            assert!(known.iter().any(|k| comment.starts_with(k)), "{line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
        assert!(series.starts_with("strowger_"), "{line}");
        assert!(
            !series.contains('{') || series.ends_with('}'),
            "labels close the series: {line}"
        );
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line}"));
        let twice = samples.insert(series.to_string(), value).is_some();
        assert!(!twice, "{series} appears twice");
    }
    samples
}

pub fn value(s: &HashMap<String, f64>, series: &str) -> f64 {
    *s.get(series).unwrap_or_else(|| {
        let mut names: Vec<_> = s.keys().collect();
        names.sort();
        panic!("no {series} among {names:#?}")
    })
}

#[test]
fn calls_a_refusal_media_transcoding_and_a_registration_show_in_the_scrape() {
    let mut n = Net::new(11);
    let head = "[rtp]\nmedia_timeout_s = 0\ncodecs = [\"PCMU\", \"GSM\"]\n\
                [registrar]\nauthenticate = false\nkeepalive_s = 0\n";
    let sw = b2bua(&mut n, head);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    // PCMU on one side and GSM on the other: strowger translates both ways.
    n.agent(a).codecs = vec![0];
    n.agent(b).codecs = vec![3];
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;

    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.run_for(secs(2));
    let s = samples(&n.sw(sw).scrape());
    assert_eq!(value(&s, "strowger_calls_in_progress"), 1.0);
    assert_eq!(value(&s, "strowger_call_legs"), 2.0, "caller and callee");
    assert_eq!(value(&s, "strowger_media_legs"), 2.0);
    assert!(value(&s, "strowger_call_timers") >= 1.0);
    let pcmu_gsm = r#"strowger_transcoding{from="pcmu",to="gsm"}"#;
    assert_eq!(value(&s, pcmu_gsm), 1.0);
    assert_eq!(
        value(&s, r#"strowger_transcoding{from="gsm",to="pcmu"}"#),
        1.0
    );
    // Two seconds of 20 ms packets from each side; out, what the phones got.
    let rtp_in = value(&s, r#"strowger_rtp_packets_total{direction="in"}"#);
    let rtp_out = value(&s, r#"strowger_rtp_packets_total{direction="out"}"#);
    assert!((180.0..=210.0).contains(&rtp_in), "{rtp_in} packets in");
    let got = n.agent(a).rtp.len() + n.agent(b).rtp.len();
    assert!(got > 50);
    assert_eq!(rtp_out, got as f64);
    assert!(value(&s, r#"strowger_rtp_bytes_total{direction="in"}"#) >= rtp_in * 33.0);
    n.bye(a, c);
    assert!(n.run_until(secs(2), bye_answered(a, c)));

    // Bob busy: the caller is refused with 486.
    n.agent(b).policy.status = 486;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| n.agent(a).call(c).statuses().contains(&486)));

    n.register(b, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([b])));

    let s = samples(&n.sw(sw).scrape());
    assert_eq!(value(&s, "strowger_calls_in_progress"), 0.0);
    assert_eq!(
        value(&s, r#"strowger_calls_total{cause="normal_clearing"}"#),
        1.0
    );
    assert_eq!(value(&s, r#"strowger_calls_total{cause="user_busy"}"#), 1.0);
    assert_eq!(value(&s, "strowger_call_setup_seconds_count"), 2.0);
    assert_eq!(value(&s, "strowger_registrations_total"), 1.0);
    let invites = r#"strowger_sip_requests_total{direction="in",method="INVITE"}"#;
    assert_eq!(value(&s, invites), 2.0);
    let out_invites = r#"strowger_sip_requests_total{direction="out",method="INVITE"}"#;
    assert_eq!(value(&s, out_invites), 2.0);
    let register = r#"strowger_sip_requests_total{direction="in",method="REGISTER"}"#;
    assert_eq!(value(&s, register), 1.0);
    assert_eq!(
        value(
            &s,
            r#"strowger_sip_responses_total{direction="in",code="486"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            r#"strowger_sip_responses_total{direction="out",code="486"}"#
        ),
        1.0
    );
    assert!(
        !s.contains_key(pcmu_gsm),
        "no transcoding once the call ended"
    );
    // The calls' state is gone, but for transactions still waiting out their timers.
    assert_eq!(value(&s, "strowger_call_legs"), 0.0);
    assert_eq!(value(&s, "strowger_media_legs"), 0.0);
    assert!(
        value(&s, "strowger_sip_transactions") >= 1.0,
        "Timer J/K not yet due"
    );
    n.run_for(secs(40));
    let s = samples(&n.sw(sw).scrape());
    assert_eq!(
        value(&s, "strowger_sip_transactions"),
        0.0,
        "all terminated"
    );
    // The answered call's caller sent media and lost none.
    assert_eq!(value(&s, "strowger_rtp_loss_ratio_count"), 1.0);
    assert_eq!(
        value(&s, r#"strowger_rtp_loss_ratio_bucket{le="0.0"}"#),
        1.0
    );
    assert_eq!(value(&s, "strowger_rtp_jitter_seconds_count"), 1.0);
    // Media passes ran on their grid: every one within half a millisecond.
    let ticks = value(&s, r#"strowger_worker_tick_lag_seconds_count{worker="0"}"#);
    let on_time = r#"strowger_worker_tick_lag_seconds_bucket{le="0.0005",worker="0"}"#;
    assert!(
        ticks >= 100.0,
        "{ticks} media passes: one per 20 ms of the call"
    );
    assert_eq!(value(&s, on_time), ticks);
}

/// The caller gives up while the callee rings, and the callee answers strowger's CANCEL but
/// never its INVITE (its 487s are lost; a phone back from a stall does the same): the INVITE
/// is given up 64*T1 after the CANCEL, so the transaction gauge comes back to 0 and the table
/// keeps no orphaned INVITE.
#[test]
fn a_cancelled_invite_the_callee_never_ends_leaves_no_transaction() {
    let mut n = Net::new(12);
    let sw = b2bua(&mut n, "[rtp]\nmedia_timeout_s = 0\n");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    n.agent(b).policy = ua::Policy {
        provisional: vec![(180, false)],
        status: 200,
        after: secs(300),
    };
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), |n| invite_statuses(n, a, c).contains(&180)));
    let bob = addr(BOB);
    n.drop_next(usize::MAX, move |p| {
        p.from == bob && p.bytes.starts_with(b"SIP/2.0 487 ")
    });
    n.cancel(a, c);
    assert!(n.run_until(secs(5), ended(a, c)));
    assert_eq!(invite_statuses(&mut n, a, c).last(), Some(&487));
    assert_eq!(n.agent(b).last().requests_of(&sip::Method::Cancel).len(), 1);
    n.run_for(secs(40));
    let s = samples(&n.sw(sw).scrape());
    assert_eq!(value(&s, "strowger_calls_in_progress"), 0.0);
    let switch::control::Reply::Stats(st) =
        n.sw(sw).node().command(switch::control::Command::Stats)
    else {
        panic!("Stats answers with Reply::Stats");
    };
    assert_eq!(
        value(&s, "strowger_sip_transactions"),
        0.0,
        "{:?}",
        st.transactions
    );
    assert_eq!(
        n.sw(sw).node().table_counts(),
        switch::TableCounts::default()
    );
}
