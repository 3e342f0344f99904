//! SIP over TLS (RFC 3261 §26): the rustls configurations the TCP connections wrap themselves
//! in. rustls runs on the worker's own non-blocking sockets (no second event loop): a
//! connection feeds it the bytes it read and writes out the records it makes, so framing,
//! limits and keep-alives stay the TCP transport's.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig};
use rustls::{ServerConnection, SupportedProtocolVersion};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLS 1.2 and 1.3: 1.2 for the phones that have nothing newer.
static VERSIONS: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

/// What TLS connections are made from: the server side (None without a `tls:` listener) and
/// the client side towards trunks and `sips:` targets.
pub struct Tls {
    server: Option<Arc<ServerConfig>>,
    client: Arc<ClientConfig>,
}

impl Tls {
    /// Builds both sides from `[sip]`; with `listening` and no `sip.tls_cert`, a self-signed
    /// certificate is generated into `data_dir/tls/` on first start (and reused after).
    pub fn new(s: &switch::config::Sip, data_dir: &Path, listening: bool) -> Result<Tls, String> {
        let server = match listening {
            true => Some(Arc::new(server_config(&s.tls, data_dir)?)),
            false => None,
        };
        Ok(Tls {
            server,
            client: Arc::new(client_config(&s.tls)?),
        })
    }

    /// The server side of a connection a `tls:` listener accepted.
    pub fn accept(&self) -> Option<Connection> {
        let cfg = self.server.clone()?;
        ServerConnection::new(cfg).ok().map(Connection::from)
    }

    /// The client side of a connection strowger opens to send `first` (a request) to `to`:
    /// the certificate must name the request URI's host (RFC 5922 §4), or `to`'s address.
    pub fn connect(&self, to: SocketAddr, first: &[u8]) -> Option<Connection> {
        let name = server_name(first).unwrap_or_else(|| ServerName::IpAddress(to.ip().into()));
        ClientConnection::new(self.client.clone(), name)
            .ok()
            .map(Connection::from)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The request URI's host of `request`, as a name to verify the server's certificate against.
fn server_name(request: &[u8]) -> Option<ServerName<'static>> {
    let msg = sip::Message::parse(request, false).ok()?;
    let uri = sip::Uri::parse(msg.request_uri()?).ok()?;
    let host = uri.host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

fn server_config(t: &switch::config::Tls, data_dir: &Path) -> Result<ServerConfig, String> {
    let (cert, key) = match &t.cert_key {
        Some((c, k)) => (c.clone(), k.clone()),
        None => self_signed(data_dir)?,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| {
            format!(
                "cannot read the TLS certificate {}: {e} (sip.tls_cert)",
                cert.display()
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "no certificate in {} (sip.tls_cert: a PEM file)",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| {
        format!(
            "cannot read the TLS key {}: {e} (sip.tls_key)",
            key.display()
        )
    })?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| e.to_string())?;
    let builder = match &t.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(roots(ca, "sip.tls_client_ca")?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| format!("sip.tls_client_ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        format!("the TLS certificate does not fit its key: {e} (sip.tls_cert, sip.tls_key)")
    })
}

/// The system's roots and `sip.tls_ca`'s: a trunk's certificate is always verified.
fn client_config(t: &switch::config::Tls) -> Result<ClientConfig, String> {
    let mut store = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    store.add_parsable_certificates(native.certs);
    if let Some(ca) = &t.ca {
        for c in roots(ca, "sip.tls_ca")?.roots {
            store.roots.push(c);
        }
    }
    if store.is_empty() {
        tracing::warn!("no trusted certificate authorities: TLS trunks will fail (install ca-certificates or set sip.tls_ca)");
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth())
}

/// The certificates of a PEM file as trust anchors; `key` names the setting in errors.
fn roots(path: &Path, key: &str) -> Result<RootCertStore, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|c| c.collect())
        .map_err(|e| format!("cannot read {}: {e} ({key})", path.display()))?;
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "no usable certificate in {} ({key}: a PEM file)",
            path.display()
        ));
    }
    Ok(store)
}

/// `data_dir/tls/cert.pem` and `key.pem`, generated on first start for localhost and the
/// loopback addresses: a demo and test certificate until `sip.tls_cert` names a real one.
fn self_signed(data_dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let dir = data_dir.join("tls");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.exists() && key.exists() {
        tracing::info!(
            "TLS: the self-signed certificate {} (set sip.tls_cert and sip.tls_key for your own)",
            cert.display()
        );
        return Ok((cert, key));
    }
    let names = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    let pair = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot generate a TLS certificate: {e}"))?;
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(&cert, pair.cert.pem())?;
        let mut opts = std::fs::OpenOptions::new();
        std::os::unix::fs::OpenOptionsExt::mode(
            opts.write(true).create(true).truncate(true),
            0o600,
        );
        std::io::Write::write_all(
            &mut opts.open(&key)?,
            pair.key_pair.serialize_pem().as_bytes(),
        )
    };
    write().map_err(|e| format!("cannot write the TLS certificate into {}: {e} (set general.data_dir, or sip.tls_cert and sip.tls_key)", dir.display()))?;
    tracing::warn!(
        "TLS: no sip.tls_cert configured, generated a self-signed certificate for localhost: {} (key {}); give phones that file as their CA, or set sip.tls_cert and sip.tls_key",
        cert.display(),
        key.display()
    );
    Ok((cert, key))
}
