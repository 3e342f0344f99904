//! SIP over WebSocket (RFC 7118), the transport-independent part: which handshakes are let in
//! (path, the `sip` subprotocol, an allowed Origin) and how one WebSocket message becomes one
//! SIP message. tungstenite does the HTTP upgrade and the framing (its server handshake takes
//! a callback that sees the request and shapes the answer, which is what `Policy::check` is).
//! Requests before an upgrade that ask for none get the phone page (`page`).

use super::page;
use std::io::{self, Read, Write};
use std::sync::Arc;
use tungstenite::handshake::server::{Callback, ErrorResponse, Request, Response, ServerHandshake};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::http::{HeaderValue, StatusCode};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::WebSocket;

/// What a WebSocket handshake must carry to be let in.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The request path phones connect to (`/ws`).
    pub path: String,
    /// Origins a browser may connect from; requests without an Origin (phones, not browsers)
    /// are let in, as a page elsewhere cannot strip the header its browser adds.
    pub origins: Vec<String>,
    /// Hosts whose pages may connect from any scheme and port (`Sip::ws_same_hosts`: the
    /// listen addresses' own, while `sip.ws_origins` is unset).
    pub same_hosts: Vec<String>,
}

/// The host of an Origin (`scheme://host[:port]`), an IPv6 one with its brackets.
fn origin_host(origin: &str) -> Option<&str> {
    let rest = origin.split_once("://")?.1;
    match rest.strip_prefix('[') {
        Some(v6) => v6.find(']').map(|end| &rest[..end + 2]),
        None => rest.split(':').next(),
    }
}

/// Why a handshake was refused: the status and the reason the client is told.
fn refuse(status: StatusCode, why: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(why.to_string()));
    *r.status_mut() = status;
    r
}

impl Policy {
    /// The policy `sip` sets (at start, and again at each reload: connections opened after it
    /// are checked against the new path and Origins).
    pub fn new(sip: &switch::config::Sip) -> Policy {
        Policy {
            path: sip.ws.path.clone(),
            origins: sip.ws.origins.clone(),
            same_hosts: sip.ws_same_hosts(),
        }
    }

    /// Lets the handshake in with `Sec-WebSocket-Protocol: sip`, or refuses it: 404 for
    /// another path, 403 for an Origin not in `sip.ws_origins`, 400 without the `sip`
    /// subprotocol (RFC 7118 §4.1).
    #[allow(clippy::result_large_err)] // the type tungstenite's callback returns
    pub fn check(&self, req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
        if req.uri().path() != self.path {
            return Err(refuse(
                StatusCode::NOT_FOUND,
                "no WebSocket here (sip.ws_path)",
            ));
        }
        if let Some(origin) = req.headers().get("origin") {
            let allowed = origin.to_str().is_ok_and(|o| {
                self.origins.iter().any(|a| a.eq_ignore_ascii_case(o))
                    || origin_host(o)
                        .is_some_and(|h| self.same_hosts.iter().any(|s| s.eq_ignore_ascii_case(h)))
            });
            if !allowed {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    "origin not allowed (sip.ws_origins)",
                ));
            }
        }
        let sip = req
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim().eq_ignore_ascii_case("sip"));
        if !sip {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "the \"sip\" WebSocket subprotocol is required (RFC 7118)",
            ));
        }
        resp.headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static("sip"));
        Ok(resp)
    }
}

/// What one WebSocket message is to SIP.
#[derive(Debug)]
pub enum Frame {
    /// One whole SIP message (boxed: a parsed message is large beside the other variants).
    Sip(Box<sip::Message>),
    /// Text or binary that is not one SIP message: dropped and counted.
    Garbage,
    /// Pings, pongs and closes, which tungstenite answers itself.
    Control,
}

/// One WebSocket message as SIP: a text or binary message holds one SIP message, its body the
/// rest of the message when Content-Length is absent (RFC 7118 §5.2) and bytes past a given
/// Content-Length discarded, exactly as in a datagram (RFC 3261 §18.3).
pub fn frame(msg: &tungstenite::Message) -> Frame {
    let Some(bytes) = payload(msg) else {
        return Frame::Control;
    };
    match sip::Message::parse(bytes, true) {
        Ok(m) => Frame::Sip(Box::new(m)),
        Err(_) => Frame::Garbage,
    }
}

/// What a text or binary message carries (None for control messages).
fn payload(msg: &tungstenite::Message) -> Option<&[u8]> {
    match msg {
        tungstenite::Message::Text(t) => Some(t.as_bytes()),
        tungstenite::Message::Binary(b) => Some(b),
        _ => None,
    }
}

/// The bytes between a connection and tungstenite: what was read from the socket (or out of
/// TLS) waits in `input`, what tungstenite writes collects in `output` for the connection to
/// send. So tungstenite never touches the socket and the worker's loop keeps it.
#[derive(Default)]
struct Pipe {
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.input.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input.drain(..n);
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `Policy::check` as tungstenite's handshake callback.
struct Check(Arc<Policy>);

impl Callback for Check {
    fn on_request(self, req: &Request, resp: Response) -> Result<Response, ErrorResponse> {
        self.0.check(req, resp)
    }
}

enum State {
    Handshake(MidHandshake<ServerHandshake<Pipe, Check>>),
    Open(WebSocket<Pipe>),
}

/// The longest request head awaited before an upgrade; a browser's are about 1 KiB.
const MAX_HEAD: usize = 8192;

/// One WebSocket connection's protocol state, without its socket: bytes in, SIP messages and
/// bytes to send out.
pub struct Session {
    /// None once the handshake was refused or the WebSocket closed.
    state: Option<State>,
    policy: Arc<Policy>,
    /// The phone page was served on it (it may still upgrade after).
    served_page: bool,
}

impl Session {
    /// A connection that has yet to send its upgrade request; messages above `max_message`
    /// bytes close it (`security.tcp_max_message`).
    pub fn new(policy: Arc<Policy>, max_message: usize) -> Session {
        // tungstenite's 128 KiB read buffer is for bulk streams: a SIP connection sits idle
        // and takes a message of a few KiB now and then (bench/RESULTS.md: 127 KiB per idle
        // connection with it, against a few with 4 KiB, which grows for a larger message).
        let config = WebSocketConfig::default()
            .read_buffer_size(4096)
            .write_buffer_size(0)
            .max_message_size(Some(max_message))
            .max_frame_size(Some(max_message));
        let check = Check(policy.clone());
        let state = match tungstenite::accept_hdr_with_config(Pipe::default(), check, Some(config))
        {
            Err(HandshakeError::Interrupted(mid)) => Some(State::Handshake(mid)),
            Ok(ws) => Some(State::Open(ws)),
            Err(HandshakeError::Failure(_)) => None,
        };
        Session {
            state,
            policy,
            served_page: false,
        }
    }

    /// Whether it answered a request for the phone page.
    pub fn served_page(&self) -> bool {
        self.served_page
    }

    /// Answers the whole request heads waiting before the upgrade that ask for none (the
    /// phone page's files) into `out`. Ok(true) once an upgrade's head is whole, for
    /// tungstenite (which must see it whole: it keeps what it has read); Ok(false) while the
    /// next head is incomplete; Err for bytes that are no request head, or too long a one.
    fn serve_page(&mut self, out: &mut Vec<u8>) -> Result<bool, ()> {
        let ws_path = self.policy.path.clone();
        let Some(State::Handshake(mid)) = self.state.as_mut() else {
            return Ok(true);
        };
        let input = &mut mid.get_mut().get_mut().input;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let len = match req.parse(input) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) if input.len() <= MAX_HEAD => return Ok(false),
                _ => return Err(()),
            };
            if req
                .headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("upgrade"))
            {
                return Ok(true);
            }
            let answer = page::answer(
                req.method.unwrap_or_default(),
                req.path.unwrap_or_default(),
                &ws_path,
            );
            out.extend_from_slice(&answer);
            input.drain(..len);
            self.served_page = true;
        }
    }

    /// Whether the handshake is done (a refused or unfinished one counts as not open).
    pub fn is_open(&self) -> bool {
        matches!(self.state, Some(State::Open(_)))
    }

    fn pipe(&mut self) -> Option<&mut Pipe> {
        match self.state.as_mut()? {
            State::Handshake(mid) => Some(mid.get_mut().get_mut()),
            State::Open(ws) => Some(ws.get_mut()),
        }
    }

    /// Takes bytes read from the connection; `on_frame` gets each WebSocket message, with its
    /// payload (for the SIP trace). Returns the bytes to write back (the handshake's answer,
    /// pongs, closes) and whether the connection stays open.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        mut on_frame: impl FnMut(Frame, &[u8]),
    ) -> (Vec<u8>, bool) {
        let Some(pipe) = self.pipe() else {
            return (Vec::new(), false);
        };
        pipe.input.extend_from_slice(bytes);
        let mut out = Vec::new();
        match self.serve_page(&mut out) {
            Ok(true) => {}
            Ok(false) => return (out, true),
            Err(()) => {
                self.state = None;
                return (out, false);
            }
        }
        self.state = match self.state.take() {
            Some(State::Handshake(mid)) => match mid.handshake() {
                Ok(ws) => Some(State::Open(ws)),
                Err(HandshakeError::Interrupted(mid)) => Some(State::Handshake(mid)),
                Err(HandshakeError::Failure(e)) => {
                    // The refusal (403, 400, 404) was written into the pipe, which went with
                    // the handshake: tell the peer again from the error, as a plain answer.
                    if let tungstenite::Error::Http(resp) = e {
                        out.extend_from_slice(&refusal_bytes(&resp));
                    }
                    return (out, false);
                }
            },
            open => open,
        };
        let mut open = true;
        if let Some(State::Open(ws)) = self.state.as_mut() {
            loop {
                match ws.read() {
                    Ok(msg) => on_frame(frame(&msg), payload(&msg).unwrap_or_default()),
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        break
                    }
                    Err(_) => {
                        open = false;
                        break;
                    }
                }
            }
        }
        if let Some(pipe) = self.pipe() {
            out.append(&mut pipe.output);
        }
        if !open {
            self.state = None;
        }
        (out, open)
    }

    /// A ping to send a connection gone silent (its pong shows it alive): the bytes, or None
    /// before the handshake is done or after a close.
    pub fn ping(&mut self) -> Option<Vec<u8>> {
        let Some(State::Open(ws)) = self.state.as_mut() else {
            return None;
        };
        ws.send(tungstenite::Message::Ping(Vec::new().into()))
            .ok()?;
        Some(std::mem::take(&mut ws.get_mut().output))
    }

    /// One SIP message as one text WebSocket message (RFC 7118 §5.2): the bytes to write, or
    /// None before the handshake is done or after a close.
    pub fn send(&mut self, sip: &[u8]) -> Option<Vec<u8>> {
        let Some(State::Open(ws)) = self.state.as_mut() else {
            return None;
        };
        let text = String::from_utf8_lossy(sip).into_owned();
        ws.send(tungstenite::Message::text(text)).ok()?;
        Some(std::mem::take(&mut ws.get_mut().output))
    }
}

/// A refused handshake's answer as HTTP/1.1 bytes, with its reason as the body.
fn refusal_bytes(resp: &tungstenite::http::Response<Option<Vec<u8>>>) -> Vec<u8> {
    let body = resp.body().as_deref().unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.status().as_u16(),
        resp.status().canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            path: "/ws".into(),
            origins: vec!["https://127.0.0.1:8088".into()],
            same_hosts: vec!["[::1]".into(), "localhost".into()],
        }
    }

    fn req(path: &str, origin: Option<&str>, proto: Option<&str>) -> Request {
        let mut b = Request::builder().uri(path);
        if let Some(o) = origin {
            b = b.header("Origin", o);
        }
        if let Some(p) = proto {
            b = b.header("Sec-WebSocket-Protocol", p);
        }
        b.body(()).unwrap()
    }

    fn status(r: Result<Response, ErrorResponse>) -> u16 {
        match r {
            Ok(resp) => {
                assert_eq!(resp.headers()["sec-websocket-protocol"], "sip");
                resp.status().as_u16()
            }
            Err(e) => e.status().as_u16(),
        }
    }

    #[test]
    fn handshake_needs_path_origin_and_subprotocol() {
        let p = policy();
        let ok = |r| status(p.check(&r, Response::new(())));
        assert_eq!(
            ok(req("/ws", Some("https://127.0.0.1:8088"), Some("sip"))),
            200
        );
        assert_eq!(ok(req("/ws", None, Some("chat, sip"))), 200);
        assert_eq!(
            ok(req("/ws", Some("https://evil.example"), Some("sip"))),
            403
        );
        // The same host on another port or scheme: a page the PBX's own web server serves.
        assert_eq!(
            ok(req("/ws", Some("http://localhost:8080"), Some("sip"))),
            200
        );
        assert_eq!(ok(req("/ws", Some("https://[::1]"), Some("sip"))), 200);
        assert_eq!(
            ok(req(
                "/ws",
                Some("https://localhost.evil.example"),
                Some("sip")
            )),
            403
        );
        assert_eq!(ok(req("/ws", Some("https://[::2]:80"), Some("sip"))), 403);
        assert_eq!(ok(req("/other", None, Some("sip"))), 404);
        assert_eq!(ok(req("/ws", None, None)), 400);
        assert_eq!(ok(req("/ws", None, Some("chat"))), 400);
    }

    #[test]
    fn one_message_is_one_sip_message() {
        let options = "OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/WS df7jal23ls0d.invalid;branch=z9hG4bK1\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n\r\n";
        let text = tungstenite::Message::text(options);
        assert!(matches!(frame(&text), Frame::Sip(m) if m.method() == Some(&sip::Method::Options)));
        let bin = tungstenite::Message::binary(options.as_bytes().to_vec());
        assert!(matches!(frame(&bin), Frame::Sip(_)));
        let garbage = tungstenite::Message::binary(vec![0u8, 159, 146, 150]);
        assert!(matches!(frame(&garbage), Frame::Garbage));
        let not_sip = tungstenite::Message::text("GET / HTTP/1.1\r\n\r\n");
        assert!(matches!(frame(&not_sip), Frame::Garbage));
        let ping = tungstenite::Message::Ping(vec![1u8].into());
        assert!(matches!(frame(&ping), Frame::Control));
    }

    fn upgrade(origin: &str) -> Vec<u8> {
        format!(
            "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: sip\r\nOrigin: {origin}\r\n\r\n"
        )
        .into_bytes()
    }

    const OPTIONS: &str = "OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/WS h.invalid;branch=z9hG4bK2\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: c2\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n\r\n";

    #[test]
    fn session_upgrades_then_carries_sip_both_ways() {
        let mut s = Session::new(Arc::new(policy()), 65536);
        let (out, open) = s.receive(&upgrade("https://127.0.0.1:8088"), |_, _| {
            panic!("no frame yet")
        });
        let answer = String::from_utf8(out).unwrap();
        assert!(open && s.is_open(), "{answer}");
        assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
        assert!(answer
            .to_ascii_lowercase()
            .contains("sec-websocket-protocol: sip"));

        // A client's masked frames, made by tungstenite's client side over its own pipe.
        let mut client =
            WebSocket::from_raw_socket(Pipe::default(), tungstenite::protocol::Role::Client, None);
        client.send(tungstenite::Message::text(OPTIONS)).unwrap();
        client
            .send(tungstenite::Message::binary(vec![0u8, 255]))
            .unwrap();
        let wire = std::mem::take(&mut client.get_mut().output);
        let mut got = Vec::new();
        assert!(!wire.is_empty());
        let (_, open) = s.receive(&wire, |f, _| got.push(f));
        assert!(open, "{got:?}");
        assert!(
            matches!(&got[..], [Frame::Sip(m), Frame::Garbage] if m.method() == Some(&sip::Method::Options)),
            "{got:?}"
        );

        let reply = s
            .send(b"SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        client.get_mut().input.extend_from_slice(&reply);
        let msg = client.read().unwrap();
        assert_eq!(
            msg.to_text().unwrap(),
            "SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn requests_without_an_upgrade_get_the_page_and_the_upgrade_may_follow() {
        let mut s = Session::new(Arc::new(policy()), 65536);
        // A head in two reads is answered once whole.
        let (out, open) = s.receive(b"GET /?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n", |_, _| {});
        assert!(open && out.is_empty() && !s.served_page());
        let (out, open) = s.receive(b"\r\nGET /phone.js HTTP/1.1\r\nHost: h\r\n\r\n", |_, _| {});
        let answer = String::from_utf8_lossy(&out).into_owned();
        assert!(open && s.served_page() && !s.is_open());
        assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer}");
        assert!(answer.contains("content=\"/ws\""), "{answer}");
        let (out, open) = s.receive(&upgrade("https://127.0.0.1:8088"), |_, _| {});
        assert!(open && s.is_open(), "{}", String::from_utf8_lossy(&out));
        assert!(out.starts_with(b"HTTP/1.1 101"));
    }

    #[test]
    fn bytes_that_are_no_request_close_the_connection_before_the_upgrade() {
        let mut s = Session::new(Arc::new(policy()), 65536);
        let (out, open) = s.receive(&[0x16, 3, 1, 0, 0xa5, 1, 0, 0, 0xa1], |_, _| {});
        assert!(!open && out.is_empty());
        let mut s = Session::new(Arc::new(policy()), 65536);
        let (_, open) = s.receive(&vec![b'a'; MAX_HEAD + 1], |_, _| {});
        assert!(!open, "a head that never ends");
        let mut s = Session::new(Arc::new(policy()), 65536);
        let (_, open) = s.receive(
            format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD)).as_bytes(),
            |_, _| {},
        );
        assert!(!open, "a head too long");
    }

    #[test]
    fn session_refuses_a_foreign_origin_with_403() {
        let mut s = Session::new(Arc::new(policy()), 65536);
        let (out, open) = s.receive(&upgrade("https://evil.example"), |_, _| panic!("refused"));
        let answer = String::from_utf8(out).unwrap();
        assert!(!open && !s.is_open());
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("sip.ws_origins"), "{answer}");
        assert!(s.send(b"SIP/2.0 200 OK\r\n\r\n").is_none());
    }

    #[test]
    fn session_closes_on_an_oversized_message() {
        let mut s = Session::new(Arc::new(policy()), 1024);
        s.receive(&upgrade("https://127.0.0.1:8088"), |_, _| {});
        let mut client =
            WebSocket::from_raw_socket(Pipe::default(), tungstenite::protocol::Role::Client, None);
        client
            .send(tungstenite::Message::text("x".repeat(4096)))
            .unwrap();
        let wire = std::mem::take(&mut client.get_mut().output);
        let (_, open) = s.receive(&wire, |_, _| panic!("too big to deliver"));
        assert!(!open);
    }
}
