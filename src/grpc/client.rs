//! Calls to one SGLang scheduler over the gateway's own HTTP/2 client (h2c with prior
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
use tonic::{Code, Request, Status, Streaming};

use super::common::{
    FlushCacheRequest, FlushCacheResponse, ProfileResponse, StartProfileRequest, StopProfileRequest,
};
use super::sglang::sglang_scheduler_client::SglangSchedulerClient;
use super::sglang::{
    AbortRequest, GenerateRequest, GenerateResponse, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, HealthCheckRequest,
};
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

/// One SGLang scheduler, reached through `wire`. Cheap to build per call: it holds the
/// pool handle and the engine's origin.
#[derive(Clone)]
pub struct Scheduler {
    rpc: SglangSchedulerClient<Wire>,
}

impl Scheduler {
    /// The scheduler at `authority` (host:port of a `grpc://` URL, or of a `grpcs://`
    /// one when `tls`).
    pub fn new(wire: Wire, authority: &Authority, tls: bool) -> Scheduler {
        Scheduler {
            rpc: SglangSchedulerClient::with_origin(wire, origin(authority, tls)),
        }
    }

    /// `HealthCheck`: whether the engine says it can generate.
    pub async fn health(&self, timeout: Duration) -> Result<bool, CallError> {
        let mut rpc = self.rpc.clone();
        let call = rpc.health_check(timed(HealthCheckRequest::default(), timeout));
        Ok(bounded(timeout, call).await?.healthy)
    }

    /// `GetModelInfo`: what the engine serves.
    pub async fn model_info(&self, timeout: Duration) -> Result<GetModelInfoResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(
            timeout,
            rpc.get_model_info(timed(GetModelInfoRequest {}, timeout)),
        )
        .await
    }

    /// `Generate`: starts one generation and returns its stream once the engine answered
    /// the call (the stream's messages are read by the caller, each within its own bound).
    pub async fn generate(
        &self,
        request: GenerateRequest,
        timeout: Duration,
    ) -> Result<Streaming<GenerateResponse>, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(timeout, rpc.generate(timed(request, timeout))).await
    }

    /// `GetLoads`: the scheduler's load per DP rank, with the sections named in
    /// `include`.
    pub async fn loads(
        &self,
        include: &[&str],
        timeout: Duration,
    ) -> Result<GetLoadsResponse, CallError> {
        let mut rpc = self.rpc.clone();
        let request = GetLoadsRequest {
            dp_rank: None,
            include: include.iter().map(|s| (*s).to_owned()).collect(),
        };
        bounded(timeout, rpc.get_loads(timed(request, timeout))).await
    }

    /// `FlushCache`: drops the KV prefix cache on every scheduler process.
    pub async fn flush_cache(
        &self,
        request: FlushCacheRequest,
        timeout: Duration,
    ) -> Result<FlushCacheResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(timeout, rpc.flush_cache(timed(request, timeout))).await
    }

    /// `StartProfile`.
    pub async fn start_profile(
        &self,
        request: StartProfileRequest,
        timeout: Duration,
    ) -> Result<ProfileResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(timeout, rpc.start_profile(timed(request, timeout))).await
    }

    /// `StopProfile`: the engine writes its traces.
    pub async fn stop_profile(&self, timeout: Duration) -> Result<ProfileResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(
            timeout,
            rpc.stop_profile(timed(StopProfileRequest {}, timeout)),
        )
        .await
    }

    /// `Abort`: asks the engine to stop generating for `request_id`.
    pub async fn abort(
        &self,
        request_id: String,
        reason: &str,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let mut rpc = self.rpc.clone();
        let request = AbortRequest {
            request_id,
            reason: reason.to_owned(),
        };
        bounded(timeout, rpc.abort(timed(request, timeout)))
            .await
            .map(drop)
    }
}

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
