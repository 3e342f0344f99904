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
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::cdr::{uuid_v7, Cdr};

/// The journal is rewritten once it holds this much, or four times what it held after its
/// last rewrite if that is more: bounded by the calls up, at most one rewrite per few calls.
const MIN_COMPACT_BYTES: usize = 256 * 1024;
/// How often the heartbeat is stamped (ms): a recovered call's end is at most this late.
const HEARTBEAT_MS: u64 = 1000;
/// The Q.850 cause of a recovered call (network out of order), and its disposition.
pub const NODE_FAILURE_CAUSE: u8 = 38;
pub const NODE_FAILURE: &str = "node_failure";
/// A set-up record's optional field that is absent (escaping never yields it).
const NONE: &str = "\\-";

/// What the worker does with the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Write<'a> {
    /// Appends these records (whole lines).
    Append(&'a [u8]),
    /// Replaces the file with these (compaction: written aside, then renamed over it).
    Replace(&'a [u8]),
}

/// The notes not yet handed to the file, and how big the file is.
#[derive(Debug, Default)]
pub struct Journal {
    /// Reused from batch to batch: noting a call allocates nothing once it has grown.
    buf: Vec<u8>,
    file_bytes: usize,
    compact_at: usize,
    /// Wall time (Unix ms) of the next heartbeat; 0 before the first.
    next_heartbeat: u64,
}

impl Journal {
    /// Notes a call set up (its table slot `id`, unique among the calls up): `O id start` and
    /// the CDR fields known then, tab-separated (Call-ID, From, To, extension, context, user,
    /// trunk), times in Unix milliseconds as the CDR has them.
    pub fn opened(&mut self, id: usize, cdr: &Cdr) {
        let b = &mut self.buf;
        b.extend_from_slice(b"O ");
        push_int(b, id as u64);
        b.push(b' ');
        push_int(b, millis(cdr.start));
        for f in [&cdr.call_id, &cdr.from, &cdr.to, &cdr.exten, &cdr.context] {
            b.push(b'\t');
            push_escaped(b, f);
        }
        for f in [&cdr.user, &cdr.trunk] {
            b.push(b'\t');
            match f {
                Some(f) => push_escaped(b, f),
                None => b.extend_from_slice(NONE.as_bytes()),
            }
        }
        b.push(b'\n');
    }

    /// Notes a call answered at `at` (Unix seconds, whole ms).
    pub fn answered(&mut self, id: usize, at: f64) {
        let b = &mut self.buf;
        b.extend_from_slice(b"A ");
        push_int(b, id as u64);
        b.push(b' ');
        push_int(b, millis(at));
        b.push(b'\n');
    }

    /// Notes a call ended (its CDR went out the normal way).
    pub fn ended(&mut self, id: usize) {
        let b = &mut self.buf;
        b.extend_from_slice(b"E ");
        push_int(b, id as u64);
        b.push(b'\n');
    }

    /// Hands `write` what to write now (`wall`: Unix ms), if anything: the notes since the
    /// last call, and a heartbeat once a second. When the file has grown past its bound, `live`
    /// notes every call up afresh and the file is to be replaced by those notes.
    pub fn take(
        &mut self,
        wall: u64,
        live: impl FnOnce(&mut Journal),
        write: impl FnOnce(Write<'_>),
    ) {
        if wall >= self.next_heartbeat {
            self.heartbeat(wall);
            self.next_heartbeat = wall + HEARTBEAT_MS;
        }
        if self.buf.is_empty() {
            return;
        }
        if self.file_bytes + self.buf.len() < self.compact_at.max(MIN_COMPACT_BYTES) {
            self.file_bytes += self.buf.len();
            write(Write::Append(&self.buf));
        } else {
            self.buf.clear();
            live(self);
            self.heartbeat(wall);
            self.file_bytes = self.buf.len();
            self.compact_at = 4 * self.file_bytes;
            write(Write::Replace(&self.buf));
        }
        self.buf.clear();
    }

    fn heartbeat(&mut self, wall: u64) {
        self.buf.extend_from_slice(b"H ");
        push_int(&mut self.buf, wall);
        self.buf.push(b'\n');
    }
}

/// Unix seconds (whole ms, as CDRs keep them) to ms.
fn millis(s: f64) -> u64 {
    (s * 1000.0 + 0.5) as u64
}

fn push_int(b: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    b.extend_from_slice(&digits[i..]);
}

/// A field with the bytes that would break a record escaped: backslash, tab, CR, LF.
fn push_escaped(b: &mut Vec<u8>, s: &str) {
    let special = |c: &u8| matches!(c, b'\\' | b'\t' | b'\r' | b'\n');
    if !s.as_bytes().iter().any(special) {
        b.extend_from_slice(s.as_bytes());
        return;
    }
    for &c in s.as_bytes() {
        match c {
            b'\\' => b.extend_from_slice(b"\\\\"),
            b'\t' => b.extend_from_slice(b"\\t"),
            b'\r' => b.extend_from_slice(b"\\r"),
            b'\n' => b.extend_from_slice(b"\\n"),
            c => b.push(c),
        }
    }
}

/// A field [`push_escaped`] wrote.
fn unescape(f: &str) -> String {
    if !f.contains('\\') {
        return f.to_string();
    }
    let mut out = String::with_capacity(f.len());
    let mut chars = f.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some(c) => out.push(c),
            None => {}
        }
    }
    out
}

/// A set-up record's fields after `O id `, or None if torn.
fn opened_cdr(rest: &str) -> Option<Cdr> {
    let mut f = rest.split('\t');
    let start = f.next()?.parse::<u64>().ok()?;
    let mut next = || f.next().map(unescape);
    let (call_id, from, to, exten, context) = (next()?, next()?, next()?, next()?, next()?);
    let mut opt = || f.next().map(|v| (v != NONE).then(|| unescape(v))).ok_or(());
    let (user, trunk) = (opt().ok()?, opt().ok()?);
    if f.next().is_some() {
        return None;
    }
    Some(Cdr {
        call_id,
        from,
        to,
        exten,
        context,
        user,
        trunk,
        start: start as f64 / 1000.0,
        ..Cdr::default()
    })
}

/// The CDRs of the calls a journal left open: each ends at the last heartbeat (or its own
/// set-up or answer, if later), with the node-failure disposition. Their ids derive from the
/// journal's content, so a recovery cut short and run again stores each call once in a CDR
/// database. A torn last line (the process killed mid-write) is skipped.
pub fn recover(text: &str) -> Vec<Cdr> {
    let mut open: HashMap<usize, Cdr> = HashMap::new();
    let mut heartbeat = 0.0f64;
    // Only whole lines: a torn one may have lost the end of a time or a field.
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let mut parts = line.splitn(3, ' ');
        let (Some(kind), Some(arg)) = (parts.next(), parts.next()) else {
            continue;
        };
        let rest = parts.next();
        let ms = |s: &str| s.parse::<u64>().ok().map(|t| t as f64 / 1000.0);
        match (kind, arg.parse::<usize>()) {
            ("H", _) => {
                if let Some(t) = ms(arg) {
                    heartbeat = heartbeat.max(t);
                }
            }
            ("O", Ok(id)) => {
                if let Some(cdr) = rest.and_then(opened_cdr) {
                    open.insert(id, cdr);
                }
            }
            ("A", Ok(id)) => {
                if let (Some(c), Some(at)) = (open.get_mut(&id), rest.and_then(ms)) {
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
        let live = |j: &mut Journal| {
            for (id, c) in live {
                j.opened(*id, c);
                if let Some(a) = c.answer {
                    j.answered(*id, a);
                }
            }
        };
        j.take(millis(wall), live, |w| match w {
            Write::Append(s) => file.push_str(std::str::from_utf8(s).unwrap()),
            Write::Replace(s) => *file = String::from_utf8(s.to_vec()).unwrap(),
        });
    }

    /// What one `take` at `wall` (Unix ms) hands the file, if anything.
    fn taken(j: &mut Journal, wall: u64) -> Option<String> {
        let mut out = None;
        j.take(
            wall,
            |_| {},
            |w| {
                let (Write::Append(s) | Write::Replace(s)) = w;
                out = Some(String::from_utf8(s.to_vec()).unwrap());
            },
        );
        out
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
        file.push_str("O 8 203700\ttorn@x\t<sip:1@x>");
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 1);
        assert_eq!(cdrs[0].answer, Some(201.5));
        assert_eq!(cdrs[0].end, 203.6);
        assert_eq!(cdrs[0].billable_s, 2.1);
        assert_eq!(cdrs[0].duration_s, 3.6);
    }

    #[test]
    fn fields_come_back_whole_whatever_they_hold() {
        let mut j = Journal::default();
        let mut file = String::new();
        let mut c = call(1, 300.0);
        c.from = "\"Tab\tand \\ slash \\-\" <sip:1@x>;tag=\r\n".into();
        c.user = None;
        c.trunk = Some(String::new());
        j.opened(1, &c);
        flush(&mut j, &mut file, 301.0, &[]);
        // A torn answer would lose digits of its time: it is not taken.
        file.push_str("A 1 30");
        let cdrs = recover(&file);
        assert_eq!(cdrs.len(), 1);
        assert_eq!(cdrs[0].from, c.from);
        assert_eq!(
            (cdrs[0].user.as_deref(), cdrs[0].trunk.as_deref()),
            (None, Some(""))
        );
        assert_eq!((cdrs[0].start, cdrs[0].answer), (300.0, None));
    }

    #[test]
    fn heartbeats_are_stamped_once_a_second_and_nothing_else_is_written_idle() {
        let mut j = Journal::default();
        assert_eq!(taken(&mut j, 10_000).as_deref(), Some("H 10000\n"));
        assert_eq!(taken(&mut j, 10_500), None);
        assert_eq!(taken(&mut j, 10_990), None);
        assert_eq!(taken(&mut j, 11_000).as_deref(), Some("H 11000\n"));
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
