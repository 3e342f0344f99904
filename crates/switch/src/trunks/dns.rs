//! Locating a provider's SIP servers (RFC 3263 §4): what the engine asks the shell to resolve,
//! what comes back, and the parts of the procedure that need no network — choosing services
//! from NAPTR records and ordering SRV records (RFC 2782) — so the shell's resolver and the
//! tests share them. The lookups themselves run in the shell, off the workers.

use sip::transaction::{Peer, Transport};
use std::time::Instant;

/// The default SIP port of `transport` (RFC 3261 §19.1.2): 5061 for TLS, else 5060.
pub fn default_port(transport: Transport) -> u16 {
    match transport {
        Transport::Tls => 5061,
        _ => 5060,
    }
}

/// A trunk host to resolve ([`crate::Event::Resolve`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsQuery {
    /// A domain (or host name) without a trailing dot.
    pub name: String,
    /// An explicit port: A/AAAA only, no NAPTR or SRV (RFC 3263 §4.2).
    pub port: Option<u16>,
    /// A transport the trunk insists on: SRV for it only, no NAPTR (RFC 3263 §4.1).
    pub transport: Option<Transport>,
}

/// Where a provider is: the servers to try in order (failover goes down the list) and until
/// when that answer holds (the shortest TTL of the records it came from).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub targets: Vec<Peer>,
    pub valid_until: Instant,
}

/// A NAPTR record (RFC 3403), the fields RFC 3263 reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naptr {
    pub order: u16,
    pub preference: u16,
    pub flags: String,
    pub service: String,
    /// The SRV name to look up (without a trailing dot).
    pub replacement: String,
}

/// An SRV record (RFC 2782).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srv {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    /// The host to look up (without a trailing dot).
    pub target: String,
}

/// The SRV names to look up from a domain's NAPTR records, in order (RFC 3263 §4.1): those
/// with flag "S" and a service strowger speaks (SIP+D2U: UDP, SIP+D2T: TCP; `only` keeps one),
/// by order then preference. SIPS services (TLS) are skipped.
pub fn naptr_services(records: &[Naptr], only: Option<Transport>) -> Vec<(Transport, String)> {
    let mut usable: Vec<(&Naptr, Transport)> = records
        .iter()
        .filter(|r| r.flags.eq_ignore_ascii_case("s"))
        .filter_map(|r| {
            let t = match r.service.to_ascii_uppercase().as_str() {
                "SIP+D2U" => Transport::Udp,
                "SIP+D2T" => Transport::Tcp,
                "SIPS+D2T" => Transport::Tls,
                _ => return None,
            };
            // TLS only for a trunk that asks for it (`transport = "tls"`), as in `srv_names`.
            let wanted = only.map_or(t != Transport::Tls, |o| o == t);
            (wanted && !r.replacement.is_empty()).then_some((r, t))
        })
        .collect();
    usable.sort_by_key(|(r, _)| (r.order, r.preference));
    usable
        .into_iter()
        .map(|(r, t)| (t, r.replacement.trim_end_matches('.').to_string()))
        .collect()
}

/// The SRV names to try without NAPTR records (RFC 3263 §4.1: the transports strowger
/// supports, UDP first), or for a transport the trunk insists on.
pub fn srv_names(domain: &str, only: Option<Transport>) -> Vec<(Transport, String)> {
    // TLS only when the trunk asks for it: a trunk left to DNS keeps what it had.
    [
        (Transport::Udp, "_sip._udp"),
        (Transport::Tcp, "_sip._tcp"),
        (Transport::Tls, "_sips._tcp"),
    ]
    .into_iter()
    .filter(|(t, _)| only.map_or(*t != Transport::Tls, |o| o == *t))
    .map(|(t, name)| (t, format!("{name}.{domain}")))
    .collect()
}

/// SRV records in the order to try them (RFC 2782): lowest priority first; within one
/// priority, a weighted random draw, repeated over what is left: each record is drawn with a
/// chance proportional to its weight, and records of weight 0 come after the others.
/// `random(n)` returns a number in `1..=n` (n > 0). A lone "." target (the service is not
/// offered) leaves nothing.
pub fn order_srv(mut records: Vec<Srv>, random: &mut dyn FnMut(u32) -> u32) -> Vec<Srv> {
    records.retain(|r| !r.target.is_empty() && r.target != ".");
    records.sort_by_key(|r| r.priority);
    let mut out = Vec::with_capacity(records.len());
    while !records.is_empty() {
        let p = records[0].priority;
        let n = records.iter().take_while(|r| r.priority == p).count();
        let mut group: Vec<Srv> = records.drain(..n).collect();
        while !group.is_empty() {
            let total: u32 = group.iter().map(|r| u32::from(r.weight)).sum();
            let pick = if total == 0 { 0 } else { random(total) };
            let mut sum = 0;
            let i = group
                .iter()
                .position(|r| {
                    sum += u32::from(r.weight);
                    sum >= pick
                })
                .unwrap_or(0);
            out.push(group.remove(i));
        }
    }
    out
}

/// Where a trunk whose host is an address, or a name whose A/AAAA answered `ips`, is reached.
pub fn peers(ips: &[std::net::IpAddr], port: u16, transport: Transport) -> Vec<Peer> {
    ips.iter()
        .map(|ip| Peer {
            transport,
            addr: std::net::SocketAddr::new(*ip, port),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srv(priority: u16, weight: u16, target: &str) -> Srv {
        Srv {
            priority,
            weight,
            port: 5060,
            target: target.into(),
        }
    }

    fn targets(v: &[Srv]) -> Vec<&str> {
        v.iter().map(|s| s.target.as_str()).collect()
    }

    #[test]
    fn srv_priority_comes_first_whatever_the_weights() {
        let recs = vec![
            srv(20, 100, "c"),
            srv(10, 0, "a"),
            srv(30, 5, "d"),
            srv(10, 0, "b"),
        ];
        let mut max = |n: u32| n;
        let got = order_srv(recs.clone(), &mut max);
        assert_eq!(
            got.iter().map(|s| s.priority).collect::<Vec<_>>(),
            [10, 10, 20, 30]
        );
        assert_eq!(targets(&got)[2..], ["c", "d"]);
        assert_eq!(order_srv(vec![srv(0, 0, ".")], &mut max), []);
    }

    #[test]
    fn srv_weights_share_the_draws_within_a_priority() {
        // 3:1 weights: over many draws the heavier one comes first about three times in four.
        let recs = vec![
            srv(10, 1, "light"),
            srv(10, 3, "heavy"),
            srv(20, 1, "backup"),
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        let mut random = |n: u32| rng.u32(1..=n);
        let mut heavy_first = 0;
        for _ in 0..4000 {
            let got = order_srv(recs.clone(), &mut random);
            assert_eq!(got.len(), 3);
            assert_eq!(
                got[2].target, "backup",
                "a lower priority always comes last"
            );
            if got[0].target == "heavy" {
                heavy_first += 1;
            }
        }
        assert!((2800..3200).contains(&heavy_first), "{heavy_first} of 4000");
        // The draw itself: a random 1 picks the first by running sum, the total the last.
        let mut one = |_: u32| 1;
        assert_eq!(
            targets(&order_srv(recs.clone(), &mut one))[..2],
            ["light", "heavy"]
        );
        // Weight 0 goes after the weighted ones of its priority.
        let zeros = vec![srv(10, 0, "zero"), srv(10, 1, "one")];
        assert_eq!(targets(&order_srv(zeros, &mut one)), ["one", "zero"]);
        let mut top = |n: u32| n;
        assert_eq!(targets(&order_srv(recs, &mut top))[..2], ["heavy", "light"]);
    }

    #[test]
    fn naptr_picks_the_sip_services_in_order() {
        let n = |order, pref, service: &str, flags: &str, repl: &str| Naptr {
            order,
            preference: pref,
            flags: flags.into(),
            service: service.into(),
            replacement: repl.into(),
        };
        let recs = vec![
            n(50, 50, "SIPS+D2T", "s", "_sips._tcp.example.com."),
            n(90, 50, "SIP+D2T", "s", "_sip._tcp.example.com."),
            n(90, 40, "SIP+D2U", "S", "_sip._udp.example.com."),
            n(10, 10, "E2U+sip", "u", "!^.*$!sip:x@y!"),
        ];
        assert_eq!(
            naptr_services(&recs, None),
            [
                (Transport::Udp, "_sip._udp.example.com".to_string()),
                (Transport::Tcp, "_sip._tcp.example.com".to_string())
            ]
        );
        assert_eq!(
            naptr_services(&recs, Some(Transport::Tcp)),
            [(Transport::Tcp, "_sip._tcp.example.com".to_string())]
        );
        assert_eq!(
            naptr_services(&recs, Some(Transport::Tls)),
            [(Transport::Tls, "_sips._tcp.example.com".to_string())]
        );
        assert_eq!(
            srv_names("example.com", None)[1],
            (Transport::Tcp, "_sip._tcp.example.com".to_string())
        );
        assert_eq!(srv_names("example.com", None).len(), 2);
        assert_eq!(
            srv_names("example.com", Some(Transport::Tls)),
            [(Transport::Tls, "_sips._tcp.example.com".to_string())]
        );
    }
}
