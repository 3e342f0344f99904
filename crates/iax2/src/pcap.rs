//! Datagrams as a pcap file, so Wireshark's IAX2 dissector can check what an endpoint sent
//! (the tests of this crate and of the switch).

use std::net::SocketAddr;

fn checksum(words: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in words.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A pcap (LINKTYPE_RAW: IPv4 packets) of `(from, to, datagram)`s; IPv6 ones are left out.
pub fn pcap(wire: &[(SocketAddr, SocketAddr, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&101u32.to_le_bytes());
    for (i, (from, to, data)) in wire.iter().enumerate() {
        let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
            continue;
        };
        let udp_len = 8 + data.len();
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
        ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        ip.extend_from_slice(&f.ip().octets());
        ip.extend_from_slice(&t.ip().octets());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip.extend_from_slice(&f.port().to_be_bytes());
        ip.extend_from_slice(&t.port().to_be_bytes());
        ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]); // no UDP checksum
        ip.extend_from_slice(data);
        out.extend_from_slice(&(i as u32 + 1).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&ip);
    }
    out
}
