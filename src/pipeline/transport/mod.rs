//! The transport seam: how an attempt reaches a worker and its answer comes back.
//!
//! The attempt loop ([`super::send`]) sees only [`Transport`]: it hands over an
//! [`Attempt`] and gets an [`Answer`] (a response whose body the gateway owns: relayed
//! frames, or a stream it produces) or a [`SendError`] it can classify for retries and
//! breakers. Plain HTTP/1.1 and h2c are the first transport ([`http`]); gRPC engines,
//! prefill/decode pairs and TLS providers plug in as further transports behind
//! [`Transports`], without touching retries, breakers or metrics. Under a provider
//! backend ([`provider`]) HTTP workers are reached through it instead. `/v1/responses`
//! on gRPC engines and external providers is run by the gateway ([`responses`]).

pub mod credentials;
pub mod grpc;
pub mod http;
pub mod pd;
pub mod provider;
pub mod responses;

use std::future::Future;
use std::time::Instant;

use ::http::{HeaderMap, Response};

use crate::fleet::{ConnectionMode, Transport as FleetTransport, Worker};
use crate::generation::prompt::Refused;
use crate::generation::run::StartError;
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::route::Route;
use crate::http::upload::{LimitedBody, ReadError};

/// One attempt, as the loop hands it over.
pub struct Attempt<'a> {
    /// The route the request was matched as (a transport never reads the path for it).
    pub route: Route,
    /// The client's method and URI (path and query are kept).
    pub head: &'a ::http::request::Parts,
    /// The headers the worker receives (already filtered).
    pub headers: HeaderMap,
    pub body: LimitedBody,
    /// The attempt, relay included, must be over by then.
    pub deadline: Instant,
    /// When the client's request arrived.
    pub arrived: Instant,
}

/// A worker's answer: status and headers for the client, the body still streaming.
pub type Answer = Response<RespBody>;

/// Why an attempt produced no answer.
#[derive(Debug)]
pub enum SendError {
    /// No answer by the attempt's deadline.
    Timeout,
    /// The client's body failed while it was sent: the client's fault, not the worker's.
    ClientBody(ReadError),
    /// The worker could not be reached, or the exchange broke: one of the gateway's
    /// `worker_*` errors.
    Exchange(GatewayError),
    /// The request itself cannot be served as asked (the gateway read it for its own
    /// pipeline), or the worker's answer is final though unusable (a provider's 2xx body
    /// that is no Messages response: asking again would pay for the work twice): the
    /// client's answer, never retried, not held against the worker's breaker.
    Refused(GatewayError),
}

impl From<Refused> for SendError {
    fn from(refused: Refused) -> SendError {
        SendError::Refused(refused.0)
    }
}

/// A generation that did not start: refused for the client, or failed by the worker
/// (which the attempt loop may try elsewhere).
impl From<StartError> for SendError {
    fn from(err: StartError) -> SendError {
        match err {
            StartError::Refused(err) => SendError::Refused(err),
            StartError::Worker(err) => SendError::Exchange(err),
        }
    }
}

/// The whole request body of an attempt, for a transport that reads it itself (the gRPC
/// pipeline, the MCP tool loop); the pipeline has usually held it already.
pub async fn whole_body(body: LimitedBody) -> Result<bytes::Bytes, SendError> {
    use http_body_util::BodyExt;
    body.collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(
            |err| match crate::http::upload::client_fault(err.as_ref()) {
                Some(fault) => SendError::ClientBody(fault),
                None => SendError::Exchange(GatewayError::ClientBodyBroken),
            },
        )
}

/// One way of carrying attempts to workers.
pub trait Transport {
    /// Whether this transport can reach `worker` at all; checked before the body is
    /// touched, so an unreachable worker costs nothing and another takes the request.
    fn reaches(&self, worker: &Worker) -> Result<(), GatewayError>;

    /// Carries `attempt` to `worker` and returns its answer.
    fn send(
        &self,
        worker: &Worker,
        attempt: Attempt<'_>,
    ) -> impl Future<Output = Result<Answer, SendError>> + Send;
}

/// The transports of this build, chosen by the worker's connection mode.
pub struct Transports<'a> {
    pub http: &'a http::UpstreamClient,
    pub grpc: &'a grpc::GrpcClient,
    /// `--backend` names an external provider: what an HTTP worker is.
    pub provider: bool,
    /// The provider backend's MCP tool loop.
    pub tools: &'a provider::mcp_loop::LoopClient,
    /// Responses run by the gateway on external providers.
    pub responses: &'a responses::Runner,
}

impl Transports<'_> {
    /// Whether a transport of this build reaches `worker`.
    pub fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        match worker.connection_mode() {
            ConnectionMode::Http => self.http.reaches(worker),
            ConnectionMode::Grpc if matches!(worker.transport, FleetTransport::Grpc { .. }) => {
                self.grpc.reaches(worker)
            }
            other => Err(GatewayError::UnsupportedTransport {
                transport: other.as_str(),
            }),
        }
    }

    /// Sends `attempt` over `worker`'s transport.
    pub async fn send(&self, worker: &Worker, attempt: Attempt<'_>) -> Result<Answer, SendError> {
        match worker.connection_mode() {
            ConnectionMode::Http if self.provider => {
                provider::send(self.http, self.tools, worker, attempt).await
            }
            ConnectionMode::Http if responses::Runner::takes(worker, &attempt) => {
                self.responses.on_provider(worker, attempt).await
            }
            ConnectionMode::Http => self.http.send(worker, attempt).await,
            ConnectionMode::Grpc if matches!(worker.transport, FleetTransport::Grpc { .. }) => {
                if attempt.route == Route::ResponsesCreate {
                    self.responses.on_engine(self.grpc, worker, attempt).await
                } else {
                    self.grpc.send(worker, attempt).await
                }
            }
            other => Err(SendError::Exchange(GatewayError::UnsupportedTransport {
                transport: other.as_str(),
            })),
        }
    }
}
