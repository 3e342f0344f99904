//! SIP over TLS for the load generator (RFC 3261 §26): one client connection per load thread
//! carries every call of that thread, as a trunk's connection does, so a run of thousands of
//! calls costs the server a few handshakes and the calls' messages. The server's certificate is
//! verified against a CA file (strowger's self-signed `data_dir/tls/cert.pem` in tests and
//! benchmarks) by the address dialled. Messages are framed by Content-Length (§18.3).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::Arc;

/// A client configuration trusting only the certificates in the PEM file `ca`.
pub fn client_config(ca: &Path) -> io::Result<Arc<rustls::ClientConfig>> {
    let bad = |e: String| io::Error::other(format!("--tls-ca {}: {e}", ca.display()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))? {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad(
            "no CERTIFICATE in it — expected a PEM certificate".into()
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One TLS connection to the server, non-blocking once its handshake is done.
pub struct TlsLink {
    tcp: TcpStream,
    conn: rustls::ClientConnection,
    /// Decrypted bytes not yet framed into messages.
    inbuf: Vec<u8>,
}

impl TlsLink {
    /// Connects from `local` (any port) to `target` and completes the handshake (blocking).
    pub fn connect(
        target: SocketAddr,
        local: IpAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> io::Result<TlsLink> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::for_address(target), Type::STREAM, None)?;
        s.bind(&SocketAddr::new(local, 0).into())?;
        s.connect(&target.into())?;
        s.set_tcp_nodelay(true)?;
        let mut tcp: TcpStream = s.into();
        let name = ServerName::IpAddress(target.ip().into());
        let mut conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        // Every call's messages go through this one connection: nothing is refused for room.
        conn.set_buffer_limit(None);
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        tcp.set_nonblocking(true)?;
        Ok(TlsLink {
            tcp,
            conn,
            inbuf: Vec::with_capacity(1 << 16),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Queues one message and writes what the socket takes now; the rest goes on
    /// [`TlsLink::flush`].
    pub fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(msg)?;
        self.flush()
    }

    /// Writes queued TLS records until the socket would block.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether records wait for room in the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Reads what has arrived (decrypted, for [`TlsLink::next_message`]); Err when the server
    /// closed the connection or broke TLS.
    pub fn receive(&mut self) -> io::Result<()> {
        loop {
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
            self.conn.process_new_packets().map_err(io::Error::other)?;
        }
        let mut chunk = [0u8; 16 << 10];
        loop {
            match self.conn.reader().read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Moves the next whole message received into `out` (cleared first); false if none.
    pub fn next_message(&mut self, out: &mut Vec<u8>) -> bool {
        out.clear();
        let Some((start, end)) = next_message(&self.inbuf) else {
            return false;
        };
        out.extend_from_slice(&self.inbuf[start..end]);
        self.inbuf.drain(..end);
        true
    }
}

impl AsRawFd for TlsLink {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

/// The first whole message in a stream's bytes, as (start, end) past any CRLF keep-alives
/// before it (RFC 5626 §3.5.1); None until all of it has arrived.
pub fn next_message(buf: &[u8]) -> Option<(usize, usize)> {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let rest = &buf[start..];
    let head = rest.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let length = std::str::from_utf8(&rest[..head])
        .ok()?
        .split("\r\n")
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = name.trim();
            (name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("l"))
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let end = start + head + length;
    (buf.len() >= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_by_content_length_past_keep_alives() {
        let a = b"SIP/2.0 100 Trying\r\nContent-Length: 0\r\n\r\n";
        let b = b"SIP/2.0 200 OK\r\nl: 5\r\n\r\nv=0\r\n";
        let mut stream = b"\r\n\r\n".to_vec();
        stream.extend_from_slice(a);
        stream.extend_from_slice(b);
        let (s, e) = next_message(&stream).unwrap();
        assert_eq!(&stream[s..e], a);
        let (s2, e2) = next_message(&stream[e..]).unwrap();
        assert_eq!(&stream[e + s2..e + e2], b);
        // A body that has not all arrived is no message yet.
        assert_eq!(next_message(&b[..b.len() - 1]), None);
        assert_eq!(next_message(b"\r\n"), None);
    }
}
