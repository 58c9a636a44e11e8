//! The gateway's own metrics (spec 3), in one place: every family is registered here and
//! recorded through the methods below, so names, labels and buckets cannot drift apart.
//!
//! Counters and histograms live in `prometheus-client` families keyed by small arrays of
//! static or interned label values ([`labels`]), so recording allocates nothing. Figures
//! the registry already holds (in-flight load, health, breaker state, pool sizes) are not
//! kept twice: [`fleet::FleetCollector`] reads them from the registry snapshot at scrape
//! time. A series appears only once something recorded it.

pub mod exporter;
pub mod fleet;
pub mod histogram;
pub mod inflight;
pub mod labels;
mod local;
mod mcp;
mod pd;
pub mod policy;
pub mod runtime;
pub mod shard;
pub mod summary;
mod tokenizer_cache;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use histogram::Histogram;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::registry::Registry;

use crate::admission::{Admission, AdmissionEvents};
use crate::fleet::{Fleet, Worker};
use crate::http::body::CountFailure;
use crate::http::route::Route;
use crate::routing::{Branch, Policy, Selection};
use labels::{Label, Labels, ModelLabels};
pub use shard::{Counter, Gauge};

/// Body-path label pairs whose counter handles are kept resolved (the pipeline has 11).
pub const BODY_PATH_SLOTS: usize = 16;

/// Default buckets (seconds) of every `*_duration_seconds` histogram.
pub const DURATION_BUCKETS: [f64; 29] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 180.0, 240.0, 300.0, 480.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 5400.0, 7200.0,
];

type Counters<const N: usize> = Family<Labels<N>, Counter>;
type Histograms<const N: usize> = Family<Labels<N>, Histogram, Buckets>;

/// Builds each histogram of a family with the configured buckets.
#[derive(Clone, Debug)]
struct Buckets(Arc<[f64]>);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// The Metrics flag group.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsSettings {
    /// `--prometheus-host`: address of the metrics listener.
    pub host: IpAddr,
    /// `--prometheus-port`: port of the metrics listener (> 0).
    pub port: u16,
    /// `--prometheus-duration-buckets`: latency histogram bounds, ascending.
    pub duration_buckets: Vec<f64>,
}

impl Default for MetricsSettings {
    fn default() -> MetricsSettings {
        MetricsSettings {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 29000,
            duration_buckets: DURATION_BUCKETS.to_vec(),
        }
    }
}

/// Every family the gateway records.
pub struct Metrics {
    /// Tells this instance's per-thread caches from another's.
    id: usize,
    registry: Registry,
    models: ModelLabels,
    // HTTP layer.
    http_requests: Counters<2>,
    http_duration: Histograms<2>,
    http_responses: Counters<3>,
    http_active: Gauge,
    /// Pre-resolved HTTP-layer handles, one slot per (route, method).
    http: Box<[OnceLock<HttpHandles>]>,
    http_overflow: OnceLock<HttpHandles>,
    /// In-flight requests by start time, for the age gauge.
    pub inflight_ages: Arc<inflight::InflightAges>,
    // Admission.
    rate_limits: Counters<1>,
    admission_rejected: Counters<1>,
    overload_shed: Counters<1>,
    // Router.
    router_requests: Counters<6>,
    router_duration: Histograms<5>,
    router_errors: Counters<6>,
    router_ttft: Histograms<4>,
    router_tpot: Histograms<4>,
    router_generation: Histograms<4>,
    router_tokens: Counters<5>,
    upstream_responses: Counters<3>,
    /// `gw_router_upstream_responses_total` for 200 without a gateway code, pre-resolved.
    upstream_ok: OnceLock<Counter>,
    send_retries: Counters<1>,
    body_path: Counters<2>,
    /// One pre-resolved counter per body path decision.
    body_paths: [OnceLock<Counter>; BODY_PATH_SLOTS],
    // Workers.
    health_checks: Counters<2>,
    selections: Counters<4>,
    worker_errors: Counters<3>,
    cb_transitions: Counters<3>,
    cb_outcomes: Counters<2>,
    retries: Counters<2>,
    retries_exhausted: Counters<2>,
    retry_backoff: summary::BackoffSummary,
    // Policies.
    branches: [Counters<1>; 4],
    match_ratio: Histogram,
    key_source: Counters<1>,
    // MCP tool calls run by the gateway.
    mcp: mcp::McpMetrics,
    // Prefill/decode dispatch.
    pd: pd::PdMetrics,
    /// The runtime canary's figures.
    pub runtime: runtime::RuntimeMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Which policy's branch family a branch belongs to.
fn branch_family(branch: Branch) -> usize {
    match branch {
        Branch::TreeMatch
        | Branch::Spill
        | Branch::ExpectedWaitFallback
        | Branch::FirstHealthyFallback => 0,
        Branch::RingHit
        | Branch::LoadBalanceWalk
        | Branch::FallbackLeastLoad
        | Branch::NoRoutingKey => 1,
        Branch::TargetWorkerHit
        | Branch::TargetWorkerMiss
        | Branch::RoutingKeyHit
        | Branch::RandomFallback => 2,
        Branch::OccupiedHit | Branch::OccupiedMiss | Branch::Vacant | Branch::NoRoutingId => 3,
        // Reported by several policies: counted under the policy that made the selection.
        Branch::NoHealthyWorkers => usize::MAX,
    }
}

/// Index of a policy's branch family by policy name.
fn policy_family(policy: &str) -> Option<usize> {
    match policy {
        "cache_aware" => Some(0),
        "prefix_hash" => Some(1),
        "consistent_hashing" => Some(2),
        "manual" => Some(3),
        _ => None,
    }
}

fn histograms<const N: usize>(buckets: Arc<[f64]>) -> Histograms<N> {
    Family::new_with_constructor(Buckets(buckets))
}

/// What the scrape-time collectors read: the fleet, the policy's gauges and the admission
/// limiter's state.
pub struct Sources {
    pub fleet: Arc<Fleet>,
    pub policy: Arc<dyn Policy>,
    pub admission: Arc<Admission>,
}

/// What a streamed gRPC generation measured (seconds), for [`Metrics::generation`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerationTiming {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    pub duration: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Where a request was routed, for the router families.
pub struct RouteLabels<'a> {
    pub connection_mode: &'static str,
    pub model: Option<&'a str>,
    pub endpoint: &'static str,
}

impl Metrics {
    /// Registers every family; `duration_buckets` replaces the default latency buckets.
    pub fn new(duration_buckets: &[f64], sources: Sources) -> Metrics {
        let buckets: Arc<[f64]> = Arc::from(duration_buckets);
        let mut registry = Registry::default();
        static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
        let m = Metrics {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            registry: Registry::default(),
            models: ModelLabels::default(),
            http_requests: Family::default(),
            http_duration: histograms(buckets.clone()),
            http_responses: Family::default(),
            http_active: Gauge::default(),
            http: (0..Route::ALL.len() * labels::METHODS.len())
                .map(|_| OnceLock::new())
                .collect(),
            http_overflow: OnceLock::new(),
            inflight_ages: Arc::default(),
            rate_limits: Family::default(),
            admission_rejected: Family::default(),
            overload_shed: Family::default(),
            router_requests: Family::default(),
            router_duration: histograms(buckets.clone()),
            router_errors: Family::default(),
            router_ttft: histograms(buckets.clone()),
            router_tpot: histograms(buckets.clone()),
            router_generation: histograms(buckets.clone()),
            pd: pd::PdMetrics::new(buckets.clone()),
            mcp: mcp::McpMetrics::new(buckets),
            router_tokens: Family::default(),
            upstream_responses: Family::default(),
            upstream_ok: OnceLock::new(),
            send_retries: Family::default(),
            body_path: Family::default(),
            body_paths: Default::default(),
            health_checks: Family::default(),
            selections: Family::default(),
            worker_errors: Family::default(),
            cb_transitions: Family::default(),
            cb_outcomes: Family::default(),
            retries: Family::default(),
            retries_exhausted: Family::default(),
            retry_backoff: summary::BackoffSummary::default(),
            branches: Default::default(),
            match_ratio: Histogram::new((0..=10).map(|i| f64::from(i) / 10.0)),
            key_source: Family::default(),
            runtime: runtime::RuntimeMetrics::default(),
        };
        // Counter names are registered without `_total`: the encoder appends it.
        registry.register(
            "gw_http_requests",
            "Requests received",
            m.http_requests.clone(),
        );
        registry.register(
            "gw_http_request_duration_seconds",
            "Receipt to response head",
            m.http_duration.clone(),
        );
        registry.register("gw_http_responses", "Responses", m.http_responses.clone());
        registry.register(
            "gw_http_connections_active",
            "Requests in flight on the main listener",
            m.http_active.clone(),
        );
        // The limiter's families exist only while it runs (spec 3: recorded when
        // `--max-concurrent-requests` is set); rejections by the media budget are counted
        // whether or not it does.
        if sources.admission.limits() {
            registry.register(
                "gw_http_rate_limit",
                "Concurrency limiter decisions",
                m.rate_limits.clone(),
            );
            registry.register(
                "gw_admission_inflight",
                "Requests holding an admission token",
                sources.admission.gauges.inflight.clone(),
            );
            registry.register(
                "gw_admission_queue_depth",
                "Requests waiting in the admission queue",
                sources.admission.gauges.queue_depth.clone(),
            );
        }
        registry.register(
            "gw_admission_queue_rejected",
            "Requests refused by admission control, by reason",
            m.admission_rejected.clone(),
        );
        registry.register(
            "gw_worker_overload_shed",
            "Requests shed with 503 worker_overload_protection_shed",
            m.overload_shed.clone(),
        );
        registry.register(
            "gw_router_requests",
            "Requests processed",
            m.router_requests.clone(),
        );
        registry.register(
            "gw_router_request_duration_seconds",
            "Total duration",
            m.router_duration.clone(),
        );
        registry.register(
            "gw_router_request_errors",
            "Router errors",
            m.router_errors.clone(),
        );
        registry.register(
            "gw_router_ttft_seconds",
            "Time to first token for streaming on the gRPC router",
            m.router_ttft.clone(),
        );
        registry.register(
            "gw_router_tpot_seconds",
            "Mean inter-token latency, streaming gRPC with more than one token",
            m.router_tpot.clone(),
        );
        registry.register(
            "gw_router_tokens",
            "Tokens of streaming gRPC generations",
            m.router_tokens.clone(),
        );
        registry.register(
            "gw_router_generation_duration_seconds",
            "Streaming generation time on gRPC",
            m.router_generation.clone(),
        );
        registry.register(
            "gw_router_upstream_responses",
            "Upstream responses",
            m.upstream_responses.clone(),
        );
        registry.register(
            "gw_router_upstream_send_retries",
            "One resend after a send failure before any response",
            m.send_retries.clone(),
        );
        registry.register(
            "gw_router_request_body_path",
            "Body buffering decisions",
            m.body_path.clone(),
        );
        registry.register(
            "gw_worker_health_checks",
            "Probe results",
            m.health_checks.clone(),
        );
        registry.register(
            "gw_worker_selection",
            "Selections by policy name",
            m.selections.clone(),
        );
        registry.register(
            "gw_worker_errors",
            "Router server errors or failed sends",
            m.worker_errors.clone(),
        );
        registry.register(
            "gw_worker_cb_transitions",
            "Circuit breaker transitions",
            m.cb_transitions.clone(),
        );
        registry.register(
            "gw_worker_cb_outcomes",
            "Breaker outcomes",
            m.cb_outcomes.clone(),
        );
        registry.register("gw_worker_retries", "Retry attempts", m.retries.clone());
        registry.register(
            "gw_worker_retries_exhausted",
            "Requests out of retries",
            m.retries_exhausted.clone(),
        );
        for (i, name) in ["cache_aware", "prefix_hash", "consistent_hashing", "manual"]
            .iter()
            .enumerate()
        {
            registry.register(
                format!("gw_{name}_policy_branch"),
                format!("{name} decisions by branch"),
                m.branches[i].clone(),
            );
        }
        registry.register(
            "gw_cache_aware_match_ratio",
            "Best prefix match ratio",
            m.match_ratio.clone(),
        );
        registry.register(
            "gw_routing_key_source",
            "Source of sticky routing key",
            m.key_source.clone(),
        );
        m.mcp.register(&mut registry);
        m.pd.register(&mut registry);
        m.runtime.register(&mut registry);
        registry.register_collector(Box::new(inflight::AgeCollector(m.inflight_ages.clone())));
        registry.register_collector(Box::new(fleet::FleetCollector::new(sources.fleet)));
        registry.register_collector(Box::new(policy::PolicyCollector::new(sources.policy)));
        registry.register_collector(Box::new(tokenizer_cache::TokenizerCacheCollector));
        Metrics { registry, ..m }
    }

    /// The exposition text of every family.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry)?;
        self.retry_backoff.encode(&mut out)?;
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }

    /// The `model` label value for a model name (capped in count and length; an
    /// overlong name is not even remembered by the thread's cache).
    pub fn model(&self, model: Option<&str>) -> Label {
        match model {
            Some(m) if m.len() > crate::bounded::LABEL_BYTES => Label::Static("other"),
            Some(m) => local::model(self.id, m, |m| self.models.get(m)),
            None => Label::Static("unknown"),
        }
    }

    // HTTP layer.

    /// A request matched `route` and arrived `at`: counted, and in flight until the
    /// returned guard finishes or drops.
    pub fn http_started(
        &self,
        method: &http::Method,
        route: Route,
        at: std::time::Instant,
    ) -> InFlight<'_> {
        let handles = self.http_handles(method, route);
        handles.requests.inc();
        self.http_active.inc();
        InFlight {
            metrics: self,
            handles,
            path: route.template(),
            age_slot: self.inflight_ages.enter(at),
        }
    }

    /// The HTTP-layer series of one (route, method), resolved on first use: later requests
    /// record with an atomic load and the metric's own atomic adds, no lock, no hash.
    fn http_handles(&self, method: &http::Method, route: Route) -> &HttpHandles {
        let method_index = labels::method_index(method);
        let slot = (route as usize) * labels::METHODS.len() + method_index;
        let fill = || {
            let method = labels::METHODS[method_index];
            let path = route.template();
            let pair: Labels<2> = [("method", method.into()), ("path", path.into())];
            HttpHandles {
                requests: self.http_requests.get_or_create(&pair).clone(),
                duration: self.http_duration.get_or_create(&pair).clone(),
                ok: OnceLock::new(),
            }
        };
        match self.http.get(slot) {
            Some(cell) => cell.get_or_init(fill),
            // Not reachable (the table has a slot per route and method); kept total.
            None => self.http_overflow.get_or_init(fill),
        }
    }

    /// `gw_http_responses_total` for one response of `path`.
    fn http_response(&self, path: &'static str, status: u16, error_code: &'static str) {
        self.http_responses
            .get_or_create(&[
                ("path", path.into()),
                ("status_code", labels::status(status).into()),
                ("error_code", error_code.into()),
            ])
            .inc();
    }

    // Admission.

    /// A request shed because every candidate was overloaded, at `stage` (`selection`,
    /// `dispatch`).
    pub fn overload_shed(&self, stage: &'static str) {
        self.overload_shed
            .get_or_create(&[("stage", stage.into())])
            .inc();
    }

    // Router.

    /// One request through the HTTP router, with its outcome.
    pub fn routed(&self, route: &RouteLabels<'_>, streaming: bool, seconds: f64) {
        let raw = local::RouteRaw {
            connection_mode: route.connection_mode,
            endpoint: route.endpoint,
            streaming,
        };
        let record = |requests: &Counter, duration: &Histogram| {
            requests.inc();
            duration.observe(seconds);
        };
        if local::last_route(self.id, raw, route.model, record) {
            return;
        }
        let key = local::RouteKey {
            connection_mode: route.connection_mode,
            model: self.model(route.model),
            endpoint: route.endpoint,
        };
        let (requests, duration) = local::route(
            self.id,
            key,
            streaming,
            |k| {
                let [a, b, c, d, e] = router_labels(k.connection_mode, k.model.clone(), k.endpoint);
                let streaming = if streaming { "true" } else { "false" };
                self.router_requests
                    .get_or_create(&[a, b, c, d, e, ("streaming", streaming.into())])
                    .clone()
            },
            |k| {
                self.router_duration
                    .get_or_create(&router_labels(
                        k.connection_mode,
                        k.model.clone(),
                        k.endpoint,
                    ))
                    .clone()
            },
        );
        record(&requests, &duration);
        local::remember_route(self.id, raw, route.model, (requests, duration));
    }

    /// What a relayed stream of `route` tells when it breaks off mid-way: one handle per
    /// route shared by its streams (per thread), so a stream carries it without an
    /// allocation, and the series is created only when a stream first fails.
    pub fn stream_errors(&self, route: &RouteLabels<'_>) -> Arc<StreamErrors> {
        let key = local::RouteKey {
            connection_mode: route.connection_mode,
            model: self.model(route.model),
            endpoint: route.endpoint,
        };
        local::stream_errors(self.id, key, |k| {
            let [a, b, c, d, e] = router_labels(k.connection_mode, k.model.clone(), k.endpoint);
            Arc::new(StreamErrors {
                family: self.router_errors.clone(),
                labels: [a, b, c, d, e, ("error_type", "streaming_error".into())],
            })
        })
    }

    /// A routed request that ended in an error of `error_type` (`no_workers`, `timeout`,
    /// `backend_error`, `validation_error`, `internal_error`).
    pub fn router_error(&self, route: &RouteLabels<'_>, error_type: &'static str) {
        let model = self.model(route.model);
        let [a, b, c, d, e] = router_labels(route.connection_mode, model, route.endpoint);
        self.router_errors
            .get_or_create(&[a, b, c, d, e, ("error_type", error_type.into())])
            .inc();
    }

    /// The timing and token counts of one streamed generation on the gRPC router: `ttft`
    /// from the request's arrival to its first token, `tpot` the mean gap between tokens
    /// (only with more than one), `duration` the whole generation.
    pub fn generation(&self, route: &RouteLabels<'_>, timing: &GenerationTiming) {
        let model = self.model(route.model);
        let labels: Labels<4> = [
            ("router_type", "grpc".into()),
            ("backend_type", "regular".into()),
            ("model", model.clone()),
            ("endpoint", route.endpoint.into()),
        ];
        if let Some(ttft) = timing.ttft {
            self.router_ttft.get_or_create(&labels).observe(ttft);
        }
        if timing.output_tokens > 1 {
            if let Some(tpot) = timing.tpot {
                self.router_tpot.get_or_create(&labels).observe(tpot);
            }
        }
        self.router_generation
            .get_or_create(&labels)
            .observe(timing.duration);
        for (kind, count) in [
            ("input", timing.input_tokens),
            ("output", timing.output_tokens),
        ] {
            let [a, b, c, d] = labels.clone();
            self.router_tokens
                .get_or_create(&[a, b, c, d, ("token_type", kind.into())])
                .inc_by(count);
        }
    }

    /// A worker's response head (or a failed exchange, with the gateway error code).
    pub fn upstream_response(&self, status: u16, error_code: &'static str) {
        let lookup = || {
            self.upstream_responses
                .get_or_create(&[
                    ("router_type", "http".into()),
                    ("status_code", labels::status(status).into()),
                    ("error_code", error_code.into()),
                ])
                .clone()
        };
        if status == 200 && error_code.is_empty() {
            self.upstream_ok.get_or_init(lookup).inc();
        } else {
            lookup().inc();
        }
    }

    pub fn send_retry(&self) {
        self.send_retries
            .get_or_create(&[("router_type", "http".into())])
            .inc();
    }

    /// How a request's body went: `path` and `reason` labels, and the pair's dense `index`
    /// (below [`BODY_PATH_SLOTS`]) under which its counter handle is kept resolved.
    pub fn body_path(&self, index: usize, path: &'static str, reason: &'static str) {
        let resolve = || {
            self.body_path
                .get_or_create(&[("path", path.into()), ("reason", reason.into())])
                .clone()
        };
        match self.body_paths.get(index) {
            Some(slot) => slot.get_or_init(resolve).inc(),
            None => resolve().inc(),
        };
    }

    // Workers.

    pub fn health_check(&self, worker: &Worker, ok: bool) {
        self.health_checks
            .get_or_create(&[
                ("worker_type", worker.worker_type.as_str().into()),
                ("result", if ok { "success" } else { "failure" }.into()),
            ])
            .inc();
    }

    /// A selection by `policy`, with the policy's branch and match ratio.
    pub fn selected(
        &self,
        worker: &Worker,
        model: Option<&str>,
        policy: &'static str,
        how: &Selection,
    ) {
        let model = model.or(worker.model_id.as_deref());
        let raw = local::SelectRaw {
            worker_type: worker.worker_type.as_str(),
            connection_mode: worker.connection_mode().as_str(),
            policy,
        };
        if !local::last_selection(self.id, raw, model) {
            let key = local::SelectKey {
                worker_type: raw.worker_type,
                connection_mode: raw.connection_mode,
                model: self.model(model),
            };
            let counter = local::selection(self.id, key, |k| {
                self.selections
                    .get_or_create(&[
                        ("worker_type", k.worker_type.into()),
                        ("connection_mode", k.connection_mode.into()),
                        ("model", k.model.clone()),
                        ("policy", policy.into()),
                    ])
                    .clone()
            });
            counter.inc();
            local::remember_selection(self.id, raw, model, counter);
        }
        if let Some(branch) = how.branch {
            let family = match branch_family(branch) {
                usize::MAX => policy_family(policy),
                i => Some(i),
            };
            if let Some(family) = family.and_then(|i| self.branches.get(i)) {
                family
                    .get_or_create(&[("branch", branch.as_str().into())])
                    .inc();
            }
        }
        if let Some(ratio) = how.match_ratio {
            self.match_ratio.observe(f64::from(ratio));
        }
    }

    /// Where a sticky routing key came from (`header` or `rid`).
    pub fn routing_key_source(&self, source: &'static str) {
        self.key_source
            .get_or_create(&[("source", source.into())])
            .inc();
    }

    /// A server error or failed send of a worker (`timeout` for 504, else `backend_error`).
    pub fn worker_error(&self, worker: &Worker, error_type: &'static str) {
        self.worker_errors
            .get_or_create(&[
                ("worker_type", worker.worker_type.as_str().into()),
                ("connection_mode", worker.connection_mode().as_str().into()),
                ("error_type", error_type.into()),
            ])
            .inc();
    }

    /// One answer of `worker` as its breaker counts it. Every request records one, so the
    /// series come from the thread's cache, not the family's lock.
    pub fn breaker_outcome(&self, worker: &Worker, failure: bool) {
        local::outcome(self.id, &worker.url_label, failure, || {
            let outcome = if failure { "failure" } else { "success" };
            self.cb_outcomes
                .get_or_create(&[
                    ("worker", worker_label(worker)),
                    ("outcome", outcome.into()),
                ])
                .clone()
        })
        .inc();
    }

    pub fn breaker_transition(&self, worker: &Worker, from: &'static str, to: &'static str) {
        self.cb_transitions
            .get_or_create(&[
                ("worker", worker_label(worker)),
                ("from", from.into()),
                ("to", to.into()),
            ])
            .inc();
    }

    /// A retry, numbered `attempt` (1 for the first retry), after `backoff`.
    pub fn retry(&self, worker: &Worker, endpoint: &'static str, attempt: u32, backoff: f64) {
        self.retry_backoff.observe(attempt, backoff);
        self.retries
            .get_or_create(&[
                ("worker_type", worker.worker_type.as_str().into()),
                ("endpoint", endpoint.into()),
            ])
            .inc();
    }

    pub fn retries_exhausted(&self, worker: &Worker, endpoint: &'static str) {
        self.retries_exhausted
            .get_or_create(&[
                ("worker_type", worker.worker_type.as_str().into()),
                ("endpoint", endpoint.into()),
            ])
            .inc();
    }
}

impl AdmissionEvents for Metrics {
    /// A decision of the concurrency limiter taken without queueing: admitted at once, or
    /// refused at once because queueing is off.
    fn rate_limit(&self, allowed: bool) {
        self.rate_limits
            .get_or_create(&[(
                "result",
                if allowed { "allowed" } else { "rejected" }.into(),
            )])
            .inc();
    }

    /// A request refused by admission control: `full`, `timeout`, `multimodal_too_large`,
    /// `multimodal_inflight`.
    fn admission_rejected(&self, reason: &'static str) {
        self.admission_rejected
            .get_or_create(&[("reason", reason.into())])
            .inc();
    }
}

/// The labels every router series carries (HTTP router, regular backend).
/// The router labels of a request; `router_type` follows the connection mode (ZMQ workers
/// count as gRPC, spec 3).
fn router_labels(connection_mode: &'static str, model: Label, endpoint: &'static str) -> Labels<5> {
    let router_type = match connection_mode {
        "grpc" | "zmq" => "grpc",
        _ => "http",
    };
    [
        ("router_type", router_type.into()),
        ("backend_type", "regular".into()),
        ("connection_mode", connection_mode.into()),
        ("model", model),
        ("endpoint", endpoint.into()),
    ]
}

/// `gw_router_request_errors_total{error_type="streaming_error"}` of one route: counts a
/// relayed stream that broke off after its head was sent (spec 3).
pub struct StreamErrors {
    family: Counters<6>,
    labels: Labels<6>,
}

impl CountFailure for StreamErrors {
    fn count(&self) {
        self.family.get_or_create(&self.labels).inc();
    }
}

/// The `worker` label: the worker's URL, shared rather than copied.
fn worker_label(worker: &Worker) -> Label {
    Label::Shared(worker.url_label.clone())
}

/// The pre-resolved HTTP-layer series of one (route, method).
#[derive(Debug)]
struct HttpHandles {
    requests: Counter,
    duration: Histogram,
    /// `gw_http_responses_total{status_code="200",error_code=""}`, the common answer.
    ok: OnceLock<Counter>,
}

/// Keeps a request counted in `gw_http_connections_active` and the in-flight age buckets
/// until it finishes or drops.
#[derive(Debug)]
pub struct InFlight<'a> {
    metrics: &'a Metrics,
    handles: &'a HttpHandles,
    path: &'static str,
    age_slot: usize,
}

impl InFlight<'_> {
    /// The response head is ready: its duration and status are recorded.
    pub fn finished(self, status: u16, error_code: &'static str, seconds: f64) {
        self.handles.duration.observe(seconds);
        if status == 200 && error_code.is_empty() {
            self.handles
                .ok
                .get_or_init(|| {
                    self.metrics
                        .http_responses
                        .get_or_create(&[
                            ("path", self.path.into()),
                            ("status_code", "200".into()),
                            ("error_code", "".into()),
                        ])
                        .clone()
                })
                .inc();
        } else {
            self.metrics.http_response(self.path, status, error_code);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.metrics.http_active.dec();
        self.metrics.inflight_ages.leave(self.age_slot);
    }
}
