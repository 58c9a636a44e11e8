//! Calls to gRPC engines over the gateway's own HTTP/2 client (h2c with prior
//! knowledge for `grpc://`, TLS with ALPN h2 for `grpcs://`): tonic's generated client
//! encodes the messages and frames, hyper carries them, so a data-plane thread's pool
//! reuses its connections to each engine and no connection crosses threads.

use std::fmt;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tonic::{Code, Request, Status};

use crate::http::client::{build, ClientOptions};
use crate::http::tls::UpstreamTls;

/// A pooled HTTP/2 client that carries gRPC calls; one per thread that makes calls.
pub type Wire = Client<HttpsConnector<HttpConnector>, tonic::body::Body>;

/// Builds a [`Wire`]: h2c with prior knowledge, or TLS verified against `tls`; idle
/// connections kept `idle_timeout` (`None`: forever).
pub fn wire(idle_timeout: Option<Duration>, tls: &UpstreamTls) -> Wire {
    build(ClientOptions::grpc(tls.clone(), idle_timeout))
}

/// Why a call to an engine failed.
#[derive(Debug)]
pub enum CallError {
    /// No answer in time.
    Timeout,
    /// The engine answered with a gRPC status other than OK, or the exchange broke (tonic
    /// reports transport failures as `UNAVAILABLE`/`UNKNOWN` statuses too).
    Status(Status),
}

impl CallError {
    /// Whether the engine does not serve this method.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, CallError::Status(s) if s.code() == Code::Unimplemented)
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Timeout => f.write_str("no answer in time"),
            CallError::Status(s) => {
                write!(f, "{:?}", s.code())?;
                if !s.message().is_empty() {
                    write!(f, ": {}", s.message())?;
                }
                // A transport failure's reason (refused connection, certificate not
                // trusted) is in the status's sources, not its message.
                let mut said = s.message().to_owned();
                let mut cause = std::error::Error::source(s);
                for _ in 0..MAX_CAUSES {
                    let Some(err) = cause else { break };
                    let text = err.to_string();
                    // Layers often repeat the layer above's words.
                    if text != said {
                        write!(f, ": {text}")?;
                        said = text;
                    }
                    cause = err.source();
                }
                Ok(())
            }
        }
    }
}

/// How deep a failed call's chain of causes is quoted.
const MAX_CAUSES: usize = 4;

impl std::error::Error for CallError {}

/// The `http://host:port/` (`https://` when `tls`) every call to the engine at
/// `authority` is made against.
pub(super) fn origin(authority: &Authority, tls: bool) -> Uri {
    Uri::builder()
        .scheme(if tls { Scheme::HTTPS } else { Scheme::HTTP })
        .authority(authority.clone())
        .path_and_query("/")
        .build()
        .unwrap_or_default()
}

/// A request that tells the engine its deadline (`grpc-timeout`).
pub(super) fn timed<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Awaits a unary or stream-opening call within `timeout`.
pub(super) async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(CallError::Status(status)),
        Err(_) => Err(CallError::Timeout),
    }
}
