//! `Ua`: a scripted SIP user agent (UAC and UAS) built on the `sip` crate's parser, builders and
//! transaction layer. It answers INVITEs by its `Policy` with SDP, ACKs 2xx, sends BYE, re-INVITE
//! and UPDATE when told, answers in-dialog requests, sends RTP when asked and records everything
//! it got.

use super::Packet;
use sip::header::{HeaderName, NameAddr};
use sip::transaction::{
    ClientTxId, Incoming, Peer, ServerTxId, Timers, Transactions, Transport, TxEvent,
};
use sip::{Message, Method, RequestBuilder, ResponseBuilder, Uri};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How the agent answers an incoming INVITE.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Provisional responses sent at once: status, and whether it carries SDP (early media).
    pub provisional: Vec<(u16, bool)>,
    /// The final response, after `after`.
    pub status: u16,
    pub after: Duration,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            provisional: vec![(180, false)],
            status: 200,
            after: Duration::ZERO,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// An INVITE sent or received, no final response yet.
    Calling,
    /// A 2xx sent or received.
    Confirmed,
    /// Failed, cancelled or hung up.
    Ended,
}

/// One call of the agent (one dialog).
#[derive(Debug)]
pub struct Call {
    pub call_id: String,
    pub outgoing: bool,
    pub state: State,
    pub local_tag: String,
    pub remote_tag: String,
    /// Name-addrs without tags: our side (From of our requests) and theirs.
    pub local_uri: String,
    pub remote_uri: String,
    /// Where in-dialog requests go (their Contact), and the route set (Route headers).
    pub remote_target: String,
    pub route_set: Vec<String>,
    pub local_cseq: u32,
    /// Every response to a request of ours in this call, in order of arrival.
    pub responses: Vec<Message>,
    /// Every request received in this call (the initial INVITE of an incoming call first).
    pub requests: Vec<Message>,
    /// SDP bodies sent and received, in order.
    pub sdp_sent: Vec<String>,
    pub sdp_received: Vec<String>,
    /// Where to send RTP, with which payload type, and whether the negotiated direction lets us.
    pub remote_media: Option<SocketAddr>,
    pub pt: u8,
    pub sending: bool,
    /// For an incoming call: its INVITE's server transaction and the INVITE, until answered.
    invite_tx: Option<(ServerTxId, Message, Peer)>,
    /// For an outgoing call: where its INVITE went and the extra headers it carried (an INVITE
    /// answering a challenge goes the same way).
    next_hop: Option<SocketAddr>,
    extra: Vec<(String, String)>,
    /// INVITEs sent with credentials in this call.
    pub auth_attempts: u32,
    /// The client transaction of the latest initial INVITE (the one a CANCEL cancels).
    invite_ctx: Option<ClientTxId>,
    /// The ACK of the last 2xx we got, re-sent when the 2xx is.
    ack: Option<(SocketAddr, Vec<u8>)>,
    rtp_seq: u16,
}

impl Call {
    /// Final statuses and provisionals of our requests, in order.
    pub fn statuses(&self) -> Vec<u16> {
        self.responses.iter().filter_map(Message::status).collect()
    }

    /// Responses to our requests of `method`.
    pub fn responses_to(&self, method: &str) -> Vec<&Message> {
        self.responses
            .iter()
            .filter(|m| cseq_method(m) == method)
            .collect()
    }

    /// Received requests of `method`.
    pub fn requests_of(&self, method: &Method) -> Vec<&Message> {
        self.requests
            .iter()
            .filter(|m| m.method() == Some(method))
            .collect()
    }
}

fn cseq_method(m: &Message) -> &str {
    m.header(HeaderName::CSeq)
        .and_then(|c| c.split_ascii_whitespace().nth(1))
        .unwrap_or("")
}

fn body_text(m: &Message) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

/// Where a SIP URI points (IP literals only; port 5060 by default).
pub fn hop(uri: &str) -> SocketAddr {
    let inner = NameAddr::parse(uri)
        .map(|n| n.uri.to_string())
        .unwrap_or_else(|_| uri.to_string());
    let u = Uri::parse(&inner).unwrap_or_else(|e| panic!("URI {inner:?}: {e:?}"));
    let ip = u
        .ip()
        .unwrap_or_else(|| panic!("URI {inner:?} names no IP"));
    SocketAddr::new(ip, u.port.unwrap_or(5060))
}

pub struct Ua {
    pub addr: SocketAddr,
    pub user: String,
    /// Our Contact URI (may name another address than `addr`: a phone behind NAT).
    pub contact: String,
    /// Where RTP is received.
    pub media: SocketAddr,
    /// Payload types supported, in order of preference.
    pub codecs: Vec<u8>,
    pub policy: Policy,
    /// Send a 20 ms RTP packet per frame on confirmed calls whose direction lets us.
    pub send_rtp: bool,
    /// Where that RTP is sent from, when not from `media` (a phone behind NAT that announces
    /// its external address, an RTP stack that is not symmetric); taken there too.
    pub rtp_from: Option<SocketAddr>,
    /// The payload of each of those packets; empty: the codec's silence.
    pub voice: Vec<u8>,
    pub calls: Vec<Call>,
    /// Every SIP message received, with its time and source.
    pub received: Vec<(Instant, SocketAddr, Message)>,
    /// Datagrams that were not SIP (CRLF keep-alives).
    pub non_sip: Vec<(Instant, SocketAddr, Vec<u8>)>,
    /// RTP received: time, source, payload type.
    pub rtp: Vec<(Instant, SocketAddr, u8)>,
    /// The payload of each packet in `rtp`.
    pub rtp_payloads: Vec<Vec<u8>>,
    /// Statuses of the responses to our REGISTERs.
    pub register_statuses: Vec<u16>,
    /// What the transaction layer reported other than ends of transactions: timeouts (no
    /// answer to a request), a 2xx never ACKed, a non-2xx never ACKed.
    pub tx_events: Vec<TxEvent>,
    /// Extra headers of the requests we send in a dialog (e.g. Session-Expires), ACK aside.
    pub dialog_headers: Vec<(String, String)>,
    /// Extra headers of our REGISTERs (e.g. a Path).
    pub register_headers: Vec<(String, String)>,
    /// Parameters of the Contact our REGISTERs carry (e.g. ";q=0.5").
    pub contact_params: String,
    /// Acting as a provider: REGISTERs are challenged (401) and INVITEs too (407) for these
    /// credentials (realm, user, password); None: neither is.
    pub auth: Option<(String, String, String)>,
    /// Acting as a registrar: the expires granted to a REGISTER, and the contacts registered.
    pub register_expires: u32,
    pub bindings: Vec<String>,
    /// Requests refused for their credentials (a wrong or missing answer), by method.
    pub challenged: Vec<String>,
    /// User name and password to answer a 401/407 to an INVITE with (RFC 3261 §22.2); none:
    /// a challenge ends the call.
    pub credentials: Option<(String, String)>,
    /// The status a NOTIFY outside its calls gets: 481 unless a test holds a subscription it
    /// made by hand (tests/voicemail.rs).
    pub notify_status: u16,
    /// Statuses that answer the next re-INVITEs with SDP, in turn, instead of a 200 (491: the
    /// agent's own offer crossed strowger's).
    pub reinvite_refusals: Vec<u16>,
    txs: Transactions,
    client_txs: HashMap<ClientTxId, (Option<usize>, Method)>,
    /// Final answers due: (when, call).
    due: Vec<(Instant, usize)>,
    next_rtp: Option<Instant>,
    sdp_version: u64,
    counter: u64,
    out: Vec<Packet>,
}

impl Ua {
    pub fn new(addr: SocketAddr, user: &str) -> Ua {
        let media = SocketAddr::new(addr.ip(), 30000 + 2 * (addr.port() % 10000));
        Ua {
            addr,
            user: user.to_string(),
            contact: format!("sip:{user}@{}", addr_text(addr)),
            media,
            codecs: vec![0, 8],
            policy: Policy::default(),
            send_rtp: false,
            rtp_from: None,
            voice: Vec::new(),
            calls: Vec::new(),
            received: Vec::new(),
            non_sip: Vec::new(),
            rtp: Vec::new(),
            rtp_payloads: Vec::new(),
            register_statuses: Vec::new(),
            register_headers: Vec::new(),
            contact_params: String::new(),
            auth: None,
            register_expires: 600,
            bindings: Vec::new(),
            challenged: Vec::new(),
            credentials: None,
            notify_status: 481,
            reinvite_refusals: Vec::new(),
            dialog_headers: Vec::new(),
            tx_events: Vec::new(),
            txs: Transactions::new(Timers::default()),
            client_txs: HashMap::new(),
            due: Vec::new(),
            next_rtp: None,
            sdp_version: 0,
            counter: 0,
            out: Vec::new(),
        }
    }

    fn id(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("{what}{}{}", self.user, self.counter)
    }

    /// A tag no other agent makes (two phones of one user answer the same fork).
    fn tag(&mut self) -> String {
        let port = self.addr.port();
        self.id(&format!("tag-{port}-"))
    }

    fn branch(&mut self) -> String {
        let id = self.id("");
        format!("z9hG4bK-ua{id}")
    }

    fn via(&mut self) -> String {
        let branch = self.branch();
        format!("SIP/2.0/UDP {};branch={branch};rport", self.addr)
    }

    /// An SDP body for our media address: `pts` offered (or answered) with `direction`.
    pub fn sdp(&mut self, pts: &[u8], direction: &str) -> String {
        self.sdp_version += 1;
        let (kind, ip) = match self.media.ip() {
            IpAddr::V4(ip) => ("IP4", ip.to_string()),
            IpAddr::V6(ip) => ("IP6", ip.to_string()),
        };
        let formats: Vec<String> = pts.iter().map(u8::to_string).collect();
        let events = if pts.contains(&101) {
            "a=rtpmap:101 telephone-event/8000\r\n"
        } else {
            ""
        };
        format!(
            "v=0\r\no=ua 1 {} IN {kind} {ip}\r\ns=-\r\nc=IN {kind} {ip}\r\nt=0 0\r\nm=audio {} RTP/AVP {}\r\n{events}a={direction}\r\n",
            self.sdp_version,
            self.media.port(),
            formats.join(" ")
        )
    }

    // -----------------------------------------------------------------------------------------
    // What a test tells it to do
    // -----------------------------------------------------------------------------------------

    /// Calls `uri` through `next_hop` with an SDP offer of our codecs; returns the call's index.
    pub fn invite(&mut self, uri: &str, next_hop: SocketAddr, now: Instant) -> usize {
        self.invite_with(uri, next_hop, &[], now)
    }

    /// Like `invite`, with extra headers (`Max-Forwards` replaces ours).
    pub fn invite_with(
        &mut self,
        uri: &str,
        next_hop: SocketAddr,
        extra: &[(&str, &str)],
        now: Instant,
    ) -> usize {
        let call_id = format!("{}@ua", self.id("call-"));
        let tag = self.tag();
        let codecs = self.codecs.clone();
        let offer = self.sdp(&codecs, "sendrecv");
        let call = Call {
            call_id: call_id.clone(),
            outgoing: true,
            state: State::Calling,
            local_tag: tag.clone(),
            remote_tag: String::new(),
            local_uri: format!("<sip:{}@{}>", self.user, addr_text(self.addr)),
            remote_uri: extra
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("To"))
                .map_or_else(|| format!("<{uri}>"), |(_, v)| v.to_string()),
            remote_target: uri.to_string(),
            route_set: Vec::new(),
            local_cseq: 1,
            responses: Vec::new(),
            requests: Vec::new(),
            sdp_sent: vec![offer.clone()],
            sdp_received: Vec::new(),
            remote_media: None,
            pt: codecs[0],
            sending: true,
            invite_tx: None,
            next_hop: Some(next_hop),
            extra: extra
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            auth_attempts: 0,
            invite_ctx: None,
            ack: None,
            rtp_seq: 0,
        };
        self.calls.push(call);
        let idx = self.calls.len() - 1;
        self.send_invite(idx, None, now);
        idx
    }

    /// Sends call `idx`'s INVITE (again, with its next CSeq, when `auth` answers a challenge:
    /// the header name and value).
    fn send_invite(&mut self, idx: usize, auth: Option<(&str, String)>, now: Instant) {
        let via = self.via();
        let contact = self.contact.clone();
        let c = &self.calls[idx];
        let uri = c.remote_target.clone();
        let mut b = RequestBuilder::new(&Method::Invite, &uri);
        b.header("Via", via);
        let mf = c
            .extra
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Max-Forwards"))
            .map_or("70", |(_, v)| v.as_str());
        b.header("Max-Forwards", mf);
        b.header("From", format_args!("{};tag={}", c.local_uri, c.local_tag));
        b.header("To", &c.remote_uri);
        b.header("Call-ID", &c.call_id);
        b.header("CSeq", format_args!("{} INVITE", c.local_cseq));
        b.header("Contact", format_args!("<{contact}>"));
        for (n, v) in &c.extra {
            if !n.eq_ignore_ascii_case("Max-Forwards") && !n.eq_ignore_ascii_case("To") {
                b.header(n, v);
            }
        }
        if let Some((name, value)) = auth {
            b.header(name, value);
        }
        let offer = c.sdp_sent[0].clone();
        let to = c.next_hop.expect("an outgoing call");
        let bytes = b.finish(Some(("application/sdp", offer.as_bytes())));
        let ctx = self.send_request(Some(idx), Method::Invite, bytes, to, now);
        self.calls[idx].invite_ctx = Some(ctx);
    }

    /// A 401 or 407 to call `idx`'s INVITE: the INVITE again with our credentials (twice at
    /// most, so a wrong password does not loop). False if we do not answer it.
    fn answer_challenge(&mut self, idx: usize, msg: &Message, now: Instant) -> bool {
        let Some((user, password)) = self.credentials.clone() else {
            return false;
        };
        let (ask, answer) = match msg.status() {
            Some(401) => (HeaderName::WwwAuthenticate, "Authorization"),
            Some(407) => (HeaderName::ProxyAuthenticate, "Proxy-Authorization"),
            _ => return false,
        };
        let Some(challenge) = msg
            .header(ask)
            .and_then(|v| sip::auth::Challenge::parse(v).ok())
        else {
            return false;
        };
        let c = &mut self.calls[idx];
        if c.auth_attempts >= 2 {
            return false;
        }
        c.auth_attempts += 1;
        c.local_cseq += 1;
        let uri = c.remote_target.clone();
        let cnonce = format!("cn{}", c.auth_attempts);
        let value = sip::auth::Authorization::build(
            &challenge, &user, &password, "INVITE", &uri, 1, &cnonce,
        );
        self.send_invite(idx, Some((answer, value)), now);
        true
    }

    /// Registers `contact` (ours by default) as our user at `registrar` for `domain`.
    pub fn register(&mut self, registrar: SocketAddr, domain: &str, expires: u32, now: Instant) {
        let tag = self.tag();
        let call_id = format!("{}@ua", self.id("reg-"));
        let mut b = RequestBuilder::new(&Method::Register, &format!("sip:{domain}"));
        b.header("Via", self.via());
        b.header("Max-Forwards", 70);
        b.header(
            "From",
            format_args!("<sip:{}@{domain}>;tag={tag}", self.user),
        );
        b.header("To", format_args!("<sip:{}@{domain}>", self.user));
        b.header("Call-ID", call_id);
        b.header("CSeq", "1 REGISTER");
        b.header(
            "Contact",
            format_args!("<{}>{}", self.contact, self.contact_params),
        );
        b.header("Expires", expires);
        for (name, value) in &self.register_headers {
            b.header(name, value);
        }
        let bytes = b.finish(None);
        self.send_request(None, Method::Register, bytes, registrar, now);
    }

    /// Hangs up an answered call.
    pub fn bye(&mut self, call: usize, now: Instant) {
        self.in_dialog(call, Method::Bye, None, now);
        self.calls[call].state = State::Ended;
    }

    /// Sends a REFER in call `call` asking the far end to transfer it to `refer_to` (a URI, or
    /// a name-addr).
    pub fn refer(&mut self, call: usize, refer_to: &str, now: Instant) {
        self.request(call, Method::Refer, &[("Refer-To", refer_to)], now);
    }

    /// Sends `method` in call `call` with `extra` headers besides the dialog's, and our
    /// Contact (which REFER and NOTIFY carry).
    pub fn request(&mut self, call: usize, method: Method, extra: &[(&str, &str)], now: Instant) {
        let via = self.via();
        let contact = self.contact.clone();
        let c = &mut self.calls[call];
        c.local_cseq += 1;
        let mut headers = self.dialog_headers.clone();
        headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        headers.push(("Contact".into(), format!("<{contact}>")));
        let (bytes, to) = dialog_request(c, &method, &via, c.local_cseq, &contact, &headers, None);
        self.send_request(Some(call), method, bytes, to, now);
    }

    /// Sends an INFO in call `call` with `body` of `content_type` (a DTMF digit, say).
    pub fn info(&mut self, call: usize, content_type: &str, body: &str, now: Instant) {
        let via = self.via();
        let contact = self.contact.clone();
        let c = &mut self.calls[call];
        c.local_cseq += 1;
        let extra = &self.dialog_headers;
        let (bytes, to) =
            dialog_request(c, &Method::Info, &via, c.local_cseq, &contact, extra, None);
        let with_body = String::from_utf8(bytes).unwrap().replace(
            "Content-Length: 0\r\n\r\n",
            &format!(
                "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        );
        self.send_request(Some(call), Method::Info, with_body.into_bytes(), to, now);
    }

    /// The Replaces value (RFC 3891) naming call `call`'s dialog for the far end: its tag as
    /// to-tag, ours as from-tag.
    pub fn replaces(&self, call: usize) -> String {
        let c = &self.calls[call];
        format!(
            "{};to-tag={};from-tag={}",
            c.call_id, c.remote_tag, c.local_tag
        )
    }

    /// Cancels the call's pending INVITE (sent once a provisional came, RFC 3261 §9.1).
    pub fn cancel(&mut self, call: usize, now: Instant) {
        let invite = self.calls[call].invite_ctx.expect("the call has an INVITE");
        if let Some(ctx) = self.txs.cancel(invite, now) {
            self.client_txs.insert(ctx, (Some(call), Method::Cancel));
        }
    }

    /// Sends a re-INVITE with `sdp` as the new offer.
    pub fn reinvite(&mut self, call: usize, sdp: String, now: Instant) {
        self.in_dialog(call, Method::Invite, Some(sdp), now);
    }

    /// Sends an UPDATE with `sdp` as the new offer.
    pub fn update(&mut self, call: usize, sdp: String, now: Instant) {
        self.in_dialog(call, Method::Update, Some(sdp), now);
    }

    fn in_dialog(&mut self, call: usize, method: Method, sdp: Option<String>, now: Instant) {
        let via = self.via();
        let contact = self.contact.clone();
        let c = &mut self.calls[call];
        c.local_cseq += 1;
        let extra = &self.dialog_headers;
        let (bytes, to) = dialog_request(
            c,
            &method,
            &via,
            c.local_cseq,
            &contact,
            extra,
            sdp.as_deref(),
        );
        if let Some(sdp) = sdp {
            c.sdp_sent.push(sdp);
        }
        self.send_request(Some(call), method, bytes, to, now);
    }

    fn send_request(
        &mut self,
        call: Option<usize>,
        method: Method,
        bytes: Vec<u8>,
        to: SocketAddr,
        now: Instant,
    ) -> ClientTxId {
        let peer = Peer {
            transport: Transport::Udp,
            addr: to,
        };
        let ctx = self.txs.send_request(bytes, peer, now);
        self.client_txs.insert(ctx, (call, method));
        ctx
    }

    // -----------------------------------------------------------------------------------------
    // The network side
    // -----------------------------------------------------------------------------------------

    /// A datagram for this agent: SIP to `addr`, RTP to `media`.
    pub fn deliver(&mut self, p: Packet, now: Instant) {
        if p.media {
            // RTP (RTCP goes to the next port).
            let ours = p.to.port() == self.media.port() || Some(p.to) == self.rtp_from;
            if p.bytes.len() >= 12 && ours {
                self.rtp.push((now, p.from, p.bytes[1] & 0x7f));
                self.rtp_payloads.push(p.bytes[12..].to_vec());
            }
            return;
        }
        let Ok(msg) = Message::parse(&p.bytes, true) else {
            self.non_sip.push((now, p.from, p.bytes));
            return;
        };
        self.received.push((now, p.from, msg.clone()));
        let peer = Peer {
            transport: Transport::Udp,
            addr: p.from,
        };
        if msg.is_request() {
            self.on_request(msg, peer, now);
        } else {
            self.on_response(msg, now);
        }
    }

    fn find_call(&self, msg: &Message) -> Option<usize> {
        let call_id = msg.header(HeaderName::CallId)?;
        self.calls.iter().rposition(|c| c.call_id == call_id)
    }

    fn on_response(&mut self, msg: Message, now: Instant) {
        let Some((ctx, first)) = self.txs.on_response(&msg, now) else {
            return;
        };
        let Some((call, method)) = self.client_txs.get(&ctx).cloned() else {
            return;
        };
        let status = msg.status().unwrap_or(500);
        let Some(call) = call else {
            if method == Method::Register && status >= 200 {
                self.register_statuses.push(status);
            }
            return;
        };
        if !first {
            // A retransmitted 2xx: our ACK was lost.
            if (200..300).contains(&status) {
                if let Some((to, ack)) = self.calls[call].ack.clone() {
                    self.out.push(Packet::sip(self.addr, to, ack));
                }
            }
            return;
        }
        let c = &mut self.calls[call];
        c.responses.push(msg.clone());
        if method != Method::Invite && method != Method::Update {
            return;
        }
        if !msg.body().is_empty() {
            let body = body_text(&msg);
            take_remote_sdp(c, &body, false);
            c.sdp_received.push(body);
        }
        if method == Method::Invite && status > 100 && status < 200 && c.state == State::Calling {
            // An early dialog (RFC 3261 §12.1.2): requests such as UPDATE may follow in it.
            if let Some(tag) = msg
                .header(HeaderName::To)
                .and_then(|t| NameAddr::parse(t).ok())
                .and_then(|n| n.tag().map(str::to_string))
            {
                if c.remote_tag.is_empty() {
                    c.remote_tag = tag;
                    if let Some(target) = msg
                        .header(HeaderName::Contact)
                        .and_then(|v| NameAddr::parse(v).ok())
                    {
                        c.remote_target = target.uri.to_string();
                    }
                }
            }
        }
        if method == Method::Update || status < 200 {
            return;
        }
        if status >= 300 {
            if method == Method::Invite
                && c.state == State::Calling
                && self.answer_challenge(call, &msg, now)
            {
                return;
            }
            let c = &mut self.calls[call];
            if c.state == State::Calling {
                c.state = State::Ended;
            }
            return;
        }
        // 2xx to an INVITE: confirm the dialog (first one) and ACK.
        if c.state == State::Calling {
            if let Some(tag) = msg
                .header(HeaderName::To)
                .and_then(|t| NameAddr::parse(t).ok())
                .and_then(|n| n.tag().map(str::to_string))
            {
                c.remote_tag = tag;
            }
            if let Some(target) = msg
                .header(HeaderName::Contact)
                .and_then(|v| NameAddr::parse(v).ok())
            {
                c.remote_target = target.uri.to_string();
            }
            c.route_set = msg
                .all(HeaderName::RecordRoute)
                .map(str::to_string)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            c.state = State::Confirmed;
        }
        let cseq =
            sip::CSeq::parse(msg.header(HeaderName::CSeq).unwrap_or_default()).map_or(1, |c| c.seq);
        self.counter += 1;
        let via = format!(
            "SIP/2.0/UDP {};branch=z9hG4bK-uaack{}{};rport",
            self.addr, self.user, self.counter
        );
        let c = &mut self.calls[call];
        let (ack, to) = dialog_request(c, &Method::Ack, &via, cseq, "", &[], None);
        c.ack = Some((to, ack.clone()));
        self.txs.send_stateless(
            ack,
            Peer {
                transport: Transport::Udp,
                addr: to,
            },
        );
    }

    fn on_request(&mut self, msg: Message, peer: Peer, now: Instant) {
        match self.txs.on_request(&msg, peer, now) {
            Incoming::New(stx) => self.new_request(stx, msg, peer, now),
            Incoming::Ack => {
                if let Some(call) = self.find_call(&msg) {
                    let c = &mut self.calls[call];
                    if !msg.body().is_empty() {
                        let body = body_text(&msg);
                        take_remote_sdp(c, &body, false);
                        c.sdp_received.push(body);
                    }
                    c.requests.push(msg);
                }
            }
            Incoming::Cancel { cancel, invite } => {
                let ok = ResponseBuilder::new(&msg, 200, "OK", Some(peer.addr), None).finish(None);
                self.txs.respond(cancel, 200, ok, now);
                if let Some(call) = self.find_call(&msg) {
                    let c = &mut self.calls[call];
                    c.requests.push(msg.clone());
                    if let (Some((stx, inv, p)), Some(_)) = (c.invite_tx.take(), invite) {
                        let tag = c.local_tag.clone();
                        let r = ResponseBuilder::new(
                            &inv,
                            487,
                            "Request Terminated",
                            Some(p.addr),
                            Some(&tag),
                        )
                        .finish(None);
                        self.txs.respond(stx, 487, r, now);
                        c.state = State::Ended;
                    }
                }
            }
            Incoming::Retransmission | Incoming::AckNon2xx | Incoming::Invalid => {}
        }
    }

    fn new_request(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        let has_to_tag = msg
            .header(HeaderName::To)
            .and_then(|t| NameAddr::parse(t).ok())
            .is_some_and(|n| n.tag().is_some());
        if matches!(method, Method::Invite | Method::Register) && !has_to_tag {
            if let Some(header) = self.challenge(&msg, &method) {
                self.challenged.push(method.to_string());
                let (status, reason, name) = match method {
                    Method::Register => (401, "Unauthorized", "WWW-Authenticate"),
                    _ => (407, "Proxy Authentication Required", "Proxy-Authenticate"),
                };
                let tag = self.tag();
                let mut b = ResponseBuilder::new(&msg, status, reason, Some(peer.addr), Some(&tag));
                b.header(name, header);
                let r = b.finish(None);
                return self.txs.respond(stx, status, r, now);
            }
        }
        if method == Method::Register {
            return self.registrar(stx, msg, peer, now);
        }
        if method == Method::Invite && !has_to_tag {
            return self.incoming_call(stx, msg, peer, now);
        }
        let call = self.find_call(&msg).filter(|_| has_to_tag);
        let Some(call) = call else {
            let status = match method {
                Method::Options => 200,
                Method::Notify => self.notify_status,
                _ => 481,
            };
            let tag = self.tag();
            let r = ResponseBuilder::new(&msg, status, "Whatever", Some(peer.addr), Some(&tag))
                .finish(None);
            return self.txs.respond(stx, status, r, now);
        };
        let contact = self.contact.clone();
        let answer = match method {
            Method::Invite if !msg.body().is_empty() && !self.reinvite_refusals.is_empty() => {
                let status = self.reinvite_refusals.remove(0);
                self.calls[call].requests.push(msg.clone());
                let r = ResponseBuilder::new(&msg, status, "Refused", Some(peer.addr), None)
                    .finish(None);
                return self.txs.respond(stx, status, r, now);
            }
            Method::Invite | Method::Update if !msg.body().is_empty() => {
                let offer = body_text(&msg);
                let (pts, dir) = answer_for(&offer, &self.codecs);
                let Some(pt) = pts.first().copied() else {
                    let r = ResponseBuilder::new(
                        &msg,
                        488,
                        "Not Acceptable Here",
                        Some(peer.addr),
                        None,
                    )
                    .finish(None);
                    self.txs.respond(stx, 488, r, now);
                    return;
                };
                let body = self.sdp(&[pt], dir);
                let c = &mut self.calls[call];
                take_remote_sdp(c, &offer, true);
                c.pt = pt;
                c.sdp_received.push(offer);
                c.sdp_sent.push(body.clone());
                Some(body)
            }
            _ => None,
        };
        let c = &mut self.calls[call];
        c.requests.push(msg.clone());
        if method == Method::Bye {
            c.state = State::Ended;
        }
        let mut b = ResponseBuilder::new(&msg, 200, "OK", Some(peer.addr), None);
        if matches!(method, Method::Invite | Method::Update) {
            b.header("Contact", format_args!("<{contact}>"));
        }
        let r = b.finish(answer.as_deref().map(|a| ("application/sdp", a.as_bytes())));
        self.txs.respond(stx, 200, r, now);
    }

    /// The challenge to send for `msg` (None: its credentials are good, or none are asked).
    fn challenge(&self, msg: &Message, method: &Method) -> Option<String> {
        let (realm, user, password) = self.auth.as_ref()?;
        let name = match method {
            Method::Register => HeaderName::Authorization,
            _ => HeaderName::ProxyAuthorization,
        };
        let good = msg
            .all(name)
            .filter_map(|v| sip::auth::Authorization::parse(v).ok())
            .any(|a| {
                let ha1 = sip::auth::ha1(a.algorithm, user, realm, password);
                &a.username == user
                    && &a.realm == realm
                    && Some(a.uri.as_str()) == msg.request_uri()
                    && a.verify(&ha1, &method.to_string())
            });
        let nonce = format!("nonce-{}", self.counter);
        (!good).then(|| {
            format!("Digest realm=\"{realm}\", nonce=\"{nonce}\", qop=\"auth\", algorithm=MD5")
        })
    }

    /// A registrar's answer: 200 with the contact and `register_expires`.
    fn registrar(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let contact = msg
            .header(HeaderName::Contact)
            .and_then(|c| NameAddr::parse(c).ok())
            .map(|n| n.uri.to_string())
            .unwrap_or_default();
        let expires = msg
            .header(HeaderName::Expires)
            .and_then(sip::header::parse_u32)
            .unwrap_or(self.register_expires)
            .min(self.register_expires);
        self.bindings.retain(|c| *c != contact);
        if expires > 0 {
            self.bindings.push(contact.clone());
        }
        let tag = self.tag();
        let mut b = ResponseBuilder::new(&msg, 200, "OK", Some(peer.addr), Some(&tag));
        b.header("Contact", format_args!("<{contact}>;expires={expires}"));
        let r = b.finish(None);
        self.txs.respond(stx, 200, r, now);
    }

    fn incoming_call(&mut self, stx: ServerTxId, msg: Message, peer: Peer, now: Instant) {
        let from = msg.header(HeaderName::From).unwrap_or_default();
        let remote_tag = NameAddr::parse(from)
            .ok()
            .and_then(|n| n.tag().map(str::to_string))
            .unwrap_or_default();
        let remote_target = msg
            .header(HeaderName::Contact)
            .and_then(|c| NameAddr::parse(c).ok())
            .map(|n| n.uri.to_string())
            .unwrap_or_default();
        let offer = body_text(&msg);
        let (pts, _) = answer_for(&offer, &self.codecs);
        let call = Call {
            call_id: msg
                .header(HeaderName::CallId)
                .unwrap_or_default()
                .to_string(),
            outgoing: false,
            state: State::Calling,
            local_tag: self.tag(),
            remote_tag,
            local_uri: sip_without_tag(msg.header(HeaderName::To).unwrap_or_default()),
            remote_uri: sip_without_tag(from),
            remote_target,
            route_set: msg
                .all(HeaderName::RecordRoute)
                .map(str::to_string)
                .collect(),
            local_cseq: 0,
            responses: Vec::new(),
            requests: vec![msg.clone()],
            sdp_sent: Vec::new(),
            sdp_received: Vec::new(),
            remote_media: None,
            pt: pts.first().copied().unwrap_or(0),
            sending: true,
            invite_tx: Some((stx, msg.clone(), peer)),
            next_hop: None,
            extra: Vec::new(),
            auth_attempts: 0,
            invite_ctx: None,
            ack: None,
            rtp_seq: 0,
        };
        self.calls.push(call);
        let idx = self.calls.len() - 1;
        if !offer.is_empty() {
            take_remote_sdp(&mut self.calls[idx], &offer, true);
            self.calls[idx].sdp_received.push(offer);
        }
        for (status, sdp) in self.policy.provisional.clone() {
            self.respond_invite(idx, status, sdp, now);
        }
        self.due.push((now + self.policy.after, idx));
    }

    /// A response to the INVITE of incoming call `call`.
    fn respond_invite(&mut self, call: usize, status: u16, with_sdp: bool, now: Instant) {
        let contact = self.contact.clone();
        let pt = self.calls[call].pt;
        let body = if with_sdp {
            let dir = self.calls[call]
                .sdp_received
                .first()
                .map_or("sendrecv", |o| answer_for(o, &self.codecs).1);
            match self.calls[call].sdp_sent.first() {
                Some(sent) => Some(sent.clone()),
                None => Some(self.sdp(&[pt], dir)),
            }
        } else {
            None
        };
        let c = &mut self.calls[call];
        let Some((stx, inv, peer)) = c.invite_tx.clone() else {
            return;
        };
        let reason = match status {
            180 => "Ringing",
            183 => "Session Progress",
            200 => "OK",
            486 => "Busy Here",
            _ => "Whatever",
        };
        let mut b = ResponseBuilder::new(&inv, status, reason, Some(peer.addr), Some(&c.local_tag));
        if status < 300 {
            for rr in inv.all(HeaderName::RecordRoute) {
                b.header_str("Record-Route", rr);
            }
            b.header("Contact", format_args!("<{contact}>"));
        }
        if let Some(body) = &body {
            if c.sdp_sent.is_empty() {
                c.sdp_sent.push(body.clone());
            }
        }
        let r = b.finish(body.as_deref().map(|b| ("application/sdp", b.as_bytes())));
        if status >= 200 {
            c.invite_tx = None;
            c.state = if status < 300 {
                State::Confirmed
            } else {
                State::Ended
            };
        }
        self.txs.respond(stx, status, r, now);
    }

    /// Runs what is due at `now`: transaction timers, delayed answers, RTP.
    pub fn advance(&mut self, now: Instant) {
        if self.txs.poll_timeout().is_some_and(|t| t <= now) {
            self.txs.handle_timeout(now);
        }
        while let Some(ev) = self.txs.poll_event() {
            if let TxEvent::AckTimeout { call_id, .. } = &ev {
                // RFC 3261 §13.3.1.4: a 2xx never ACKed ends the session with a BYE.
                if let Some(call) = self.calls.iter().rposition(|c| c.call_id == *call_id) {
                    if self.calls[call].state == State::Confirmed {
                        self.bye(call, now);
                    }
                }
            }
            if !matches!(ev, TxEvent::Terminated(_)) {
                self.tx_events.push(ev);
            }
        }
        let due: Vec<usize> = self
            .due
            .iter()
            .filter(|(t, _)| *t <= now)
            .map(|(_, c)| *c)
            .collect();
        self.due.retain(|(t, _)| *t > now);
        for call in due {
            let status = self.policy.status;
            self.respond_invite(call, status, status < 300, now);
        }
        if self.send_rtp {
            let mut at = *self.next_rtp.get_or_insert(now);
            while at <= now {
                self.send_frames();
                at += super::node::FRAME;
            }
            self.next_rtp = Some(at);
        }
    }

    fn send_frames(&mut self) {
        for c in &mut self.calls {
            // Confirmed calls, and incoming ones whose early media we announced (183 with SDP).
            let early = c.state == State::Calling && !c.outgoing && !c.sdp_sent.is_empty();
            let up = c.state == State::Confirmed || early;
            let Some(dst) = c.remote_media.filter(|_| up && c.sending) else {
                continue;
            };
            c.rtp_seq = c.rtp_seq.wrapping_add(1);
            let ts = u32::from(c.rtp_seq) * 160;
            let mut p = vec![0x80, c.pt];
            p.extend_from_slice(&c.rtp_seq.to_be_bytes());
            p.extend_from_slice(&ts.to_be_bytes());
            p.extend_from_slice(&0x5ca1_ab1eu32.to_be_bytes());
            match self.voice.is_empty() {
                true => p.extend_from_slice(&[if c.pt == 8 { 0xd5 } else { 0xff }; 160]),
                false => p.extend_from_slice(&self.voice),
            }
            self.out
                .push(Packet::media(self.rtp_from.unwrap_or(self.media), dst, p));
        }
    }

    /// Sends `digit` in call `call` as RFC 4733 telephone-events (payload type 101, which
    /// the call's SDP must have offered): a start packet and the end packet three times.
    pub fn dtmf(&mut self, call: usize, digit: char) {
        let event = match digit {
            '*' => 10,
            '#' => 11,
            d => d.to_digit(10).expect("a DTMF digit") as u8,
        };
        let c = &mut self.calls[call];
        let dst = c.remote_media.expect("the call has media");
        let ts = u32::from(c.rtp_seq) * 160;
        for (i, (end, duration)) in [(false, 160u16), (true, 800), (true, 800), (true, 800)]
            .into_iter()
            .enumerate()
        {
            c.rtp_seq = c.rtp_seq.wrapping_add(1);
            let mut p = vec![0x80, if i == 0 { 0x80 | 101 } else { 101 }];
            p.extend_from_slice(&c.rtp_seq.to_be_bytes());
            p.extend_from_slice(&ts.to_be_bytes());
            p.extend_from_slice(&0x5ca1_ab1eu32.to_be_bytes());
            p.extend_from_slice(&[event, if end { 0x80 | 10 } else { 10 }]);
            p.extend_from_slice(&duration.to_be_bytes());
            self.out
                .push(Packet::media(self.rtp_from.unwrap_or(self.media), dst, p));
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        let rtp = self.next_rtp.filter(|_| self.send_rtp);
        [
            self.txs.poll_timeout(),
            self.due.iter().map(|(t, _)| *t).min(),
            rtp,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn drain(&mut self) -> Vec<Packet> {
        while let Some(t) = self.txs.poll_transmit() {
            self.out
                .push(Packet::sip(self.addr, t.to.addr, t.bytes.to_vec()));
        }
        std::mem::take(&mut self.out)
    }

    // -----------------------------------------------------------------------------------------
    // Looking at what it got
    // -----------------------------------------------------------------------------------------

    pub fn call(&self, i: usize) -> &Call {
        &self.calls[i]
    }

    /// The last call (the one the switch placed to us, in most tests).
    pub fn last(&self) -> &Call {
        self.calls.last().expect("the agent has a call")
    }

    pub fn last_index(&self) -> Option<usize> {
        self.calls.len().checked_sub(1)
    }

    /// Received requests of `method` (in any dialog or none).
    pub fn requests_of(&self, method: &Method) -> Vec<&Message> {
        self.received
            .iter()
            .map(|(_, _, m)| m)
            .filter(|m| m.method() == Some(method))
            .collect()
    }
}

/// An in-dialog request of call `c`: bytes and where it goes (first Route, else the target).
fn dialog_request(
    c: &Call,
    method: &Method,
    via: &str,
    cseq: u32,
    contact: &str,
    extra: &[(String, String)],
    sdp: Option<&str>,
) -> (Vec<u8>, SocketAddr) {
    let mut b = RequestBuilder::new(method, &c.remote_target);
    b.header("Via", via);
    for r in &c.route_set {
        b.header("Route", r);
    }
    b.header("Max-Forwards", 70);
    b.header("From", format_args!("{};tag={}", c.local_uri, c.local_tag));
    if c.remote_tag.is_empty() {
        b.header("To", &c.remote_uri);
    } else {
        b.header("To", format_args!("{};tag={}", c.remote_uri, c.remote_tag));
    }
    b.header("Call-ID", &c.call_id);
    b.header("CSeq", format_args!("{cseq} {method}"));
    if matches!(method, Method::Invite | Method::Update) {
        b.header("Contact", format_args!("<{contact}>"));
    }
    for (name, value) in extra {
        b.header(name, value);
    }
    let to = match c.route_set.first() {
        Some(r) => hop(r),
        None => hop(&c.remote_target),
    };
    let bytes = b.finish(sdp.map(|s| ("application/sdp", s.as_bytes())));
    (bytes, to)
}

/// The payload types we can answer an offer with (ours, in the offer's order) and the answer's
/// direction.
fn answer_for(offer: &str, ours: &[u8]) -> (Vec<u8>, &'static str) {
    let Ok(sd) = sdp::SessionDescription::parse(offer.as_bytes()) else {
        return (ours.to_vec(), "sendrecv");
    };
    let Some(m) = sd.media.iter().find(|m| m.kind == "audio") else {
        return (Vec::new(), "sendrecv");
    };
    let pts = m.payload_types().filter(|p| ours.contains(p)).collect();
    let dir = match m.direction(&sd) {
        sdp::Direction::SendRecv => "sendrecv",
        sdp::Direction::SendOnly => "recvonly",
        sdp::Direction::RecvOnly => "sendonly",
        sdp::Direction::Inactive => "inactive",
    };
    (pts, dir)
}

/// Takes the far end's media address, payload type and direction from SDP it sent
/// (`offer`: we answered it, so our direction is the reverse of theirs).
fn take_remote_sdp(c: &mut Call, body: &str, offer: bool) {
    let Ok(sd) = sdp::SessionDescription::parse(body.as_bytes()) else {
        return;
    };
    let Some(m) = sd.media.iter().find(|m| m.kind == "audio") else {
        return;
    };
    if let Some(ip) = m.connection.or(sd.connection) {
        c.remote_media = Some(SocketAddr::new(ip, m.port));
    }
    if !offer {
        if let Some(pt) = m.payload_types().next() {
            c.pt = pt;
        }
    }
    c.sending = m.direction(&sd).receives();
}

fn sip_without_tag(v: &str) -> String {
    match NameAddr::parse(v) {
        Ok(n) => format!("<{}>", n.uri),
        Err(_) => v.to_string(),
    }
}

/// `127.0.0.1:5060` or `[::1]:5060` (the SocketAddr Display already brackets IPv6).
fn addr_text(a: SocketAddr) -> String {
    a.to_string()
}
