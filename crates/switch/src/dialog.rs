//! SIP dialog state (RFC 3261 §12) for one leg of a call, and the in-dialog requests built from it.

use sip::header::{parse_u32, HeaderName, NameAddr};
use sip::transaction::{Peer, Transport};
use sip::{Message, Method, RequestBuilder};
use std::net::SocketAddr;

#[derive(Debug, Clone)]
pub struct Dialog {
    pub call_id: String,
    pub local_tag: String,
    pub remote_tag: String,
    /// Our side's URI as a name-addr without tag (From of our requests).
    pub local_uri: String,
    /// The peer's name-addr without tag (To of our requests).
    pub remote_uri: String,
    /// Where in-dialog requests go: the peer's Contact URI.
    pub remote_target: String,
    pub route_set: Vec<String>,
    pub local_cseq: u32,
    pub remote_cseq: u32,
    /// The flow requests are sent on. For a dialog strowger answered, the flow the INVITE came in
    /// on, so phones behind NAT stay reachable (what Asterisk calls `force_rport`).
    pub peer: Peer,
    pub local_contact: String,
    /// Max-Forwards of requests strowger sends in this dialog (a bridge passes the caller's on, less one).
    pub max_forwards: u32,
}

/// The name-addr of a From/To header value with its `tag` parameter removed.
pub fn without_tag(v: &str) -> String {
    match NameAddr::parse(v) {
        Ok(n) => {
            let mut out = match n.display {
                Some(d) => format!("{d} <{}>", n.uri),
                None => format!("<{}>", n.uri),
            };
            for (name, value) in n
                .params
                .iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case("tag"))
            {
                out.push(';');
                out.push_str(name);
                if let Some(v) = value {
                    out.push('=');
                    out.push_str(v);
                }
            }
            out
        }
        Err(_) => v.to_string(),
    }
}

/// The URI inside a Contact / Record-Route value.
pub fn uri_of(v: &str) -> Option<String> {
    NameAddr::parse(v).ok().map(|n| n.uri.to_string())
}

impl Dialog {
    /// The UAS side of a dialog created by a received INVITE (RFC 3261 §12.1.1).
    pub fn uas(
        invite: &Message,
        peer: Peer,
        local_tag: String,
        local_contact: String,
    ) -> Option<Dialog> {
        let from = invite.header(HeaderName::From)?;
        let remote_tag = NameAddr::parse(from).ok()?.tag().unwrap_or("").to_string();
        let cseq = sip::CSeq::parse(invite.header(HeaderName::CSeq)?).ok()?;
        let remote_target = invite
            .header(HeaderName::Contact)
            .and_then(uri_of)
            .unwrap_or_else(|| {
                NameAddr::parse(from)
                    .map(|n| n.uri.to_string())
                    .unwrap_or_default()
            });
        Some(Dialog {
            call_id: invite.header(HeaderName::CallId)?.to_string(),
            local_tag,
            remote_tag,
            local_uri: without_tag(invite.header(HeaderName::To)?),
            remote_uri: without_tag(from),
            remote_target,
            route_set: invite
                .all(HeaderName::RecordRoute)
                .map(str::to_string)
                .collect(),
            local_cseq: 0,
            remote_cseq: cseq.seq,
            peer,
            local_contact,
            max_forwards: 70,
        })
    }

    /// The UAC side, once a response with a To tag arrives (RFC 3261 §12.1.2).
    pub fn confirm_uac(&mut self, resp: &Message) {
        if let Some(tag) = resp.to_addr().ok().and_then(|n| n.tag()) {
            self.remote_tag = tag.to_string();
        }
        if let Some(target) = resp.header(HeaderName::Contact).and_then(uri_of) {
            self.remote_target = target;
        }
        let rr: Vec<String> = resp
            .all(HeaderName::RecordRoute)
            .map(str::to_string)
            .collect();
        if !rr.is_empty() {
            self.route_set = rr.into_iter().rev().collect();
        }
    }

    /// Starts an in-dialog request: Request-URI, Via, Route, Max-Forwards, From, To, Call-ID, CSeq
    /// and Contact. ACK and CANCEL reuse `cseq`; other methods take the next local CSeq.
    pub fn request(
        &mut self,
        method: &Method,
        branch: &str,
        via_host: SocketAddr,
        cseq: Option<u32>,
    ) -> RequestBuilder {
        let seq = cseq.unwrap_or_else(|| {
            self.local_cseq += 1;
            self.local_cseq
        });
        // Loose routing (RFC 3261 §12.2.1.1): the Request-URI is the remote target and the route set
        // goes into Route; a strict first hop takes the Request-URI and the target goes last.
        let strict = self
            .route_set
            .first()
            .and_then(|r| NameAddr::parse(r).ok())
            .is_some_and(|n| sip::Uri::parse(n.uri).is_ok_and(|u| u.params.get("lr").is_none()));
        let (ruri, routes): (String, Vec<String>) = if strict {
            let mut rest: Vec<String> = self.route_set[1..].to_vec();
            rest.push(format!("<{}>", self.remote_target));
            (uri_of(&self.route_set[0]).unwrap_or_default(), rest)
        } else {
            (self.remote_target.clone(), self.route_set.clone())
        };
        let mut b = RequestBuilder::new(method, &ruri);
        b.header(
            "Via",
            format_args!(
                "SIP/2.0/{} {};branch={branch};rport",
                transport_name(self.peer.transport),
                via_host
            ),
        );
        for r in &routes {
            b.header("Route", r);
        }
        b.header("Max-Forwards", self.max_forwards);
        b.header(
            "From",
            format_args!("{};tag={}", self.local_uri, self.local_tag),
        );
        if self.remote_tag.is_empty() {
            b.header("To", &self.remote_uri);
        } else {
            b.header(
                "To",
                format_args!("{};tag={}", self.remote_uri, self.remote_tag),
            );
        }
        b.header("Call-ID", &self.call_id);
        b.header("CSeq", format_args!("{seq} {method}"));
        if matches!(method, Method::Invite | Method::Update) {
            b.header("Contact", &self.local_contact);
        }
        b
    }

    /// Checks an in-dialog request's CSeq is newer than the last one (RFC 3261 §12.2.2).
    pub fn accept_remote_cseq(&mut self, req: &Message) -> bool {
        let seq = req
            .header(HeaderName::CSeq)
            .and_then(|c| c.split_ascii_whitespace().next())
            .and_then(parse_u32);
        match seq {
            Some(s)
                if s > self.remote_cseq
                    || matches!(req.method(), Some(Method::Ack | Method::Cancel)) =>
            {
                self.remote_cseq = self.remote_cseq.max(s);
                true
            }
            _ => false,
        }
    }
}

pub fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Udp => "UDP",
        Transport::Tcp => "TCP",
        Transport::Tls => "TLS",
        Transport::Ws => "WS",
        Transport::Wss => "WSS",
    }
}
