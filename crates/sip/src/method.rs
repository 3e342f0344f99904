//! SIP request methods.

use std::fmt;

/// A request method; extension methods keep their text (methods are case-sensitive, RFC 3261 §7.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Invite,
    Ack,
    Bye,
    Cancel,
    Options,
    Register,
    Update,
    Info,
    Prack,
    Refer,
    Subscribe,
    Notify,
    Message,
    Publish,
    Other(Box<str>),
}

impl Method {
    pub fn from_bytes(b: &[u8]) -> Method {
        match b {
            b"INVITE" => Method::Invite,
            b"ACK" => Method::Ack,
            b"BYE" => Method::Bye,
            b"CANCEL" => Method::Cancel,
            b"OPTIONS" => Method::Options,
            b"REGISTER" => Method::Register,
            b"UPDATE" => Method::Update,
            b"INFO" => Method::Info,
            b"PRACK" => Method::Prack,
            b"REFER" => Method::Refer,
            b"SUBSCRIBE" => Method::Subscribe,
            b"NOTIFY" => Method::Notify,
            b"MESSAGE" => Method::Message,
            b"PUBLISH" => Method::Publish,
            other => Method::Other(String::from_utf8_lossy(other).into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Method::Invite => "INVITE",
            Method::Ack => "ACK",
            Method::Bye => "BYE",
            Method::Cancel => "CANCEL",
            Method::Options => "OPTIONS",
            Method::Register => "REGISTER",
            Method::Update => "UPDATE",
            Method::Info => "INFO",
            Method::Prack => "PRACK",
            Method::Refer => "REFER",
            Method::Subscribe => "SUBSCRIBE",
            Method::Notify => "NOTIFY",
            Method::Message => "MESSAGE",
            Method::Publish => "PUBLISH",
            Method::Other(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
