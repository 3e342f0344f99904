//! TLS settings from PEM files: the API's server side (`api.tls_cert`, `api.tls_key`) and the
//! trust of `strowger ctl --ca`. rustls on the ring provider, chosen here once rather than by
//! whichever crate features happen to be on.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// The crypto every TLS endpoint of the process uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file; `key` names the setting in errors.
pub fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{key} {}: {e} — expected a PEM certificate", path.display()))?;
    match certs.is_empty() {
        true => Err(format!(
            "{key} {}: no CERTIFICATE in it — expected a PEM certificate",
            path.display()
        )),
        false => Ok(certs),
    }
}

/// The API's HTTPS settings: its certificate chain and key, HTTP/1.1 only (what it serves).
pub fn server_config(tls: &switch::config::ApiTls) -> Result<Arc<ServerConfig>, String> {
    let certs = read_certs(&tls.cert, "api.tls_cert")?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        format!(
            "api.tls_key {}: {e} — expected a PEM private key (PKCS#8, PKCS#1 or SEC1)",
            tls.key.display()
        )
    })?;
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!("api.tls_cert / api.tls_key: {e} — is api.tls_key the certificate's key?")
        })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client that trusts only the certificates in `ca` (`ctl --ca`).
pub fn client_config(ca: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c.clone()).map_err(|e| format!("--ca: {e}"))?;
    }
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}
