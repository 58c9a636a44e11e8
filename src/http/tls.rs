//! What the gateway trusts when it speaks TLS to others (https workers, external
//! providers, identity providers), and how a failed handshake is told apart.
//!
//! Trust is the platform's root store (what `curl` on the same machine trusts), plus an
//! operator's PEM bundle from `--upstream-ca-cert-path` for private CAs. Certificate and
//! host-name checks are always on: there is no way to turn them off, so an https worker is
//! either verified or refused. The set is read once at startup into one shared rustls
//! configuration; every client built from it (the data path's pools on every thread, the
//! control plane's calls) shares its session cache.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::client::ClientConfig;
use rustls::{CertificateError, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// The roots and TLS settings of the gateway's outbound TLS. Cheap to clone.
#[derive(Clone)]
pub struct UpstreamTls {
    config: Arc<ClientConfig>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls").finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// The platform's roots plus the certificates of the PEM bundle at `extra` (if any).
    /// Refuses a bundle that cannot be read or holds no certificate, so a typo in the flag
    /// stops startup instead of failing every request to a private-CA worker later.
    pub fn load(extra: Option<&Path>) -> Result<UpstreamTls, String> {
        let Some(path) = extra else {
            return Ok(UpstreamTls::platform());
        };
        let mut roots = platform_roots().clone();
        let shown = path.display();
        let added = add_bundle(&mut roots, path)
            .map_err(|e| format!("--upstream-ca-cert-path {shown}: {e}"))?;
        tracing::info!(path = %shown, certificates = added, "trusting extra CA certificates for upstream TLS");
        Ok(UpstreamTls {
            config: Arc::new(client_config(roots)),
        })
    }

    /// The platform's roots alone.
    pub fn platform() -> UpstreamTls {
        static PLATFORM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
        let config = PLATFORM.get_or_init(|| Arc::new(client_config(platform_roots().clone())));
        UpstreamTls {
            config: config.clone(),
        }
    }

    /// A connector that speaks TLS to `https://` URIs (offering HTTP/2 by ALPN when
    /// `alpn_h2`) and plain TCP to `http://` ones.
    pub fn connector(
        &self,
        mut tcp: HttpConnector,
        alpn_h2: bool,
    ) -> HttpsConnector<HttpConnector> {
        // The TLS wrapper needs `https://` URIs to reach it.
        tcp.enforce_http(false);
        let protocols = HttpsConnectorBuilder::new()
            .with_tls_config((*self.config).clone())
            .https_or_http()
            .enable_http1();
        if alpn_h2 {
            protocols.enable_http2().wrap_connector(tcp)
        } else {
            protocols.wrap_connector(tcp)
        }
    }
}

fn client_config(roots: RootCertStore) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    match ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
        Ok(builder) => builder.with_root_certificates(roots).with_no_client_auth(),
        // The ring provider supports the default versions; this arm is unreachable in
        // practice, and a configuration with the process default is still verified.
        Err(_) => ClientConfig::builder()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
    }
}

/// The platform's trusted roots, read once per process. Where the platform has none
/// (a minimal container without a CA bundle), the Mozilla roots compiled in stand in.
fn platform_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for err in &found.errors {
            tracing::debug!(error = %err, "a platform CA certificate could not be read");
        }
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(
                "no CA certificates found on this machine; trusting the compiled-in Mozilla roots"
            );
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        roots
    })
}

/// Adds every certificate of the PEM file at `path`; returns how many.
fn add_bundle(roots: &mut RootCertStore, path: &Path) -> Result<usize, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("a certificate cannot be used as a root: {e}"))?;
        added += 1;
    }
    if added == 0 {
        return Err("holds no PEM certificate".into());
    }
    Ok(added)
}

/// Why a TLS handshake with a worker failed, as far as the client can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFailure {
    /// The certificate chain does not lead to a trusted root.
    UnknownIssuer,
    /// The certificate is not valid for the worker's host name or address.
    WrongHost,
    /// The certificate has expired (or is not valid yet).
    Expired,
    /// The certificate was refused for another reason (revoked, bad signature, ...).
    BadCertificate,
    /// The handshake failed otherwise (alert from the peer, no common protocol, not TLS).
    Handshake,
}

impl TlsFailure {
    /// Finds a rustls error in `err`'s source chain; `None` when the failure is not TLS's.
    pub fn find(err: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(tls) = e.downcast_ref::<rustls::Error>() {
                return Some(TlsFailure::of(tls));
            }
            // `io::Error::source` skips the error it wraps (it answers that error's own
            // source), and the TLS connector wraps rustls's error in two of them: step
            // into the wrapped error instead.
            next = match e.downcast_ref::<std::io::Error>() {
                Some(io) => io
                    .get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static)),
                None => e.source(),
            };
        }
        None
    }

    fn of(err: &rustls::Error) -> TlsFailure {
        match err {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => TlsFailure::UnknownIssuer,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => TlsFailure::WrongHost,
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => TlsFailure::Expired,
                _ => TlsFailure::BadCertificate,
            },
            _ => TlsFailure::Handshake,
        }
    }

    /// What an operator should read in the error message.
    pub fn describe(self) -> &'static str {
        match self {
            TlsFailure::UnknownIssuer => {
                "the worker's certificate is not signed by a trusted CA (add its CA with --upstream-ca-cert-path)"
            }
            TlsFailure::WrongHost => "the worker's certificate is not valid for its host name",
            TlsFailure::Expired => "the worker's certificate has expired or is not valid yet",
            TlsFailure::BadCertificate => "the worker's certificate was refused",
            TlsFailure::Handshake => "the TLS handshake with the worker failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_are_told_apart() {
        let cases = [
            (CertificateError::UnknownIssuer, TlsFailure::UnknownIssuer),
            (CertificateError::NotValidForName, TlsFailure::WrongHost),
            (CertificateError::Expired, TlsFailure::Expired),
            (CertificateError::NotValidYet, TlsFailure::Expired),
            (CertificateError::Revoked, TlsFailure::BadCertificate),
        ];
        for (cert, want) in cases {
            // As the TLS connector reports it: rustls's error in an io::Error in another.
            let io = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(cert),
            );
            assert_eq!(TlsFailure::find(&std::io::Error::other(io)), Some(want));
        }
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert_eq!(TlsFailure::find(&alert), Some(TlsFailure::Handshake));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(TlsFailure::find(&refused), None);
    }

    #[test]
    fn a_bundle_must_hold_certificates() {
        let dir = std::env::temp_dir().join(format!("tollgate-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = UpstreamTls::load(Some(&empty)).unwrap_err();
        assert!(
            err.contains("--upstream-ca-cert-path") && err.contains("no PEM certificate"),
            "{err}"
        );
        let missing = dir.join("missing.pem");
        let err = UpstreamTls::load(Some(&missing)).unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(UpstreamTls::load(None).is_ok());
    }
}
