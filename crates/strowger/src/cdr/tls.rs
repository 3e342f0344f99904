//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` URL parameters ask. The driver
//! (tokio-postgres) knows only disable, prefer and require and refuses `sslrootcert`: both are
//! taken out of `cdr.database` here, and the certificate checks they ask for are made by rustls.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::tls::{provider, read_certs};

/// libpq's modes, but `allow` (plain first, a downgrade by design).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Disable,
    /// The default, as in libpq: TLS when the server offers it, its certificate unchecked.
    Prefer,
    /// TLS or no connection; the certificate is checked only if `sslrootcert` is given.
    Require,
    /// TLS, a certificate signed by `sslrootcert` (or a system CA), for any host name.
    VerifyCa,
    /// TLS, a certificate signed by `sslrootcert` (or a system CA), for the URL's host.
    VerifyFull,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Tls {
    pub mode: Mode,
    /// None, or "system": the system's CAs.
    roots: Option<PathBuf>,
}

/// `url` without `sslmode` and `sslrootcert`, and what they asked for.
pub fn split(url: &str) -> Result<(String, Tls), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut mode, mut roots, mut rest) = (Mode::Prefer, None, Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value: Cow<str> = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match key {
            "sslmode" => {
                mode = match &*value {
                    "disable" => Mode::Disable,
                    "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(format!(
                        "cdr.database: sslmode={other} — expected disable, prefer (the default), require, verify-ca or verify-full"
                    ))
                    }
                }
            }
            "sslrootcert" if value != "system" => roots = Some(PathBuf::from(&*value)),
            "sslrootcert" => roots = None,
            _ => rest.push(pair),
        }
    }
    // As libpq: a CA file given with `require` is checked as with verify-ca.
    if mode == Mode::Require && roots.is_some() {
        mode = Mode::VerifyCa;
    }
    let url = match rest.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", rest.join("&")),
    };
    Ok((url, Tls { mode, roots }))
}

impl Tls {
    /// What the driver itself enforces: whether TLS may be skipped.
    pub fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector for one connection. `sslrootcert` is read each time, so a CA file
    /// replaced on disk is taken at the next reconnect, without a restart.
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(self.verifier()?)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }

    fn verifier(&self) -> Result<Arc<dyn ServerCertVerifier>, String> {
        if matches!(self.mode, Mode::Disable | Mode::Prefer | Mode::Require) {
            return Ok(Arc::new(Unchecked));
        }
        let full = WebPkiServerVerifier::builder_with_provider(Arc::new(self.roots()?), provider())
            .build()
            .map_err(|e| format!("cdr.database sslrootcert: {e}"))?;
        Ok(match self.mode {
            Mode::VerifyCa => Arc::new(AnyName(full)),
            _ => full,
        })
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        let mut store = RootCertStore::empty();
        match &self.roots {
            Some(path) => {
                let certs = read_certs(path, "cdr.database sslrootcert")?;
                let (added, _) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!(
                        "cdr.database sslrootcert {}: no usable CA certificate in it",
                        path.display()
                    ));
                }
            }
            None => {
                store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                if store.is_empty() {
                    return Err("cdr.database: no system CA to verify PostgreSQL's certificate — set sslrootcert=FILE in the URL (or install ca-certificates)".into());
                }
            }
        }
        Ok(store)
    }
}

/// `prefer` and `require` without a CA: the channel is encrypted, the server not identified
/// (libpq's behaviour). The handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked;

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// verify-ca: the whole WebPKI check but the host name, which rustls checks last (so a name
/// error means the chain was good).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "postgres://u:p@db.example:5432/pbx";

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        let (url, tls) = split(&format!(
            "{BASE}?connect_timeout=3&sslmode=verify-full&sslrootcert=%2Fetc%2Fpg%20ca.pem"
        ))
        .unwrap();
        assert_eq!(url, format!("{BASE}?connect_timeout=3"));
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.roots, Some(PathBuf::from("/etc/pg ca.pem")));
        assert_eq!(tls.ssl_mode(), SslMode::Require);
    }

    #[test]
    fn prefer_is_the_default_and_require_with_a_ca_verifies_it() {
        let (url, tls) = split(BASE).unwrap();
        assert_eq!((url.as_str(), tls.mode), (BASE, Mode::Prefer));
        assert_eq!(tls.ssl_mode(), SslMode::Prefer);
        let (_, tls) = split(&format!("{BASE}?sslmode=require&sslrootcert=ca.pem")).unwrap();
        assert_eq!(tls.mode, Mode::VerifyCa);
        let (_, tls) = split(&format!("{BASE}?sslmode=verify-ca&sslrootcert=system")).unwrap();
        assert_eq!((tls.mode, tls.roots), (Mode::VerifyCa, None));
        assert_eq!(
            split(&format!("{BASE}?sslmode=disable"))
                .unwrap()
                .1
                .ssl_mode(),
            SslMode::Disable
        );
    }

    /// A server certificate for db.example signed by a CA written to a file: each mode's
    /// verifier as asked of a server reached as db.example, as 127.0.0.1, and with another CA.
    #[test]
    fn verify_full_checks_ca_and_name_verify_ca_the_ca_only() {
        let dir = std::env::temp_dir().join(format!("strowger-pg-tls-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = |name: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            std::fs::write(dir.join(name), cert.pem()).unwrap();
            (cert, key)
        };
        let (ours, ours_key) = ca("ours.pem");
        ca("other.pem");
        let key = rcgen::KeyPair::generate().unwrap();
        let server = rcgen::CertificateParams::new(vec!["db.example".to_string()])
            .unwrap()
            .signed_by(&key, &ours, &ours_key)
            .unwrap();
        let accepts = |mode: &str, ca: &str, host: &str| {
            let url = format!(
                "{BASE}?sslmode={mode}&sslrootcert={}",
                dir.join(ca).display()
            );
            let verifier = split(&url).unwrap().1.verifier().unwrap();
            let name = ServerName::try_from(host.to_string()).unwrap();
            verifier
                .verify_server_cert(server.der(), &[], &name, &[], UnixTime::now())
                .is_ok()
        };
        assert!(accepts("verify-full", "ours.pem", "db.example"));
        assert!(
            !accepts("verify-full", "ours.pem", "127.0.0.1"),
            "wrong name"
        );
        assert!(
            !accepts("verify-full", "other.pem", "db.example"),
            "wrong CA"
        );
        assert!(accepts("verify-ca", "ours.pem", "127.0.0.1"), "any name");
        assert!(!accepts("verify-ca", "other.pem", "db.example"), "wrong CA");
        assert!(
            !accepts("require", "other.pem", "db.example"),
            "require with a CA checks it"
        );
        let prefer = split(BASE).unwrap().1.verifier().unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        assert!(
            prefer
                .verify_server_cert(server.der(), &[], &name, &[], UnixTime::now())
                .is_ok(),
            "prefer encrypts without a check, as libpq"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_unknown_sslmode_or_a_missing_ca_file_is_an_error_naming_the_key() {
        let e = split(&format!("{BASE}?sslmode=allow")).unwrap_err();
        assert!(
            e.contains("cdr.database") && e.contains("verify-full"),
            "{e}"
        );
        let (_, tls) = split(&format!(
            "{BASE}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"
        ))
        .unwrap();
        let e = tls.connector().err().unwrap();
        assert!(
            e.contains("sslrootcert") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
    }
}
