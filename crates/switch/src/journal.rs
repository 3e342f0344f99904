//! The journal of calls in progress: what lets a node killed outright (`kill -9`, a crash)
//! still account for the calls it carried. Like a database's write-ahead log: each call's
//! set-up, answer and end are noted, with a heartbeat stamp about once a second; the next start
//! turns every call noted open into a CDR ending at the last heartbeat ([`recover`]) and starts
//! a fresh journal. See docs/architecture.md ("Calls of a killed node").
//!
//! The table of calls notes into the journal's buffer; the worker hands the buffer to the file
//! after each batch of the engine's outputs, before the batch's SIP messages leave
//! ([`Journal::take`]): one append per batch, none for media. The
//! file is compacted when it has grown to several times what the calls up need: it is then
//! rewritten with only their notes.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::cdr::{uuid_v7, Cdr};

/// The journal is rewritten once it holds this much, or four times what it held after its
/// last rewrite if that is more: bounded by the calls up, at most one rewrite per few calls.
const MIN_COMPACT_BYTES: usize = 256 * 1024;
/// How often the heartbeat is stamped: a recovered call's end is at most this late.
const HEARTBEAT_S: f64 = 1.0;
/// The Q.850 cause of a recovered call (network out of order), and its disposition.
pub const NODE_FAILURE_CAUSE: u8 = 38;
pub const NODE_FAILURE: &str = "node_failure";

/// What the worker does with the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Write {
    /// Appends these records (whole lines).
    Append(String),
    /// Replaces the file with these (compaction: written aside, then renamed over it).
    Replace(String),
}

/// The notes not yet handed to the file, and how big the file is.
#[derive(Debug, Default)]
pub struct Journal {
    buf: String,
    file_bytes: usize,
    compact_at: usize,
    /// Wall time (Unix seconds) of the next heartbeat; 0 before the first.
    next_heartbeat: f64,
}

/// A call's set-up record: the CDR fields known when it starts.
#[derive(Serialize, Deserialize)]
struct Opened<'a> {
    #[serde(borrow)]
    call_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    from: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    to: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    exten: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    context: std::borrow::Cow<'a, str>,
    user: Option<std::borrow::Cow<'a, str>>,
    trunk: Option<std::borrow::Cow<'a, str>>,
    start: f64,
}

impl Journal {
    /// Notes a call set up (its table slot `id`, unique among the calls up).
    pub fn opened(&mut self, id: usize, cdr: &Cdr) {
        let rec = Opened {
            call_id: cdr.call_id.as_str().into(),
            from: cdr.from.as_str().into(),
            to: cdr.to.as_str().into(),
            exten: cdr.exten.as_str().into(),
            context: cdr.context.as_str().into(),
            user: cdr.user.as_deref().map(Into::into),
            trunk: cdr.trunk.as_deref().map(Into::into),
            start: cdr.start,
        };
        let _ = write!(self.buf, "O {id} ");
        // Writing JSON into a String cannot fail.
        let _ = serde_json::to_writer(string_writer(&mut self.buf), &rec);
        self.buf.push('\n');
    }

    /// Notes a call answered at `at` (Unix seconds).
    pub fn answered(&mut self, id: usize, at: f64) {
        let _ = writeln!(self.buf, "A {id} {at}");
    }

    /// Notes a call ended (its CDR went out the normal way).
    pub fn ended(&mut self, id: usize) {
        let _ = writeln!(self.buf, "E {id}");
    }

    /// What to write now (`wall`: Unix seconds), if anything: the notes since the last call,
    /// and a heartbeat once a second. When the file has grown past its bound, `live` notes
    /// every call up afresh and the file is to be replaced by those notes.
    pub fn take(&mut self, wall: f64, live: impl FnOnce(&mut Journal)) -> Option<Write> {
        if wall >= self.next_heartbeat {
            let _ = writeln!(self.buf, "H {wall}");
            self.next_heartbeat = wall + HEARTBEAT_S;
        }
        if self.buf.is_empty() {
            return None;
        }
        if self.file_bytes + self.buf.len() < self.compact_at.max(MIN_COMPACT_BYTES) {
            self.file_bytes += self.buf.len();
            return Some(Write::Append(std::mem::take(&mut self.buf)));
        }
        self.buf.clear();
        live(self);
        let _ = writeln!(self.buf, "H {wall}");
        self.file_bytes = self.buf.len();
        self.compact_at = 4 * self.file_bytes;
        Some(Write::Replace(std::mem::take(&mut self.buf)))
    }
}

/// `serde_json` writes UTF-8 only, so its bytes may go straight into a String.
fn string_writer(s: &mut String) -> impl std::io::Write + '_ {
    struct W<'a>(&'a mut String);
    impl std::io::Write for W<'_> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let s = std::str::from_utf8(b).map_err(std::io::Error::other)?;
            self.0.push_str(s);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    W(s)
}

/// The CDRs of the calls a journal left open: each ends at the last heartbeat (or its own
/// set-up or answer, if later), with the node-failure disposition. Their ids derive from the
/// journal's content, so a recovery cut short and run again stores each call once in a CDR
/// database. A torn last line (the process killed mid-write) is skipped.
pub fn recover(text: &str) -> Vec<Cdr> {
    let mut open: HashMap<usize, Cdr> = HashMap::new();
    let mut heartbeat = 0.0f64;
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(kind), Some(arg)) = (parts.next(), parts.next()) else {
            continue;
        };
        let rest = parts.next();
        match (kind, arg.parse::<usize>()) {
            ("H", _) => {
                if let Ok(t) = arg.parse::<f64>() {
                    heartbeat = heartbeat.max(t);
                }
            }
            ("O", Ok(id)) => {
                let Some(rec) = rest.and_then(|r| serde_json::from_str::<Opened>(r).ok()) else {
                    continue;
                };
                let cdr = Cdr {
                    call_id: rec.call_id.into_owned(),
                    from: rec.from.into_owned(),
                    to: rec.to.into_owned(),
                    exten: rec.exten.into_owned(),
                    context: rec.context.into_owned(),
                    user: rec.user.map(|u| u.into_owned()),
                    trunk: rec.trunk.map(|t| t.into_owned()),
                    start: rec.start,
                    ..Cdr::default()
                };
                open.insert(id, cdr);
            }
            ("A", Ok(id)) => {
                if let (Some(c), Some(Ok(at))) = (open.get_mut(&id), rest.map(str::parse::<f64>)) {
                    c.answer = Some(at);
                }
            }
            ("E", Ok(id)) => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    let mut open: Vec<_> = open.into_iter().collect();
    open.sort_by(|a, b| a.1.start.total_cmp(&b.1.start));
    let mut cdrs = Vec::new();
    for (id, mut c) in open {
        let end = heartbeat.max(c.start).max(c.answer.unwrap_or(0.0));
        let ms = |s: f64| (s * 1000.0).round() / 1000.0;
        c.end = end;
        c.duration_s = ms(end - c.start);
        c.billable_s = c.answer.map_or(0.0, |a| ms(end - a));
        c.cause = NODE_FAILURE_CAUSE;
        c.cause_text = NODE_FAILURE.to_string();
        c.hangup_side = "switch";
        let mut h = DefaultHasher::new();
        (&c.call_id, c.start.to_bits(), id).hash(&mut h);
        let random = u128::from(h.finish()) << 64 | u128::from(c.start.to_bits());
        c.id = uuid_v7((end * 1000.0) as u64, random);
        cdrs.push(c);
    }
    cdrs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(n: u32, start: f64) -> Cdr {
        Cdr {
            call_id: format!("call-{n}@phone"),
            from: format!("\"Phone {n}\" <sip:{n}@example.com>;tag=x"),
            to: "<sip:2000@example.com>".into(),
            exten: "2000".into(),
            context: "default".into(),
            user: Some(format!("{n}")),
            start,
            ..Cdr::default()
        }
    }

    /// Runs the journal as the worker does: appends, or replaces on compaction.
    fn flush(j: &mut Journal, file: &mut String, wall: f64, live: &[(usize, Cdr)]) {
        match j.take(wall, |j| {
            for (id, c) in live {
                j.opened(*id, c);
                if let Some(a) = c.answer {
                    j.answered(*id, a);
                }
            }
        }) {
            Some(Write::Append(s)) => file.push_str(&s),
            Some(Write::Replace(s)) => *file = s,
            None => {}
        }
    }

    #[test]
    fn calls_left_open_become_cdrs_ending_at_the_last_heartbeat() {
        let mut j = Journal::default();
        let mut file = String::new();
        j.opened(0, &call(1, 100.0));
        j.opened(1, &call(2, 100.5));
        j.opened(2, &call(3, 101.0));
        j.answered(0, 102.0);
        j.answered(2, 103.0);
        flush(&mut j, &mut file, 103.2, &[]);
        // Call 2 ends normally; the slot of call 1 is reused by a new call that rings.
        j.ended(2);
        j.ended(0);
        j.opened(0, &call(4, 104.0));
        flush(&mut j, &mut file, 104.25, &[]);
        // Heartbeats a second apart; the last lands at 110.3, then the node dies.
        for t in [105.3, 106.3, 107.3, 108.3, 109.3, 110.3, 110.9] {
            flush(&mut j, &mut file, t, &[]);
        }
        let cdrs = recover(&file);
        let ids: Vec<_> = cdrs.iter().map(|c| c.call_id.as_str()).collect();
        assert_eq!(ids, ["call-2@phone", "call-4@phone"]);
        let (rang, ringing) = (&cdrs[0], &cdrs[1]);
        assert_eq!(rang.end, 110.3);
        assert_eq!(rang.answer, None);
        assert_eq!(rang.duration_s, 9.8);
        assert_eq!(rang.billable_s, 0.0);
        assert_eq!(ringing.duration_s, 6.3);
        assert_eq!(ringing.from, "\"Phone 4\" <sip:4@example.com>;tag=x");
        assert_eq!(ringing.user.as_deref(), Some("4"));
        for c in &cdrs {
            assert_eq!(c.cause_text, NODE_FAILURE);
            assert_eq!(c.cause, NODE_FAILURE_CAUSE);
        }
        assert_ne!(rang.id, ringing.id);
        assert_eq!(
            recover(&file)[0].id,
            rang.id,
            "a second recovery gives the same ids"
        );
    }

    #[test]
    fn an_answered_call_bills_up_to_the_last_heartbeat() {
        let mut j = Journal::default();
        let mut file = String::new();
        j.opened(7, &call(1, 200.0));
        j.answered(7, 201.5);
        for t in [201.6, 202.6, 203.6] {
            flush(&mut j, &mut file, t, &[]);
        }
        // Killed mid-write: a torn set-up record of another call.
        file.push_str("O 8 {\"call_id\":\"torn");
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 1);
        assert_eq!(cdrs[0].answer, Some(201.5));
        assert_eq!(cdrs[0].end, 203.6);
        assert_eq!(cdrs[0].billable_s, 2.1);
        assert_eq!(cdrs[0].duration_s, 3.6);
    }

    #[test]
    fn heartbeats_are_stamped_once_a_second_and_nothing_else_is_written_idle() {
        let mut j = Journal::default();
        assert!(matches!(j.take(10.0, |_| {}), Some(Write::Append(s)) if s == "H 10\n"));
        assert_eq!(j.take(10.5, |_| {}), None);
        assert_eq!(j.take(10.99, |_| {}), None);
        assert!(matches!(j.take(11.0, |_| {}), Some(Write::Append(s)) if s == "H 11\n"));
    }

    #[test]
    fn the_file_stays_bounded_by_the_calls_up() {
        let mut j = Journal::default();
        let mut file = String::new();
        let mut live: Vec<(usize, Cdr)> = Vec::new();
        let mut biggest = 0;
        let mut replaced = 0;
        // 200,000 calls, 50 up at a time, 20 set up and ended per 20 ms flush.
        let mut wall = 1000.0;
        for n in 0..200_000u32 {
            let id = n as usize % 50;
            if let Some(pos) = live.iter().position(|(i, _)| *i == id) {
                live.remove(pos);
                j.ended(id);
            }
            let mut c = call(n, wall);
            j.opened(id, &c);
            j.answered(id, wall);
            c.answer = Some(wall);
            live.push((id, c));
            if n % 20 == 19 {
                wall += 0.02;
                let before = file.len();
                flush(&mut j, &mut file, wall, &live);
                replaced += usize::from(file.len() < before);
                biggest = biggest.max(file.len());
            }
        }
        assert!(replaced > 10, "compacted {replaced} times");
        assert!(biggest < 2 * MIN_COMPACT_BYTES, "grew to {biggest} bytes");
        // After all that, exactly the calls up are open, each answered.
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 50);
        let mut want: Vec<_> = live.iter().map(|(_, c)| c.call_id.clone()).collect();
        let mut got: Vec<_> = cdrs.iter().map(|c| c.call_id.clone()).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        assert!(cdrs.iter().all(|c| c.answer.is_some()));
    }
}
