//! Information elements (RFC 5456 §8.6): one-octet id, one-octet length, data. `Ies` is a
//! validated view over a frame payload with typed getters; `IeBuilder` writes them.

use crate::frame::FrameError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const CALLED_NUMBER: u8 = 0x01;
pub const CALLING_NUMBER: u8 = 0x02;
pub const CALLING_ANI: u8 = 0x03;
pub const CALLING_NAME: u8 = 0x04;
pub const CALLED_CONTEXT: u8 = 0x05;
pub const USERNAME: u8 = 0x06;
pub const PASSWORD: u8 = 0x07;
pub const CAPABILITY: u8 = 0x08;
pub const FORMAT: u8 = 0x09;
pub const LANGUAGE: u8 = 0x0a;
pub const VERSION: u8 = 0x0b;
pub const ADSICPE: u8 = 0x0c;
pub const DNID: u8 = 0x0d;
pub const AUTHMETHODS: u8 = 0x0e;
pub const CHALLENGE: u8 = 0x0f;
pub const MD5_RESULT: u8 = 0x10;
pub const RSA_RESULT: u8 = 0x11;
pub const APPARENT_ADDR: u8 = 0x12;
pub const REFRESH: u8 = 0x13;
pub const DPSTATUS: u8 = 0x14;
pub const CALLNO: u8 = 0x15;
pub const CAUSE: u8 = 0x16;
pub const IAX_UNKNOWN: u8 = 0x17;
pub const MSGCOUNT: u8 = 0x18;
pub const AUTOANSWER: u8 = 0x19;
pub const MUSICONHOLD: u8 = 0x1a;
pub const TRANSFERID: u8 = 0x1b;
pub const RDNIS: u8 = 0x1c;
pub const PROVISIONING: u8 = 0x1d;
pub const AESPROVISIONING: u8 = 0x1e;
pub const DATETIME: u8 = 0x1f;
pub const DEVICETYPE: u8 = 0x20;
pub const SERVICEIDENT: u8 = 0x21;
pub const FIRMWAREVER: u8 = 0x22;
pub const FWBLOCKDESC: u8 = 0x23;
pub const FWBLOCKDATA: u8 = 0x24;
pub const PROVVER: u8 = 0x25;
pub const CALLINGPRES: u8 = 0x26;
pub const CALLINGTON: u8 = 0x27;
pub const CALLINGTNS: u8 = 0x28;
pub const SAMPLINGRATE: u8 = 0x29;
pub const CAUSECODE: u8 = 0x2a;
pub const ENCRYPTION: u8 = 0x2b;
pub const ENCKEY: u8 = 0x2c;
pub const CODEC_PREFS: u8 = 0x2d;
pub const RR_JITTER: u8 = 0x2e;
pub const RR_LOSS: u8 = 0x2f;
pub const RR_PKTS: u8 = 0x30;
pub const RR_DELAY: u8 = 0x31;
pub const RR_DROPPED: u8 = 0x32;
pub const RR_OOO: u8 = 0x33;
pub const VARIABLE: u8 = 0x34;
pub const OSPTOKEN: u8 = 0x35;
pub const CALLTOKEN: u8 = 0x36;
pub const CAPABILITY2: u8 = 0x37;
pub const FORMAT2: u8 = 0x38;
/// Not assigned by RFC 5456: strowger pads a first NEW or REGREQ with it so that a server's
/// CALLTOKEN reply is no larger than the request. Receivers ignore unknown elements.
pub const PADDING: u8 = 0xfe;

/// AUTHMETHODS bits.
pub const AUTH_PLAINTEXT: u16 = 0x0001;
pub const AUTH_MD5: u16 = 0x0002;
pub const AUTH_RSA: u16 = 0x0004;

/// The protocol version carried in VERSION.
pub const PROTOCOL_VERSION: u16 = 2;

/// A validated sequence of information elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ies<'a> {
    data: &'a [u8],
}

impl<'a> Ies<'a> {
    /// Checks that every element fits inside `data`.
    pub fn parse(data: &'a [u8]) -> Result<Ies<'a>, FrameError> {
        let mut rest = data;
        while !rest.is_empty() {
            if rest.len() < 2 || rest.len() < 2 + rest[1] as usize {
                return Err(FrameError::BadIe);
            }
            rest = &rest[2 + rest[1] as usize..];
        }
        Ok(Ies { data })
    }

    /// (id, data) pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        let mut rest = self.data;
        std::iter::from_fn(move || {
            if rest.len() < 2 || rest.len() < 2 + rest[1] as usize {
                return None;
            }
            let (id, len) = (rest[0], rest[1] as usize);
            let data = &rest[2..2 + len];
            rest = &rest[2 + len..];
            Some((id, data))
        })
    }

    /// The first element with `id`.
    pub fn get(&self, id: u8) -> Option<&'a [u8]> {
        self.iter().find(|(i, _)| *i == id).map(|(_, d)| d)
    }

    pub fn has(&self, id: u8) -> bool {
        self.get(id).is_some()
    }

    /// A string element (UTF-8; anything else reads as absent).
    pub fn str(&self, id: u8) -> Option<&'a str> {
        self.get(id).and_then(|d| std::str::from_utf8(d).ok())
    }

    pub fn u8(&self, id: u8) -> Option<u8> {
        match self.get(id)? {
            [a] => Some(*a),
            _ => None,
        }
    }

    pub fn u16(&self, id: u8) -> Option<u16> {
        match self.get(id)? {
            [a, b] => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    pub fn u32(&self, id: u8) -> Option<u32> {
        match self.get(id)? {
            [a, b, c, d] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => None,
        }
    }

    /// FORMAT2/CAPABILITY2 style: a version octet (0) then a 64-bit big-endian value.
    pub fn u64_versioned(&self, id: u8) -> Option<u64> {
        let d = self.get(id)?;
        if d.len() != 9 || d[0] != 0 {
            return None;
        }
        Some(u64::from_be_bytes(d[1..9].try_into().ok()?))
    }

    /// APPARENT_ADDR: a `struct sockaddr_in` (16 octets) or `sockaddr_in6` (28) as Asterisk
    /// sends it: family in little-endian host order, port and address in network order.
    pub fn addr(&self, id: u8) -> Option<SocketAddr> {
        let d = self.get(id)?;
        let port = u16::from_be_bytes([*d.get(2)?, *d.get(3)?]);
        match d.len() {
            16 => {
                let ip = Ipv4Addr::new(d[4], d[5], d[6], d[7]);
                Some(SocketAddr::new(IpAddr::V4(ip), port))
            }
            28 => {
                let octets: [u8; 16] = d[8..24].try_into().ok()?;
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), port))
            }
            _ => None,
        }
    }
}

/// Writes information elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IeBuilder {
    buf: Vec<u8>,
}

impl IeBuilder {
    pub fn new() -> IeBuilder {
        IeBuilder::default()
    }

    /// Raw element; data over 255 octets is cut to 255 (the length is one octet).
    pub fn bytes(&mut self, id: u8, data: &[u8]) -> &mut Self {
        let data = &data[..data.len().min(255)];
        self.buf.push(id);
        self.buf.push(data.len() as u8);
        self.buf.extend_from_slice(data);
        self
    }

    pub fn str(&mut self, id: u8, s: &str) -> &mut Self {
        self.bytes(id, s.as_bytes())
    }

    pub fn empty(&mut self, id: u8) -> &mut Self {
        self.bytes(id, &[])
    }

    pub fn u8(&mut self, id: u8, v: u8) -> &mut Self {
        self.bytes(id, &[v])
    }

    pub fn u16(&mut self, id: u8, v: u16) -> &mut Self {
        self.bytes(id, &v.to_be_bytes())
    }

    pub fn u32(&mut self, id: u8, v: u32) -> &mut Self {
        self.bytes(id, &v.to_be_bytes())
    }

    pub fn u64_versioned(&mut self, id: u8, v: u64) -> &mut Self {
        let mut d = [0u8; 9];
        d[1..].copy_from_slice(&v.to_be_bytes());
        self.bytes(id, &d)
    }

    /// APPARENT_ADDR in the sockaddr layout `Ies::addr` reads.
    pub fn addr(&mut self, id: u8, a: SocketAddr) -> &mut Self {
        match a.ip() {
            IpAddr::V4(ip) => {
                let mut d = [0u8; 16];
                d[0] = 2; // AF_INET, little-endian
                d[2..4].copy_from_slice(&a.port().to_be_bytes());
                d[4..8].copy_from_slice(&ip.octets());
                self.bytes(id, &d)
            }
            IpAddr::V6(ip) => {
                let mut d = [0u8; 28];
                d[0] = 10; // AF_INET6, little-endian
                d[2..4].copy_from_slice(&a.port().to_be_bytes());
                d[8..24].copy_from_slice(&ip.octets());
                self.bytes(id, &d)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_every_kind() {
        let v4: SocketAddr = "192.0.2.7:4569".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:4570".parse().unwrap();
        let mut b = IeBuilder::new();
        b.u16(VERSION, PROTOCOL_VERSION)
            .str(CALLED_NUMBER, "2000")
            .str(USERNAME, "trunk")
            .u32(FORMAT, 4)
            .u32(CAPABILITY, 0x10c)
            .u16(AUTHMETHODS, AUTH_MD5)
            .str(CHALLENGE, "123456")
            .u8(CAUSECODE, 16)
            .empty(CALLTOKEN)
            .addr(APPARENT_ADDR, v4)
            .u64_versioned(FORMAT2, 1 << 40);
        let mut b6 = b.clone();
        b6.addr(0xf0, v6);
        let bytes = b6.finish();
        let ies = Ies::parse(&bytes).unwrap();
        assert_eq!(ies.u16(VERSION), Some(2));
        assert_eq!(ies.str(CALLED_NUMBER), Some("2000"));
        assert_eq!(ies.str(USERNAME), Some("trunk"));
        assert_eq!(ies.u32(FORMAT), Some(4));
        assert_eq!(ies.u32(CAPABILITY), Some(0x10c));
        assert_eq!(ies.u16(AUTHMETHODS), Some(AUTH_MD5));
        assert_eq!(ies.u8(CAUSECODE), Some(16));
        assert_eq!(ies.get(CALLTOKEN), Some(&[][..]));
        assert_eq!(ies.addr(APPARENT_ADDR), Some(v4));
        assert_eq!(ies.addr(0xf0), Some(v6));
        assert_eq!(ies.u64_versioned(FORMAT2), Some(1 << 40));
        // Wrong lengths read as absent rather than garbage.
        assert_eq!(ies.u16(FORMAT), None);
        assert_eq!(ies.str(MD5_RESULT), None);
        assert_eq!(ies.iter().count(), 12);
    }

    #[test]
    fn truncated_elements_are_errors() {
        assert!(Ies::parse(&[]).is_ok());
        assert_eq!(Ies::parse(&[1]), Err(FrameError::BadIe));
        assert_eq!(Ies::parse(&[1, 3, b'a', b'b']), Err(FrameError::BadIe));
        assert!(Ies::parse(&[1, 2, b'a', b'b']).is_ok());
        let long = [7u8; 300];
        let b = IeBuilder::new().bytes(PASSWORD, &long).clone().finish();
        assert_eq!(b.len(), 257);
    }
}
