//! Store operations a worker drives over its own connection to the backend (sans-IO).
//!
//! A blocking operation on a store thread costs two thread hand-offs and a sleeping thread per
//! round trip, which on a busy registrar is most of the CPU a REGISTER takes. The common cases
//! are one request and one reply — a user's credentials read, an AOR's bindings written over the
//! value this process last saw — so a worker can send the request itself and finish the
//! operation when its event loop reads the reply. The caller writes what `begin` appends, reads
//! the replies in order (`reply` frames them) and hands each to `finish` with what `begin`
//! returned. Anything off the common path — a value someone else changed (a failed
//! compare-and-set), a backend that failed lately, bindings to delete, an error — is answered
//! `None` with nothing changed, and the caller runs the operation on a store thread instead,
//! where the blocking code handles it.

use crate::{Binding, Change, Credentials};

/// What a worker asks of the store over its connection.
#[derive(Clone, Debug, PartialEq)]
pub enum Ask {
    /// A user's credentials (`CredentialStore::user`).
    User { user: String, domain: String },
    /// Changes to an AOR's bindings (`LocationStore::update`), at unix time `now`.
    Update {
        aor: String,
        changes: Vec<Change>,
        now: u64,
    },
}

/// The answer to an `Ask`. Moved once per round trip and never kept: credentials inline
/// cost less than a box each.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    User(Option<Credentials>),
    Bindings(Vec<Binding>),
}

/// An ask whose reply is awaited: what `finish` needs to make sense of it.
#[derive(Debug)]
pub enum Pending {
    User {
        user: String,
        domain: String,
    },
    Update {
        aor: String,
        key: String,
        /// The value written, remembered with its CAS id once stored.
        data: Vec<u8>,
        list: Vec<Binding>,
    },
}

/// One reply of memcached's meta protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `VA`: a value and its CAS id.
    Value(Vec<u8>, u64),
    /// `EN`: no such key.
    Miss,
    /// `HD`: stored, with the new CAS id.
    Stored(u64),
    /// `NS`, `EX`, `NF`: a condition failed; nothing was written.
    NotStored,
    /// An error line, or a reply this client did not ask for.
    Failed(String),
}

/// A store that takes asks over a caller's connection.
pub trait Pipe: Send + Sync {
    /// `HOST:PORT` of the connection.
    fn addr(&self) -> &str;
    /// Appends the request for `ask` to `out`; None (and nothing appended) when a store thread
    /// must run it.
    fn begin(&self, ask: &Ask, out: &mut Vec<u8>) -> Option<Pending>;
    /// What the reply to a request `begin` made means; None when a store thread must run the
    /// ask again (nothing was changed).
    fn finish(&self, pending: Pending, reply: Reply) -> Option<Answer>;
}

/// The first complete reply in `buf` and its length in bytes; None until all of it arrived.
pub fn reply(buf: &[u8]) -> Option<(Reply, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&buf[..end]);
    let mut parts = line.split(' ');
    let head = parts.next().unwrap_or("");
    let flag = |f: char| {
        line.split(' ')
            .skip(1)
            .find_map(|t| t.strip_prefix(f)?.parse().ok())
    };
    let reply = match head {
        "VA" => {
            let Some(n) = parts.next().and_then(|n| n.parse::<usize>().ok()) else {
                return Some((Reply::Failed(line.to_string()), end + 2));
            };
            let start = end + 2;
            if buf.len() < start + n + 2 {
                return None;
            }
            let data = buf[start..start + n].to_vec();
            let cas = flag('c').unwrap_or(0);
            return Some((Reply::Value(data, cas), start + n + 2));
        }
        "EN" => Reply::Miss,
        "HD" => match flag('c') {
            Some(cas) => Reply::Stored(cas),
            None => Reply::Failed(line.to_string()),
        },
        "NS" | "EX" | "NF" => Reply::NotStored,
        _ => Reply::Failed(line.to_string()),
    };
    Some((reply, end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_replies_and_waits_for_the_rest() {
        let buf = b"VA 3 c42\r\nabc\r\nEN\r\nHD c7\r\nEX\r\nSERVER_ERROR out of memory\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, n)) = reply(&buf[at..]) {
            got.push(r);
            at += n;
        }
        assert_eq!(at, buf.len());
        assert_eq!(
            got,
            [
                Reply::Value(b"abc".to_vec(), 42),
                Reply::Miss,
                Reply::Stored(7),
                Reply::NotStored,
                Reply::Failed("SERVER_ERROR out of memory".into()),
            ]
        );
        // A value split across reads: nothing until its data and CRLF are in.
        for cut in 1..15 {
            assert_eq!(reply(&buf[..cut]), None, "cut at {cut}");
        }
        assert_eq!(reply(b"HD\r\n"), Some((Reply::Failed("HD".into()), 4)));
    }
}
