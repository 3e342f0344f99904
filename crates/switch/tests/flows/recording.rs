//! Whole-call recordings on the simulated network (call_recording.rs): the `record-call` step
//! and the `RECORD_CALLS` variable hand the writer a recording that lasts as long as the call,
//! the CDR names it with its duration, and a writer that falls behind leaves the call alone and
//! the recording marked incomplete.

use crate::net;

use net::*;

/// 4001 records in stereo and bridges to Bob; 4002 sets RECORD_CALLS (mono, Opus), 4003 sets
/// it to nonsense; both bridge to Bob too.
const RULES: &str = r#"
[[dialplan.contexts.default.rules]]
exten = "4001"
steps = ["record-call calls/${CALLID}.wav mix=stereo", "bridge sip:2001@${bridge_target} timeout=20"]
[[dialplan.contexts.default.rules]]
exten = "4002"
steps = ["set RECORD_CALLS=mono,opus", "bridge sip:2002@${bridge_target} timeout=20"]
[[dialplan.contexts.default.rules]]
exten = "4003"
steps = ["set RECORD_CALLS=loud", "bridge sip:2003@${bridge_target} timeout=20"]
"#;

/// Alice calls `exten` (both sides sending RTP) and talks for `talk`, the writer draining the
/// recordings every 100 ms when `drain`; then hangs up. Returns the CDR, and for each
/// recording its name, channels and the samples per channel the writer got.
fn recorded_call(exten: &str, talk: std::time::Duration, drain: bool) -> RecordedCall {
    let mut n = Net::new(11);
    let sw = b2bua(&mut n, RULES);
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(n.run_until(secs(2), confirmed(a, c)), "{exten} answered");
    let mut got = Vec::new();
    let end = n.now + talk;
    while n.now < end {
        n.run_for(ms(100));
        if drain {
            take(&mut n, sw, &mut got);
        }
    }
    hang_up(&mut n, a, c, secs(2));
    take(&mut n, sw, &mut got);
    let cdr = one_cdr(&mut n, sw, exten);
    let call_id = cdr["call_id"].as_str().unwrap().to_string();
    RecordedCall {
        cdr,
        call_id,
        got,
        logs: n.sw(sw).logs(),
    }
}

struct RecordedCall {
    cdr: serde_json::Value,
    call_id: String,
    /// Name, channels, samples per channel.
    got: Vec<(String, u16, usize)>,
    logs: Vec<String>,
}

/// What the writer gets: each recording's blocks so far.
fn take(n: &mut Net, sw: Id, got: &mut Vec<(String, u16, usize)>) {
    for (name, rec) in n.sw(sw).node().recordings().iter() {
        let ch = rec.mix.channels();
        let samples: usize =
            rec.blocks.try_iter().map(|b| b.len()).sum::<usize>() / usize::from(ch);
        match got.iter_mut().find(|(n, ..)| n == name) {
            Some(entry) => entry.2 += samples,
            None => got.push((name.clone(), ch, samples)),
        }
    }
}

#[test]
fn a_recorded_bridged_call_is_written_for_as_long_as_it_lasts_and_named_in_the_cdr() {
    let r = recorded_call("4001", secs(5), true);
    let name = format!("calls/{}.wav", r.call_id);
    assert_eq!(r.got.len(), 1, "{:?}", r.got);
    let (got_name, channels, samples) = &r.got[0];
    assert_eq!((got_name, *channels), (&name, 2));
    // The recording runs from the first step to the hang-up: the 5 s talked and the set-up.
    let secs = *samples as f64 / 8000.0;
    assert!((5.0..5.5).contains(&secs), "{secs} s recorded");
    assert_eq!(r.cdr["recording"], name.as_str());
    assert_eq!(r.cdr["recording_s"].as_f64().unwrap(), secs);
    assert_eq!(r.cdr["recording_complete"], true);
}

#[test]
fn record_calls_set_in_the_dialplan_records_the_call_under_its_call_id() {
    let r = recorded_call("4002", secs(2), true);
    let name = format!("calls/{}.opus", r.call_id);
    assert_eq!(r.got.len(), 1, "{:?}", r.got);
    assert_eq!((&r.got[0].0, r.got[0].1), (&name, 1), "mono, Opus");
    assert!(r.got[0].2 >= 2 * 8000, "{} samples", r.got[0].2);
    assert_eq!(r.cdr["recording"], name.as_str());
    assert_eq!(r.cdr["recording_complete"], true);
}

#[test]
fn a_writer_that_falls_behind_leaves_the_call_up_and_the_recording_incomplete() {
    let r = recorded_call("4001", secs(5), false);
    // The call went on and ended with a 200 to the BYE (hang_up); what the writer missed is
    // the CDR's to say: 2 s queued, the rest dropped.
    assert_eq!(r.cdr["recording_complete"], false);
    assert_eq!(r.cdr["recording_s"].as_f64().unwrap(), 2.0);
    assert_eq!(r.cdr["billable_s"].as_f64().unwrap().round(), 5.0);
    assert_eq!(r.got[0].2, 2 * 8000, "the queued blocks reach the writer");
}

#[test]
fn an_unknown_record_calls_value_is_reported_and_the_call_goes_on_unrecorded() {
    let r = recorded_call("4003", secs(1), true);
    assert!(r.got.is_empty(), "{:?}", r.got);
    assert!(r.cdr["recording"].is_null());
    assert!(
        r.logs
            .iter()
            .any(|l| l.contains("RECORD_CALLS=\"loud\"") && l.contains("expected mono or stereo")),
        "{:?}",
        r.logs
    );
    assert!(r.cdr["billable_s"].as_f64().unwrap() >= 1.0);
}

#[test]
fn a_user_with_record_calls_has_its_calls_recorded() {
    let mut n = Net::new(12);
    let head = format!("[security]\ntrusted = [\"10.9.9.9\"]\n{RULES}");
    let sw = b2bua(&mut n, &head);
    let user = store::Credentials {
        record_calls: Some("stereo".into()),
        ..switch::registrar::credentials("1001", "strowger", "pw-1001")
    };
    store::CredentialStore::put_user(&*n.sw(sw).shared.store, &user).unwrap();
    let a = n.ua(ALICE, "1001");
    n.ua(BOB, "bob");
    n.agent(a).credentials = Some(("1001".into(), "pw-1001".into()));
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    n.run_for(secs(1));
    hang_up(&mut n, a, c, secs(2));
    let mut got = Vec::new();
    take(&mut n, sw, &mut got);
    let cdr = one_cdr(&mut n, sw, "");
    assert_eq!(cdr["user"], "1001");
    let name = format!("calls/{}.wav", cdr["call_id"].as_str().unwrap());
    assert_eq!(cdr["recording"], name.as_str());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0].0, got[0].1),
        (&name, 2),
        "the user's stereo recording"
    );
}

#[test]
fn a_file_name_leading_out_of_its_directory_is_refused_and_the_call_goes_on() {
    let rules = RULES.replace("calls/${CALLID}.wav", "calls/../${CALLID}.wav");
    let mut n = Net::new(13);
    let sw = b2bua(&mut n, &rules);
    let a = n.ua(ALICE, "alice");
    n.ua(BOB, "bob");
    let c = n.invite(a, "sip:4001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    hang_up(&mut n, a, c, secs(2));
    assert!(n.sw(sw).node().recordings().is_empty());
    assert!(one_cdr(&mut n, sw, "")["recording"].is_null());
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter().any(|l| l.contains("\"..\" is refused")),
        "{logs:?}"
    );
}
