//! Conference rooms on the simulated network (tests/net): callers of a room each send their
//! own tone and hear the others' and not their own; PINs, mute, volume, lock and kick keys
//! (RFC 4733 events); rooms that are full or locked; callers of one room on different workers
//! meet on one.

use crate::net;

use net::*;

/// Room `board` needs PIN 1234 (moderators 9999); room `small` holds two. A caller turned away
/// is bridged to Bob with its CONFSTATUS as the user part (sip:FULL@Bob), so it can be seen.
fn conference_switch(n: &mut Net, workers: usize) -> Id {
    let head = format!(
        "[conferences.board]\npin = \"1234\"\nmoderator_pin = \"9999\"\nrate = 8000\n\
         [conferences.small]\nmax_members = 2\n\
         [[dialplan.contexts.default.rules]]\nexten = \"8000\"\nsteps = [\"conference ${{EXTEN}}\"]\n\
         [[dialplan.contexts.default.rules]]\nexten = \"8100\"\n\
         steps = [\"conference board\", \"bridge sip:${{CONFSTATUS}}@{BOB} timeout=5\"]\n\
         [[dialplan.contexts.default.rules]]\nexten = \"8200\"\n\
         steps = [\"conference small\", \"bridge sip:${{CONFSTATUS}}@{BOB} timeout=5\"]\n"
    );
    n.switch(&config(&head), &[SW], workers)
}

/// A caller at 127.0.0.1:`port` saying a `hz` tone (and able to key digits) dials `exten`.
fn caller(n: &mut Net, port: u16, hz: u32, exten: &str) -> (Id, usize) {
    caller_of(n, SW, port, hz, exten)
}

/// `caller`, of the switch at `sw`.
fn caller_of(n: &mut Net, sw: &str, port: u16, hz: u32, exten: &str) -> (Id, usize) {
    let ua = n.ua(&format!("127.0.0.1:{port}"), &format!("c{port}"));
    let a = n.agent(ua);
    a.codecs = vec![0, 101];
    a.send_rtp = true;
    a.voice = tone(hz);
    let c = n.invite(ua, &format!("sip:{exten}@127.0.0.1"), sw);
    assert!(
        n.run_until(secs(2), confirmed(ua, c)),
        "caller {port} answered"
    );
    (ua, c)
}

/// Keys `digits` one by one, 200 ms apart.
fn key(n: &mut Net, ua: Id, c: usize, digits: &str) {
    for d in digits.chars() {
        n.agent(ua).dtmf(c, d);
        n.run_for(ms(200));
    }
}

/// Whether `heard` (amplitudes of `freqs`) has every tone but `own`'s, and not `own`'s.
fn only_the_others(heard: &[f64], freqs: &[u32], own: u32) -> bool {
    freqs
        .iter()
        .zip(heard)
        .all(|(&f, &a)| if f == own { a < 300.0 } else { a > 3000.0 })
}

/// The user part of the INVITEs Bob got: the CONFSTATUS of the callers turned away.
fn turned_away(n: &mut Net, bob: Id) -> Vec<String> {
    let b = n.agent(bob);
    b.calls
        .iter()
        .filter(|c| !c.outgoing)
        .map(|c| {
            let uri = c.requests[0].request_uri().unwrap_or_default().to_string();
            uri.trim_start_matches("sip:")
                .split('@')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The tones of the three callers of `callers_in_8000`, one each.
const FREQS: [u32; 3] = [500, 1000, 1500];

/// Three callers in room 8000 from ports 5061-5063, each sending its tone of `FREQS`.
fn callers_in_8000(n: &mut Net) -> Vec<(Id, usize)> {
    FREQS
        .iter()
        .enumerate()
        .map(|(i, &hz)| caller(n, 5061 + i as u16, hz, "8000"))
        .collect()
}

/// Each of `callers_in_8000` hears the other two tones and not its own, over a second each.
fn each_hears_only_the_others(n: &mut Net, callers: &[(Id, usize)]) {
    for (&(ua, _), &own) in callers.iter().zip(&FREQS) {
        let heard = hears(n, ua, &FREQS, secs(1));
        assert!(only_the_others(&heard, &FREQS, own), "{own} Hz: {heard:?}");
    }
}

#[test]
fn each_caller_hears_the_others_and_not_itself() {
    let mut n = Net::new(81);
    let sw = conference_switch(&mut n, 1);
    let callers = callers_in_8000(&mut n);
    n.run_for(secs(1));
    each_hears_only_the_others(&mut n, &callers);
    // The first leaves: the others hear each other alone.
    let (first, c) = callers[0];
    hang_up(&mut n, first, c, secs(2));
    n.run_for(ms(500));
    let heard = hears(&mut n, callers[1].0, &FREQS, secs(1));
    assert!(heard[0] < 300.0 && heard[2] > 3000.0, "{heard:?}");
    for &(ua, c) in &callers[1..] {
        hang_up(&mut n, ua, c, secs(2));
    }
    assert_eq!(n.sw(sw).active_calls(), 0);
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("joined conference 8000 as member (3 in the room)")),
        "{logs:?}"
    );
}

/// Two switches on one store, each naming itself in `[cluster]`: the room lives on the first
/// one reached, the second bridges its callers there, and every caller hears the others and
/// not itself. The room's claim goes with its last member: the next caller of the second
/// switch hosts the room there.
#[test]
fn callers_of_two_nodes_meet_on_the_node_that_claimed_the_room() {
    const SW2: &str = "127.0.0.2:5060";
    let mut n = Net::new(84);
    let node = |addr: &str| format!("[cluster]\nnode_uri = \"sip:{addr}\"\n");
    let room =
        "[[dialplan.contexts.default.rules]]\nexten = \"8000\"\nsteps = [\"conference 8000\"]\n";
    let a = n.switch(&config(&format!("{}{room}", node(SW))), &[SW], 2);
    let b_config = config(&format!("{}{room}", node(SW2)));
    let b = n.switch_sharing(&b_config, &[SW2], 2, a);
    let callers = vec![
        caller_of(&mut n, SW, 5061, FREQS[0], "8000"),
        caller_of(&mut n, SW2, 5062, FREQS[1], "8000"),
        caller_of(&mut n, SW2, 5063, FREQS[2], "8000"),
    ];
    n.run_for(secs(1));
    each_hears_only_the_others(&mut n, &callers);
    let bridged = |n: &mut Net, sw: Id| {
        let logs = n.sw(sw).logs();
        logs.iter()
            .filter(|l| l.contains("8000 is on node sip:127.0.0.1:5060: bridged there"))
            .count()
    };
    assert_eq!(bridged(&mut n, b), 2, "{:?}", n.sw(b).logs());
    assert_eq!(bridged(&mut n, a), 0);
    for &(ua, c) in &callers {
        hang_up(&mut n, ua, c, secs(2));
    }
    assert_eq!(n.sw(a).active_calls() + n.sw(b).active_calls(), 0);
    let (ua, c) = caller_of(&mut n, SW2, 5064, FREQS[0], "8000");
    let logs = n.sw(b).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("joined conference 8000 as member (1 in")),
        "the room is free again, and b's now: {logs:?}"
    );
    hang_up(&mut n, ua, c, secs(2));
}

#[test]
fn a_pin_admits_members_and_moderators_and_wrong_ones_turn_away() {
    let mut n = Net::new(82);
    let sw = conference_switch(&mut n, 1);
    let bob = n.ua(BOB, "bob");
    n.agent(bob).policy.status = 486;
    let (a, ac) = caller(&mut n, 5061, 500, "8100");
    key(&mut n, a, ac, "1234#");
    let (m, mc) = caller(&mut n, 5062, 1000, "8100");
    key(&mut n, m, mc, "9999#");
    let (w, wc) = caller(&mut n, 5063, 1500, "8100");
    key(&mut n, w, wc, "1111#12#");
    assert!(
        turned_away(&mut n, bob).is_empty(),
        "two wrong PINs: still asked"
    );
    key(&mut n, w, wc, "#");
    assert!(n.run_until(secs(2), |n| turned_away(n, bob) == ["BADPIN"]));
    let logs = n.sw(sw).logs();
    for want in ["board as member (1 in", "board as moderator (2 in"] {
        assert!(logs.iter().any(|l| l.contains(want)), "{want}: {logs:?}");
    }
    let freqs = [500, 1000, 1500];
    let heard = hears(&mut n, a, &freqs, secs(1));
    assert!(only_the_others(&heard, &freqs[..2], 500), "{heard:?}");
    assert!(
        heard[2] < 300.0,
        "the caller turned away is not in the room"
    );

    // No PIN at all: the program goes on when the time is up.
    let (s, _) = caller(&mut n, 5064, 2000, "8100");
    assert!(n.run_until(secs(25), |n| turned_away(n, bob).len() == 2));
    assert_eq!(turned_away(&mut n, bob)[1], "NOPIN");
    let _ = s;
}

#[test]
fn members_mute_and_set_volumes_and_moderators_lock_and_kick() {
    let mut n = Net::new(83);
    let sw = conference_switch(&mut n, 1);
    let bob = n.ua(BOB, "bob");
    n.agent(bob).policy.status = 486;
    let (m, mc) = caller(&mut n, 5061, 500, "8100");
    key(&mut n, m, mc, "9999#");
    let (a, ac) = caller(&mut n, 5062, 1000, "8100");
    key(&mut n, a, ac, "1234#");
    n.run_for(ms(500));
    let freqs = [500, 1000];
    let before = hears(&mut n, m, &freqs, secs(1));
    assert!(before[1] > 3000.0, "{before:?}");

    key(&mut n, a, ac, "1");
    let muted = hears(&mut n, m, &freqs, secs(1));
    assert!(muted[1] < 300.0, "muted: {muted:?}");
    key(&mut n, a, ac, "1");
    n.run_for(ms(200));

    // Two steps up of what A hears: 6 dB, twice the amplitude.
    let normal = hears(&mut n, a, &freqs, secs(1))[0];
    key(&mut n, a, ac, "66");
    let louder = hears(&mut n, a, &freqs, secs(1))[0];
    assert!((louder / normal - 2.0).abs() < 0.2, "{normal} → {louder}");
    // One step down of what A says: 3 dB less for M.
    key(&mut n, a, ac, "7");
    let quieter = hears(&mut n, m, &freqs, secs(1))[1];
    assert!(
        (quieter / before[1] - 0.71).abs() < 0.08,
        "{before:?} → {quieter}"
    );

    // Members' 2 and 3 do nothing; the moderator's lock the room and kick the last one in.
    key(&mut n, a, ac, "23");
    key(&mut n, m, mc, "2");
    let (l, lc) = caller(&mut n, 5063, 1500, "8100");
    key(&mut n, l, lc, "1234#");
    assert!(n.run_until(secs(2), |n| turned_away(n, bob) == ["LOCKED"]));
    key(&mut n, m, mc, "3");
    assert!(n.run_until(secs(2), ended(a, ac)), "A was removed");
    assert_eq!(n.agent(a).call(ac).requests_of(&sip::Method::Bye).len(), 1);
    assert!(
        n.run_until(secs(2), ended(l, lc)),
        "turned away, then Bob refused"
    );
    hang_up(&mut n, m, mc, secs(2));
    assert_eq!(n.sw(sw).active_calls(), 0);
}

#[test]
fn a_full_room_turns_callers_away() {
    let mut n = Net::new(84);
    conference_switch(&mut n, 1);
    let bob = n.ua(BOB, "bob");
    n.agent(bob).policy.status = 486;
    caller(&mut n, 5061, 500, "8200");
    caller(&mut n, 5062, 1000, "8200");
    caller(&mut n, 5063, 1500, "8200");
    assert!(n.run_until(secs(2), |n| turned_away(n, bob) == ["FULL"]));
}

/// With two workers, callers whose Call-IDs belong to either are handed to the room's worker:
/// all three meet in one room.
#[test]
fn callers_on_different_workers_meet_in_one_room() {
    let mut n = Net::new(85);
    let sw = conference_switch(&mut n, 2);
    let callers = callers_in_8000(&mut n);
    assert!(
        n.sw(sw).handed_off() > 0,
        "some caller came in on the other worker"
    );
    n.run_for(secs(1));
    each_hears_only_the_others(&mut n, &callers);
    for &(ua, c) in &callers {
        hang_up(&mut n, ua, c, secs(2));
    }
    assert_eq!(n.sw(sw).active_calls(), 0);
}
