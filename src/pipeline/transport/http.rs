//! HTTP/1.1 and h2c to plain-HTTP workers, over each data-plane thread's own pools.
//!
//! The upstream URI is the worker's pre-parsed scheme and authority plus the client's path
//! and query; the worker key is presented when the client sent no `Authorization`. The
//! answer's body is relayed frame by frame, bounded by the attempt's deadline.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::uri::{self, Authority, Scheme, Uri};
use http::{Request, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

use super::{Answer, Attempt, SendError, Transport};
use crate::fleet::{PoolTuning, Worker};
use crate::http::body::RespBody;
use crate::http::client::{self, ClientOptions, CONNECT_TIMEOUT};
use crate::http::error::GatewayError;
use crate::http::upload::{client_fault, LimitedBody};
use crate::pipeline::headers;
use crate::pipeline::PipelineSettings;

/// Idle connections kept per worker, per thread.
pub const POOL_MAX_IDLE_PER_HOST: usize = 500;

/// Distinct per-worker pool settings a thread keeps pools for; workers beyond them use
/// the default pools (their `timeout_secs` still applies), so no registration can make a
/// thread build pools without bound.
pub const MAX_TUNED_POOLS: usize = 32;

/// One pooled client towards plain-HTTP workers, speaking one protocol.
type UpstreamPool = Client<HttpConnector, LimitedBody>;

/// A thread's clients towards HTTP workers: HTTP/1.1, and HTTP/2 with prior knowledge
/// (h2c) for workers registered with `http2` (one pool cannot choose per request).
/// Workers with their own `http_pool` settings get pools of their own, built on first use
/// and shared by every worker with the same settings.
pub struct UpstreamClient {
    http1: UpstreamPool,
    h2c: UpstreamPool,
    idle_timeout: Option<Duration>,
    /// Taken only for workers with a [`PoolTuning`], on this thread only: uncontended.
    tuned: Mutex<Vec<((PoolTuning, bool), UpstreamPool)>>,
}

impl UpstreamClient {
    /// Builds one thread's pools.
    pub fn new(settings: &PipelineSettings) -> UpstreamClient {
        let defaults = Tuning::defaults(settings.upstream_pool_idle_timeout);
        UpstreamClient {
            http1: pool(defaults, false),
            h2c: pool(defaults, true),
            idle_timeout: settings.upstream_pool_idle_timeout,
            tuned: Mutex::new(Vec::new()),
        }
    }

    /// The pool for `worker`: the default one for its protocol unless it has its own
    /// settings.
    fn pool_for(&self, worker: &Worker) -> Cow<'_, UpstreamPool> {
        let default = if worker.http2 { &self.h2c } else { &self.http1 };
        let Some(tuning) = worker.pool else {
            return Cow::Borrowed(default);
        };
        let key = (tuning, worker.http2);
        let mut tuned = self.tuned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, pool)) = tuned.iter().find(|(k, _)| *k == key) {
            return Cow::Owned(pool.clone());
        }
        if tuned.len() >= MAX_TUNED_POOLS {
            return Cow::Borrowed(default);
        }
        let built = pool(
            Tuning::defaults(self.idle_timeout).with(tuning),
            worker.http2,
        );
        tuned.push((key, built.clone()));
        Cow::Owned(built)
    }
}

/// The settings a pool is built with.
#[derive(Clone, Copy)]
struct Tuning {
    max_idle_per_host: usize,
    idle_timeout: Option<Duration>,
    connect_timeout: Duration,
}

impl Tuning {
    fn defaults(idle_timeout: Option<Duration>) -> Tuning {
        Tuning {
            max_idle_per_host: POOL_MAX_IDLE_PER_HOST,
            idle_timeout,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// These settings with a worker's overrides applied.
    fn with(self, worker: PoolTuning) -> Tuning {
        Tuning {
            max_idle_per_host: worker.max_idle_per_host.unwrap_or(self.max_idle_per_host),
            idle_timeout: worker.idle_timeout.unwrap_or(self.idle_timeout),
            connect_timeout: worker.connect_timeout.unwrap_or(self.connect_timeout),
        }
    }
}

fn pool(tuning: Tuning, http2_only: bool) -> UpstreamPool {
    client::build(ClientOptions::data_path(
        http2_only,
        tuning.max_idle_per_host,
        tuning.idle_timeout,
        tuning.connect_timeout,
    ))
}

impl Transport for UpstreamClient {
    /// Plain HTTP only in this build: TLS workers have no transport yet.
    fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        cleartext_origin(worker).map(|_| ())
    }

    async fn send(&self, worker: &Worker, attempt: Attempt<'_>) -> Result<Answer, SendError> {
        let origin = cleartext_origin(worker).map_err(SendError::Exchange)?;
        let deadline = attempt.deadline;
        let request = request(attempt, origin, worker)?;
        let sent =
            tokio::time::timeout_at(deadline.into(), self.pool_for(worker).request(request)).await;
        let response = match sent {
            Err(_) => return Err(SendError::Timeout),
            Ok(Err(err)) => {
                if let Some(fault) = client_fault(&err) {
                    return Err(SendError::ClientBody(fault));
                }
                tracing::debug!(worker = %worker.url, error = %err, "worker request failed");
                return Err(SendError::Exchange(if err.is_connect() {
                    GatewayError::UpstreamConnect
                } else {
                    GatewayError::UpstreamBroken
                }));
            }
            Ok(Ok(response)) => response,
        };
        if !relayable(response.status()) {
            tracing::debug!(worker = %worker.url, status = response.status().as_u16(), "worker answered a status that cannot be relayed");
            return Err(SendError::Exchange(GatewayError::UpstreamBroken));
        }
        let (mut head, body) = response.into_parts();
        headers::strip_hop_by_hop(&mut head.headers);
        Ok(Answer::from_parts(head, RespBody::relay(body, deadline)))
    }
}

/// The request of one attempt on `worker`.
fn request(
    attempt: Attempt<'_>,
    (scheme, authority): (&Scheme, &Authority),
    worker: &Worker,
) -> Result<Request<LimitedBody>, SendError> {
    let mut uri_parts = uri::Parts::default();
    uri_parts.scheme = Some(scheme.clone());
    uri_parts.authority = Some(authority.clone());
    uri_parts.path_and_query = attempt.head.uri.path_and_query().cloned();
    let uri = Uri::from_parts(uri_parts)
        .map_err(|_| SendError::Exchange(GatewayError::UpstreamBroken))?;

    let mut upstream = Request::new(attempt.body);
    *upstream.method_mut() = attempt.head.method.clone();
    *upstream.uri_mut() = uri;
    *upstream.version_mut() = if worker.http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let mut headers = attempt.headers;
    if !headers.contains_key(AUTHORIZATION) {
        if let Some(bearer) = &worker.bearer {
            headers.insert(AUTHORIZATION, bearer.clone());
        }
    }
    *upstream.headers_mut() = headers;
    Ok(upstream)
}

/// Whether a worker's status can go to the client: a final status of RFC 9110 (200–599).
/// hyper consumes interim 1xx answers itself except `101`, which this gateway never asks
/// for (it sends no `Upgrade`); and it parses any three digits, 600–999 included.
fn relayable(status: http::StatusCode) -> bool {
    (200..=599).contains(&status.as_u16())
}

/// The scheme and authority of a worker this transport can reach: plain HTTP only.
fn cleartext_origin(worker: &Worker) -> Result<(&Scheme, &Authority), GatewayError> {
    match worker.http_origin() {
        Some((scheme, _)) if *scheme == Scheme::HTTPS => {
            Err(GatewayError::UnsupportedTransport { transport: "https" })
        }
        Some(origin) => Ok(origin),
        None => Err(GatewayError::UnsupportedTransport {
            transport: worker.connection_mode().as_str(),
        }),
    }
}
