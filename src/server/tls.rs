//! The main listener's TLS: the certificate chain and key of `--tls-cert-path` and
//! `--tls-key-path`, checked at startup and replaced on reload, and the handshake of one
//! connection.
//!
//! Handshakes read the certificate through an [`ArcSwap`], so a reload (SIGHUP) never
//! takes a lock on their path and never touches connections already established: they
//! keep the session they negotiated, new handshakes present the new certificate. A reload
//! that finds the files broken keeps the old certificate, so a half-written renewal cannot
//! take the listener down.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, ServerConfig};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::drain::DrainWait;

/// `--tls-cert-path` and `--tls-key-path` (Listener group). Both or neither: the flag
/// parser refuses one alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_path: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_path: Option<PathBuf>,
}

/// Why the certificate files cannot be served. Messages name the file, never its content.
#[derive(Debug)]
pub enum TlsError {
    Read {
        path: PathBuf,
        source: io::Error,
    },
    NotPem {
        path: PathBuf,
        problem: &'static str,
    },
    NoCertificate(PathBuf),
    BadCertificate {
        path: PathBuf,
        problem: String,
    },
    NoKey(PathBuf),
    BadKey {
        path: PathBuf,
        problem: String,
    },
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
    },
    Config(rustls::Error),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            TlsError::NotPem { path, problem } => {
                write!(f, "{} is not a PEM file: {problem}", path.display())
            }
            TlsError::NoCertificate(path) => {
                write!(f, "{} holds no PEM certificate", path.display())
            }
            TlsError::BadCertificate { path, problem } => {
                write!(
                    f,
                    "the certificate in {} is unusable: {problem}",
                    path.display()
                )
            }
            TlsError::NoKey(path) => write!(
                f,
                "{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                path.display()
            ),
            TlsError::BadKey { path, problem } => {
                write!(
                    f,
                    "the private key in {} is unusable: {problem}",
                    path.display()
                )
            }
            TlsError::Mismatch { cert, key } => write!(
                f,
                "the private key in {} does not match the certificate in {}",
                key.display(),
                cert.display()
            ),
            TlsError::Config(err) => write!(f, "cannot set up TLS: {err}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// A file's bytes, or the error naming it.
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Describes a PEM parse failure in our own words: the parser's may quote the file.
fn pem_problem(err: &pem::Error) -> &'static str {
    match err {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a section is not valid base64",
        pem::Error::SectionTooLarge => "a section is too large",
        _ => "it cannot be parsed",
    }
}

fn not_pem(path: &Path, problem: &'static str) -> TlsError {
    TlsError::NotPem {
        path: path.to_owned(),
        problem,
    }
}

/// The chain in `cert` and the key in `key`, checked to belong together.
fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    let cert_pem = read(cert)?;
    if memchr::memmem::find(&cert_pem, BEGIN).is_none() {
        return Err(not_pem(cert, "no -----BEGIN line"));
    }
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(cert, pem_problem(&e)))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let key_pem = read(key)?;
    if memchr::memmem::find(&key_pem, BEGIN).is_none() {
        return Err(not_pem(key, "no -----BEGIN line"));
    }
    let key_der = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(der) => der,
        Err(pem::Error::NoItemsFound) => return Err(TlsError::NoKey(key.to_owned())),
        Err(e) => return Err(not_pem(key, pem_problem(&e))),
    };
    let signing = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| TlsError::BadKey {
            path: key.to_owned(),
            problem: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key type whose public half rustls cannot derive: accepted, as rustls does.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::Mismatch {
                cert: cert.to_owned(),
                key: key.to_owned(),
            })
        }
        Err(e) => Err(TlsError::BadCertificate {
            path: cert.to_owned(),
            problem: e.to_string(),
        }),
    }
}

/// The served certificate, swapped whole on reload.
struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The TLS side of the main listener: what accepts handshakes and what reloads the
/// certificate. Cheap to clone (two `Arc`s).
#[derive(Clone)]
pub struct Tls {
    store: Arc<CertStore>,
    acceptor: TlsAcceptor,
}

impl Tls {
    /// Loads and checks the files of `settings`; `None` when TLS is off.
    pub fn from_settings(settings: &TlsSettings) -> Result<Option<Tls>, TlsError> {
        let (Some(cert), Some(key)) = (&settings.cert_path, &settings.key_path) else {
            return Ok(None);
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = load(cert, key, &provider)?;
        let store = Arc::new(CertStore {
            cert_path: cert.clone(),
            key_path: key.clone(),
            provider: provider.clone(),
            current: ArcSwap::from_pointee(current),
        });
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(store.clone());
        // hyper's auto builder serves both on one port; ALPN tells the client which.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(Tls {
            store,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }))
    }

    /// The certificate file, for log lines.
    pub fn cert_path(&self) -> &Path {
        &self.store.cert_path
    }

    /// Re-reads both files and serves them to new handshakes if they are valid; otherwise
    /// keeps the current certificate and returns why.
    pub fn reload(&self) -> Result<(), TlsError> {
        let store = &self.store;
        let fresh = load(&store.cert_path, &store.key_path, &store.provider)?;
        store.current.store(Arc::new(fresh));
        Ok(())
    }

    /// Runs the handshake of one connection, in that connection's task, until `deadline`
    /// (the header-read timeout from accept) or shutdown, which need not wait for a
    /// connection that has not sent a request yet. `None`: the connection is to be closed.
    pub async fn accept<IO>(
        &self,
        io: IO,
        deadline: Instant,
        drain: &mut DrainWait,
    ) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = tokio::time::timeout_at(deadline, self.acceptor.accept(io));
        tokio::select! {
            done = handshake => match done {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "TLS handshake failed; closing");
                    None
                }
                Err(_) => {
                    tracing::debug!("no TLS handshake within the header read timeout; closing");
                    None
                }
            },
            () = drain.fired() => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-tls-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn provider() -> CryptoProvider {
        rustls::crypto::ring::default_provider()
    }

    #[test]
    fn refusals_name_the_file() {
        let d = dir("refusals");
        let missing = d.join("missing.pem");
        let garbage = write(&d, "garbage.pem", "not a certificate\n");
        let err = load(&missing, &missing, &provider()).unwrap_err();
        assert!(matches!(err, TlsError::Read { .. }), "{err}");
        assert!(err.to_string().contains("missing.pem"));
        let err = load(&garbage, &garbage, &provider()).unwrap_err();
        assert!(matches!(err, TlsError::NotPem { .. }), "{err}");
        let key_only = write(
            &d,
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let err = load(&key_only, &key_only, &provider()).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate(_)), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
