//! SIP over WebSocket (RFC 7118), the transport-independent part: which handshakes are let in
//! (path, the `sip` subprotocol, an allowed Origin) and how one WebSocket message becomes one
//! SIP message. tungstenite does the HTTP upgrade and the framing (its server handshake takes
//! a callback that sees the request and shapes the answer, which is what `Policy::check` is).

use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::{HeaderValue, StatusCode};

/// What a WebSocket handshake must carry to be let in.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The request path phones connect to (`/ws`).
    pub path: String,
    /// Origins a browser may connect from; requests without an Origin (phones, not browsers)
    /// are let in, as a page elsewhere cannot strip the header its browser adds.
    pub origins: Vec<String>,
}

/// Why a handshake was refused: the status and the reason the client is told.
fn refuse(status: StatusCode, why: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(why.to_string()));
    *r.status_mut() = status;
    r
}

impl Policy {
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
            let allowed = origin
                .to_str()
                .is_ok_and(|o| self.origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
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
    /// One whole SIP message.
    Sip(sip::Message),
    /// Text or binary that is not one SIP message: dropped and counted.
    Garbage,
    /// Pings, pongs and closes, which tungstenite answers itself.
    Control,
}

/// One WebSocket message as SIP: a text or binary message holds one SIP message, its body the
/// rest of the message when Content-Length is absent (RFC 7118 §5.2) and bytes past a given
/// Content-Length discarded, exactly as in a datagram (RFC 3261 §18.3).
pub fn frame(msg: &tungstenite::Message) -> Frame {
    let bytes: &[u8] = match msg {
        tungstenite::Message::Text(t) => t.as_bytes(),
        tungstenite::Message::Binary(b) => b,
        _ => return Frame::Control,
    };
    match sip::Message::parse(bytes, true) {
        Ok(m) => Frame::Sip(m),
        Err(_) => Frame::Garbage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            path: "/ws".into(),
            origins: vec!["https://127.0.0.1:8088".into()],
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
}
