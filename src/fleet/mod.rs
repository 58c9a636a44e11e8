//! The worker fleet.
//!
//! Readers on the data plane load an immutable [`Snapshot`] through an atomic pointer swap
//! and never lock; writers (the control plane) build a new snapshot and publish it. Live
//! per-worker figures that change on every request (in-flight load, status) are atomics
//! inside the shared [`Worker`], so publishing a snapshot is only needed when membership
//! or a worker's static description changes.

pub mod dp;
pub mod engine_load;
pub mod overload;
pub mod provider;
pub mod rooms;
pub mod spec;
mod url;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use http::uri::{Authority, Scheme};
use http::HeaderValue;
use uuid::Uuid;

use crate::chat::language::Language;
use crate::engine::zmq::Engine as ZmqEngine;
use crate::http::guard::{Guard, Release};
use crate::parsers;
use crate::resilience::{self, Breaker};
use crate::resilience::{BreakerConfig, BreakerDefaults};
use crate::secret::Secret;
use overload::OverloadDefaults;
use spec::ResilienceOverrides;
use spec::{HealthOverrides, WorkerPatch, WorkerSpec};

pub use url::{parse_http_worker_url, parse_worker_url, Transport, WorkerUrl, WorkerUrlError};

/// How the gateway reaches a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionMode {
    Http,
    Grpc,
    Zmq,
}

impl ConnectionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionMode::Http => "http",
            ConnectionMode::Grpc => "grpc",
            ConnectionMode::Zmq => "zmq",
        }
    }

    /// Whether the worker is a token engine: the gateway tokenizes, generates through the
    /// engine seam and detokenizes (gRPC and ZMQ engines alike).
    pub fn takes_token_ids(self) -> bool {
        matches!(self, ConnectionMode::Grpc | ConnectionMode::Zmq)
    }
}

/// The role a worker plays in (dis)aggregated serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerType {
    Regular,
    Prefill,
    Decode,
    Encode,
}

impl WorkerType {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerType::Regular => "regular",
            WorkerType::Prefill => "prefill",
            WorkerType::Decode => "decode",
            WorkerType::Encode => "encode",
        }
    }
}

/// The engine behind a worker. `Unspecified` means "detect at registration".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RuntimeType {
    Sglang,
    Vllm,
    Trtllm,
    Mlx,
    Tokenspeed,
    Generic,
    External,
    #[default]
    Unspecified,
}

impl RuntimeType {
    /// The gRPC service engines of this runtime speak; `None` for the runtimes that have
    /// none (`generic`, `external`, `unspecified`).
    pub fn grpc_service(self) -> Option<crate::engine::grpc::Service> {
        use crate::engine::grpc::Service;
        match self {
            RuntimeType::Sglang => Some(Service::Sglang),
            RuntimeType::Vllm => Some(Service::Vllm),
            RuntimeType::Trtllm => Some(Service::Trtllm),
            RuntimeType::Tokenspeed => Some(Service::Tokenspeed),
            RuntimeType::Mlx => Some(Service::Mlx),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeType::Sglang => "sglang",
            RuntimeType::Vllm => "vllm",
            RuntimeType::Trtllm => "trtllm",
            RuntimeType::Mlx => "mlx",
            RuntimeType::Tokenspeed => "tokenspeed",
            RuntimeType::Generic => "generic",
            RuntimeType::External => "external",
            RuntimeType::Unspecified => "unspecified",
        }
    }
}

/// Worker status; only `Ready` workers receive traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Pending = 0,
    Ready = 1,
    NotReady = 2,
    Failed = 3,
    Draining = 4,
}

impl Status {
    fn from_u8(v: u8) -> Status {
        match v {
            1 => Status::Ready,
            2 => Status::NotReady,
            3 => Status::Failed,
            4 => Status::Draining,
            _ => Status::Pending,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Ready => "ready",
            Status::NotReady => "not_ready",
            Status::Failed => "failed",
            Status::Draining => "draining",
        }
    }
}

/// Health settings of one worker: the gateway's flags with the spec's `health` overrides
/// applied. External providers are never probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    pub timeout: Duration,
    pub check_interval: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    pub disabled: bool,
    pub drain_settle: Duration,
}

impl HealthConfig {
    pub fn resolve(
        defaults: &HealthConfig,
        overrides: &HealthOverrides,
        runtime: RuntimeType,
    ) -> Self {
        let secs = |value: Option<u64>, default: Duration| {
            value.map_or(default, |s| Duration::from_secs(s.min(MAX_SECS)))
        };
        let count = |value: Option<u64>, default: u32| {
            value.map_or(default, |n| n.clamp(1, u64::from(u32::MAX)) as u32)
        };
        HealthConfig {
            timeout: secs(overrides.timeout_secs, defaults.timeout).max(Duration::from_secs(1)),
            check_interval: secs(overrides.check_interval_secs, defaults.check_interval)
                .max(Duration::from_secs(1)),
            success_threshold: count(overrides.success_threshold, defaults.success_threshold),
            failure_threshold: count(overrides.failure_threshold, defaults.failure_threshold),
            disabled: runtime == RuntimeType::External
                || overrides.disable_health_check.unwrap_or(defaults.disabled),
            drain_settle: secs(overrides.drain_settle_secs, defaults.drain_settle),
        }
    }
}

impl Default for HealthConfig {
    /// The documented defaults of the health flags.
    fn default() -> HealthConfig {
        HealthConfig {
            timeout: Duration::from_secs(5),
            check_interval: Duration::from_secs(60),
            success_threshold: 2,
            failure_threshold: 3,
            disabled: false,
            drain_settle: Duration::from_secs(5),
        }
    }
}

/// What a worker inherits from the gateway's flags where its spec is silent: health,
/// circuit breaker and overload thresholds. The wiring composes it from the owning modules'
/// settings; registration and PATCH read only this.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerDefaults {
    pub health: HealthConfig,
    pub breaker: BreakerDefaults,
    pub overload: OverloadDefaults,
}

/// The Workers flag group's part that shapes the fleet itself (what the data path reads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetSettings {
    /// `--model-alias alias=canonical`: extra names of served models.
    pub model_aliases: Vec<(String, String)>,
    /// `--enable-igw`: several models behind one gateway; requests go to workers of their
    /// `model`.
    pub enable_igw: bool,
    /// `--dp-aware`: each data-parallel rank of an engine is registered as its own routing
    /// target, and requests to a rank carry `data_parallel_rank` in their body.
    pub dp_aware: bool,
    /// `--pd-disaggregation`: the fleet is prefill and decode workers.
    pub pd_disaggregation: bool,
    /// `--upstream-http2`: prefer HTTP/2 (h2c) towards workers that do not set `http2`.
    pub upstream_http2: bool,
    /// `--backend`: engines, or a hosted provider's API.
    pub backend: provider::Backend,
    /// `--health-check-*`, `--health-*-threshold`, `--disable-health-check`,
    /// `--drain-settle-secs`: the health defaults of workers.
    pub health: HealthConfig,
    /// `--worker-overload-*`: overload protection defaults of workers.
    pub overload: OverloadDefaults,
}

/// A worker's breaker settings: its `resilience` block over the gateway flags. A status
/// list given in the block replaces the default set.
fn breaker_config(defaults: &BreakerDefaults, overrides: &ResilienceOverrides) -> BreakerConfig {
    let clamp = |v: u64| u32::try_from(v.max(1)).unwrap_or(u32::MAX);
    BreakerConfig {
        enabled: !defaults.disabled,
        failure_threshold: overrides
            .cb_failure_threshold
            .map_or(defaults.failure_threshold, clamp),
        success_threshold: overrides
            .cb_success_threshold
            .map_or(defaults.success_threshold, clamp),
        open_for: overrides
            .cb_timeout_secs
            .map_or(defaults.open_for, std::time::Duration::from_secs),
        failure_statuses: overrides
            .retryable_status_codes
            .clone()
            .unwrap_or_else(|| resilience::breaker::DEFAULT_FAILURE_STATUSES.to_vec()),
        capacity_statuses: overrides
            .capacity_status_codes
            .clone()
            .unwrap_or_else(|| resilience::breaker::DEFAULT_CAPACITY_STATUSES.to_vec()),
    }
}

/// A worker's own connection-pool settings (spec 1 `http_pool`), resolved once at
/// registration. A worker that sets none has no `PoolTuning` and uses its data-plane
/// thread's default pools, so the common case costs nothing per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolTuning {
    /// `None`: the gateway default.
    pub max_idle_per_host: Option<usize>,
    /// `None`: the gateway default; `Some(None)`: idle connections are kept (0 in the spec).
    pub idle_timeout: Option<Option<Duration>>,
    /// `None`: the gateway default.
    pub connect_timeout: Option<Duration>,
}

impl PoolTuning {
    fn resolve(pool: &spec::HttpPoolOverrides) -> Option<PoolTuning> {
        let tuning = PoolTuning {
            max_idle_per_host: pool.pool_max_idle_per_host,
            idle_timeout: pool
                .pool_idle_timeout_secs
                .map(|s| (s > 0).then(|| Duration::from_secs(s.min(MAX_SECS)))),
            // A connect needs some time: 0 would fail every connection.
            connect_timeout: pool
                .connect_timeout_secs
                .map(|s| Duration::from_secs(s.clamp(1, MAX_SECS))),
        };
        let none = PoolTuning {
            max_idle_per_host: None,
            idle_timeout: None,
            connect_timeout: None,
        };
        (tuning != none).then_some(tuning)
    }
}

/// Upper bound of any per-worker duration override, as for the flags.
const MAX_SECS: u64 = 365 * 24 * 60 * 60;

/// What a worker's engine told registration about itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Discovered {
    /// `Unspecified` when detection was skipped or found nothing.
    pub runtime: RuntimeType,
    /// Models listed by the engine (`/v1/models`), in its order.
    pub models: Vec<String>,
    /// Labels read from the engine; the spec's labels win over these.
    pub labels: BTreeMap<String, String>,
    /// Whether the gateway speaks HTTP/2 to it.
    pub http2: bool,
    /// A gRPC engine's tokenizer and chat template.
    pub language: Option<LanguageRef>,
    /// A gRPC engine's output parsers.
    pub parsers: Option<ParsersRef>,
    /// A gRPC engine's KV-transfer configuration, as it reports it (prefill/decode).
    pub kv: crate::engine::grpc::service::KvFacts,
    /// A ZMQ worker's sockets, bound at registration.
    pub zmq: Option<LinkRef>,
}

/// The `max_context_length` label as a number of tokens.
fn context_window(labels: &BTreeMap<String, String>) -> Option<u32> {
    labels
        .get("max_context_length")
        .and_then(|n| n.parse().ok())
}

/// A shared [`Language`]: workers of one model share one kit; two references are equal
/// when they are the same kit.
#[derive(Clone, Debug)]
pub struct LanguageRef(pub Arc<Language>);

impl PartialEq for LanguageRef {
    fn eq(&self, other: &LanguageRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A gRPC worker's output parsers, chosen at registration; equal when the same choice.
#[derive(Clone, Debug)]
pub struct ParsersRef(pub Arc<parsers::Choice>);

impl PartialEq for ParsersRef {
    fn eq(&self, other: &ParsersRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A ZMQ worker's link to its engine ranks (its sockets and their thread); equal when the
/// same link.
#[derive(Clone)]
pub struct LinkRef(pub ZmqEngine);

impl PartialEq for LinkRef {
    fn eq(&self, other: &LinkRef) -> bool {
        self.0.same_link(&other.0)
    }
}

impl std::fmt::Debug for LinkRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkRef")
    }
}

/// The figures that change per request or per probe. Shared by every version of a worker
/// (a PATCH publishes a new `Worker` value that keeps the same `Live`), so no in-flight
/// count or health streak is lost when the description changes.
#[derive(Debug, Default)]
pub struct Live {
    status: AtomicU8,
    load: AtomicUsize,
    successes: AtomicU32,
    failures: AtomicU32,
    /// Set when the worker leaves the registry; its background tasks stop.
    retired: AtomicBool,
    /// The load monitor's latest report of the engine; `None` until the first poll, after
    /// a failed one and while the worker is not ready.
    engine_load: ArcSwapOption<engine_load::EngineLoad>,
    /// Overload protection's verdict on the latest report (only with thresholds).
    overloaded: AtomicBool,
    /// Decode rooms the gateway holds on this worker (gRPC prefill/decode).
    rooms: Arc<rooms::RoomWindow>,
}

/// One registered worker: an immutable description plus shared live figures. A clone is
/// another version of the same worker (it shares the live figures).
#[derive(Clone, Debug)]
pub struct Worker {
    pub id: Uuid,
    /// The URL exactly as registered (normalised: no trailing slash).
    pub url: String,
    /// The same URL, shared, as the `worker` metrics label.
    pub url_label: Arc<str>,
    pub transport: Transport,
    pub worker_type: WorkerType,
    /// The runtime in effect: the spec's, else the detected one.
    pub runtime: RuntimeType,
    /// Pre-built `Bearer <key>` for the gateway's own calls and for client requests that
    /// carry no `Authorization`; marked sensitive so it never shows in debug output.
    pub bearer: Option<HeaderValue>,
    /// For an external provider: its key in the header that provider reads; `None` for
    /// engines.
    pub provider: Option<provider::ProviderKey>,
    /// The spec as registered (with PATCHes applied).
    pub spec: WorkerSpec,
    /// The model it serves: the first model card, else the model labels, else the first
    /// model the engine lists.
    pub model_id: Option<String>,
    /// Every name requests may use for its models (ids and aliases). Empty: any model.
    pub model_names: Vec<String>,
    /// Discovered labels with the spec's labels merged over them.
    pub labels: BTreeMap<String, String>,
    pub health: HealthConfig,
    pub http2: bool,
    /// Overload thresholds; `None` when overload protection is off for this worker.
    pub overload: Option<overload::Thresholds>,
    /// `http_pool.timeout_secs`: the most a request to this worker may take (the
    /// request timeout still applies when shorter); `None` without an override.
    pub request_timeout: Option<Duration>,
    /// The worker's own pool settings; `None` uses the default pools.
    pub pool: Option<PoolTuning>,
    /// The circuit breaker. Not part of [`Live`]: a PATCH rebuilds it (spec 1).
    pub breaker: Arc<Breaker>,
    /// With `--dp-aware`, the data-parallel rank of the engine this target stands for;
    /// requests to it go to the engine's URL with the rank pinned in the body.
    pub dp: Option<dp::DpRank>,
    /// A gRPC engine's tokenizer and chat template (the gateway does the language work);
    /// `None` for HTTP workers.
    pub language: Option<Arc<Language>>,
    /// A gRPC engine's output parsers (tool calls, reasoning); `None` for HTTP workers.
    pub parsers: Option<Arc<parsers::Choice>>,
    /// A ZMQ worker's engines, reached through the link registration bound.
    pub zmq: Option<ZmqEngine>,
    /// The context window the engine advertised (its `max_context_length` label, which the
    /// spec's labels may override), read once here rather than per request.
    pub context_window: Option<u32>,
    live: Arc<Live>,
}

impl Worker {
    /// Builds a worker from its spec and what registration discovered.
    pub fn new(
        id: Uuid,
        mut spec: WorkerSpec,
        discovered: Discovered,
        defaults: &WorkerDefaults,
    ) -> Worker {
        // Spec 1: a connector or role given in the spec overrides the engine's; the
        // engine's KV engine id wins over the spec's.
        let kv = discovered.kv;
        spec.kv_connector = spec.kv_connector.take().or(kv.connector);
        spec.kv_role = spec.kv_role.take().or(kv.role);
        spec.kv_engine_id = kv.engine_id.or(spec.kv_engine_id.take());
        let runtime = match spec.effective_runtime() {
            RuntimeType::Unspecified => discovered.runtime,
            explicit => explicit,
        };
        let runtime = match runtime {
            RuntimeType::Unspecified => RuntimeType::Generic,
            known => known,
        };
        // Spec 1: external workers ignore `models` (and model labels); they serve what
        // the provider lists.
        let external = runtime == RuntimeType::External;
        let (cards, named) = if external {
            (&[][..], None)
        } else {
            (&spec.models[..], spec.model_id())
        };
        let model_id = cards
            .first()
            .map(|card| card.id.clone())
            .or_else(|| named.map(str::to_owned))
            .or_else(|| discovered.models.first().cloned());
        let mut model_names: Vec<String> = Vec::new();
        for card in cards {
            model_names.push(card.id.clone());
            model_names.extend(card.aliases.iter().cloned());
        }
        if model_names.is_empty() {
            model_names.extend(model_id.iter().cloned());
            model_names.extend(discovered.models.iter().skip(1).cloned());
        }
        model_names.dedup();
        let mut labels = discovered.labels;
        labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let provider = provider_key(runtime, &spec, &labels);
        Worker {
            id,
            provider,
            url: spec.url.normalized.clone(),
            url_label: Arc::from(spec.url.normalized.as_str()),
            transport: spec.url.transport.clone(),
            worker_type: spec.worker_type,
            runtime,
            bearer: bearer(spec.api_key.as_ref()),
            health: HealthConfig::resolve(&defaults.health, &spec.health, runtime),
            model_id,
            model_names,
            context_window: context_window(&labels),
            labels,
            http2: discovered.http2,
            language: discovered.language.map(|l| l.0),
            parsers: discovered.parsers.map(|p| p.0),
            zmq: discovered.zmq.map(|l| l.0),
            overload: overload::Thresholds::resolve(&defaults.overload, &spec.overload),
            request_timeout: spec
                .http_pool
                .timeout_secs
                .map(|s| Duration::from_secs(s.clamp(1, MAX_SECS))),
            pool: PoolTuning::resolve(&spec.http_pool),
            breaker: Arc::new(Breaker::new(breaker_config(
                &defaults.breaker,
                &spec.resilience,
            ))),
            spec,
            dp: None,
            live: Arc::new(Live::default()),
        }
    }

    /// One rank of a data-parallel engine as its own target: listed under
    /// [`dp::DpRank::target_url`], its spec showing the engine's `dp_size`, reached (and
    /// probed) at the engine's URL.
    pub fn for_rank(
        id: Uuid,
        mut spec: WorkerSpec,
        discovered: Discovered,
        defaults: &WorkerDefaults,
        rank: dp::DpRank,
    ) -> Worker {
        spec.dp_size = Some(rank.size().get() as usize);
        let url = rank.target_url(&spec.url.normalized);
        Worker {
            url_label: Arc::from(url.as_str()),
            url,
            dp: Some(rank),
            ..Worker::new(id, spec, discovered, defaults)
        }
    }

    /// Whether this worker speaks for its engine in calls made once per engine (cache
    /// flush, profiling): any worker but a data-parallel rank other than 0, so an engine
    /// of N ranks is not called N times.
    pub fn fronts_engine(&self) -> bool {
        self.dp.is_none_or(|rank| rank.rank() == 0)
    }

    /// The engine's own URL: where requests and probes go. For a rank target it is the
    /// URL without the `@rank`; for any other worker, its URL.
    pub fn engine_url(&self) -> &str {
        &self.spec.url.normalized
    }

    /// A worker with a default spec and nothing discovered (benches, tests, tools).
    pub fn for_url(url: &str) -> Result<Worker, WorkerUrlError> {
        let spec = WorkerSpec::new(parse_worker_url(url)?);
        Ok(Worker::new(
            Uuid::new_v4(),
            spec,
            Discovered::default(),
            &WorkerDefaults::default(),
        ))
    }

    /// The worker with the KV engine id its engine reports now (re-read when a gRPC
    /// prefill or decode worker recovers): same live figures, same breaker.
    pub fn with_kv_engine_id(&self, engine_id: String) -> Worker {
        let mut worker = self.clone();
        worker.spec.kv_engine_id = Some(engine_id);
        worker
    }

    /// The worker after a PATCH: new description, same live figures.
    pub fn patched(&self, patch: WorkerPatch, defaults: &WorkerDefaults) -> Worker {
        let mut spec = self.spec.clone();
        spec.apply_patch(patch);
        let mut labels = self.labels.clone();
        labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        Worker {
            id: self.id,
            url: self.url.clone(),
            url_label: self.url_label.clone(),
            transport: self.transport.clone(),
            worker_type: self.worker_type,
            runtime: self.runtime,
            bearer: bearer(spec.api_key.as_ref()),
            provider: provider_key(self.runtime, &spec, &labels),
            health: HealthConfig::resolve(&defaults.health, &spec.health, self.runtime),
            model_id: self.model_id.clone(),
            model_names: self.model_names.clone(),
            context_window: context_window(&labels),
            labels,
            http2: self.http2,
            language: self.language.clone(),
            parsers: self.parsers.clone(),
            zmq: self.zmq.clone(),
            overload: self.overload,
            request_timeout: self.request_timeout,
            pool: self.pool,
            // Spec 1, PATCH: the breaker restarts with the built-in thresholds until a PUT.
            breaker: Arc::new(Breaker::new(self.breaker.config().after_patch())),
            spec,
            dp: self.dp,
            live: self.live.clone(),
        }
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.live.status.load(Ordering::Acquire))
    }

    /// Stores a status without republishing; use [`Registry::set_status`] for workers that
    /// are already registered.
    pub fn set_status(&self, status: Status) {
        self.live.status.store(status as u8, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.status() == Status::Ready
    }

    /// Requests the gateway has in flight to this worker.
    pub fn load(&self) -> usize {
        self.live.load.load(Ordering::Relaxed)
    }

    /// Counts one request in flight until the returned guard drops (response fully relayed,
    /// failed, or abandoned by the client).
    pub fn track(self: &Arc<Self>) -> LoadGuard {
        self.live.load.fetch_add(1, Ordering::Relaxed);
        LoadGuard(Guard::counted(self.live.clone()))
    }

    /// Records a probe result; returns the consecutive count of that kind.
    pub fn record_probe(&self, ok: bool) -> u32 {
        let (hit, reset) = if ok {
            (&self.live.successes, &self.live.failures)
        } else {
            (&self.live.failures, &self.live.successes)
        };
        reset.store(0, Ordering::Relaxed);
        hit.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    }

    /// The decode rooms the gateway holds on this worker.
    pub fn rooms(&self) -> &Arc<rooms::RoomWindow> {
        &self.live.rooms
    }

    /// How many decode rooms this worker takes at once: what its engine last reported as
    /// `max_running_requests` (every rank's), else [`rooms::DEFAULT_WINDOW`].
    pub fn room_window(&self) -> u32 {
        let reported: u64 = self.engine_load().map_or(0, |report| {
            report.loads.iter().map(|l| l.max_running_requests).sum()
        });
        match u32::try_from(reported) {
            Ok(0) => rooms::DEFAULT_WINDOW,
            Ok(window) => window,
            Err(_) => u32::MAX,
        }
    }

    /// The engine's latest load report (lock-free; see [`load`]).
    pub fn engine_load(&self) -> Option<Arc<engine_load::EngineLoad>> {
        self.live.engine_load.load_full()
    }

    /// Keeps a load report (or drops the last one) and, under overload protection, takes
    /// the verdict on it. Without a report the verdict stands: a worker leaves the
    /// overloaded state only on a report below both thresholds.
    pub fn set_engine_load(&self, report: Option<Arc<engine_load::EngineLoad>>) {
        if let (Some(thresholds), Some(report)) = (&self.overload, &report) {
            let now = thresholds.exceeded(report);
            if self.live.overloaded.swap(now, Ordering::AcqRel) != now {
                tracing::info!(worker = %self.url, overloaded = now, "worker overload state changed");
            }
        }
        self.live.engine_load.store(report);
    }

    /// Whether overload protection keeps the worker out of routing.
    pub fn is_overloaded(&self) -> bool {
        self.live.overloaded.load(Ordering::Relaxed)
    }

    /// Whether the worker has left the registry (its background tasks stop).
    pub fn is_retired(&self) -> bool {
        self.live.retired.load(Ordering::Acquire)
    }

    fn retire(&self) {
        self.live.retired.store(true, Ordering::Release);
    }

    /// Whether two values are versions of the same registered worker.
    pub fn same_live(&self, other: &Worker) -> bool {
        Arc::ptr_eq(&self.live, &other.live)
    }

    pub fn connection_mode(&self) -> ConnectionMode {
        match self.transport {
            Transport::Http { .. } => ConnectionMode::Http,
            Transport::Grpc { .. } => ConnectionMode::Grpc,
            Transport::Zmq { .. } => ConnectionMode::Zmq,
        }
    }

    /// Scheme and authority of an HTTP worker, for building upstream URIs without
    /// re-parsing the URL per request.
    pub fn http_origin(&self) -> Option<(&Scheme, &Authority)> {
        match &self.transport {
            Transport::Http { scheme, authority } => Some((scheme, authority)),
            _ => None,
        }
    }

    /// The key a prefill and a decode worker must share to be paired: the `pairing_protocol`
    /// label, else `runtime/transport/layout` with the KV connector as layout (`default`
    /// without one). `None` for workers outside prefill/decode disaggregation.
    pub fn pd_pairing(&self) -> Option<String> {
        if !matches!(self.worker_type, WorkerType::Prefill | WorkerType::Decode) {
            return None;
        }
        if let Some(explicit) = self
            .labels
            .get("pairing_protocol")
            .filter(|v| !v.is_empty())
        {
            return Some(explicit.clone());
        }
        let layout = self.spec.kv_connector.as_deref().unwrap_or("default");
        Some(format!(
            "{}/{}/{}",
            self.runtime.as_str(),
            self.connection_mode().as_str(),
            layout
        ))
    }

    /// Whether this prefill worker may hand its KV cache to `decode`: both set a
    /// `pairing_protocol` label and the values match, or, when either does not, both run
    /// the same runtime over the same transport with the same KV connector (the parts of
    /// [`Worker::pd_pairing`], compared without building the key).
    pub fn pairs_with(&self, decode: &Worker) -> bool {
        fn explicit(w: &Worker) -> Option<&str> {
            w.labels
                .get("pairing_protocol")
                .map(String::as_str)
                .filter(|v| !v.is_empty())
        }
        match (explicit(self), explicit(decode)) {
            (Some(a), Some(b)) => a == b,
            _ => {
                self.runtime == decode.runtime
                    && self.connection_mode() == decode.connection_mode()
                    && self.spec.kv_connector == decode.spec.kv_connector
            }
        }
    }

    /// Whether the worker serves `model` (workers without a model list serve any).
    pub fn serves(&self, model: &str) -> bool {
        self.model_names.is_empty() || self.model_names.iter().any(|m| m == model)
    }
}

/// `Bearer <key>` as a sensitive header value; `None` without a key or for a key that
/// cannot be a header value.
/// An external worker's key as its provider reads it; `None` for engines.
fn provider_key(
    runtime: RuntimeType,
    spec: &WorkerSpec,
    labels: &BTreeMap<String, String>,
) -> Option<provider::ProviderKey> {
    (runtime == RuntimeType::External).then(|| {
        let label = labels.get(provider::PROVIDER_LABEL).map(String::as_str);
        let style = provider::KeyStyle::of(&spec.url, label);
        provider::ProviderKey::new(style, spec.api_key.as_ref())
    })
}

pub fn bearer(key: Option<&Secret>) -> Option<HeaderValue> {
    let mut value = HeaderValue::try_from(format!("Bearer {}", key?.expose())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// One request's share of a worker's in-flight load, given back when dropped. It is a
/// counted [`Guard`] on the worker's shared figures, so it rides on a response body as is,
/// without an allocation.
#[derive(Debug)]
pub struct LoadGuard(Guard);

impl LoadGuard {
    /// The share as a body guard, released with the body's last byte.
    pub fn into_guard(self) -> Guard {
        self.0
    }
}

/// What a [`LoadGuard`] gives back. `Live` is private to this module, so only the guard
/// `Worker::track` made can call it.
impl Release for Live {
    fn release(&self) {
        self.load.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An immutable view of the fleet.
///
/// Everything selection needs is computed when the snapshot is built (the routable
/// workers, per model), so the hot path works on ready-made slices. Every status change
/// goes through [`Registry::set_status`], which republishes.
#[derive(Debug, Default)]
pub struct Snapshot {
    workers: Vec<Arc<Worker>>,
    by_id: HashMap<Uuid, Arc<Worker>>,
    by_url: HashMap<String, Arc<Worker>>,
    routable: Vec<Arc<Worker>>,
    /// Ready prefill workers (prefill/decode disaggregation).
    routable_prefill: Vec<Arc<Worker>>,
    /// Ready decode workers (prefill/decode disaggregation).
    routable_decode: Vec<Arc<Worker>>,
    /// Routable workers per model name (ids, card aliases and `--model-alias` names).
    routable_by_model: HashMap<String, Vec<Arc<Worker>>>,
    /// Routable workers without a model list: they serve any model.
    routable_any_model: Vec<Arc<Worker>>,
    /// Every name a registered regular worker serves, whatever its status (aliases
    /// included), to tell an unknown model (404) from one that is down (503).
    known_models: std::collections::HashSet<String>,
    /// Whether a registered regular worker has no model list (it serves any model).
    any_model: bool,
    /// Regular workers are registered and every one is a gRPC engine.
    all_grpc: bool,
    /// A gRPC encode worker is registered: the fleet is encode/prefill/decode (EPD).
    grpc_encode: bool,
}

/// Workers by URL. Rank targets are found under their own `URL@rank` and, the first
/// rank registered, under the engine's URL, so a second registration of an engine is
/// refused as a duplicate.
fn by_url(workers: &[Arc<Worker>]) -> HashMap<String, Arc<Worker>> {
    let mut map: HashMap<String, Arc<Worker>> = HashMap::with_capacity(workers.len());
    for worker in workers {
        map.insert(worker.url.clone(), worker.clone());
    }
    for worker in workers.iter().filter(|w| w.dp.is_some()) {
        map.entry(worker.engine_url().to_owned())
            .or_insert_with(|| worker.clone());
    }
    map
}

impl Snapshot {
    fn new(workers: Vec<Arc<Worker>>, aliases: &[(String, String)]) -> Snapshot {
        // Prefill, decode and encode workers serve only their stage of disaggregated
        // serving; regular requests never go to them.
        let routable: Vec<Arc<Worker>> = workers
            .iter()
            .filter(|w| w.is_ready() && w.worker_type == WorkerType::Regular)
            .cloned()
            .collect();
        let routable_prefill: Vec<Arc<Worker>> = workers
            .iter()
            .filter(|w| w.is_ready() && w.worker_type == WorkerType::Prefill)
            .cloned()
            .collect();
        let routable_decode: Vec<Arc<Worker>> = workers
            .iter()
            .filter(|w| w.is_ready() && w.worker_type == WorkerType::Decode)
            .cloned()
            .collect();
        let mut routable_by_model: HashMap<String, Vec<Arc<Worker>>> = HashMap::new();
        let mut routable_any_model = Vec::new();
        for worker in &routable {
            if worker.model_names.is_empty() {
                routable_any_model.push(worker.clone());
            }
            for name in &worker.model_names {
                routable_by_model
                    .entry(name.clone())
                    .or_default()
                    .push(worker.clone());
            }
        }
        for (alias, canonical) in aliases {
            if let Some(list) = routable_by_model.get(canonical).cloned() {
                routable_by_model
                    .entry(alias.clone())
                    .or_default()
                    .extend(list);
            }
        }
        let regular = || {
            workers
                .iter()
                .filter(|w| w.worker_type == WorkerType::Regular)
        };
        let mut known_models: std::collections::HashSet<String> = regular()
            .flat_map(|w| w.model_names.iter().cloned())
            .collect();
        let any_model = regular().any(|w| w.model_names.is_empty());
        let all_grpc =
            regular().next().is_some() && regular().all(|w| w.connection_mode().takes_token_ids());
        let grpc_encode = workers.iter().any(|w| {
            w.worker_type == WorkerType::Encode && w.connection_mode() == ConnectionMode::Grpc
        });
        for (alias, canonical) in aliases {
            if known_models.contains(canonical) {
                known_models.insert(alias.clone());
            }
        }
        Snapshot {
            by_id: workers.iter().map(|w| (w.id, w.clone())).collect(),
            by_url: by_url(&workers),
            workers,
            routable,
            routable_prefill,
            routable_decode,
            routable_by_model,
            routable_any_model,
            known_models,
            any_model,
            all_grpc,
            grpc_encode,
        }
    }

    /// Regular workers are registered and every one is a token engine, gRPC or ZMQ (the
    /// gateway reads every request whole to do the language work).
    pub fn all_grpc(&self) -> bool {
        self.all_grpc
    }

    /// A gRPC encode worker is registered (the fleet is EPD).
    pub fn grpc_encode(&self) -> bool {
        self.grpc_encode
    }

    /// Every registered worker, in registration order.
    pub fn all(&self) -> &[Arc<Worker>] {
        &self.workers
    }

    /// Regular workers that may receive traffic now.
    pub fn routable(&self) -> &[Arc<Worker>] {
        &self.routable
    }

    /// Prefill workers that may receive traffic now.
    pub fn routable_prefill(&self) -> &[Arc<Worker>] {
        &self.routable_prefill
    }

    /// Decode workers that may receive traffic now.
    pub fn routable_decode(&self) -> &[Arc<Worker>] {
        &self.routable_decode
    }

    /// Routable workers that serve `model` (by id or alias); workers without a model list
    /// are used when no worker names the model.
    pub fn routable_for_model(&self, model: &str) -> &[Arc<Worker>] {
        match self.routable_by_model.get(model) {
            Some(list) => list,
            None => &self.routable_any_model,
        }
    }

    /// Whether any registered worker serves `model`, routable or not.
    pub fn knows_model(&self, model: &str) -> bool {
        self.any_model || self.known_models.contains(model)
    }

    pub fn by_id(&self, id: &Uuid) -> Option<&Arc<Worker>> {
        self.by_id.get(id)
    }

    pub fn by_url(&self, url: &str) -> Option<&Arc<Worker>> {
        self.by_url.get(url)
    }

    /// The worker and, when it is a data-parallel rank, every rank of its engine, in
    /// registration order: what a DELETE or PATCH of any one of them applies to.
    pub fn engine_targets(&self, worker: &Worker) -> Vec<Arc<Worker>> {
        match worker.dp {
            None => self.by_id(&worker.id).cloned().into_iter().collect(),
            Some(_) => self
                .workers
                .iter()
                .filter(|w| w.dp.is_some() && w.engine_url() == worker.engine_url())
                .cloned()
                .collect(),
        }
    }

    /// Workers that can take traffic now: the ready regular workers, plus the ready prefill
    /// and decode workers once at least one of each is ready (a prefill worker without a
    /// decode worker, or the other way round, serves nothing).
    pub fn ready_count(&self) -> usize {
        let pairs = !self.routable_prefill.is_empty() && !self.routable_decode.is_empty();
        let pd = if pairs {
            self.routable_prefill.len() + self.routable_decode.len()
        } else {
            0
        };
        self.routable.len() + pd
    }

    /// Every model name served by a registered worker, in registration order, without
    /// repeats (the `/v1/models` list).
    pub fn model_ids(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.workers
            .iter()
            .filter_map(|w| w.model_id.as_deref())
            .filter(|id| seen.insert(*id))
            .collect()
    }
}

/// The registry: one atomically swapped snapshot. Writers (the control plane) are
/// serialised by `rcu`; readers never wait.
#[derive(Debug, Default)]
pub struct Registry {
    fleet: Arc<Fleet>,
    /// `--model-alias` pairs, applied to every snapshot.
    aliases: Vec<(String, String)>,
}

/// What the metrics read at scrape time: the current snapshot and the workers that left
/// (their series keep reporting, as spec 3 "Removed workers" says).
#[derive(Debug, Default)]
pub struct Fleet {
    current: ArcSwap<Snapshot>,
    /// The current snapshot's [`Shape`], readable without loading it: every request asks
    /// before it reads its body, and a snapshot load is two locked instructions.
    shape: AtomicU8,
    /// Held while a change is published: publications take turns.
    publishing: std::sync::Mutex<()>,
    departed: std::sync::Mutex<std::collections::VecDeque<Departed>>,
}

/// What the dispatch of a request asks of the fleet before it picks a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// [`Snapshot::all_grpc`].
    pub all_grpc: bool,
    /// [`Snapshot::grpc_encode`].
    pub grpc_encode: bool,
}

impl Shape {
    fn of(snapshot: &Snapshot) -> Shape {
        Shape {
            all_grpc: snapshot.all_grpc(),
            grpc_encode: snapshot.grpc_encode(),
        }
    }

    fn bits(self) -> u8 {
        u8::from(self.all_grpc) | (u8::from(self.grpc_encode) << 1)
    }

    fn from_bits(bits: u8) -> Shape {
        Shape {
            all_grpc: bits & 1 != 0,
            grpc_encode: bits & 2 != 0,
        }
    }
}

/// A removed worker's last figures, for its series.
#[derive(Clone, Debug)]
pub struct Departed {
    pub url: Arc<str>,
    pub http2: bool,
}

/// Removed workers remembered for their series; the oldest are forgotten beyond this.
const DEPARTED_CAP: usize = 4096;

impl Fleet {
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// Removed workers, oldest first.
    pub fn departed(&self) -> Vec<Departed> {
        self.departed
            .lock()
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn depart(&self, worker: &Worker) {
        if let Ok(mut departed) = self.departed.lock() {
            departed.retain(|d| *d.url != *worker.url);
            if departed.len() >= DEPARTED_CAP {
                departed.pop_front();
            }
            departed.push_back(Departed {
                url: worker.url_label.clone(),
                http2: worker.http2,
            });
        }
    }

    fn arrive(&self, worker: &Worker) {
        if let Ok(mut departed) = self.departed.lock() {
            departed.retain(|d| *d.url != *worker.url);
        }
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn with_aliases(aliases: Vec<(String, String)>) -> Registry {
        Registry {
            fleet: Arc::default(),
            aliases,
        }
    }

    /// The `--model-alias` pairs (alias, canonical name).
    pub fn aliases(&self) -> &[(String, String)] {
        &self.aliases
    }

    /// The current fleet. Lock-free; hold the guard only for the duration of a decision.
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.fleet.current.load()
    }

    /// A handle on the fleet for readers outside the gateway state (the metrics).
    pub fn fleet(&self) -> Arc<Fleet> {
        self.fleet.clone()
    }

    /// The current fleet's [`Shape`], without loading the snapshot.
    pub fn shape(&self) -> Shape {
        Shape::from_bits(self.fleet.shape.load(Ordering::Acquire))
    }

    /// Publishes the fleet `change` makes of the current one. Publications take turns (the
    /// lock), so each reads the last one's snapshot and no compare-and-swap retry is needed,
    /// and the shape stored last is the last snapshot's.
    fn publish(&self, change: impl FnOnce(&mut Vec<Arc<Worker>>)) {
        // A poisoned lock guards nothing but the order of publications: go on.
        let _turn = self
            .fleet
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut workers = self.fleet.current.load().workers.clone();
        change(&mut workers);
        let next = Snapshot::new(workers, &self.aliases);
        let shape = Shape::of(&next);
        self.fleet.current.store(Arc::new(next));
        self.fleet.shape.store(shape.bits(), Ordering::Release);
    }

    /// Adds a worker, or replaces the registered worker with the same id in place (PATCH,
    /// PUT). A replaced worker with other live figures (PUT) is retired.
    pub fn upsert(&self, worker: Arc<Worker>) {
        let mut replaced: Option<Arc<Worker>> = None;
        self.publish(
            |workers| match workers.iter_mut().find(|w| w.id == worker.id) {
                Some(slot) => replaced = Some(std::mem::replace(slot, worker.clone())),
                None => workers.push(worker.clone()),
            },
        );
        if replaced.is_none() {
            self.fleet.arrive(&worker);
        }
        if let Some(old) = replaced.filter(|old| !old.same_live(&worker)) {
            old.retire();
        }
    }

    /// Adds a worker (alias of [`Registry::upsert`] for a new id).
    pub fn insert(&self, worker: Arc<Worker>) {
        self.upsert(worker);
    }

    /// Changes a worker's status and republishes so selection sees it.
    pub fn set_status(&self, worker: &Worker, status: Status) {
        if worker.status() == status {
            return;
        }
        worker.set_status(status);
        self.publish(|_| {});
    }

    /// Removes a worker by id and retires it; returns it if it was present.
    pub fn remove(&self, id: &Uuid) -> Option<Arc<Worker>> {
        let mut removed = None;
        self.publish(|workers| {
            removed = workers
                .iter()
                .position(|w| w.id == *id)
                .map(|i| workers.remove(i));
        });
        if let Some(worker) = &removed {
            worker.retire();
            self.fleet.depart(worker);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> WorkerSpec {
        WorkerSpec::new(parse_worker_url(url).unwrap())
    }

    fn worker(url: &str) -> Arc<Worker> {
        Arc::new(Worker::new(
            Uuid::new_v4(),
            spec(url),
            Discovered::default(),
            &WorkerDefaults::default(),
        ))
    }

    fn serving(url: &str, models: &[&str]) -> Arc<Worker> {
        let discovered = Discovered {
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            ..Discovered::default()
        };
        let w = Worker::new(
            Uuid::new_v4(),
            spec(url),
            discovered,
            &WorkerDefaults::default(),
        );
        w.set_status(Status::Ready);
        Arc::new(w)
    }

    #[test]
    fn the_shape_follows_every_published_change() {
        let reg = Registry::new();
        assert_eq!(reg.shape(), Shape::default());
        let grpc = worker("grpc://127.0.0.1:7");
        reg.upsert(grpc.clone());
        assert_eq!(reg.shape(), Shape::of(&reg.snapshot()));
        assert!(reg.shape().all_grpc);
        reg.upsert(worker("http://127.0.0.1:8"));
        assert!(!reg.shape().all_grpc);
        assert_eq!(reg.shape(), Shape::of(&reg.snapshot()));
    }

    #[test]
    fn the_spec_names_the_connector_and_role_the_engine_its_engine_id() {
        let reported = crate::engine::grpc::service::KvFacts {
            connector: Some("NixlConnector".into()),
            role: Some("kv_producer".into()),
            engine_id: Some("engine-side".into()),
        };
        let mut given = spec("grpc://127.0.0.1:7");
        given.kv_connector = Some("MooncakeConnector".into());
        given.kv_engine_id = Some("spec-side".into());
        let discovered = Discovered {
            kv: reported.clone(),
            ..Discovered::default()
        };
        let w = Worker::new(
            Uuid::new_v4(),
            given,
            discovered,
            &WorkerDefaults::default(),
        );
        assert_eq!(w.spec.kv_connector.as_deref(), Some("MooncakeConnector"));
        assert_eq!(w.spec.kv_role.as_deref(), Some("kv_producer"));
        assert_eq!(w.spec.kv_engine_id.as_deref(), Some("engine-side"));
        let plain = Worker::new(
            Uuid::new_v4(),
            spec("grpc://127.0.0.1:7"),
            Discovered {
                kv: reported,
                ..Discovered::default()
            },
            &WorkerDefaults::default(),
        );
        assert_eq!(plain.spec.kv_connector.as_deref(), Some("NixlConnector"));
        let renamed = plain.with_kv_engine_id("after-restart".into());
        assert_eq!(renamed.spec.kv_engine_id.as_deref(), Some("after-restart"));
        assert!(renamed.same_live(&plain));
    }

    #[test]
    fn rank_targets_share_the_engine_url_and_go_together() {
        let reg = Registry::new();
        let engine = "http://127.0.0.1:7";
        let size = dp::DpSize::choose(None, Some(3)).unwrap().unwrap();
        let ranks: Vec<Arc<Worker>> = size
            .ranks()
            .map(|rank| {
                let w = Worker::for_rank(
                    Uuid::new_v4(),
                    spec(engine),
                    Discovered::default(),
                    &WorkerDefaults::default(),
                    rank,
                );
                Arc::new(w)
            })
            .collect();
        let other = worker("http://127.0.0.1:8");
        for w in ranks.iter().chain([&other]) {
            reg.insert(w.clone());
        }
        let snap = reg.snapshot();
        assert_eq!(ranks[2].url, "http://127.0.0.1:7@2");
        assert_eq!(&*ranks[2].url_label, "http://127.0.0.1:7@2");
        assert_eq!(ranks[2].engine_url(), engine);
        assert_eq!(ranks[2].spec.dp_size, Some(3));
        assert_eq!(
            ranks[2].http_origin().map(|(_, a)| a.as_str()),
            Some("127.0.0.1:7"),
            "requests go to the engine"
        );
        assert_eq!(snap.by_url(engine).map(|w| w.id), Some(ranks[0].id));
        assert_eq!(
            snap.by_url("http://127.0.0.1:7@1").map(|w| w.id),
            Some(ranks[1].id)
        );
        let together: Vec<Uuid> = snap
            .engine_targets(&ranks[1])
            .iter()
            .map(|w| w.id)
            .collect();
        assert_eq!(together, ranks.iter().map(|w| w.id).collect::<Vec<_>>());
        assert_eq!(snap.engine_targets(&other).len(), 1);
        assert!(ranks[0].fronts_engine() && !ranks[1].fronts_engine() && other.fronts_engine());
        let patched = ranks[1].patched(WorkerPatch::default(), &WorkerDefaults::default());
        assert_eq!(
            (patched.url.as_str(), patched.dp),
            (ranks[1].url.as_str(), ranks[1].dp)
        );
    }

    #[test]
    fn insert_and_remove_publish_new_snapshots() {
        let reg = Registry::new();
        let a = worker("http://127.0.0.1:1");
        let b = worker("http://127.0.0.1:2");
        reg.insert(a.clone());
        let before = reg.snapshot();
        reg.insert(b.clone());
        assert_eq!(before.all().len(), 1, "an old snapshot never changes");
        assert_eq!(reg.snapshot().all().len(), 2);
        assert!(reg.snapshot().by_url("http://127.0.0.1:2").is_some());
        assert_eq!(reg.remove(&a.id).map(|w| w.id), Some(a.id));
        assert!(reg.remove(&a.id).is_none());
        assert_eq!(reg.snapshot().all().len(), 1);
    }

    #[test]
    fn routable_follows_status_changes() {
        let reg = Registry::new();
        let a = worker("http://127.0.0.1:1");
        reg.insert(a.clone());
        assert!(
            reg.snapshot().routable().is_empty(),
            "pending is not routable"
        );
        reg.set_status(&a, Status::Ready);
        assert_eq!(reg.snapshot().routable().len(), 1);
        reg.set_status(&a, Status::Draining);
        assert_eq!(reg.snapshot().ready_count(), 0);
    }

    #[test]
    fn load_guard_counts_in_flight() {
        let w = worker("http://127.0.0.1:1");
        let g1 = w.track();
        let g2 = w.track();
        assert_eq!(w.load(), 2);
        drop(g1);
        assert_eq!(w.load(), 1);
        drop(g2);
        assert_eq!(w.load(), 0);
    }

    #[test]
    fn status_round_trips_and_readiness() {
        let w = worker("http://127.0.0.1:1");
        assert_eq!(w.status(), Status::Pending);
        w.set_status(Status::Ready);
        assert!(w.is_ready());
        w.set_status(Status::Draining);
        assert_eq!(w.status().as_str(), "draining");
    }

    #[test]
    fn api_key_is_not_in_debug_output() {
        let mut s = spec("http://127.0.0.1:1");
        s.api_key = Some(Secret::new("sk-very-secret"));
        let w = Worker::new(
            Uuid::new_v4(),
            s,
            Discovered::default(),
            &WorkerDefaults::default(),
        );
        assert!(w.bearer.is_some());
        assert!(!format!("{w:?}").contains("sk-very-secret"));
    }

    #[test]
    fn a_patch_keeps_live_figures() {
        let reg = Registry::new();
        let w = worker("http://127.0.0.1:1");
        reg.insert(w.clone());
        reg.set_status(&w, Status::Ready);
        let _guard = w.track();
        let patch = WorkerPatch {
            priority: Some(7),
            ..WorkerPatch::default()
        };
        let patched = Arc::new(w.patched(patch, &WorkerDefaults::default()));
        reg.upsert(patched.clone());
        let snap = reg.snapshot();
        let now = snap.by_id(&w.id).unwrap();
        assert_eq!(now.spec.priority, 7);
        assert_eq!(now.load(), 1, "in-flight count survives the patch");
        assert!(now.is_ready());
        assert!(!w.is_retired(), "a patch does not retire the worker");
        assert_eq!(snap.all().len(), 1);
    }

    #[test]
    fn replacing_or_removing_retires() {
        let reg = Registry::new();
        let w = worker("http://127.0.0.1:1");
        reg.insert(w.clone());
        let replacement = Worker::new(
            w.id,
            spec(&w.url),
            Discovered::default(),
            &WorkerDefaults::default(),
        );
        reg.upsert(Arc::new(replacement));
        assert!(w.is_retired());
        let current = reg.snapshot().by_id(&w.id).unwrap().clone();
        assert!(!current.is_retired());
        reg.remove(&w.id);
        assert!(current.is_retired());
    }

    #[test]
    fn model_index_with_aliases_and_any_model_workers() {
        let reg = Registry::with_aliases(vec![("fast".into(), "llama".into())]);
        let a = serving("http://127.0.0.1:1", &["llama"]);
        let b = serving("http://127.0.0.1:2", &["qwen"]);
        let any = worker("http://127.0.0.1:3");
        any.set_status(Status::Ready);
        reg.insert(a.clone());
        reg.insert(b.clone());
        reg.insert(any.clone());
        let snap = reg.snapshot();
        let ids = |list: &[Arc<Worker>]| list.iter().map(|w| w.id).collect::<Vec<_>>();
        assert_eq!(ids(snap.routable_for_model("llama")), [a.id]);
        assert_eq!(ids(snap.routable_for_model("fast")), [a.id]);
        assert_eq!(ids(snap.routable_for_model("qwen")), [b.id]);
        assert_eq!(ids(snap.routable_for_model("other")), [any.id]);
        assert_eq!(snap.model_ids(), ["llama", "qwen"]);
        assert!(a.serves("llama") && !a.serves("qwen") && any.serves("qwen"));
    }

    #[test]
    fn only_regular_workers_take_regular_traffic() {
        let reg = Registry::new();
        let mut prefill = spec("http://127.0.0.1:1");
        prefill.worker_type = WorkerType::Prefill;
        let p = Arc::new(Worker::new(
            Uuid::new_v4(),
            prefill,
            Discovered::default(),
            &WorkerDefaults::default(),
        ));
        let r = worker("http://127.0.0.1:2");
        reg.insert(p.clone());
        reg.insert(r.clone());
        reg.set_status(&p, Status::Ready);
        reg.set_status(&r, Status::Ready);
        let snap = reg.snapshot();
        assert_eq!(snap.all().len(), 2);
        let routable: Vec<_> = snap.routable().iter().map(|w| w.id).collect();
        assert_eq!(routable, [r.id]);
    }

    #[test]
    fn probe_streaks_reset_on_the_other_outcome() {
        let w = worker("http://127.0.0.1:1");
        assert_eq!(w.record_probe(true), 1);
        assert_eq!(w.record_probe(true), 2);
        assert_eq!(w.record_probe(false), 1);
        assert_eq!(w.record_probe(true), 1);
    }

    #[test]
    fn health_config_merges_overrides_over_flags() {
        let config = HealthConfig::default();
        let h = HealthConfig::resolve(&config, &HealthOverrides::default(), RuntimeType::Sglang);
        assert_eq!(h.check_interval, Duration::from_secs(60));
        assert_eq!((h.success_threshold, h.failure_threshold), (2, 3));
        assert!(!h.disabled);
        let overrides = HealthOverrides {
            check_interval_secs: Some(2),
            success_threshold: Some(0),
            ..HealthOverrides::default()
        };
        let h = HealthConfig::resolve(&config, &overrides, RuntimeType::Generic);
        assert_eq!(h.check_interval, Duration::from_secs(2));
        assert_eq!(h.success_threshold, 1, "a threshold is at least one probe");
        let h = HealthConfig::resolve(&config, &HealthOverrides::default(), RuntimeType::External);
        assert!(h.disabled, "external providers are never probed");
    }
    fn pd_worker(
        url: &str,
        kind: WorkerType,
        runtime: RuntimeType,
        key: Option<&str>,
    ) -> Arc<Worker> {
        let mut s = spec(url);
        s.worker_type = kind;
        s.runtime_type = runtime;
        if let Some(key) = key {
            s.labels.insert("pairing_protocol".into(), key.into());
        }
        let w = Arc::new(Worker::new(
            Uuid::new_v4(),
            s,
            Discovered::default(),
            &WorkerDefaults::default(),
        ));
        w.set_status(Status::Ready);
        w
    }

    #[test]
    fn pairing_follows_explicit_keys_else_runtime_transport_and_connector() {
        use RuntimeType::{Sglang, Vllm};
        use WorkerType::{Decode, Prefill};
        let p = pd_worker("http://127.0.0.1:1", Prefill, Sglang, None);
        let d = pd_worker("http://127.0.0.1:2", Decode, Sglang, None);
        let v = pd_worker("http://127.0.0.1:3", Decode, Vllm, None);
        assert!(p.pairs_with(&d));
        assert!(!p.pairs_with(&v), "runtimes differ");
        let pa = pd_worker("http://127.0.0.1:4", Prefill, Sglang, Some("a"));
        let da = pd_worker("http://127.0.0.1:5", Decode, Vllm, Some("a"));
        let db = pd_worker("http://127.0.0.1:6", Decode, Sglang, Some("b"));
        assert!(pa.pairs_with(&da), "explicit keys win over runtimes");
        assert!(!pa.pairs_with(&db));
        assert!(pa.pairs_with(&d), "one key alone: the derived parts decide");
    }

    #[test]
    fn a_pd_fleet_is_ready_with_one_prefill_and_one_decode() {
        let reg = Registry::new();
        let p = pd_worker(
            "http://127.0.0.1:1",
            WorkerType::Prefill,
            RuntimeType::Sglang,
            None,
        );
        reg.insert(p.clone());
        assert_eq!(
            reg.snapshot().ready_count(),
            0,
            "prefill alone serves nothing"
        );
        let d = pd_worker(
            "http://127.0.0.1:2",
            WorkerType::Decode,
            RuntimeType::Sglang,
            None,
        );
        reg.insert(d.clone());
        assert_eq!(reg.snapshot().ready_count(), 2);
        assert_eq!(reg.snapshot().routable_decode().len(), 1);
        reg.set_status(&p, Status::NotReady);
        assert_eq!(
            reg.snapshot().ready_count(),
            0,
            "decode alone serves nothing"
        );
    }
}
