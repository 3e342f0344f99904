//! Matching keys (RFC 3261 §17.1.3, §17.2.3), written into a reused buffer so a lookup does not
//! allocate; a new transaction turns the buffer into its one shared `Arc<str>` key.

use crate::header::HeaderName;
use crate::message::Message;
use crate::method::Method;
use std::fmt::Write as _;

/// Branches starting with this were built by RFC 3261 elements and are unique per transaction.
const COOKIE: &str = "z9hG4bK";

/// Server transaction key of a request, as if its method were `method` (INVITE for an ACK or
/// when looking up the INVITE a CANCEL targets). False when the request has no usable top Via
/// or CSeq (it failed validation and cannot belong to a transaction).
pub(super) fn server(msg: &Message, method: &Method, out: &mut String) -> bool {
    out.clear();
    let (Some(raw_via), Ok(via)) = (msg.header(HeaderName::Via), msg.top_via()) else {
        return false;
    };
    match via.branch() {
        Some(branch) if branch.starts_with(COOKIE) => {
            // Branch + sent-by + method (§17.2.3).
            out.push_str(branch);
            out.push('\0');
            out.extend(via.host.chars().map(|c| c.to_ascii_lowercase()));
            let _ = write!(out, ":{}\0{method}", via.port.unwrap_or(0));
            true
        }
        _ => rfc2543(msg, method, raw_via, out),
    }
}

/// The method a `server` key was made with: its last field after a cookie branch, its sixth
/// in an RFC 2543 key (the top Via follows it).
pub(super) fn server_method(key: &str) -> &str {
    let mut fields = key.split('\0');
    match key.starts_with(COOKIE) {
        true => fields.nth(2),
        false => fields.nth(5),
    }
    .unwrap_or("")
}

/// RFC 2543 peers have no unique branch: Request-URI, tags, Call-ID, CSeq and the top Via
/// identify the transaction. The To tag is left out for INVITE because the ACK for a non-2xx
/// carries the tag our response added, which the INVITE did not have.
fn rfc2543(msg: &Message, method: &Method, raw_via: &str, out: &mut String) -> bool {
    let (Some(uri), Some(call_id), Ok(cseq)) = (
        msg.request_uri(),
        msg.header(HeaderName::CallId),
        msg.cseq(),
    ) else {
        return false;
    };
    let to_tag = if *method == Method::Invite {
        ""
    } else {
        msg.to_tag().unwrap_or("")
    };
    let from_tag = msg.from_tag();
    let _ = write!(
        out,
        "{uri}\0{from_tag}\0{to_tag}\0{call_id}\0{}\0{method}\0{raw_via}",
        cseq.seq
    );
    true
}

/// Client transaction key (§17.1.3): top Via branch + CSeq method, the same for a request and
/// its responses.
pub(super) fn client(msg: &Message, out: &mut String) -> bool {
    out.clear();
    let branch = msg.top_via().ok().and_then(|v| v.branch());
    match (branch, msg.cseq()) {
        (Some(branch), Ok(cseq)) => client_of(branch, &cseq.method, out),
        _ => false,
    }
}

/// The client key of top Via branch `branch` and CSeq method `method` (false: no branch).
pub(super) fn client_of(branch: &str, method: &Method, out: &mut String) -> bool {
    out.clear();
    if branch.is_empty() {
        return false;
    }
    out.push_str(branch);
    out.push('\0');
    out.push_str(method.as_str());
    true
}

/// The CSeq method of a `client` key.
pub(super) fn client_method(key: &str) -> &str {
    key.rsplit('\0').next().unwrap_or("")
}

/// Key tying the ACK for a 2xx (a new transaction with its own branch) to the INVITE it
/// acknowledges: CSeq number and Call-ID (§13.3.1.4).
pub(super) fn ack(msg: &Message, out: &mut String) -> bool {
    out.clear();
    match (msg.cseq(), msg.header(HeaderName::CallId)) {
        (Ok(cseq), Some(call_id)) => {
            let _ = write!(out, "{} {call_id}", cseq.seq);
            true
        }
        _ => false,
    }
}

/// Splits an `ack` key back into (CSeq number, Call-ID) for the AckTimeout event.
pub(super) fn split_ack(key: &str) -> (u32, &str) {
    let (seq, call_id) = key.split_once(' ').unwrap_or(("", key));
    (seq.parse().unwrap_or(0), call_id)
}
