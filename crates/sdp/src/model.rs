//! The session description as data. Only what a softswitch acts on is typed;
//! other attributes are kept verbatim so nothing is silently reinterpreted.

use std::net::IpAddr;

/// A parsed or locally built session description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionDescription {
    pub origin: Origin,
    pub session_name: String,
    /// Session-level `c=`; media-level `c=` overrides it.
    pub connection: Option<IpAddr>,
    /// `t=` start and stop; `0 0` for the unbounded sessions VoIP uses.
    pub time: (u64, u64),
    pub attributes: Vec<Attribute>,
    pub media: Vec<Media>,
}

/// The `o=` line. The session id is opaque (some stacks exceed 64 bits), the
/// version is compared numerically, and the address may be a host name (RFC 5118 §4.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub username: String,
    pub session_id: String,
    pub session_version: u64,
    /// `IP4` or `IP6`.
    pub addr_type: String,
    pub address: String,
}

/// One `m=` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Media {
    /// `audio`, `video`, `application`, ...
    pub kind: String,
    /// 0 means the stream is rejected or disabled (RFC 3264 §6).
    pub port: u16,
    pub port_count: Option<u16>,
    /// `RTP/AVP`, `RTP/SAVP`, ...
    pub proto: String,
    /// Payload type numbers for RTP profiles, arbitrary tokens otherwise.
    pub formats: Vec<String>,
    pub connection: Option<IpAddr>,
    pub attributes: Vec<Attribute>,
}

/// Stream direction (RFC 3264 §5.1); `SendRecv` when no attribute says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Direction {
    #[default]
    SendRecv,
    SendOnly,
    RecvOnly,
    Inactive,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Direction> {
        [
            Direction::SendRecv,
            Direction::SendOnly,
            Direction::RecvOnly,
            Direction::Inactive,
        ]
        .into_iter()
        .find(|d| d.as_str() == name)
    }

    /// The direction the other side must answer with (sendonly ↔ recvonly).
    pub fn reverse(self) -> Direction {
        match self {
            Direction::SendOnly => Direction::RecvOnly,
            Direction::RecvOnly => Direction::SendOnly,
            same => same,
        }
    }

    pub fn sends(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::SendOnly)
    }

    pub fn receives(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::RecvOnly)
    }

    pub(crate) fn from_flags(sends: bool, receives: bool) -> Direction {
        match (sends, receives) {
            (true, true) => Direction::SendRecv,
            (true, false) => Direction::SendOnly,
            (false, true) => Direction::RecvOnly,
            (false, false) => Direction::Inactive,
        }
    }
}

/// An `a=` line. Malformed instances of the typed attributes parse as `Other`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attribute {
    Rtpmap {
        pt: u8,
        encoding: String,
        clock: u32,
        channels: Option<u8>,
    },
    Fmtp {
        pt: u8,
        params: String,
    },
    Ptime(u32),
    MaxPtime(u32),
    Direction(Direction),
    /// RFC 3605: the RTCP port, and address when it is not the RTP one.
    Rtcp {
        port: u16,
        addr: Option<IpAddr>,
    },
    /// RFC 4568 SDES key for SRTP.
    Crypto(crate::Crypto),
    Other {
        name: String,
        value: Option<String>,
    },
}

impl Media {
    /// Payload types of an RTP stream; tokens that are not numbers 0–127 are skipped.
    pub fn payload_types(&self) -> impl Iterator<Item = u8> + '_ {
        self.formats
            .iter()
            .filter_map(|f| f.parse::<u8>().ok())
            .filter(|pt| *pt < 128)
    }

    /// `(encoding, clock)` for a payload type: its rtpmap, else the RFC 3551 static table.
    pub fn encoding(&self, pt: u8) -> Option<(&str, u32)> {
        self.attributes
            .iter()
            .find_map(|a| match a {
                Attribute::Rtpmap {
                    pt: p,
                    encoding,
                    clock,
                    ..
                } if *p == pt => Some((encoding.as_str(), *clock)),
                _ => None,
            })
            .or_else(|| crate::Codec::by_static_pt(pt).map(|c| (c.name, c.clock)))
    }

    pub fn fmtp(&self, pt: u8) -> Option<&str> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Fmtp { pt: p, params } if *p == pt => Some(params.as_str()),
            _ => None,
        })
    }

    /// The stream's own direction attribute, falling back to the session-level one.
    pub fn direction(&self, session: &SessionDescription) -> Direction {
        find_direction(&self.attributes)
            .or_else(|| find_direction(&session.attributes))
            .unwrap_or_default()
    }

    pub fn ptime(&self) -> Option<u32> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Ptime(p) => Some(*p),
            _ => None,
        })
    }

    pub fn rtcp(&self) -> Option<(u16, Option<IpAddr>)> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Rtcp { port, addr } => Some((*port, *addr)),
            _ => None,
        })
    }
}

impl Media {
    /// The usable `a=crypto:` lines, in offer order.
    pub fn crypto(&self) -> impl Iterator<Item = &crate::Crypto> + '_ {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Crypto(c) => Some(c),
            _ => None,
        })
    }

    /// An SRTP profile (`RTP/SAVP`, `RTP/SAVPF`), whose keys come from SDES or DTLS.
    pub fn is_secure(&self) -> bool {
        matches!(self.proto.as_str(), "RTP/SAVP" | "RTP/SAVPF")
    }
}

fn find_direction(attrs: &[Attribute]) -> Option<Direction> {
    attrs.iter().find_map(|a| match a {
        Attribute::Direction(d) => Some(*d),
        _ => None,
    })
}
