//! HTTP/1.1 and h2c to plain-HTTP workers, and HTTPS (HTTP/2 or HTTP/1.1 by ALPN) to TLS
//! workers and external providers, over each data-plane thread's own pools.
//!
//! The upstream URI is the worker's pre-parsed scheme and authority plus the client's path
//! and query; the worker key is presented as [`super::credentials`] decides. The answer's
//! body is relayed frame by frame, bounded by the attempt's deadline. Cleartext pools have
//! no TLS layer at all; a failed handshake is reported with what failed
//! ([`TlsFailure`]).

use std::borrow::Cow;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use http::uri::{self, Authority, Scheme, Uri};
use http::{Request, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};

use super::either::{Captures, Either};
use super::{Answer, Attempt, SendError, Transport, Waits};
use crate::fleet::{PoolTuning, Worker};
use crate::http::body::{RespBody, UpstreamBody};
use crate::http::client::{self, ClientOptions, CONNECT_TIMEOUT};
use crate::http::deadline::Deadline;
use crate::http::error::GatewayError;
use crate::http::h1::{self, H1Error};
use crate::http::tls::{TlsFailure, UpstreamTls};
use crate::http::upload::{client_fault, LimitedBody};
use crate::transport::headers;

/// Idle connections kept per worker, per thread.
pub const POOL_MAX_IDLE_PER_HOST: usize = 500;

/// Distinct per-worker pool settings a thread keeps pools for; workers beyond them use
/// the default pools (their `timeout_secs` still applies), so no registration can make a
/// thread build pools without bound.
pub const MAX_TUNED_POOLS: usize = 32;

/// How an attempt reaches its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    /// HTTP/1.1 over TCP, through the gateway's own client ([`h1`]).
    Http1,
    /// Through one of hyper's pools.
    Pooled(PoolWire),
}

/// How a hyper pool speaks to its workers; one pool cannot choose per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolWire {
    /// HTTP/2 with prior knowledge over TCP, for workers registered with `http2`.
    H2c,
    /// TLS, with HTTP/2 or HTTP/1.1 as ALPN settles.
    Tls,
}

impl Wire {
    fn of(worker: &Worker, scheme: &Scheme) -> Wire {
        if *scheme == Scheme::HTTPS {
            Wire::Pooled(PoolWire::Tls)
        } else if worker.http2 {
            Wire::Pooled(PoolWire::H2c)
        } else {
            Wire::Http1
        }
    }
}

/// One pooled client, cleartext or TLS: the two have different connector types, and the
/// cleartext one keeps TLS's stream wrapper off its reads and writes.
#[derive(Clone)]
enum UpstreamPool {
    Plain(Client<HttpConnector, LimitedBody>),
    Tls(Client<HttpsConnector<HttpConnector>, LimitedBody>),
}

impl UpstreamPool {
    fn request(&self, request: Request<LimitedBody>) -> ResponseFuture {
        match self {
            UpstreamPool::Plain(pool) => pool.request(request),
            UpstreamPool::Tls(pool) => pool.request(request),
        }
    }
}

/// A thread's hyper clients towards h2c and TLS workers, one per [`PoolWire`] (HTTP/1.1
/// workers go through [`h1`], whose pool is the thread's own). Workers with their own
/// `http_pool` settings get pools of their own, built on first use and shared by every
/// worker with the same settings.
pub struct UpstreamClient {
    h2c: UpstreamPool,
    tls: UpstreamPool,
    trust: UpstreamTls,
    idle_timeout: Option<Duration>,
    /// `--stream-stall-timeout-secs`: the relay's limit on a silent worker.
    stall: Option<Duration>,
    /// Taken only for workers with a [`PoolTuning`], on this thread only: uncontended.
    tuned: Mutex<Vec<((PoolTuning, PoolWire), UpstreamPool)>>,
}

impl UpstreamClient {
    /// Builds one thread's pools; TLS ones trust `trust`.
    pub fn new(waits: Waits, trust: &UpstreamTls) -> UpstreamClient {
        let defaults = Tuning::defaults(waits.pool_idle);
        UpstreamClient {
            h2c: pool(defaults, PoolWire::H2c, trust),
            tls: pool(defaults, PoolWire::Tls, trust),
            trust: trust.clone(),
            idle_timeout: waits.pool_idle,
            stall: waits.stall,
            tuned: Mutex::new(Vec::new()),
        }
    }

    /// The pool for `worker` over `wire`: the default one (borrowed, so the common case
    /// clones nothing) unless it has its own settings.
    fn pool_for(&self, worker: &Worker, wire: PoolWire) -> Cow<'_, UpstreamPool> {
        let default = match wire {
            PoolWire::H2c => &self.h2c,
            PoolWire::Tls => &self.tls,
        };
        let Some(tuning) = worker.pool else {
            return Cow::Borrowed(default);
        };
        let key = (tuning, wire);
        let mut tuned = self.tuned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, pool)) = tuned.iter().find(|(k, _)| *k == key) {
            return Cow::Owned(pool.clone());
        }
        if tuned.len() >= MAX_TUNED_POOLS {
            return Cow::Borrowed(default);
        }
        let settings = Tuning::defaults(self.idle_timeout).with(tuning);
        let built = pool(settings, wire, &self.trust);
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

fn pool(tuning: Tuning, wire: PoolWire, trust: &UpstreamTls) -> UpstreamPool {
    let (idle, keep, connect) = (
        tuning.max_idle_per_host,
        tuning.idle_timeout,
        tuning.connect_timeout,
    );
    match wire {
        PoolWire::H2c => UpstreamPool::Plain(client::build(ClientOptions::data_path_h2c(
            idle, keep, connect,
        ))),
        PoolWire::Tls => UpstreamPool::Tls(client::build(ClientOptions::data_path_tls(
            trust.clone(),
            idle,
            keep,
            connect,
        ))),
    }
}

impl Transport for UpstreamClient {
    /// `http://` and `https://` workers.
    fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        origin(worker).map(|_| ())
    }

    /// Not an `async fn`: one would hold the attempt twice beside the relay's own future
    /// and be copied whole into every caller's state, on every request.
    fn send(
        &self,
        worker: &Worker,
        mut attempt: Attempt<'_>,
    ) -> impl Future<Output = Result<Answer, SendError>> + Send {
        super::credentials::present(worker, &mut attempt.headers);
        self.relay(worker, attempt)
    }
}

impl UpstreamClient {
    /// Carries `attempt` to `worker` with exactly the headers it holds (no credentials
    /// added: the caller has settled them) and relays the answer.
    ///
    /// Not an `async fn`: it picks the wire and returns that wire's future, so the request
    /// carries no future of its own here.
    pub(super) fn relay<'c, 'w, 'a>(
        &'c self,
        worker: &'w Worker,
        attempt: Attempt<'a>,
    ) -> impl Future<Output = Result<Answer, SendError>> + Send + Captures<(&'c (), &'w (), &'a ())>
    {
        let origin = match origin(worker) {
            Ok(origin) => origin,
            Err(err) => return Either::left(std::future::ready(Err(SendError::Exchange(err)))),
        };
        Either::right(match Wire::of(worker, origin.0) {
            Wire::Http1 => Either::left(self.send_h1(worker, origin.1, attempt)),
            Wire::Pooled(wire) => Either::right(self.send_pooled(worker, origin, wire, attempt)),
        })
    }

    /// An attempt through one of hyper's pools (h2c, https).
    async fn send_pooled(
        &self,
        worker: &Worker,
        origin: (&Scheme, &Authority),
        wire: PoolWire,
        attempt: Attempt<'_>,
    ) -> Result<Answer, SendError> {
        let deadline = attempt.deadline;
        let request = request(attempt, origin, worker)?;
        let pool = self.pool_for(worker, wire);
        let sent = tokio::time::timeout_at(deadline.into(), pool.request(request)).await;
        let response = match sent {
            Err(_) => return Err(SendError::Timeout),
            Ok(Err(err)) => {
                if let Some(fault) = client_fault(&err) {
                    return Err(SendError::ClientBody(fault));
                }
                if let Some(failure) = TlsFailure::find(&err) {
                    tracing::warn!(worker = %worker.url, error = %err, "TLS with the worker failed");
                    return Err(SendError::Exchange(GatewayError::UpstreamTls { failure }));
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
        Ok(Answer::from_parts(
            head,
            RespBody::relay(UpstreamBody::Hyper(body), deadline, self.stall),
        ))
    }

    /// An attempt on a cleartext HTTP/1.1 worker, over the gateway's own client: the
    /// response body is read from the worker's connection by the task serving the client,
    /// or answered as one buffer when it came whole with the head.
    ///
    /// Not an `async fn`: one would keep the attempt (296 bytes) twice in its state and copy
    /// it from the argument to the local on every request; the block uses it in place.
    #[allow(clippy::manual_async_fn)] // see above: the arguments are used in place
    fn send_h1<'c, 'w, 'a>(
        &'c self,
        worker: &'w Worker,
        authority: &'w Authority,
        attempt: Attempt<'a>,
    ) -> impl Future<Output = Result<Answer, SendError>> + Send + Captures<(&'c (), &'w (), &'a ())>
    {
        async move {
            let deadline = attempt.deadline;
            let tuning = match worker.pool {
                Some(tuning) => Tuning::defaults(self.idle_timeout).with(tuning),
                None => Tuning::defaults(self.idle_timeout),
            };
            let exchange = h1::Exchange {
                origin: authority,
                method: &attempt.head.method,
                target: attempt
                    .head
                    .uri
                    .path_and_query()
                    .map_or("/", |target| target.as_str()),
                headers: &attempt.headers,
                connect_timeout: tuning.connect_timeout,
                keep: h1::Keep {
                    max_idle: tuning.max_idle_per_host,
                    idle_timeout: tuning.idle_timeout,
                },
            };
            // The exchange and its deadline are pinned where they stand and polled side by
            // side: wrapped in tokio's `Timeout`, the exchange's future (about 1 KiB) was
            // copied into the wrapper and the wrapper into this state, on every request.
            // The deadline waits on the thread's list, not in the timer wheel
            // (`crate::http::deadline`).
            let mut exchanged = pin!(h1::exchange(exchange, attempt.body));
            let mut expiry = Deadline::new(deadline.into());
            let sent = poll_fn(|cx| match exchanged.as_mut().poll(cx) {
                Poll::Ready(done) => Poll::Ready(Some(done)),
                Poll::Pending => expiry.poll_passed(cx).map(|()| None),
            })
            .await;
            let (head, mut body) = match sent {
                None => return Err(SendError::Timeout),
                Some(Err(err)) => return Err(h1_failure(worker, err)),
                Some(Ok(answer)) => answer,
            };
            if !relayable(head.status) {
                tracing::debug!(worker = %worker.url, status = head.status.as_u16(), "worker answered a status that cannot be relayed");
                return Err(SendError::Exchange(GatewayError::UpstreamBroken));
            }
            let body = match body.take_whole() {
                Some(whole) => RespBody::full(whole),
                None => RespBody::relay(UpstreamBody::H1(body), deadline, self.stall),
            };
            let mut answer = Answer::new(body);
            *answer.status_mut() = head.status;
            *answer.headers_mut() = head.headers;
            headers::strip_hop_by_hop(answer.headers_mut());
            Ok(answer)
        }
    }
}

/// What a failed HTTP/1.1 exchange means for the attempt loop.
fn h1_failure(worker: &Worker, err: H1Error) -> SendError {
    if let H1Error::ClientBody(cause) = &err {
        if let Some(fault) = client_fault(cause.as_ref()) {
            return SendError::ClientBody(fault);
        }
    }
    tracing::debug!(worker = %worker.url, error = %err, "worker request failed");
    SendError::Exchange(match err {
        H1Error::Connect(_) => GatewayError::UpstreamConnect,
        _ => GatewayError::UpstreamBroken,
    })
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
    *upstream.headers_mut() = attempt.headers.into_owned();
    Ok(upstream)
}

/// Whether a worker's status can go to the client: a final status of RFC 9110 (200–599).
/// hyper consumes interim 1xx answers itself except `101`, which this gateway never asks
/// for (it sends no `Upgrade`); and it parses any three digits, 600–999 included.
fn relayable(status: http::StatusCode) -> bool {
    (200..=599).contains(&status.as_u16())
}

/// The scheme and authority of a worker this transport can reach: `http://` and
/// `https://`.
fn origin(worker: &Worker) -> Result<(&Scheme, &Authority), GatewayError> {
    match worker.http_origin() {
        Some(origin) => Ok(origin),
        None => Err(GatewayError::UnsupportedTransport {
            transport: worker.connection_mode().as_str(),
        }),
    }
}
