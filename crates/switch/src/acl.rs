//! Address lists (`"203.0.113.5"`, `"10.0.0.0/8"`, `"2001:db8::/32"`): which peers are trusted.
//! An IPv4 address reached over an IPv6 socket (`::ffff:a.b.c.d`) matches its IPv4 entries.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One network: an address and how many leading bits of it must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.bits),
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.bits),
            _ => false,
        }
    }
}

/// An IPv4 address reached over an IPv6 socket (`::ffff:a.b.c.d`) as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let whole = usize::from(bits / 8);
    let rest = bits % 8;
    a[..whole] == b[..whole] && (rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0)
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let expect = "expected an IP address or network such as \"203.0.113.5\", \"10.0.0.0/8\" or \"2001:db8::/32\"";
        let (ip, bits) = match s.split_once('/') {
            Some((ip, bits)) => (ip, Some(bits)),
            None => (s, None),
        };
        let addr = canonical(
            ip.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .map_err(|_| format!("{s:?} — {expect}"))?,
        );
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?} — the prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr { addr, bits })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// A list of networks; empty trusts nobody.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl(pub Vec<Cidr>);

impl Acl {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(list: &[&str]) -> Acl {
        Acl(list.iter().map(|s| s.parse().unwrap()).collect())
    }

    #[test]
    fn networks_match_by_prefix_and_family() {
        let a = acl(&["10.1.0.0/16", "192.0.2.7", "2001:db8::/32"]);
        assert!(a.contains("10.1.200.3".parse().unwrap()));
        assert!(!a.contains("10.2.0.1".parse().unwrap()));
        assert!(a.contains("192.0.2.7".parse().unwrap()));
        assert!(!a.contains("192.0.2.8".parse().unwrap()));
        assert!(a.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!a.contains("2001:db9::5".parse().unwrap()));
        assert!(a.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!Acl::default().contains("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn odd_prefixes_compare_the_leading_bits_only() {
        let a = acl(&["127.0.0.0/9"]);
        assert!(a.contains("127.127.0.1".parse().unwrap()));
        assert!(!a.contains("127.128.0.1".parse().unwrap()));
        assert!(acl(&["0.0.0.0/0"]).contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn bad_entries_say_what_is_expected() {
        assert!("10.0.0.0/33"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("0 to 32"));
        assert!("example.com"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("expected an IP"));
        assert_eq!("[::1]".parse::<Cidr>().unwrap().to_string(), "::1/128");
    }
}
