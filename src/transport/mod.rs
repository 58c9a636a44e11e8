//! The transport seam: how an attempt reaches a worker and its answer comes back.
//!
//! The attempt loop (`pipeline::send`) hands over an [`Attempt`] and gets an [`Answer`] (a
//! response whose body the gateway owns: relayed frames, or a stream it produces) or a
//! [`SendError`] it can classify for retries and breakers. These are the carriers that
//! relay HTTP as it is: plain HTTP/1.1 and h2c ([`http`]), prefill/decode pairs of HTTP
//! workers ([`pd`]), an external provider's Messages API ([`provider`]), and which headers
//! a worker may see ([`headers`]). Front-ends that answer a request themselves (token
//! engines, Responses, the MCP tool loops) live above, in `crate::api`, and return the same
//! [`Answer`] and [`SendError`]; nothing here knows of them.

pub mod credentials;
pub mod either;
pub mod headers;
pub mod http;
pub mod pd;
pub mod provider;

use std::borrow::Cow;
use std::future::Future;
use std::time::{Duration, Instant};

use ::http::{HeaderMap, Response};

use crate::fleet::Worker;
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
    /// The headers the worker receives (already filtered). Borrowed from the request when
    /// another attempt may follow, so an attempt that adds nothing to them copies nothing.
    pub headers: Cow<'a, HeaderMap>,
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

/// How long a thread's clients wait on workers: what every upstream pool is built with.
#[derive(Clone, Copy, Debug)]
pub struct Waits {
    /// `--upstream-pool-idle-timeout-secs`: how long an idle pooled connection is kept.
    pub pool_idle: Option<Duration>,
    /// `--stream-stall-timeout-secs`: the longest silence of a worker mid-answer.
    pub stall: Option<Duration>,
}

/// Whether a response is a server-sent event stream.
pub fn is_sse<B>(resp: &::http::Response<B>) -> bool {
    resp.headers()
        .get(::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}
