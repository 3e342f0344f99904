//! Shared RTP ports (`rtp.shared_ports`, on by default) with far ends that cannot be told apart
//! by the address their SDP names: one that sends from another address is moved onto a pair
//! of its own by a re-INVITE once that is heard, a callee whose answer names another leg's
//! address is moved at once, and RTP sprayed from addresses nobody announced moves no more
//! legs than the rate limit lets through.

use crate::net;

use net::*;
use std::net::SocketAddr;

/// A scrape's value of a counter (0 when absent).
fn counter(n: &mut Net, sw: Id, name: &str) -> f64 {
    let scrape = n.sw(sw).scrape();
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

const MOVED: &str = "strowger_rtp_legs_moved_total";
const STRAYS: &str = "strowger_rtp_stray_packets_total";

/// Packets agent `ua` got since `from` (an index into its RTP) carrying `voice`, by source.
fn heard(n: &mut Net, ua: Id, from: usize, voice: u8) -> Vec<SocketAddr> {
    let a = n.agent(ua);
    a.rtp[from..]
        .iter()
        .zip(&a.rtp_payloads[from..])
        .filter(|(_, p)| p.iter().all(|&b| b == voice))
        .map(|((_, src, _), _)| *src)
        .collect()
}

/// The strowger port each SDP that agent `ua` got in call `c` names.
fn offered_ports(n: &mut Net, ua: Id, c: usize) -> Vec<u16> {
    n.agent(ua)
        .call(c)
        .sdp_received
        .iter()
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("m=audio ")))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn a_far_end_that_sends_from_another_address_than_its_sdp_is_moved_to_a_pair_and_heard() {
    let mut n = Net::new(1);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let b = n.ua(BOB, "bob");
    // Alice announces 127.0.0.1:40122 and sends from another port (static NAT mapping).
    n.send_rtp_from(a, "127.0.0.1:41000");
    for (ua, voice) in [(a, 0x22), (b, 0x11)] {
        n.agent(ua).send_rtp = true;
        n.agent(ua).voice = vec![voice; 160];
    }
    let c = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.run_for(ms(500));
    assert!(
        heard(&mut n, b, 0, 0x22).is_empty(),
        "a shared port takes RTP from the announced address alone"
    );
    assert_eq!(
        counter(&mut n, sw, MOVED),
        0.0,
        "not before 1.5 s of silence"
    );

    n.run_for(secs(3));
    let ports = offered_ports(&mut n, a, c);
    assert_eq!(ports.len(), 2, "the answer, then the re-INVITE: {ports:?}");
    assert_ne!(ports[0], ports[1], "a port of its own");
    assert_eq!(counter(&mut n, sw, MOVED), 1.0);
    assert!(counter(&mut n, sw, STRAYS) >= 10.0);
    let from = n.agent(b).rtp.len();
    let from_a = n.agent(a).rtp.len();
    n.run_for(secs(1));
    let alice = heard(&mut n, b, from, 0x22);
    assert!(alice.len() > 40, "Bob hears Alice: {}", alice.len());
    let bob = heard(&mut n, a, from_a, 0x11);
    assert!(bob.len() > 40, "Alice hears Bob: {}", bob.len());
    let own = SocketAddr::new(ALICE.parse::<SocketAddr>().unwrap().ip(), ports[1]);
    assert!(
        bob.iter().all(|&src| src == own),
        "from Alice's own pair: {:?}",
        bob.first()
    );
    let bc = n.agent(b).last_index().unwrap();
    assert_eq!(
        n.agent(b).call(bc).sdp_received.len(),
        1,
        "Bob, heard from his announced address, stays where he is"
    );
    hang_up(&mut n, a, c, secs(2));
}

#[test]
fn rtp_sprayed_from_unannounced_addresses_moves_no_more_legs_than_the_rate_limit() {
    let mut n = Net::new(2);
    let sw = b2bua(&mut n, "");
    // Twelve silent callers of the demo prompt, each on an address of its own (their legs
    // share a port).
    let callers: Vec<(Id, usize)> = (0..12)
        .map(|i| {
            let a = n.ua(&format!("127.0.0.{}:5061", 10 + i), &format!("caller{i}"));
            let c = n.invite(a, "sip:44444@127.0.0.1", SW);
            (a, c)
        })
        .collect();
    for &(a, c) in &callers {
        assert!(n.run_until(secs(2), confirmed(a, c)));
    }
    let shared = offered_ports(&mut n, callers[0].0, callers[0].1)[0];
    assert!(
        callers
            .iter()
            .all(|&(a, c)| offered_ports(&mut n, a, c) == [shared]),
        "the callers share a port"
    );
    let to = SocketAddr::from(([127, 0, 0, 1], shared));
    let rtp = |seq: u16| {
        let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        p[2..4].copy_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0x55; 160]);
        p
    };
    // Two seconds of a scan: every packet from another address none of the calls uses.
    n.run_for(secs(2));
    for i in 0..2000u32 {
        let from = SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 1024 + (i % 60000) as u16));
        n.inject(Packet::media(from, to, rtp(i as u16)));
        if i % 20 == 0 {
            n.run_for(ms(20));
        }
    }
    assert!(counter(&mut n, sw, STRAYS) >= 2000.0);
    assert_eq!(
        counter(&mut n, sw, MOVED),
        0.0,
        "no far end sends from there"
    );

    // Two seconds of streams spoofed from the callers' own addresses, other ports.
    let spray_for = secs(2);
    let start = n.elapsed();
    let mut seq = 0u16;
    while n.elapsed() - start < spray_for {
        for i in 0..12u8 {
            let from = SocketAddr::from(([127, 0, 0, 10 + i], 50000));
            n.inject(Packet::media(from, to, rtp(seq)));
        }
        seq += 1;
        n.run_for(ms(20));
    }
    let moved = counter(&mut n, sw, MOVED);
    // A burst of 4, then one per 500 ms: at most 4 + 2 s / 500 ms.
    assert!(moved >= 1.0, "the spoofed streams do count");
    assert!(moved <= 8.0, "{moved} legs moved in 2 s");
    n.run_for(secs(2));
    assert!(
        counter(&mut n, sw, MOVED) <= moved + 1.0,
        "nothing more once it stops"
    );
    assert_eq!(n.sw(sw).active_calls(), 12, "every call still up");
}

/// Strowger offers a callee a shared port once the far end has shown it answers calls from
/// addresses of their own (two answers differed); one whose answer then names another leg's
/// address all the same is moved to a pair at once by a re-INVITE, and gets pairs again.
#[test]
fn a_callee_whose_answer_names_another_legs_address_is_moved_to_a_pair() {
    let mut n = Net::new(3);
    let sw = b2bua(&mut n, "");
    let b = n.ua(BOB, "bob");
    n.agent(b).send_rtp = true;
    n.agent(b).voice = vec![0x11; 160];
    let mut calls = Vec::new();
    // Calls 2001..2004 from callers of their own; Bob answers from `media`.
    let mut call = |n: &mut Net, i: u8, media: &str| {
        n.set_media(b, media);
        let a = n.ua(&format!("127.0.0.{}:5061", 10 + i), &format!("caller{i}"));
        n.agent(a).send_rtp = true;
        let c = n.invite(a, &format!("sip:200{i}@127.0.0.1"), SW);
        assert!(n.run_until(secs(2), confirmed(a, c)));
        n.run_for(secs(1));
        let bc = n.agent(b).last_index().unwrap();
        calls.push((a, c));
        (a, offered_ports(n, b, bc))
    };
    let (_, first) = call(&mut n, 1, "127.0.0.1:40000");
    let (_, second) = call(&mut n, 2, "127.0.0.1:40100");
    assert_ne!(first, second, "pairs of their own while Bob is unknown");
    let (third_caller, third) = call(&mut n, 3, "127.0.0.1:40000");
    assert_eq!(
        third.len(),
        2,
        "offered the shared port, then re-INVITEd: {third:?}"
    );
    assert_eq!(counter(&mut n, sw, MOVED), 1.0);
    let from = n.agent(third_caller).rtp.len();
    n.run_for(secs(1));
    let bob = heard(&mut n, third_caller, from, 0x11);
    assert!(bob.len() > 40, "the third caller hears Bob: {}", bob.len());
    let (_, fourth) = call(&mut n, 4, "127.0.0.1:40200");
    assert_eq!(fourth.len(), 1, "a pair at once again: {fourth:?}");
    assert_eq!(counter(&mut n, sw, MOVED), 1.0);
    for (a, c) in calls {
        hang_up(&mut n, a, c, secs(2));
    }
}
