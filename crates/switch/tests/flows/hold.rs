//! Hold with music on the simulated network (tests/net): a party of a bridged call that holds
//! it leaves the other party hearing music on hold; resuming restores the bridge.

use crate::net;

use net::*;
use std::time::Duration;

/// A bridged call from Alice to Bob (2001), both sending silence (µ-law 0xff) every 20 ms.
fn bridged(seed: u64) -> (Net, Id, Id, Id, usize, usize) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    n.agent(a).send_rtp = true;
    n.agent(b).send_rtp = true;
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let bc = n.agent(b).last_index().unwrap();
    (n, sw, a, b, c, bc)
}

/// What agent `ua` hears during the next `d`: (packets, packets carrying sound — not the
/// agents' own silence).
fn heard(n: &mut Net, ua: Id, d: Duration) -> (usize, usize) {
    let from = n.agent(ua).rtp_payloads.len();
    n.run_for(d);
    let got = &n.agent(ua).rtp_payloads[from..];
    let loud = got.iter().filter(|p| p.iter().any(|&b| b != 0xff)).count();
    (got.len(), loud)
}

/// Agent `ua` re-INVITEs in call `c` with `sdp`; strowger answers 200, whose SDP is returned.
fn reinvite_answered(n: &mut Net, ua: Id, c: usize, sdp: String) -> String {
    let oks = |n: &mut Net| {
        n.agent(ua)
            .call(c)
            .responses_to("INVITE")
            .iter()
            .filter(|m| m.status() == Some(200))
            .count()
    };
    let before = oks(n);
    n.reinvite(ua, c, sdp);
    assert!(n.run_until(secs(2), |n| oks(n) > before));
    n.run_for(ms(100));
    body(&last_response(n, ua, c, "INVITE"))
}

#[test]
fn the_callee_holds_and_the_caller_hears_music_until_it_resumes() {
    let (mut n, sw, a, b, c, bc) = bridged(1);
    let (pkts, loud) = heard(&mut n, a, secs(1));
    assert!(
        pkts > 40 && loud == 0,
        "Bob's silence relayed: {pkts} packets, {loud} loud"
    );

    let hold = n.agent(b).sdp(&[0], "sendonly");
    let answer = reinvite_answered(&mut n, b, bc, hold);
    assert!(answer.contains("a=recvonly"), "{answer}");
    let (pkts, loud) = heard(&mut n, a, secs(2));
    assert!(
        pkts > 90 && loud > 90,
        "music on hold: {pkts} packets, {loud} loud"
    );
    let (to_bob, _) = heard(&mut n, b, secs(1));
    assert_eq!(to_bob, 0, "nothing is sent to the party that holds");

    let resume = n.agent(b).sdp(&[0], "sendrecv");
    reinvite_answered(&mut n, b, bc, resume);
    let (pkts, loud) = heard(&mut n, a, secs(1));
    assert!(
        pkts > 40 && loud == 0,
        "Bob again, not music: {pkts} packets, {loud} loud"
    );
    let (pkts, _) = heard(&mut n, b, secs(1));
    assert!(pkts > 40, "Alice heard again by Bob: {pkts}");

    hang_up(&mut n, a, c, secs(2));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// The caller holds the old way (RFC 2543: connection address 0.0.0.0, by UPDATE here): the
/// callee hears the music; a second hold by the callee leaves both quiet, and the callee's
/// resume gives the callee the music again while the caller still holds.
#[test]
fn holds_from_both_sides_and_address_zero_follow_each_party() {
    let (mut n, sw, a, b, c, bc) = bridged(2);
    let zero = n
        .agent(a)
        .sdp(&[0], "sendrecv")
        .replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0");
    n.update(a, c, zero);
    assert!(n.run_until(secs(2), |n| !n
        .agent(a)
        .call(c)
        .responses_to("UPDATE")
        .is_empty()));
    let (pkts, loud) = heard(&mut n, b, secs(1));
    assert!(pkts > 40 && loud > 40, "Bob hears music: {pkts}/{loud}");

    let hold = n.agent(b).sdp(&[0], "inactive");
    reinvite_answered(&mut n, b, bc, hold);
    assert_eq!(
        heard(&mut n, b, secs(1)).0,
        0,
        "both hold: Bob gets nothing"
    );
    assert_eq!(
        heard(&mut n, a, secs(1)).0,
        0,
        "both hold: Alice gets nothing"
    );

    let resume = n.agent(b).sdp(&[0], "sendrecv");
    reinvite_answered(&mut n, b, bc, resume);
    let (pkts, loud) = heard(&mut n, b, secs(1));
    assert!(
        pkts > 40 && loud > 40,
        "Alice still holds: music for Bob: {pkts}/{loud}"
    );

    let resume = n.agent(a).sdp(&[0], "sendrecv");
    n.update(a, c, resume);
    assert!(
        n.run_until(secs(2), |n| n.agent(a).call(c).responses_to("UPDATE").len()
            == 2)
    );
    n.run_for(ms(100));
    let (pkts, loud) = heard(&mut n, b, secs(1));
    assert!(pkts > 40 && loud == 0, "bridged again: {pkts}/{loud}");

    hang_up(&mut n, b, bc, secs(2));
    assert!(n.run_until(secs(2), ended(a, c)));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// The `moh` step plays the class in a loop; a named class that does not exist plays the
/// default one rather than nothing.
#[test]
fn the_moh_step_plays_music_until_the_caller_hangs_up() {
    let mut n = Net::new(3);
    let sw = b2bua(
        &mut n,
        "[[dialplan.contexts.default.rules]]\nexten = \"7777\"\nsteps = [\"answer\", \"moh jazz\"]\n",
    );
    let a = n.ua(ALICE, "alice");
    let c = n.invite(a, "sip:7777@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    let (pkts, loud) = heard(&mut n, a, secs(10));
    assert!(
        pkts > 490 && loud > 490,
        "ten seconds of music: {pkts}/{loud}"
    );
    hang_up(&mut n, a, c, secs(2));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

/// A reload with new music classes: a hold playing keeps its tracks to the end; the next hold
/// plays the new class (here "jazz", one silent track, where the default tune played before).
#[test]
fn a_reload_gives_the_next_hold_the_new_music_and_leaves_a_playing_one_alone() {
    let mut n = Net::new(4);
    let rule = "[[dialplan.contexts.default.rules]]\nexten = \"7777\"\nsteps = [\"answer\", \"moh jazz\"]\n";
    let sw = b2bua(&mut n, rule);
    let a = n.ua(ALICE, "alice");
    let playing = n.invite(a, "sip:7777@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, playing)));

    let mut music = switch::moh::Music::default();
    let silence = std::sync::Arc::new(media::Prompt::from_pcm("jazz", &[0; 8000]));
    music.add("jazz", vec![silence], false);
    let cfg = switch::config::Config::from_str(&b2bua_config(rule), "reload.toml").unwrap();
    n.reload_with(
        sw,
        switch::Reload::new(cfg).with_music(std::sync::Arc::new(music)),
    );
    let (pkts, loud) = heard(&mut n, a, secs(8));
    assert!(
        pkts > 390 && loud > 390,
        "the default tune goes on: {pkts}/{loud}"
    );
    hang_up(&mut n, a, playing, secs(2));

    let next = n.invite(a, "sip:7777@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, next)));
    n.run_for(ms(200));
    let (pkts, loud) = heard(&mut n, a, secs(3));
    assert!(pkts > 140 && loud == 0, "the new class: {pkts}/{loud}");
    hang_up(&mut n, a, next, secs(2));
}
