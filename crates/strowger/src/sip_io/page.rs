//! The phone page (crates/strowger/phone: a softphone on JsSIP, which build.rs bundles from
//! npm), served by the `ws:` and `wss:` listeners to requests that ask no upgrade. Served from
//! the origin its WebSocket goes to, the page needs no `sip.ws_origins`, and a browser shown
//! the demo's self-signed certificate accepts it once, for the page and its WebSocket alike.

/// Every file of the page: (path, content type, bytes).
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_bytes!("../../phone/index.html"),
    ),
    (
        "/phone.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../phone/phone.js"),
    ),
    (
        "/recorder.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../phone/recorder.js"),
    ),
    (
        "/phone.css",
        "text/css; charset=utf-8",
        include_bytes!("../../phone/phone.css"),
    ),
    (
        "/jssip.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!(concat!(env!("OUT_DIR"), "/console/jssip.min.js")),
    ),
];

/// Where index.html names the WebSocket's path (`sip.ws_path`), which the page connects to.
const WS_PATH: &str = "{{ws_path}}";

/// The whole HTTP/1.1 answer to a request without an upgrade: the file at `path` (its query
/// ignored) for GET and HEAD, 404 for another path, 405 for another method. The connection
/// stays open for the page's next file.
pub fn answer(method: &str, path: &str, ws_path: &str) -> Vec<u8> {
    let path = path.split('?').next().unwrap_or_default();
    let (status, kind, body) = match FILES.iter().find(|(p, _, _)| *p == path) {
        _ if method != "GET" && method != "HEAD" => (
            "405 Method Not Allowed",
            "text/plain",
            b"only GET here".to_vec(),
        ),
        Some(("/", kind, bytes)) => {
            let html = String::from_utf8_lossy(bytes).replace(WS_PATH, &escape(ws_path));
            ("200 OK", *kind, html.into_bytes())
        }
        Some((_, kind, bytes)) => ("200 OK", *kind, bytes.to_vec()),
        None => (
            "404 Not Found",
            "text/plain",
            format!("no such file: the phone page is at /, SIP over WebSocket at {ws_path}")
                .into_bytes(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n\
         X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'self'; \
         connect-src 'self'; media-src 'self' blob: mediastream:; frame-ancestors 'none'\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(&body);
    }
    out
}

/// `text` safe inside a double-quoted HTML attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(answer: &[u8]) -> (String, Vec<u8>) {
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (
            String::from_utf8(answer[..end].to_vec()).unwrap(),
            answer[end + 4..].to_vec(),
        )
    }

    #[test]
    fn the_page_names_its_websocket_and_its_scripts_are_served() {
        let (head, body) = split(&answer("GET", "/?user=1001", "/sip\"ws"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/html"), "{head}");
        let html = String::from_utf8(body).unwrap();
        assert!(html.contains("content=\"/sip&quot;ws\""), "{html}");
        assert!(!html.contains(WS_PATH));
        for script in ["/jssip.min.js", "/phone.js"] {
            assert!(
                html.contains(&format!("src=\"{}\"", &script[1..])),
                "{html}"
            );
            let (head, body) = split(&answer("GET", script, "/ws"));
            assert!(head.contains("Content-Type: text/javascript"), "{head}");
            assert!(
                head.contains(&format!("Content-Length: {}", body.len())),
                "{head}"
            );
        }
        let (_, jssip) = split(&answer("GET", "/jssip.min.js", "/ws"));
        assert!(
            jssip.starts_with(b"/*! "),
            "the bundle begins with JsSIP's licence"
        );
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        let (head, body) = split(&answer("GET", "/etc/passwd", "/ws"));
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        assert!(String::from_utf8(body).unwrap().contains("/ws"));
        let (head, _) = split(&answer("POST", "/", "/ws"));
        assert!(head.starts_with("HTTP/1.1 405"), "{head}");
        let (head, body) = split(&answer("HEAD", "/phone.css", "/ws"));
        assert!(
            head.starts_with("HTTP/1.1 200") && body.is_empty(),
            "{head}"
        );
    }
}
