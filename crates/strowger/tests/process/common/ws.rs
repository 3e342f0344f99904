//! A SIP phone on a WebSocket (RFC 7118), as a browser phone is: tungstenite's client over a
//! TCP connection or over rustls for `wss:`, a SIP message per text message, its Via and
//! Contact at an `.invalid` host (RFC 7118 §5), digests by coreutils.

use super::sip::{coreutils_hash, param, Msg};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::{Message, WebSocket};

/// The next message of `ws`, or None when its socket's read timeout passed first (the callers
/// poll against a deadline of their own).
pub fn read_within<S: Read + Write>(
    ws: &mut WebSocket<S>,
) -> Result<Option<Message>, tungstenite::Error> {
    match ws.read() {
        Ok(m) => Ok(Some(m)),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The host a WebSocket phone names itself by: no one can connect to it.
pub const HOST: &str = "df7jal23ls0d.invalid";

/// A plain or TLS connection under the WebSocket.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// What the upgrade request carries.
pub struct Upgrade<'a> {
    pub path: &'a str,
    pub origin: Option<&'a str>,
    pub subprotocol: Option<&'a str>,
}

impl Default for Upgrade<'_> {
    fn default() -> Self {
        Upgrade {
            path: "/ws",
            origin: None,
            subprotocol: Some("sip"),
        }
    }
}

pub struct WsPhone {
    ws: WebSocket<Stream>,
    /// `ws` or `wss`, for Via and Contact.
    pub transport: &'static str,
    cseq: u32,
}

/// Connects to `addr` (over TLS trusting `ca` when given) and upgrades: the phone, or the
/// HTTP status of the refusal (0: the connection closed without an answer).
pub fn connect(addr: SocketAddr, ca: Option<&Path>, up: Upgrade) -> Result<WsPhone, u16> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (scheme, stream) = match ca {
        None => ("ws", Stream::Plain(tcp)),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            let name = ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
            let tls = rustls::StreamOwned::new(conn, tcp);
            ("wss", Stream::Tls(Box::new(tls)))
        }
    };
    let mut req = format!("{scheme}://{addr}{}", up.path)
        .into_client_request()
        .unwrap();
    let headers = req.headers_mut();
    if let Some(o) = up.origin {
        headers.insert("Origin", HeaderValue::from_str(o).unwrap());
    }
    if let Some(p) = up.subprotocol {
        headers.insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
    }
    match tungstenite::client::client(req, stream) {
        Ok((ws, resp)) => {
            assert_eq!(resp.headers()["sec-websocket-protocol"], "sip");
            Ok(WsPhone {
                ws,
                transport: scheme,
                cseq: 0,
            })
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            Err(resp.status().as_u16())
        }
        // Closed before an answer: a reset reads as Io, a clean close as an unfinished
        // handshake, depending on when the server's close lands.
        Err(tungstenite::HandshakeError::Failure(
            tungstenite::Error::Io(_)
            | tungstenite::Error::ConnectionClosed
            | tungstenite::Error::Protocol(tungstenite::error::ProtocolError::HandshakeIncomplete),
        )) => Err(0),
        Err(e) => panic!("WebSocket upgrade at {addr}: {e}"),
    }
}

impl WsPhone {
    pub fn send(&mut self, text: &str) {
        self.ws.send(Message::text(text)).unwrap();
    }

    /// Sends `bytes` as one binary WebSocket message.
    pub fn send_binary(&mut self, bytes: &[u8]) {
        self.ws.send(Message::binary(bytes.to_vec())).unwrap();
    }

    /// The next SIP message within `timeout` (pings are answered by tungstenite).
    pub fn recv(&mut self, timeout: Duration) -> Option<Msg> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            match read_within(&mut self.ws) {
                Ok(Some(Message::Text(t))) => return Msg::parse(t.as_bytes()),
                Ok(Some(Message::Binary(b))) => return Msg::parse(&b),
                Ok(_) => {}
                Err(e) => panic!("the WebSocket broke: {e}"),
            }
        }
        None
    }

    /// Whether a ping arrives within `timeout` (tungstenite answers it).
    pub fn pinged_within(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            match self.ws.read() {
                Ok(Message::Ping(_)) => return true,
                Ok(_) => {}
                Err(tungstenite::Error::Io(_)) => {}
                Err(e) => panic!("the WebSocket broke: {e}"),
            }
        }
        false
    }

    /// The next response to `method` that is final.
    pub fn final_response(&mut self, method: &str) -> Msg {
        loop {
            let m = self
                .recv(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("no final response to {method}"));
            if m.cseq_method() == Some(method) && m.status().is_some_and(|s| s >= 200) {
                return m;
            }
        }
    }

    /// The next request `method` (other messages skipped).
    pub fn expect_request(&mut self, method: &str) -> Msg {
        loop {
            let m = self
                .recv(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("no {method} on the WebSocket"));
            if m.method() == Some(method) {
                return m;
            }
        }
    }

    /// A request in a dialog of `call_id` (new CSeq unless ACK, which takes `cseq`).
    pub fn request(&mut self, line: &str, call_id: &str, to: &str, extra: &str, body: &str) {
        let method = line.split(' ').next().unwrap();
        if method != "ACK" {
            self.cseq += 1;
        }
        let branch = format!("z9hG4bK-ws-{}-{}", self.cseq, method.to_lowercase());
        let ctype = match body.is_empty() {
            true => "",
            false => "Content-Type: application/sdp\r\n",
        };
        let text = format!(
            "{line} SIP/2.0\r\nVia: SIP/2.0/{} {HOST};branch={branch}\r\nMax-Forwards: 70\r\n\
             From: <sip:1001@strowger>;tag=ws1\r\nTo: {to}\r\nCall-ID: {call_id}\r\n\
             CSeq: {} {method}\r\nContact: <sip:1001@{HOST};transport={}>\r\n{extra}{ctype}\
             Content-Length: {}\r\n\r\n{body}",
            self.transport.to_uppercase(),
            self.cseq,
            self.transport,
            body.len()
        );
        self.send(&text);
    }

    /// Registers as `user` with `password` (answering the 401's digest challenge): the 200.
    pub fn register(&mut self, user: &str, password: &str) -> Msg {
        let call_id = format!("reg-{}-{user}", self.transport);
        let to = format!("<sip:{user}@strowger>");
        self.request(
            "REGISTER sip:strowger",
            &call_id,
            &to,
            "Expires: 600\r\n",
            "",
        );
        let challenge = self.final_response("REGISTER");
        assert_eq!(challenge.status(), Some(401), "{challenge:?}");
        let c = challenge.header("www-authenticate").unwrap();
        let (realm, nonce) = (param(c, "realm").unwrap(), param(c, "nonce").unwrap());
        let h = |d: &str| coreutils_hash("md5sum", d);
        let ha1 = h(&format!("{user}:{realm}:{password}"));
        let ha2 = h("REGISTER:sip:strowger");
        let response = h(&format!("{ha1}:{nonce}:00000001:c0ffee:auth:{ha2}"));
        let auth = format!(
            "Authorization: Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", \
             uri=\"sip:strowger\", response=\"{response}\", algorithm=MD5, qop=auth, \
             nc=00000001, cnonce=\"c0ffee\"\r\nExpires: 600\r\n"
        );
        self.request("REGISTER sip:strowger", &call_id, &to, &auth, "");
        self.final_response("REGISTER")
    }

    /// Answers `req` with `status` (a To tag added), `body` as SDP when not empty.
    pub fn respond(&mut self, req: &Msg, status: u16, body: &str) {
        let mut out = format!("SIP/2.0 {status} Whatever\r\n");
        for v in req.headers("via") {
            out += &format!("Via: {v}\r\n");
        }
        let to = req.header("to").unwrap();
        let to = match to.contains("tag=") {
            true => to.to_string(),
            false => format!("{to};tag=ws-callee"),
        };
        for (name, value) in [
            ("From", req.header("from").unwrap()),
            ("To", &to),
            ("Call-ID", req.header("call-id").unwrap()),
            ("CSeq", req.header("cseq").unwrap()),
        ] {
            out += &format!("{name}: {value}\r\n");
        }
        out += &format!(
            "Contact: <sip:1001@{HOST};transport={}>\r\n",
            self.transport
        );
        if !body.is_empty() {
            out += "Content-Type: application/sdp\r\n";
        }
        out += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.send(&out);
    }
}
