//! A dual-stack strowger (listening on 127.0.0.1 and [::1]) as RFC 6157 has a B2BUA do it:
//! each leg's media in its far end's family, bridged across families both ways, with and
//! without transcoding, on port pairs and on shared ports.

use crate::net;

use net::*;

const SW4: &str = "127.0.0.1:5060";
const SW6: &str = "[::1]:5060";

/// A call from `caller` (whose codecs are `caller_pts`) to extension 2001 bridged to `callee`
/// (`callee_pts`) through a switch on both families; `rtp` adds to `[rtp]`. Checks each leg's
/// SDP names its own far end's family and that audio of the right payload type flows both
/// ways, each far end getting it from strowger's address of its own family.
fn bridged_across(seed: u64, caller: &str, callee: &str, pts: (u8, u8), rtp: &str) {
    let mut n = Net::new(seed);
    let toml = format!("[rtp]\nmedia_timeout_s = 0\n{rtp}\n[vars]\nbridge_target = \"{callee}\"\n");
    n.switch(&config(&toml), &[SW4, SW6], 1);
    let a = n.ua(caller, "alice");
    let b = n.ua(callee, "bob");
    for (ua, pt) in [(a, pts.0), (b, pts.1)] {
        n.agent(ua).send_rtp = true;
        n.agent(ua).codecs = vec![pt];
    }
    let caller_v6 = addr(caller).is_ipv6();
    let sw = if caller_v6 { SW6 } else { SW4 };
    let c = n.invite(a, "sip:2001@strowger", sw);
    assert!(n.run_until(secs(5), confirmed(a, c)));

    let family = |v6: bool| {
        if v6 {
            "c=IN IP6 ::1"
        } else {
            "c=IN IP4 127.0.0.1"
        }
    };
    let inv = n.agent(b).last().requests[0].clone();
    let callee_v6 = addr(callee).is_ipv6();
    assert!(body(&inv).contains(family(callee_v6)), "{}", body(&inv));
    let ok = last_response(&mut n, a, c, "INVITE");
    assert!(body(&ok).contains(family(caller_v6)), "{}", body(&ok));

    let t = n.now;
    n.run_for(secs(2));
    for (ua, v6, pt, who) in [
        (a, caller_v6, pts.0, "caller"),
        (b, callee_v6, pts.1, "callee"),
    ] {
        let got: Vec<_> = n
            .agent(ua)
            .rtp
            .iter()
            .filter(|(at, _, _)| *at > t)
            .map(|(_, from, pt)| (from.is_ipv6(), *pt))
            .collect();
        assert!(got.len() > 50, "{} packets to the {who}", got.len());
        assert!(
            got.iter().all(|g| *g == (v6, pt)),
            "the {who} gets payload type {pt} over IPv{}: {got:?}",
            if v6 { 6 } else { 4 }
        );
    }
    hang_up(&mut n, a, c, secs(5));
}

#[test]
fn an_ipv4_caller_is_bridged_to_an_ipv6_callee() {
    bridged_across(71, "127.0.0.1:5061", "[::1]:5090", (0, 0), "");
}

#[test]
fn an_ipv6_caller_is_bridged_to_an_ipv4_callee() {
    bridged_across(72, "[::1]:5061", "127.0.0.1:5090", (0, 0), "");
}

#[test]
fn a_bridge_across_families_transcodes_pcmu_to_pcma_both_ways() {
    bridged_across(73, "127.0.0.1:5061", "[::1]:5090", (0, 8), "");
    bridged_across(74, "[::1]:5061", "127.0.0.1:5090", (8, 0), "");
}

#[test]
fn shared_ports_keep_each_family_on_its_own_pair() {
    bridged_across(
        75,
        "[::1]:5061",
        "127.0.0.1:5090",
        (0, 0),
        "shared_ports = true",
    );
    bridged_across(
        76,
        "127.0.0.1:5061",
        "[::1]:5090",
        (0, 8),
        "shared_ports = true",
    );
}

/// Behind NAT: `rtp.advertise_ipv4` is what the callee is told for SDP, Contact and Via, while
/// the IPv6 leg keeps its listen address.
#[test]
fn advertised_addresses_go_into_sdp_contact_and_via_of_their_family() {
    let mut n = Net::new(78);
    let toml = "[rtp]\nmedia_timeout_s = 0\nadvertise_ipv4 = \"192.0.2.7\"\n\
                [vars]\nbridge_target = \"127.0.0.1:5090\"\n";
    n.switch(&config(toml), &[SW4, SW6], 1);
    let a = n.ua("[::1]:5061", "alice");
    let b = n.ua("127.0.0.1:5090", "bob");
    let c = n.invite(a, "sip:2001@strowger", SW6);
    assert!(n.run_until(secs(5), confirmed(a, c)));
    let inv = n.agent(b).last().requests[0].clone();
    assert!(body(&inv).contains("c=IN IP4 192.0.2.7"), "{}", body(&inv));
    let via = inv.header(sip::HeaderName::Via).unwrap();
    assert!(via.starts_with("SIP/2.0/UDP 192.0.2.7:5060;"), "{via}");
    let contact = inv.header(sip::HeaderName::Contact).unwrap();
    assert!(contact.contains("@192.0.2.7:5060"), "{contact}");
    let ok = last_response(&mut n, a, c, "INVITE");
    assert!(body(&ok).contains("c=IN IP6 ::1"), "{}", body(&ok));
}
