//! Connections to the target: hyper's low-level client over one TCP socket each, HTTP/1.1
//! or h2c with prior knowledge. A pooled client would hide how many connections the
//! load uses; here a worker (HTTP/1.1) or a group of workers (HTTP/2) owns one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::stats::Failure;

pub type Body = Full<Bytes>;

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// `host:port` as given, for `Host` and `:authority`.
    pub authority: String,
}

impl Target {
    /// Resolves the host of an `http://host:port[/...]` URL.
    pub async fn resolve(url: &str) -> Result<Target, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("--url {url}: {e}"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| format!("--url {url} has no host"))?
            .to_string();
        let host_port = if uri.port().is_some() {
            authority.clone()
        } else {
            format!("{authority}:80")
        };
        let addr = tokio::net::lookup_host(&host_port)
            .await
            .map_err(|e| format!("resolving {host_port}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host_port} resolves to no address"))?;
        Ok(Target { addr, authority })
    }

    /// A request for `path` in the form the protocol wants: origin-form plus `Host` for
    /// HTTP/1.1, an absolute URI (scheme and authority pseudo-headers) for HTTP/2.
    pub fn request(
        &self,
        http2: bool,
        method: http::Method,
        path: &str,
        headers: &[(String, String)],
        body: Bytes,
    ) -> Result<Request<Body>, Failure> {
        let mut builder = Request::builder().method(method);
        builder = if http2 {
            builder.uri(format!("http://{}{path}", self.authority))
        } else {
            builder
                .uri(path)
                .header(http::header::HOST, &self.authority)
        };
        if !body.is_empty() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        // Only a bad --header makes this fail; it then fails every request alike.
        builder.body(Full::new(body)).map_err(|_| Failure::Io)
    }
}

async fn tcp(target: &Target, timeout: Duration) -> Result<TokioIo<TcpStream>, Failure> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(target.addr))
        .await
        .map_err(|_| Failure::Connect)?
        .map_err(|_| Failure::Connect)?;
    let _ = stream.set_nodelay(true);
    Ok(TokioIo::new(stream))
}

async fn connect_h1(
    target: &Target,
    timeout: Duration,
) -> Result<http1::SendRequest<Body>, Failure> {
    let io = tcp(target, timeout).await?;
    let (sender, conn) = http1::handshake(io).await.map_err(|_| Failure::Connect)?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn connect_h2(
    target: &Target,
    timeout: Duration,
) -> Result<http2::SendRequest<Body>, Failure> {
    let io = tcp(target, timeout).await?;
    let handshake = http2::handshake(TokioExecutor::new(), io);
    let (sender, conn) = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| Failure::Connect)?
        .map_err(|_| Failure::Connect)?;
    tokio::spawn(conn);
    Ok(sender)
}

/// A shared HTTP/2 connection slot: workers clone the sender out of it.
pub type H2Slot = Arc<Mutex<Option<http2::SendRequest<Body>>>>;

/// One worker's way to the target; (re)connects lazily.
pub enum Conn {
    H1(Option<http1::SendRequest<Body>>),
    H2(H2Slot),
}

impl Conn {
    /// Sends `request`, connecting first when there is no live connection.
    pub async fn send(
        &mut self,
        target: &Target,
        timeout: Duration,
        request: Request<Body>,
    ) -> Result<Response<Incoming>, Failure> {
        match self {
            Conn::H1(slot) => {
                let mut sender = match slot.take() {
                    Some(s) if !s.is_closed() => s,
                    _ => connect_h1(target, timeout).await?,
                };
                sender.ready().await.map_err(|_| Failure::Io)?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|_| Failure::Io)?;
                // Put back only after a good exchange; a failed one drops the socket.
                *slot = Some(sender);
                Ok(response)
            }
            Conn::H2(shared) => {
                let mut sender = {
                    let mut guard = shared.lock().await;
                    match guard.as_ref() {
                        Some(s) if !s.is_closed() => s.clone(),
                        _ => {
                            let fresh = connect_h2(target, timeout).await?;
                            *guard = Some(fresh.clone());
                            fresh
                        }
                    }
                };
                sender.ready().await.map_err(|_| Failure::Io)?;
                sender.send_request(request).await.map_err(|_| Failure::Io)
            }
        }
    }

    /// Forgets an HTTP/1.1 connection whose exchange did not finish (its framing is lost).
    pub fn reset(&mut self) {
        if let Conn::H1(slot) = self {
            *slot = None;
        }
    }
}

/// An idle-test connection: opened, used for one GET, then only held.
pub async fn open_idle(
    target: &Target,
    timeout: Duration,
) -> Result<http1::SendRequest<Body>, Failure> {
    let mut sender = connect_h1(target, timeout).await?;
    let request = target.request(false, http::Method::GET, "/health", &[], Bytes::new())?;
    let exchange = async {
        sender.ready().await.map_err(|_| Failure::Io)?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|_| Failure::Io)?;
        crate::exchange::read_bounded(response.into_body(), 64 << 10).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Failure::Timeout)??;
    Ok(sender)
}
