//! Shared RTP ports (`rtp.shared_ports`, on by default) with far ends that cannot be told apart
//! by the address their SDP names: one that sends from another address is moved onto a pair
//! of its own by a re-INVITE once that is heard, a callee whose answer names another leg's
//! address is moved at once (and that far end's next callees get pairs from the start), and RTP sprayed from addresses nobody announced moves no more
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

#[test]
fn a_callee_whose_answer_names_another_legs_address_is_moved_and_its_next_calls_get_pairs() {
    let mut n = Net::new(3);
    let sw = b2bua(&mut n, "");
    let a = n.ua(ALICE, "alice");
    let a2 = n.ua("127.0.0.2:5061", "carol");
    let b = n.ua(BOB, "bob");
    for (ua, voice) in [(a, 0x22), (a2, 0x33), (b, 0x11)] {
        n.agent(ua).send_rtp = true;
        n.agent(ua).voice = vec![voice; 160];
    }
    // Bob answers both calls from one media address: the second answer collides.
    let c1 = n.invite(a, "sip:2001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c1)));
    let b1 = n.agent(b).last_index().unwrap();
    let c2 = n.invite(a2, "sip:2002@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a2, c2)));
    let b2 = n.agent(b).last_index().unwrap();
    n.run_for(secs(1));
    let first = offered_ports(&mut n, b, b1);
    let second = offered_ports(&mut n, b, b2);
    assert_eq!(first.len(), 1, "the first callee stays on the shared port");
    assert_eq!(second.len(), 2, "the second is re-INVITEd: {second:?}");
    assert_eq!(first[0], second[0], "both were offered the shared port");
    assert_ne!(second[1], second[0]);
    assert_eq!(counter(&mut n, sw, MOVED), 1.0);
    let from1 = n.agent(a).rtp.len();
    let from2 = n.agent(a2).rtp.len();
    n.run_for(secs(1));
    for (ua, from) in [(a, from1), (a2, from2)] {
        let bob = heard(&mut n, ua, from, 0x11);
        assert!(bob.len() > 40, "each caller hears Bob: {}", bob.len());
        let other = heard(&mut n, ua, from, if ua == a { 0x33 } else { 0x22 });
        assert!(other.is_empty(), "and not the other caller");
    }
    // Bob is now known to answer many calls from one address: his next call gets a pair of
    // its own at once, with no re-INVITE.
    let a3 = n.ua("127.0.0.3:5061", "dave");
    n.agent(a3).send_rtp = true;
    let c3 = n.invite(a3, "sip:2003@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a3, c3)));
    let b3 = n.agent(b).last_index().unwrap();
    n.run_for(secs(1));
    let third = offered_ports(&mut n, b, b3);
    assert_eq!(third.len(), 1, "{third:?}");
    assert_ne!(third[0], first[0], "a pair of its own");
    assert_eq!(counter(&mut n, sw, MOVED), 1.0);
    let from3 = n.agent(a3).rtp.len();
    n.run_for(secs(1));
    assert!(
        heard(&mut n, a3, from3, 0x11).len() > 40,
        "the third caller hears Bob"
    );
    hang_up(&mut n, a, c1, secs(2));
    hang_up(&mut n, a2, c2, secs(2));
    hang_up(&mut n, a3, c3, secs(2));
}
