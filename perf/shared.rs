//! What the bundled engines (`mock-worker`, `grpc-engine`) share: reading flag values,
//! serving TLS and waiting for the signal that stops them. Each binary includes this file
//! as a module.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its TLS handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS acceptor for the PEM certificate chain and key at these paths (the
/// `--tls-cert-path` and `--tls-key-path` flags), offering `alpn` in order.
pub fn tls_acceptor(cert: &str, key: &str, alpn: &[&[u8]]) -> Result<TlsAcceptor, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-cert-path {cert}: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key-path {key}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("TLS certificate: {e}"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The next flag's value as UTF-8 text.
pub fn string_value(parser: &mut lexopt::Parser) -> Result<String, String> {
    use lexopt::prelude::*;
    parser
        .value()
        .map_err(|e| e.to_string())?
        .string()
        .map_err(|e| e.to_string())
}

/// The next flag's value parsed as `T`; the error names `flag` and the value.
pub fn parsed_value<T>(parser: &mut lexopt::Parser, flag: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let raw = string_value(parser)?;
    raw.parse::<T>()
        .map_err(|e| format!("invalid value '{raw}' for {flag}: {e}"))
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
