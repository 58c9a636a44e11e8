//! Forwarding to HTTP workers: select, dispatch, relay.
//!
//! The request body streams to the worker unread (counted against the payload limit), or
//! is read first, within the limits [`body_path`] explains; the worker's response streams
//! back frame by frame. Each data-plane thread owns its own connection pool, so pooled
//! connections never cross threads.
//!
//! A request takes its admission ticket only once the body it must read has arrived, so
//! a client trickling its body in holds no token (and is cut off at
//! `--request-body-timeout-secs`); a streamed body is admitted before it is sent.

pub mod body_path;
pub mod headers;
pub mod peek;
pub mod select;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::uri::{self, Authority, Scheme, Uri};
use http::{HeaderMap, HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::admission::body_budget::Charge;
use crate::admission::{Admission, Ticket};
use crate::config::Config;
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::upload::{client_fault, read_prefix, BodyTiming, LimitedBody, Prefix};
use crate::metrics::{Metrics, RouteLabels};
use crate::resilience::{Outcome, RetryConfig};
use crate::routing::{Needs, Policy, RequestFacts};
use crate::workers::{LoadGuard, PoolTuning, Registry, Worker};
use peek::Wants;
use uuid::Uuid;

pub use headers::ContentType;

/// Header naming the worker to use, as an index into the candidates (consistent_hashing).
const TARGET_WORKER: &str = "x-gw-target-worker";

/// Idle connections kept per worker, per thread.
pub const POOL_MAX_IDLE_PER_HOST: usize = 500;
/// Time allowed to establish a TCP connection to a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub fn new(config: &Config) -> UpstreamClient {
        let defaults = Tuning::defaults(config.upstream_pool_idle_timeout);
        UpstreamClient {
            http1: pool(defaults, false),
            h2c: pool(defaults, true),
            idle_timeout: config.upstream_pool_idle_timeout,
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
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(tuning.connect_timeout));
    Client::builder(TokioExecutor::new())
        .http2_only(http2_only)
        .pool_max_idle_per_host(tuning.max_idle_per_host)
        .pool_idle_timeout(tuning.idle_timeout)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
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
    pub admission: &'a Admission,
    pub client: &'a UpstreamClient,
    pub retry: RetryConfig,
    pub metrics: &'a Metrics,
    /// The route's `endpoint` metrics label.
    pub endpoint: &'static str,
}

/// What the router metrics need to know of a request once it is over: the model the body
/// named (copied only when the body was read anyway) and the last worker tried.
#[derive(Default)]
struct Seen {
    model: Option<String>,
    worker: Option<Arc<Worker>>,
}

/// The request body as the attempts see it: streamed once, or held for replay.
enum Payload {
    Stream(Option<LimitedBody>),
    Held(Bytes),
}

impl Payload {
    fn replayable(&self) -> bool {
        matches!(self, Payload::Held(_))
    }

    /// The attempt's body as `worker` must receive it: a JSON body sent to a
    /// data-parallel rank (`--dp-aware`, which holds JSON bodies) carries the rank;
    /// anything else goes unchanged (other media types have no field to set).
    fn for_worker(
        &self,
        worker: &Worker,
        body: LimitedBody,
        json: bool,
    ) -> Result<LimitedBody, GatewayError> {
        match (self, worker.dp) {
            (Payload::Held(bytes), Some(rank)) if json => {
                crate::workers::dp::pin_rank(bytes, rank.rank())
                    .map(LimitedBody::whole)
                    .map_err(|_| GatewayError::BodyNotJsonObject)
            }
            _ => Ok(body),
        }
    }

    /// The body of the next attempt; `None` once a streamed body has been used.
    fn next(&mut self) -> Option<LimitedBody> {
        match self {
            Payload::Stream(body) => body.take(),
            Payload::Held(bytes) => Some(LimitedBody::whole(bytes.clone())),
        }
    }
}

/// How one attempt ended, when it did not produce the response to relay.
enum Failed {
    /// A retryable status; the response is kept in case it is the last word.
    Status(Response<Incoming>, LoadGuard),
    /// No response: connect failure or broken exchange.
    Exchange(GatewayError),
}

impl Failed {
    /// The client's answer when no further attempt follows.
    fn into_result(
        self,
        deadline: Instant,
        ticket: Ticket,
    ) -> Result<Response<RespBody>, GatewayError> {
        match self {
            Failed::Status(response, load) => Ok(relay(response, deadline, load, ticket)),
            Failed::Exchange(err) => Err(err),
        }
    }
}

impl Forward<'_> {
    /// Forwards `req` to a routable worker and relays its answer, retrying on another
    /// worker (with backoff) while no response byte has reached the client.
    pub async fn send(
        &self,
        req: Request<Incoming>,
        content_type: ContentType,
    ) -> Result<Response<RespBody>, GatewayError> {
        let started = Instant::now();
        let mut seen = Seen::default();
        let result = self.dispatch(req, content_type, &mut seen).await;
        let route = RouteLabels {
            connection_mode: seen
                .worker
                .as_ref()
                .map_or("http", |w| w.connection_mode().as_str()),
            model: seen
                .model
                .as_deref()
                .or_else(|| seen.worker.as_ref().and_then(|w| w.model_id.as_deref())),
            endpoint: self.endpoint,
        };
        match &result {
            Ok(resp) => {
                let streaming = resp
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
                self.metrics
                    .routed(&route, streaming, started.elapsed().as_secs_f64());
            }
            Err(err) => {
                if let Some(kind) = err.router_error() {
                    self.metrics.router_error(&route, kind);
                }
            }
        }
        result
    }

    async fn dispatch(
        &self,
        req: Request<Incoming>,
        content_type: ContentType,
        seen: &mut Seen,
    ) -> Result<Response<RespBody>, GatewayError> {
        if self.config.pd_disaggregation && !self.config.enable_igw {
            return Err(GatewayError::NotImplemented {
                route: "prefill/decode dispatch (--pd-disaggregation)",
            });
        }
        let limit = self.config.max_payload_size;
        let declared = declared_length(&req);
        if declared.is_some_and(|len| len > limit) {
            return Err(GatewayError::PayloadTooLarge { limit });
        }
        let deadline = Instant::now() + self.config.request_timeout;

        let json = content_type == ContentType::Json;
        let needs = self.policy.needs();
        // Header values are shared buffers: taken before the header map is handed on.
        let (routing_key, target_worker) = if needs == Needs::Header {
            (
                self.routing_key_header(req.headers()),
                req.headers().get(TARGET_WORKER).cloned(),
            )
        } else {
            (None, None)
        };
        let inputs = body_path::Inputs {
            needs_model: self.config.enable_igw && json,
            needs_text: needs == Needs::PromptText && json,
            needs_rid: needs == Needs::Header
                && json
                && routing_key.is_none()
                && target_worker.is_none(),
            mutates_body: self.config.dp_aware && json,
            needs_media: json && self.admission.media.is_some(),
            retries: self.retry.enabled(),
            declared_len: declared,
            max_buffered: self.config.max_buffered_request_bytes,
        };
        let path = body_path::decide(inputs);
        let (mut parts, body) = req.into_parts();
        let timing = BodyTiming {
            idle: self.config.request_body_idle_timeout,
            whole_by: tokio::time::Instant::from_std(
                deadline.min(Instant::now() + self.config.request_body_timeout),
            ),
        };
        let body = LimitedBody::new(body, limit, Some(timing));
        // Held until the exchange is over: the bytes of a held body stay charged.
        let (mut payload, path, _charge) = self.read_body(body, path, &inputs, timing).await?;
        self.metrics.body_path(path);
        let mut ticket = self.admission.admit(self.metrics).await?;
        if let (Payload::Held(bytes), true) = (&payload, json) {
            self.admission
                .charge_media(&mut ticket, bytes, self.metrics)
                .await?;
        }
        let wants = Wants {
            model: inputs.needs_model || inputs.needs_text,
            stream: false,
            rid: inputs.needs_rid,
            text: inputs.needs_text,
        };
        let held = match &payload {
            Payload::Held(bytes) if wants != Wants::default() => bytes.clone(),
            _ => Bytes::new(),
        };
        let peeked = peek::peek(&held, wants);
        let facts = RequestFacts {
            routing_key: routing_key
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .or(peeked.rid.as_deref()),
            target_worker: target_worker.as_ref().and_then(|v| v.to_str().ok()),
            model: peeked.model.as_deref(),
            text: peeked.text.as_deref(),
            body_len: declared.map_or(held.len(), |len| usize::try_from(len).unwrap_or(usize::MAX)),
        };
        if needs == Needs::Header {
            if routing_key.is_some() {
                self.metrics.routing_key_source("header");
            } else if peeked.rid.is_some() {
                self.metrics.routing_key_source("rid");
            }
        }
        seen.model = peeked.model.as_deref().map(str::to_owned);
        // Candidates are narrowed to the model's workers only with several models behind
        // the gateway; otherwise the model only informs the policy.
        let model = if inputs.needs_model {
            peeked.model.as_deref()
        } else {
            None
        };
        let mut headers = headers::to_worker(&mut parts.headers, content_type, None);

        let mut tried: Vec<Uuid> = Vec::new();
        let mut attempt: u32 = 0;
        let mut resent = false;
        let mut last: Option<Failed> = None;
        loop {
            let picked = {
                let snapshot = self.registry.snapshot();
                select::pick(&snapshot, model, self.policy, &facts, &tried)
            };
            let worker = match (picked, last.take()) {
                (Ok((worker, how)), _) => {
                    self.metrics
                        .selected(&worker, facts.model, self.policy.name(), &how);
                    worker
                }
                // Overload sheds the request, never retried: the first attempt sheds at
                // selection, a retry at dispatch.
                (Err(select::NoPick::Overloaded), _) => {
                    let stage = if attempt == 0 {
                        "selection"
                    } else {
                        "dispatch"
                    };
                    self.metrics.overload_shed(stage);
                    return Err(GatewayError::OverloadShed {
                        retry_after_secs: self.config.load_monitor_interval.as_secs(),
                    });
                }
                // Every breaker opened while retrying: the last answer is the better word.
                (Err(_), Some(failed)) => return failed.into_result(deadline, ticket),
                (Err(select::NoPick::None), None) => return Err(self.no_worker_for(model)),
            };
            // A worker this build cannot reach fails before anything is sent, so even a
            // streamed body is still unread: another worker takes the request at once, and
            // the failure goes through the breaker so the worker leaves rotation.
            let origin = match cleartext_origin(&worker) {
                Ok(origin) => origin,
                Err(unreachable) => {
                    self.failed_exchange(&worker, &unreachable);
                    tried.push(worker.id);
                    last = Some(Failed::Exchange(unreachable));
                    continue;
                }
            };
            let Some(body) = payload.next() else {
                return Err(GatewayError::UpstreamBroken);
            };
            let body = payload.for_worker(&worker, body, json)?;
            let last_chance = !payload.replayable();
            let upstream =
                self.request(&parts, &mut headers, origin, &worker, body, last_chance)?;
            seen.worker = Some(worker.clone());
            let load = worker.track();
            // A worker's `http_pool.timeout_secs` caps this attempt, relay included.
            let attempt_deadline = worker
                .request_timeout
                .map_or(deadline, |cap| deadline.min(Instant::now() + cap));
            let sent = tokio::time::timeout_at(
                attempt_deadline.into(),
                self.client.pool_for(&worker).request(upstream),
            )
            .await;
            let failed = match sent {
                Err(_) => {
                    self.failed_exchange(&worker, &GatewayError::UpstreamTimeout);
                    return Err(GatewayError::UpstreamTimeout);
                }
                Ok(Err(err)) => {
                    // The client's body failed, not the worker: no breaker, no retry.
                    if let Some(fault) = client_fault(&err) {
                        return Err(GatewayError::from_read(fault, limit));
                    }
                    tracing::debug!(worker = %worker.url, error = %err, "worker request failed");
                    let failure = if err.is_connect() {
                        GatewayError::UpstreamConnect
                    } else {
                        GatewayError::UpstreamBroken
                    };
                    self.failed_exchange(&worker, &failure);
                    // A pooled connection the worker closed as the request went out: one
                    // immediate resend, before any retry.
                    if failure == GatewayError::UpstreamBroken && payload.replayable() && !resent {
                        resent = true;
                        self.metrics.send_retry();
                        continue;
                    }
                    Failed::Exchange(failure)
                }
                Ok(Ok(response)) if !relayable(response.status()) => {
                    tracing::debug!(worker = %worker.url, status = response.status().as_u16(), "worker answered a status that cannot be relayed");
                    self.failed_exchange(&worker, &GatewayError::UpstreamBroken);
                    Failed::Exchange(GatewayError::UpstreamBroken)
                }
                Ok(Ok(response)) => {
                    let status = response.status();
                    self.metrics.upstream_response(status.as_u16(), "");
                    if status.is_server_error() {
                        let kind = if status == http::StatusCode::GATEWAY_TIMEOUT {
                            "timeout"
                        } else {
                            "backend_error"
                        };
                        self.metrics.worker_error(&worker, kind);
                    }
                    let outcome = worker.breaker.config().classify(status);
                    self.record_outcome(&worker, outcome);
                    if RetryConfig::retries_status(status) && payload.replayable() {
                        Failed::Status(response, load)
                    } else {
                        return Ok(relay(response, attempt_deadline, load, ticket));
                    }
                }
            };
            attempt += 1;
            let backoff = self.retry.backoff(attempt);
            let can_retry = payload.replayable()
                && attempt <= self.retry.max_retries
                && Instant::now() + backoff < deadline;
            if !can_retry {
                if payload.replayable() && attempt > self.retry.max_retries {
                    tracing::debug!(worker = %worker.url, attempts = attempt, "retries exhausted");
                    self.metrics.retries_exhausted(&worker, self.endpoint);
                }
                return failed.into_result(deadline, ticket);
            }
            self.metrics
                .retry(&worker, self.endpoint, attempt, backoff.as_secs_f64());
            last = Some(failed);
            tracing::debug!(worker = %worker.url, attempt, backoff_ms = backoff.as_millis() as u64, "retrying on another worker");
            tried.push(worker.id);
            tokio::time::sleep(backoff).await;
        }
    }

    /// Why no worker took the request: under `--enable-igw` a model no registered worker
    /// serves is unknown (404, spec 2); otherwise its workers are out of rotation (503).
    fn no_worker_for(&self, model: Option<&str>) -> GatewayError {
        match model {
            Some(model) if !self.registry.snapshot().knows_model(model) => {
                GatewayError::ModelNotFound
            }
            _ => GatewayError::NoAvailableWorkers,
        }
    }

    /// Reads what `path` says of the body before dispatch, by the body's whole-body
    /// deadline and within the gateway-wide budget, and settles the path:
    /// a buffered body that passes its hold limit or the budget streams on instead.
    async fn read_body(
        &self,
        body: LimitedBody,
        path: body_path::BodyPath,
        inputs: &body_path::Inputs,
        timing: BodyTiming,
    ) -> Result<(Payload, body_path::BodyPath, Option<Charge>), GatewayError> {
        use body_path::{BodyPath, StreamReason};
        if !path.is_buffered() {
            return Ok((Payload::Stream(Some(body)), path, None));
        }
        let limit = self.config.max_payload_size;
        let cap = inputs.hold_limit().unwrap_or(u64::MAX);
        let charge = self.admission.bodies.charge();
        match read_prefix(body, cap, charge, timing.whole_by).await {
            Err(err) => Err(GatewayError::from_read(err, limit)),
            Ok(Prefix::Whole(bytes, charge)) => Ok((Payload::Held(bytes), path, Some(charge))),
            // Only the budget ends the read of a body held whole early (the payload limit
            // is an error of its own).
            Ok(Prefix::Partial { .. }) if inputs.hold_limit().is_none() => {
                Err(GatewayError::BufferBudgetFull)
            }
            Ok(Prefix::Partial { body, budget_full }) => {
                let reason = if budget_full {
                    StreamReason::BudgetFull
                } else {
                    StreamReason::RetryForfeited
                };
                Ok((
                    Payload::Stream(Some(body)),
                    BodyPath::Streamed(reason),
                    None,
                ))
            }
        }
    }

    /// Accounts for an exchange that produced no response.
    fn failed_exchange(&self, worker: &Worker, err: &GatewayError) {
        self.metrics
            .upstream_response(err.status().as_u16(), err.code());
        let kind = if *err == GatewayError::UpstreamTimeout {
            "timeout"
        } else {
            "backend_error"
        };
        self.metrics.worker_error(worker, kind);
        self.record_outcome(worker, Outcome::Failure);
    }

    /// Feeds the worker's breaker and counts the outcome and any state change.
    fn record_outcome(&self, worker: &Worker, outcome: Outcome) {
        if outcome != Outcome::Neutral && worker.breaker.config().enabled {
            self.metrics
                .breaker_outcome(worker, outcome == Outcome::Failure);
        }
        if let Some(change) = worker.breaker.record(outcome) {
            self.metrics
                .breaker_transition(worker, change.from.as_str(), change.to.as_str());
            tracing::info!(
                worker = %worker.url,
                from = change.from.as_str(),
                to = change.to.as_str(),
                "circuit breaker changed"
            );
        }
    }

    /// The routing key from the first `--routing-key-headers` header the request carries.
    fn routing_key_header(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        self.config
            .routing_key_headers
            .iter()
            .find_map(|name| headers.get(name.as_str()))
            .cloned()
    }

    /// The request for one attempt on `worker`. An attempt that cannot be followed by
    /// another (a streamed body) takes the header map; others copy it.
    fn request(
        &self,
        parts: &http::request::Parts,
        headers: &mut HeaderMap,
        (scheme, authority): (&Scheme, &Authority),
        worker: &Worker,
        body: LimitedBody,
        last: bool,
    ) -> Result<Request<LimitedBody>, GatewayError> {
        let mut uri_parts = uri::Parts::default();
        uri_parts.scheme = Some(scheme.clone());
        uri_parts.authority = Some(authority.clone());
        uri_parts.path_and_query = parts.uri.path_and_query().cloned();
        let uri = Uri::from_parts(uri_parts).map_err(|_| GatewayError::UpstreamBroken)?;

        let mut upstream = Request::new(body);
        *upstream.method_mut() = parts.method.clone();
        *upstream.uri_mut() = uri;
        *upstream.version_mut() = if worker.http2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        let mut headers = if last {
            std::mem::take(headers)
        } else {
            headers.clone()
        };
        if !headers.contains_key(AUTHORIZATION) {
            if let Some(bearer) = &worker.bearer {
                headers.insert(AUTHORIZATION, bearer.clone());
            }
        }
        *upstream.headers_mut() = headers;
        Ok(upstream)
    }
}

/// Whether a worker's status can go to the client: a final status of RFC 9110 (200–599).
/// hyper consumes interim 1xx answers itself except `101`, which this gateway never asks
/// for (it sends no `Upgrade`); and it parses any three digits, 600–999 included.
fn relayable(status: http::StatusCode) -> bool {
    (200..=599).contains(&status.as_u16())
}

/// The scheme and authority of a worker the data plane can reach: plain HTTP only in this
/// build (TLS workers and gRPC engines have no transport yet).
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

/// The worker's response on its way to the client, hop-by-hop headers removed.
fn relay(
    response: Response<Incoming>,
    deadline: Instant,
    load: LoadGuard,
    ticket: Ticket,
) -> Response<RespBody> {
    let (mut head, body) = response.into_parts();
    headers::strip_hop_by_hop(&mut head.headers);
    Response::from_parts(head, RespBody::relay(body, deadline, load).holding(ticket))
}
