//! Forwarding to HTTP workers: select, dispatch, relay.
//!
//! The request body streams to the worker unread (counted against the payload limit), and
//! the worker's response streams back frame by frame. Each data-plane thread owns its own
//! connection pool, so pooled connections never cross threads.

pub mod headers;
pub mod peek;

use std::borrow::Cow;
use std::time::{Duration, Instant};

use http::uri::{self, Scheme, Uri};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::Config;
use crate::http::body::{is_body_too_large, read_whole, LimitedBody, ReadError, RespBody};
use crate::http::error::GatewayError;
use crate::routing::{Policy, RequestFacts};
use crate::workers::Registry;

pub use headers::ContentType;

/// Idle connections kept per worker, per thread.
pub const POOL_MAX_IDLE_PER_HOST: usize = 500;
/// Time allowed to establish a TCP connection to a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One pooled client towards plain-HTTP workers, speaking one protocol.
type UpstreamPool = Client<HttpConnector, LimitedBody>;

/// A thread's clients towards HTTP workers: HTTP/1.1, and HTTP/2 with prior knowledge
/// (h2c) for workers registered with `http2` (one pool cannot choose per request).
pub struct UpstreamClient {
    http1: UpstreamPool,
    h2c: UpstreamPool,
}

impl UpstreamClient {
    /// Builds one thread's pools.
    pub fn new(config: &Config) -> UpstreamClient {
        UpstreamClient {
            http1: pool(config, false),
            h2c: pool(config, true),
        }
    }

    fn pool(&self, http2: bool) -> &UpstreamPool {
        if http2 {
            &self.h2c
        } else {
            &self.http1
        }
    }
}

fn pool(config: &Config, http2_only: bool) -> UpstreamPool {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    Client::builder(TokioExecutor::new())
        .http2_only(http2_only)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
        .pool_idle_timeout(config.upstream_pool_idle_timeout)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}

/// The top-level `"model"` of a JSON body; `None` when absent or not JSON (the worker
/// then answers the malformed request itself).
/// The name is borrowed from the body unless it contains escapes.
fn peek_model(body: &[u8]) -> Option<Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        model: Option<Cow<'a, str>>,
    }
    serde_json::from_slice::<Peek<'_>>(body).ok()?.model
}

/// The body length the client declared, if any.
fn declared_length(req: &Request<Incoming>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// What a forward needs from the gateway; borrowed for the duration of one request.
pub struct Forward<'a> {
    pub config: &'a Config,
    pub registry: &'a Registry,
    pub policy: &'a dyn Policy,
    pub client: &'a UpstreamClient,
}

impl Forward<'_> {
    /// Forwards `req` to one routable worker and relays its answer.
    pub async fn send(
        &self,
        req: Request<Incoming>,
        content_type: ContentType,
    ) -> Result<Response<RespBody>, GatewayError> {
        let limit = self.config.max_payload_size;
        if declared_length(&req).is_some_and(|len| len > limit) {
            return Err(GatewayError::PayloadTooLarge { limit });
        }
        if self.config.pd_disaggregation && !self.config.enable_igw {
            return Err(GatewayError::NotImplemented {
                route: "prefill/decode dispatch (--pd-disaggregation)",
            });
        }
        let deadline = Instant::now() + self.config.request_timeout;

        let (parts, body) = req.into_parts();
        // With several models behind the gateway the body names the model: read it whole
        // (bounded by the limit and the deadline) and look at that one field only.
        let (body, peeked) = if self.config.enable_igw && content_type == ContentType::Json {
            let bytes =
                read_whole(body, limit, deadline.into())
                    .await
                    .map_err(|err| match err {
                        ReadError::TooLarge => GatewayError::PayloadTooLarge { limit },
                        ReadError::Broken => GatewayError::ClientBodyBroken,
                        ReadError::TooSlow => GatewayError::ClientBodyTimeout,
                    })?;
            (LimitedBody::whole(bytes.clone()), Some(bytes))
        } else {
            (LimitedBody::new(body, limit), None)
        };
        let model = peeked.as_deref().and_then(peek_model);

        let worker = {
            let snap = self.registry.snapshot();
            let routable = match &model {
                Some(model) => snap.routable_for_model(model),
                None => snap.routable(),
            };
            let idx = self
                .policy
                .select(routable, &RequestFacts::default())
                .ok_or(GatewayError::NoAvailableWorkers)?;
            routable
                .get(idx)
                .cloned()
                .ok_or(GatewayError::NoAvailableWorkers)?
        };
        let (scheme, authority) =
            worker
                .http_origin()
                .ok_or(GatewayError::UnsupportedTransport {
                    transport: worker.connection_mode().as_str(),
                })?;
        if *scheme == Scheme::HTTPS {
            return Err(GatewayError::UnsupportedTransport { transport: "https" });
        }

        let mut parts = parts;
        let mut uri_parts = uri::Parts::default();
        uri_parts.scheme = Some(scheme.clone());
        uri_parts.authority = Some(authority.clone());
        uri_parts.path_and_query = parts.uri.path_and_query().cloned();
        let uri = Uri::from_parts(uri_parts).map_err(|_| GatewayError::UpstreamBroken)?;

        let mut upstream = Request::new(body);
        *upstream.method_mut() = parts.method;
        *upstream.uri_mut() = uri;
        *upstream.version_mut() = if worker.http2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        *upstream.headers_mut() =
            headers::to_worker(&mut parts.headers, content_type, worker.bearer.as_ref());

        let load = worker.track();
        let response = match tokio::time::timeout_at(
            deadline.into(),
            self.client.pool(worker.http2).request(upstream),
        )
        .await
        {
            Err(_) => return Err(GatewayError::UpstreamTimeout),
            Ok(Err(err)) => {
                if is_body_too_large(&err) {
                    return Err(GatewayError::PayloadTooLarge { limit });
                }
                tracing::debug!(worker = %worker.url, error = %err, "worker request failed");
                return Err(if err.is_connect() {
                    GatewayError::UpstreamConnect
                } else {
                    GatewayError::UpstreamBroken
                });
            }
            Ok(Ok(resp)) => resp,
        };
        let (mut head, body) = response.into_parts();
        headers::strip_hop_by_hop(&mut head.headers);
        Ok(Response::from_parts(
            head,
            RespBody::relay(body, deadline, load),
        ))
    }
}
