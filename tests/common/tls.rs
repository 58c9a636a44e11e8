//! Talking to the gateway's TLS listener: a gateway started with `--tls-cert-path` and
//! `--tls-key-path`, and clients over tokio-rustls that trust a given CA, offer given ALPN
//! protocols and show what the server presented. The plain-HTTP helpers of `common` stay
//! as they are; these are their TLS counterparts.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::pki::ServerCert;
use super::{eventually, gateway, Proc, Reply};

pub const H2: &[u8] = b"h2";
pub const H1: &[u8] = b"http/1.1";

/// Starts the gateway serving `cert` on its main listener and, when `args` name workers,
/// waits (through TLS, trusting `ca`) until one is ready.
pub async fn tls_gateway(args: &[&str], cert: &ServerCert, ca: &Path) -> Proc {
    let mut all = vec![
        "--tls-cert-path",
        cert.cert_str(),
        "--tls-key-path",
        cert.key_str(),
    ];
    all.extend_from_slice(args);
    let gw = gateway(&all);
    if args.contains(&"--worker-urls") {
        let config = client_config(ca, &[H1]);
        let addr = gw.addr;
        let ready = eventually(Duration::from_secs(20), || {
            let config = config.clone();
            async move {
                match TlsConn::open(addr, config).await {
                    Ok(mut conn) => conn
                        .send("GET", "/readiness", &[], Bytes::new())
                        .await
                        .is_ok_and(|r| r.status == 200),
                    Err(_) => false,
                }
            }
        })
        .await;
        assert!(ready, "no worker became ready:\n{}", gw.log_text());
    }
    gw
}

/// A client configuration trusting only the CA certificate(s) in `ca`, offering `alpn`.
pub fn client_config(ca: &Path, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read CA") {
        roots.add(cert.expect("CA PEM")).expect("add CA");
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS handshake with `addr` as `localhost`; the error text on failure.
pub async fn handshake(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let hs = TlsConnector::from(config).connect(name, tcp);
    match tokio::time::timeout(Duration::from_secs(10), hs).await {
        Ok(res) => res.map_err(|e| e.to_string()),
        Err(_) => Err("handshake timed out".into()),
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One kept-alive TLS connection to the gateway, HTTP/1.1 or h2 as ALPN chose.
pub struct TlsConn {
    sender: Sender,
    authority: String,
    /// The protocol ALPN chose (`None`: the server chose none).
    pub alpn: Option<Vec<u8>>,
    /// The leaf certificate the server presented (DER).
    pub peer_cert: Vec<u8>,
}

impl TlsConn {
    pub async fn open(addr: SocketAddr, config: Arc<ClientConfig>) -> Result<TlsConn, String> {
        let tls = handshake(addr, config).await?;
        let (_, session) = tls.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let peer_cert = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let io = TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(H2) {
            let (send, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Sender::H2(send)
        } else {
            let (send, conn) = http1::handshake(io).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Sender::H1(send)
        };
        Ok(TlsConn {
            sender,
            authority: format!("localhost:{}", addr.port()),
            alpn,
            peer_cert,
        })
    }

    /// Sends one request on this connection; the response with its body unread.
    pub async fn start(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<http::Response<Incoming>, String> {
        let uri = match self.sender {
            Sender::H1(_) => path.to_string(),
            Sender::H2(_) => format!("https://{}{path}", self.authority),
        };
        let mut req = http::Request::builder().method(method).uri(uri);
        if let Sender::H1(_) = self.sender {
            req = req.header("host", &self.authority);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(body.into()))
            .map_err(|e| e.to_string())?;
        let sent = async {
            match &mut self.sender {
                Sender::H1(s) => {
                    s.ready().await?;
                    s.send_request(req).await
                }
                Sender::H2(s) => {
                    s.ready().await?;
                    s.send_request(req).await
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(30), sent).await {
            Ok(res) => res.map_err(|e| e.to_string()),
            Err(_) => Err("no response within 30 s".into()),
        }
    }

    /// Sends one request and reads the whole response.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Reply, String> {
        let resp = self.start(method, path, headers, body).await?;
        let (parts, body) = resp.into_parts();
        let body = match tokio::time::timeout(Duration::from_secs(30), body.collect()).await {
            Ok(Ok(b)) => b.to_bytes(),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("body not complete within 30 s".into()),
        };
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    /// POSTs a JSON body and reads the whole response.
    pub async fn post_json(
        &mut self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Reply, String> {
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        self.send("POST", path, &[("content-type", "application/json")], bytes)
            .await
    }
}

/// The DER of the first certificate in a PEM file.
pub fn leaf_der(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .expect("read cert")
        .next()
        .expect("a certificate")
        .expect("cert PEM")
        .to_vec()
}
