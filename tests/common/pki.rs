//! A private certificate authority made at test time, and the certificates the TLS tests
//! need from it: a good server certificate for `localhost`/`127.0.0.1`, an expired one, one
//! for another host, and one from a CA nobody trusts. Everything is written as PEM files
//! into a fresh directory, so the gateway, the mock worker, curl and the Python SDKs all
//! read the same files.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// A server certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct ServerCert {
    /// The leaf certificate followed by nothing else (the CA is the trust anchor).
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServerCert {
    pub fn cert_str(&self) -> &str {
        self.cert.to_str().expect("utf-8 path")
    }

    pub fn key_str(&self) -> &str {
        self.key.to_str().expect("utf-8 path")
    }
}

/// How a server certificate is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Valid now, for `localhost` and `127.0.0.1`.
    Good,
    /// For `localhost` and `127.0.0.1`, but its validity ended in 2020.
    Expired,
    /// Valid now, but only for `elsewhere.invalid`.
    WrongHost,
}

/// A CA with its key, and the directory its files go to.
pub struct Pki {
    pub dir: PathBuf,
    /// The CA certificate, the bundle a client trusts.
    pub ca: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Pki {
    /// A fresh CA in a fresh directory under the system's temp dir.
    pub fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-pki-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("pki dir");
        let (ca_pem, issuer) = make_ca("tollgate test CA");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_pem).expect("write ca");
        Pki { dir, ca, issuer }
    }

    pub fn ca_str(&self) -> &str {
        self.ca.to_str().expect("utf-8 path")
    }

    /// A server certificate of `kind` signed by this CA, written as `<name>.pem` and
    /// `<name>.key`.
    pub fn server(&self, name: &str, kind: Kind) -> ServerCert {
        write_server(&self.dir, name, kind, &self.issuer)
    }

    /// A good server certificate signed by a different CA that no test trusts.
    pub fn untrusted(&self, name: &str) -> ServerCert {
        let (_, other) = make_ca("some other CA");
        write_server(&self.dir, name, Kind::Good, &other)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("ca key");
    let cert = ca_params(name).self_signed(&key).expect("self-signed ca");
    (cert.pem(), Issuer::new(ca_params(name), key))
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn write_server(dir: &Path, name: &str, kind: Kind, issuer: &Issuer<'_, KeyPair>) -> ServerCert {
    let hosts: Vec<String> = match kind {
        Kind::WrongHost => vec!["elsewhere.invalid".into()],
        _ => vec!["localhost".into(), "127.0.0.1".into()],
    };
    let mut params = CertificateParams::new(hosts).expect("server params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if kind == Kind::Expired {
        params.not_before = date_time_ymd(2019, 1, 1);
        params.not_after = date_time_ymd(2020, 1, 1);
    } else {
        params.not_before = date_time_ymd(2024, 1, 1);
        params.not_after = date_time_ymd(2099, 1, 1);
    }
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, issuer).expect("sign server cert");
    let out = ServerCert {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&out.cert, cert.pem()).expect("write cert");
    std::fs::write(&out.key, key.serialize_pem()).expect("write key");
    out
}

/// A client that trusts only the CA at `ca` (HTTP/2 or HTTP/1.1 by ALPN; plain `http://`
/// too, so one client reaches both kinds of listener).
pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub fn https_client(ca: &Path) -> HttpsClient {
    // No ALPN in the configuration: the connector offers h2 and http/1.1 itself.
    let config = super::tls::client_config(ca, &[]);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*config).clone())
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

/// The request log of a mock worker serving TLS at `url`, read with a client trusting `ca`.
pub async fn tls_mock_requests(ca: &Path, url: &str) -> Vec<serde_json::Value> {
    let reply = super::send(
        &https_client(ca),
        "GET",
        &format!("{url}/mock/requests"),
        &[],
        "",
    )
    .await;
    match reply.json() {
        serde_json::Value::Array(items) => items,
        other => panic!("unexpected request log {other}"),
    }
}
