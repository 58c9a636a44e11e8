//! The data path: how one inference request is served, phase by phase.
//!
//! The route is matched and the caller authenticated before (`crate::app`, for every
//! route); [`Pipeline::serve`] then reads top to bottom as an inference request moves:
//!
//! 1. **prepare** ([`prepare`]) — the body path: stream the body through, or read what
//!    routing and replay need (within the budgets), peek at the fields the policy asks for,
//!    and set aside the head for the worker;
//! 2. **admit** — admission control (concurrency, rate, media budget), taken only once the
//!    body that had to be read has arrived; the ticket rides on the response to its last
//!    byte;
//! 3. **send** ([`send`]) — the attempt loop: [`select`] a worker (or a prefill/decode
//!    pair, [`pd`]), carry the attempt ([`carry`]) over the worker's
//!    [`transport`](crate::transport) or to the front-end ([`crate::api`]) that answers
//!    it on token engines and providers, classify the outcome for its breaker, retry
//!    elsewhere while nothing has been relayed;
//! 4. **respond** — the winning answer becomes the client's response: the release guard
//!    (the worker's load, the admission ticket) and any tap ride on its body, and once the
//!    route is known, for SSE, the terminal error of its dialect;
//! 5. **record** — the router metrics, once the answer is known.
//!
//! Each data-plane thread owns its own upstream pools ([`crate::transport::http`]), so pooled
//! connections never cross threads. Nothing here imports the gateway's wiring: the
//! [`Pipeline`] handle carries what the path reads.

pub mod body_path;
mod carry;
mod dispatch;
mod pd;
pub mod peek;
mod prepare;
pub mod select;
mod send;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http::request_body::RequestBody;
use http::{Request, Response};

use crate::admission::{Admission, Ticket};
use crate::fleet::provider::Backend;
use crate::fleet::{LoadGuard, Registry, Worker};
use crate::history::History;
use crate::http::body::{Dialect, RespBody, Terminal};
use crate::http::error::GatewayError;
use crate::http::guard::Guard;
use crate::http::route::{Endpoint, Route};
use crate::http::tls::UpstreamTls;
use crate::metrics::{Metrics, RouteLabels};
use crate::resilience::RetryConfig;
use crate::routing::Policy;

pub use crate::api::engines::Engines;
pub use crate::transport::headers::ContentType;
pub use crate::transport::http::UpstreamClient;
pub use pd::PdDispatch;

use crate::api::messages::tools::LoopClient;
use crate::api::responses::Runner;
use crate::mcp::builtins::Builtins;
use crate::mcp::McpSettings;
use crate::transport::{is_sse, Answer, Waits};

/// The data path's part of the Limits and timeouts flag group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineSettings {
    /// `--request-timeout-secs`: default timeout of a request to a worker.
    pub request_timeout: Duration,
    /// `--max-payload-size`: largest accepted request body, in bytes (>= 1).
    pub max_payload_size: u64,
    /// `--request-body-timeout-secs`: time a client has to send the part of its body the
    /// gateway reads before dispatch.
    pub request_body_timeout: Duration,
    /// `--request-body-idle-timeout-secs`: longest silence inside a request body, read or
    /// streamed.
    pub request_body_idle_timeout: Duration,
    /// `--upstream-pool-idle-timeout-secs`: idle keep time of upstream connections;
    /// `None` (flag value 0) keeps them forever.
    pub upstream_pool_idle_timeout: Option<Duration>,
    /// `--max-buffered-request-bytes`: largest body kept for replay.
    pub max_buffered_request_bytes: u64,
    /// `--stream-stall-timeout-secs`: longest silence of a worker in the middle of a
    /// relayed response; `None` (flag value 0) waits as long as the request deadline.
    pub stream_stall_timeout: Option<Duration>,
    /// `--upstream-ca-cert-path`: a PEM bundle of CAs trusted for https workers besides
    /// the platform's roots (read at startup into an [`UpstreamTls`]).
    pub upstream_ca_cert_path: Option<PathBuf>,
    /// `--mcp-call-timeout-secs`: longest wait for one call to an MCP server (connect,
    /// tool listing, or a tool) in the provider backend's tool loop.
    pub mcp_call_timeout: Duration,
    /// `--mcp-loop-timeout-secs`: a request's time for MCP calls, all together.
    pub mcp_loop_timeout: Duration,
    /// `--mcp-allow-private-addresses`: MCP servers a client names may be on loopback,
    /// link-local or private addresses.
    pub mcp_allow_private: bool,
    /// `--mcp-config-path`: the MCP servers backing Responses' built-in tools (read at
    /// startup into [`crate::mcp::builtins::Builtins`]).
    pub mcp_config_path: Option<PathBuf>,
}

impl Default for PipelineSettings {
    fn default() -> PipelineSettings {
        PipelineSettings {
            request_timeout: Duration::from_secs(1800),
            max_payload_size: 512 * 1024 * 1024,
            request_body_timeout: Duration::from_secs(120),
            request_body_idle_timeout: Duration::from_secs(30),
            upstream_pool_idle_timeout: Some(Duration::from_secs(3)),
            max_buffered_request_bytes: 16 * 1024 * 1024,
            stream_stall_timeout: Some(Duration::from_secs(300)),
            upstream_ca_cert_path: None,
            mcp_call_timeout: Duration::from_secs(60),
            mcp_loop_timeout: Duration::from_secs(300),
            mcp_allow_private: false,
            mcp_config_path: None,
        }
    }
}

/// How the fleet is organised, as far as the data path cares; copied from the owning
/// modules' settings by the wiring.
#[derive(Clone, Debug, Default)]
pub struct FleetModes {
    /// `--enable-igw`: candidates are the workers of the request's model.
    pub enable_igw: bool,
    /// `--dp-aware`: a request to a rank target carries its rank in the body.
    pub dp_aware: bool,
    /// `--backend`: under a provider backend only `/v1/messages` is served.
    pub backend: Backend,
    /// `--routing-key-headers`: where a request's routing key may come from.
    pub routing_key_headers: Vec<String>,
    /// `--load-monitor-interval`: when overload verdicts refresh, the `Retry-After` of a
    /// shed request.
    pub overload_retry_after: Duration,
}

/// One data-plane thread's clients to workers, one per transport; their connections never
/// cross threads.
pub struct ThreadClients {
    pub http: UpstreamClient,
    pub engines: Engines,
    /// The provider backend's MCP tool loop: MCP servers and the provider's rounds.
    pub tools: LoopClient,
    /// `/v1/responses` run by the gateway (gRPC engines and external providers).
    pub responses: Runner,
}

impl ThreadClients {
    pub fn new(
        settings: &PipelineSettings,
        tls: &UpstreamTls,
        metrics: &Arc<Metrics>,
        history: &Arc<dyn History>,
        builtins: &Arc<Builtins>,
    ) -> ThreadClients {
        // One pool for MCP servers and providers, shared by both tool loops.
        let pool = crate::mcp::client(tls);
        let mcp = McpSettings {
            call_timeout: settings.mcp_call_timeout,
            loop_timeout: settings.mcp_loop_timeout,
            private_ok: settings.mcp_allow_private,
        };
        let waits = Waits {
            pool_idle: settings.upstream_pool_idle_timeout,
            stall: settings.stream_stall_timeout,
        };
        let responses = Runner::new(
            mcp,
            waits.stall,
            pool.clone(),
            metrics.clone(),
            history.clone(),
            builtins.clone(),
        );
        ThreadClients {
            http: UpstreamClient::new(waits, tls),
            engines: Engines::new(waits, tls, metrics.clone()),
            responses,
            tools: LoopClient {
                http: pool,
                mcp,
                metrics: metrics.clone(),
            },
        }
    }
}

/// What the data path shares across threads: the handles it reads and its settings. Built
/// once by the wiring; nothing else of the gateway is visible from here.
pub struct Pipeline {
    pub settings: PipelineSettings,
    pub modes: FleetModes,
    pub registry: Arc<Registry>,
    pub policy: Arc<dyn Policy>,
    pub admission: Arc<Admission>,
    /// Prefill/decode dispatch (`--pd-disaggregation` without `--enable-igw`).
    pub pd: Option<PdDispatch>,
    /// Retry settings in force (none under `--disable-retries`).
    pub retry: RetryConfig,
    pub metrics: Arc<Metrics>,
    /// What the https pools of every thread trust (`--upstream-ca-cert-path`).
    pub tls: UpstreamTls,
    /// Stored responses and conversations (`--history-backend`).
    pub history: Arc<dyn History>,
    /// The MCP servers backing Responses' built-in tools (`--mcp-config-path`).
    pub builtins: Arc<Builtins>,
}

/// What the router metrics need to know of a request once it is over: the model the body
/// named (copied only when the body was read anyway) and the last worker tried.
#[derive(Default)]
struct Seen {
    model: Option<String>,
    worker: Option<Arc<Worker>>,
}

impl Pipeline {
    /// Serves one inference request, matched as `route`, on a thread's upstream clients
    /// and answers it. The route is carried down as it was matched: no phase reads the
    /// path again. `arrived`: when the gateway took the request (its time in the router
    /// metrics, its deadlines and its time to first token count from there). `answered`:
    /// set to the time the router metrics took as the request's end, for the caller's own
    /// (one clock read serves both). The phases, in order.
    ///
    /// Not an `async fn`, which would keep the request twice in its state and copy it from
    /// the argument to a local on every request: the block uses it where it was captured.
    #[allow(clippy::manual_async_fn)] // see above: the arguments are used in place
    pub fn serve<'a>(
        &'a self,
        clients: &'a ThreadClients,
        route: Route,
        req: Request<RequestBody>,
        content_type: ContentType,
        arrived: Instant,
        answered: &'a mut Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Response<RespBody>, GatewayError>> + Send + 'a
    {
        async move {
            let endpoint = route.endpoint().as_str();
            let mut seen = Seen::default();
            // The phases in sequence, each error ending the request: a labelled block rather
            // than an inner `async` block with `?`, which would be one more future to build and
            // poll through on every request.
            let mut result = 'phases: {
                let dispatch = self.dispatch(route);
                if dispatch.provider {
                    if let Err(err) = crate::transport::provider::serves(route) {
                        break 'phases Err(err);
                    }
                }
                // Used where it landed: moving the prepared request (672 bytes) out of its
                // `Result` was a copy on every request.
                let mut prepared = self
                    .prepare(req, route, dispatch, content_type, arrived)
                    .await;
                let prepared = match &mut prepared {
                    Ok(prepared) => prepared,
                    // The error is taken out; the `Result` is dropped with what stands in for it.
                    Err(err) => {
                        break 'phases Err(std::mem::replace(err, GatewayError::UpstreamBroken))
                    }
                };
                let ticket = match self.admit(prepared.media()).await {
                    Ok(ticket) => ticket,
                    Err(err) => break 'phases Err(err),
                };
                self.send(clients, endpoint, prepared, ticket, &mut seen)
                    .await
            };
            // One lookup of the answer's media type serves both the metrics and the relay.
            let sse = result.as_ref().is_ok_and(is_sse);
            *answered = Some(self.record(endpoint, &seen, &result, sse, arrived));
            if let (true, Ok(resp)) = (sse, &mut result) {
                self.guard_relay(endpoint, &seen, resp);
            }
            result
        }
    }

    /// Phase 2: an admission token (perhaps after a wait in the queue) and, for a JSON
    /// body read whole (`media`), its media charge.
    async fn admit(&self, media: Option<&[u8]>) -> Result<Ticket, GatewayError> {
        let metrics = self.metrics.as_ref();
        let mut ticket = self.admission.admit(metrics).await?;
        if let Some(body) = media {
            self.admission
                .charge_media(&mut ticket, body, metrics)
                .await?;
        }
        Ok(ticket)
    }

    /// Phase 4: the answer of the attempt that won, on its way to the client. Whatever
    /// must be released at its last byte rides on the body as one guard, so a long stream
    /// holds the worker's load and the admission token exactly as long as it runs, and a
    /// client that goes away releases them at once. (Taps that store responses or count
    /// usage attach here.)
    fn respond(answer: &mut Answer, load: LoadGuard, ticket: Ticket) {
        let body = answer.body_mut();
        body.hold(load.into_guard());
        // A ticket that holds something is boxed once; without admission limits there is
        // nothing to hold, and the response costs no allocation.
        if !ticket.holds_nothing() {
            body.hold(Guard::new(ticket));
        }
    }

    /// Phase 4, once the route's labels are known: a relayed SSE stream (`resp`) that
    /// fails (its worker stalled or died, the deadline passed) ends with an error event in
    /// the route's dialect and counts as a `streaming_error`. The counter is a handle the
    /// route's streams share, so a stream costs no allocation here.
    fn guard_relay(&self, endpoint: &'static str, seen: &Seen, resp: &mut Response<RespBody>) {
        let failures = self.metrics.stream_errors(&route_labels(endpoint, seen));
        resp.body_mut()
            .end_with(Terminal::new(dialect(endpoint), failures));
    }

    /// Phase 5: the router metrics of the finished request (`sse`: its answer is a stream).
    /// Returns the time it took as the request's end.
    fn record(
        &self,
        endpoint: &'static str,
        seen: &Seen,
        result: &Result<Response<RespBody>, GatewayError>,
        sse: bool,
        started: Instant,
    ) -> Instant {
        let ended = Instant::now();
        let route = route_labels(endpoint, seen);
        match result {
            Ok(_) => {
                let seconds = ended.saturating_duration_since(started).as_secs_f64();
                self.metrics.routed(&route, sse, seconds);
            }
            Err(err) => {
                if let Some(kind) = err.router_error() {
                    self.metrics.router_error(&route, kind);
                }
            }
        }
        ended
    }
}

/// The router labels of a request: the model it named (else its worker's), the worker's
/// connection mode, the route's endpoint.
fn route_labels<'a>(endpoint: &'static str, seen: &'a Seen) -> RouteLabels<'a> {
    RouteLabels {
        connection_mode: seen
            .worker
            .as_ref()
            .map_or("http", |w| w.connection_mode().as_str()),
        model: seen
            .model
            .as_deref()
            .or_else(|| seen.worker.as_ref().and_then(|w| w.model_id.as_deref())),
        endpoint,
    }
}

/// The stream dialect of the route whose endpoint label is `endpoint`: the shape its
/// terminal error event takes.
fn dialect(endpoint: &str) -> Dialect {
    if endpoint == Endpoint::Messages.as_str() {
        Dialect::Messages
    } else if endpoint == Endpoint::Responses.as_str() {
        Dialect::Responses
    } else {
        Dialect::OpenAi
    }
}
