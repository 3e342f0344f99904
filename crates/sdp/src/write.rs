//! Serialization in RFC 4566 §5 order (v o s c t a, then m c a per stream), CRLF line ends.

use std::fmt::{self, Display, Formatter};
use std::net::IpAddr;

use crate::model::{Attribute, Media, SessionDescription};

impl Display for SessionDescription {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let o = &self.origin;
        write!(f, "v=0\r\n")?;
        write!(
            f,
            "o={} {} {} IN {} {}\r\n",
            o.username, o.session_id, o.session_version, o.addr_type, o.address
        )?;
        // RFC 4566 forbids an empty s=; a single space is the conventional filler.
        let name = if self.session_name.is_empty() {
            " "
        } else {
            &self.session_name
        };
        write!(f, "s={name}\r\n")?;
        if let Some(addr) = self.connection {
            write_connection(f, addr)?;
        }
        write!(f, "t={} {}\r\n", self.time.0, self.time.1)?;
        for a in &self.attributes {
            write!(f, "a={a}\r\n")?;
        }
        self.media.iter().try_for_each(|m| write!(f, "{m}"))
    }
}

impl Display for Media {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "m={} {}", self.kind, self.port)?;
        if let Some(count) = self.port_count {
            write!(f, "/{count}")?;
        }
        write!(f, " {}", self.proto)?;
        for format in &self.formats {
            write!(f, " {format}")?;
        }
        write!(f, "\r\n")?;
        if let Some(addr) = self.connection {
            write_connection(f, addr)?;
        }
        for a in &self.attributes {
            write!(f, "a={a}\r\n")?;
        }
        Ok(())
    }
}

impl Display for Attribute {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Attribute::Rtpmap {
                pt,
                encoding,
                clock,
                channels,
            } => {
                write!(f, "rtpmap:{pt} {encoding}/{clock}")?;
                channels.map_or(Ok(()), |c| write!(f, "/{c}"))
            }
            Attribute::Fmtp { pt, params } => write!(f, "fmtp:{pt} {params}"),
            Attribute::Ptime(ms) => write!(f, "ptime:{ms}"),
            Attribute::MaxPtime(ms) => write!(f, "maxptime:{ms}"),
            Attribute::Direction(d) => f.write_str(d.as_str()),
            Attribute::Rtcp { port, addr } => {
                write!(f, "rtcp:{port}")?;
                addr.map_or(Ok(()), |a| write!(f, " IN {} {a}", addr_type(a)))
            }
            Attribute::Crypto(c) => c.fmt(f),
            Attribute::Other { name, value } => {
                f.write_str(name)?;
                value.as_ref().map_or(Ok(()), |v| write!(f, ":{v}"))
            }
        }
    }
}

fn write_connection(f: &mut Formatter<'_>, addr: IpAddr) -> fmt::Result {
    write!(f, "c=IN {} {addr}\r\n", addr_type(addr))
}

pub(crate) fn addr_type(addr: IpAddr) -> &'static str {
    match addr {
        IpAddr::V4(_) => "IP4",
        IpAddr::V6(_) => "IP6",
    }
}
