//! Worker lifecycles on the control runtime: the job executor (register, update, replace,
//! remove) and one health watcher per registered worker. Nothing here runs on a data-plane
//! thread; the data plane only sees the snapshots these tasks publish.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, Instant};
use uuid::Uuid;

use super::calls::{probe_health, CallClient};
use super::detect::{detect, is_external_provider, server_dp_size};
use super::external;
use super::jobs::{Job, SubmitError, QUEUE_CAPACITY};
use super::protocol::{self, Unsettled, Want};
use super::spec_body::check_for_registration;
use super::Control;
use super::ControlSettings;
use crate::fleet::dp::DpSize;
use crate::fleet::spec::WorkerSpec;
use crate::fleet::WorkerDefaults;
use crate::fleet::{Discovered, RuntimeType, Status, Transport, Worker, WorkerType};

/// Jobs that may run at once (registrations can wait on a worker for a long time).
const CONCURRENT_JOBS: usize = 64;
/// Probe spacing while a worker is pending, so a fresh worker is routable within seconds
/// even with a long `check_interval`.
const PENDING_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How often a watcher whose probes are disabled re-reads the worker's settings.
const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// Drains the job queue until the gateway stops.
///
/// Jobs of different workers run concurrently (a registration may wait on its worker for
/// a long time); jobs of one worker run one after the other, in submission order, so that
/// a PUT and a DELETE of one worker can never interleave (a PUT finishing during the
/// DELETE's drain would otherwise publish the draining worker again).
pub async fn run_jobs(control: Arc<Control>, mut rx: mpsc::Receiver<Job>) {
    let permits = Arc::new(Semaphore::new(CONCURRENT_JOBS));
    let client = CallClient::new(&control.tls);
    let lanes = Lanes::default();
    while let Some(job) = rx.recv().await {
        // Taken here, so jobs waiting in a lane count too: what the executor holds is
        // bounded by CONCURRENT_JOBS plus the queue.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let id = job.id();
        let Some(first) = lanes.enter(job, permit) else {
            continue;
        };
        let (control, client, lanes) = (control.clone(), client.clone(), lanes.clone());
        tokio::spawn(async move {
            let mut next = Some(first);
            while let Some((job, permit)) = next {
                run_one(&control, &client, job).await;
                drop(permit);
                next = lanes.next(&id);
            }
        });
    }
}

/// A job with the executor permit it holds while queued and running.
type Queued = (Job, OwnedSemaphorePermit);

/// One lane per worker id with a job running: the jobs submitted for it meanwhile, in
/// order. A lane exists exactly while a task is running its jobs. Touched only by the
/// dispatcher and the lane tasks, for a push or a pop, so a plain mutex is fine.
#[derive(Clone, Default)]
struct Lanes(Arc<Mutex<HashMap<Uuid, VecDeque<Queued>>>>);

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, VecDeque<Queued>>> {
        // Nothing is left half-done under this lock, so a poisoned one is taken over.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lines `job` up behind its worker's running job. Returns it when the worker had
    /// none: the caller then runs the lane.
    fn enter(&self, job: Job, permit: OwnedSemaphorePermit) -> Option<Queued> {
        match self.lock().entry(job.id()) {
            Entry::Occupied(mut lane) => {
                lane.get_mut().push_back((job, permit));
                None
            }
            Entry::Vacant(lane) => {
                lane.insert(VecDeque::new());
                Some((job, permit))
            }
        }
    }

    /// The worker's next job; `None` closes the lane.
    fn next(&self, id: &Uuid) -> Option<Queued> {
        let mut lanes = self.lock();
        let next = lanes.get_mut(id)?.pop_front();
        if next.is_none() {
            lanes.remove(id);
        }
        next
    }
}

/// Runs one job and records how it ended on the job board.
async fn run_one(control: &Arc<Control>, client: &CallClient, job: Job) {
    let id = job.id();
    control.jobs.processing(&id);
    match execute(control, client, job).await {
        Ok(()) => control.jobs.succeeded(&id),
        Err(reason) => {
            tracing::warn!(worker_id = %id, reason = %reason, "worker job failed");
            control.jobs.failed(&id, reason);
        }
    }
}
async fn execute(control: &Arc<Control>, client: &CallClient, job: Job) -> Result<(), String> {
    match job {
        Job::Add { id, spec } => {
            let snapshot = control.registry.snapshot();
            if let Some(existing) = snapshot.by_url(&spec.url.normalized) {
                return Err(format!("URL already registered as worker {}", existing.id));
            }
            drop(snapshot);
            let registered = register(control, client, id, *spec).await?;
            for worker in registered.into_workers(id, &control.defaults) {
                admit(control, client, worker);
            }
            Ok(())
        }
        Job::Replace { id, spec } => {
            let before = current(control, &id)?;
            let registered = register(control, client, id, *spec).await?;
            // The admin route refuses PUT under --dp-aware, so nothing here has ranks.
            let [worker] = <[Worker; 1]>::try_from(registered.into_workers(id, &control.defaults))
                .map_err(|_| {
                    "a data-parallel engine cannot be replaced; remove and add it".to_owned()
                })?;
            let now = current(control, &id)?;
            if !now.same_live(&before) {
                return Err("the worker was replaced while this job ran".into());
            }
            if now.status() == Status::Draining || now.is_retired() {
                return Err("the worker is being removed".into());
            }
            admit(control, client, worker);
            Ok(())
        }
        Job::Patch { id, patch } => {
            let worker = current(control, &id)?;
            // A rank's spec is its engine's: the patch applies to every rank.
            for target in control.registry.snapshot().engine_targets(&worker) {
                let patched = Arc::new(target.patched(patch.clone(), &control.defaults));
                control.registry.upsert(patched.clone());
                if patched.health.disabled && patched.status() == Status::Pending {
                    control.registry.set_status(&patched, Status::Ready);
                }
                tracing::info!(worker = %patched.url, id = %patched.id, "worker updated");
            }
            Ok(())
        }
        Job::Remove { id } => {
            let worker = current(control, &id)?;
            // Removing one rank of a data-parallel engine removes the engine: all ranks
            // drain together, then leave.
            let targets = control.registry.snapshot().engine_targets(&worker);
            let mut settle = std::time::Duration::ZERO;
            for target in &targets {
                if target.status() == Status::Ready && !target.health.drain_settle.is_zero() {
                    control.registry.set_status(target, Status::Draining);
                    tracing::info!(worker = %target.url, id = %target.id, "worker draining");
                    settle = settle.max(target.health.drain_settle);
                }
            }
            sleep(settle).await;
            for target in &targets {
                control.registry.remove(&target.id);
                control.policy.remove_worker(&target.url);
                tracing::info!(worker = %target.url, id = %target.id, "worker removed");
            }
            Ok(())
        }
    }
}

/// The registered worker with this id.
fn current(control: &Control, id: &Uuid) -> Result<Arc<Worker>, String> {
    control
        .registry
        .snapshot()
        .by_id(id)
        .cloned()
        .ok_or_else(|| "the worker no longer exists".to_owned())
}

/// What a registration found: the spec as stored, what the engine told about itself and,
/// under `--dp-aware`, its data-parallel ranks.
struct Registered {
    spec: WorkerSpec,
    discovered: Discovered,
    dp: Option<DpSize>,
}

impl Registered {
    /// The routing targets to publish: one worker, or one per rank. Rank 0 takes `id`
    /// (the id the POST answered, so polling it works); the other ranks get fresh ids.
    fn into_workers(self, id: Uuid, defaults: &WorkerDefaults) -> Vec<Worker> {
        let Some(size) = self.dp else {
            return vec![Worker::new(id, self.spec, self.discovered, defaults)];
        };
        size.ranks()
            .map(|rank| {
                let rank_id = if rank.rank() == 0 { id } else { Uuid::new_v4() };
                let (spec, discovered) = (self.spec.clone(), self.discovered.clone());
                Worker::for_rank(rank_id, spec, discovered, defaults, rank)
            })
            .collect()
    }
}

/// The data-parallel size to register under `--dp-aware`: the spec's `dp_size` when it
/// has one, else what the engine's server information states.
async fn dp_size(
    pool: &super::calls::CallPool,
    spec: &WorkerSpec,
    bearer: Option<&http::HeaderValue>,
    timeout: Duration,
) -> Result<Option<DpSize>, String> {
    let stated = match spec.dp_size {
        Some(_) => None,
        None => server_dp_size(pool, &spec.url, bearer, timeout).await,
    };
    DpSize::choose(spec.dp_size, stated)
}

/// Full registration: the checks the spec must pass, then [`discover`].
async fn register(
    control: &Control,
    client: &CallClient,
    id: Uuid,
    mut spec: WorkerSpec,
) -> Result<Registered, String> {
    check_for_registration(&spec)?;
    let http = matches!(spec.url.transport, Transport::Http { .. });
    if (control.backend.is_provider() && http)
        || (spec.runtime_type == RuntimeType::Unspecified && is_external_provider(&spec.url))
    {
        spec.runtime_type = RuntimeType::External;
    }
    // Spec 1: a ZMQ worker has no server to pin ranks through.
    if matches!(spec.url.transport, Transport::Zmq { .. })
        && control.dp_aware
        && spec.dp_size.is_some_and(|n| n > 1)
    {
        return Err("a ZMQ worker cannot have dp_size above 1 on a --dp-aware gateway".into());
    }
    // The derived handshake address is the one the engines must dial: shown with the worker.
    if let Transport::Zmq { path } = &spec.url.transport {
        if spec.zmq_handshake_address.is_none() {
            spec.zmq_handshake_address = Some(super::zmq::default_handshake(path));
        }
    }
    let (discovered, dp) = discover(control, client, id, &spec).await?;
    Ok(Registered {
        spec,
        discovered,
        dp,
    })
}

/// Finds out what a worker is, the one way for command-line workers and `POST`/`PUT
/// /workers` alike (both arrive here as registration jobs): over HTTP, waits until it
/// answers and settles the protocol, detects its runtime and models, and under
/// `--dp-aware` reads its data-parallel size. Over gRPC, asks the engine what it serves and
/// loads its tokenizer ([`super::grpc`]). For a ZMQ worker, binds its sockets and loads its
/// tokenizer ([`super::zmq`]); its engines dial in when they start.
async fn discover(
    control: &Control,
    client: &CallClient,
    id: Uuid,
    spec: &WorkerSpec,
) -> Result<(Discovered, Option<DpSize>), String> {
    // The spec's health settings resolved against the gateway's defaults.
    let probe_worker = Worker::new(id, spec.clone(), Discovered::default(), &control.defaults);
    match spec.url.transport {
        Transport::Http { .. } => {}
        Transport::Grpc { .. } => {
            let timeout = probe_worker.health.timeout;
            return Ok((super::grpc::discover(control, spec, timeout).await?, None));
        }
        Transport::Zmq { .. } => return Ok((super::zmq::discover(control, spec).await?, None)),
    }
    let bearer = crate::fleet::bearer(spec.api_key.as_ref());
    let want = Want::from_settings(spec.http_pool.http2, control.upstream_http2);
    let timeout = probe_worker.health.timeout;
    if spec.runtime_type == RuntimeType::External && control.backend.is_provider() {
        // The provider backend's worker: the gateway holds no key to list models with,
        // so nothing is asked; with no model list it takes every model.
        return Ok((
            Discovered {
                runtime: RuntimeType::External,
                ..Discovered::default()
            },
            None,
        ));
    }
    if spec.runtime_type == RuntimeType::External {
        return Ok((
            external::discover(client.pool(false), spec, timeout).await?,
            None,
        ));
    }
    let http2 = if probe_worker.health.disabled {
        protocol::settle_once(client, &spec.url, bearer.as_ref(), timeout, want).await?
    } else {
        wait_until_answering(control, client, spec, bearer.as_ref(), timeout, want).await?
    };
    let discovered = detect(
        client.pool(http2),
        &spec.url,
        bearer.as_ref(),
        spec.effective_runtime(),
        timeout,
    )
    .await;
    let dp = if control.dp_aware {
        dp_size(client.pool(http2), spec, bearer.as_ref(), timeout).await?
    } else {
        None
    };
    Ok((
        Discovered {
            http2,
            ..discovered
        },
        dp,
    ))
}

/// Startup probing: `/health` every `--worker-startup-check-interval` until it answers or
/// `--worker-startup-timeout-secs` runs out. Returns whether the worker is spoken to over
/// HTTP/2.
async fn wait_until_answering(
    control: &Control,
    client: &CallClient,
    spec: &WorkerSpec,
    bearer: Option<&http::HeaderValue>,
    timeout: Duration,
    want: Want,
) -> Result<bool, String> {
    let settings = &control.settings;
    let deadline = Instant::now() + settings.startup_timeout;
    loop {
        match protocol::check(client, &spec.url, bearer, timeout, want).await {
            Ok(http2) => return Ok(http2),
            Err(Unsettled::Http1Only) => return Err(protocol::HTTP1_ONLY.into()),
            Err(Unsettled::NotYet(err)) => {
                let next = Instant::now() + settings.startup_check_interval;
                if next >= deadline {
                    return Err(format!(
                        "worker did not answer /health within {} s: {err}",
                        settings.startup_timeout.as_secs()
                    ));
                }
                tracing::info!(worker = %spec.url.normalized, error = %err, "waiting for worker to answer");
                tokio::time::sleep_until(next).await;
            }
        }
    }
}

/// Queues the workers named on the command line (`--worker-urls`, and `--prefill` /
/// `--decode` with their worker types) as registration jobs, exactly like `POST /workers`:
/// each is probed every `--worker-startup-check-interval` until it answers or
/// `--worker-startup-timeout-secs` runs out, detected, and routable only once healthy.
/// They carry the gateway's `--api-key`. Returns at once, so the gateway listens (and its
/// readiness says 503) while slow workers come up. A URL listed twice, in any spelling,
/// is registered once.
pub fn register_startup(control: &Control) -> Result<(), String> {
    for mut spec in startup_specs(&control.settings)? {
        if control.backend.is_provider() {
            // The provider reads the client's own key; the gateway's is never sent there.
            spec.runtime_type = RuntimeType::External;
        } else {
            spec.api_key = control.startup_api_key.clone();
        }
        let url = spec.url.normalized.clone();
        let job = Job::Add {
            id: Uuid::new_v4(),
            spec: Box::new(spec),
        };
        match control.jobs.submit(&url, job) {
            Ok(()) => {}
            Err(SubmitError::InProgress(_)) => {
                tracing::warn!(worker = %url, "worker listed more than once on the command line; registering it once");
            }
            Err(SubmitError::QueueFull) => {
                return Err(format!(
                    "too many command-line workers (at most {QUEUE_CAPACITY})"
                ));
            }
        }
    }
    Ok(())
}

/// The specs of the command-line workers, in flag order: regular, prefill, decode.
fn startup_specs(config: &ControlSettings) -> Result<Vec<WorkerSpec>, String> {
    let parse = |flag: &str, raw: &str| {
        crate::fleet::parse_worker_url(raw)
            .map_err(|e| format!("{flag} {}: {e}", crate::secret::redact_userinfo(raw)))
    };
    let mut specs = Vec::new();
    for raw in &config.worker_urls {
        specs.push(WorkerSpec::new(parse("--worker-urls", raw)?));
    }
    for prefill in &config.prefill_workers {
        let mut spec = WorkerSpec::new(parse("--prefill", &prefill.url)?);
        spec.worker_type = WorkerType::Prefill;
        spec.bootstrap_port = prefill.bootstrap_port;
        specs.push(spec);
    }
    for raw in &config.decode_workers {
        let mut spec = WorkerSpec::new(parse("--decode", raw)?);
        spec.worker_type = WorkerType::Decode;
        specs.push(spec);
    }
    Ok(specs)
}

/// Publishes a registered worker with the status its registration earned.
fn admit(control: &Arc<Control>, client: &CallClient, worker: Worker) {
    let worker = Arc::new(worker);
    let status = match (&worker.transport, worker.health.disabled) {
        (Transport::Zmq { .. }, _) => Status::NotReady,
        (_, true) => Status::Ready,
        // The registration probe counts as the first success.
        (_, false) if worker.record_probe(true) >= worker.health.success_threshold => Status::Ready,
        (_, false) => Status::Pending,
    };
    publish(control, client, worker, status);
}

/// Puts the worker in the registry with `status` and starts its health watcher.
fn publish(control: &Arc<Control>, client: &CallClient, worker: Arc<Worker>, status: Status) {
    worker.set_status(status);
    control.registry.upsert(worker.clone());
    tracing::info!(
        worker = %worker.url,
        id = %worker.id,
        runtime = worker.runtime.as_str(),
        model = worker.model_id.as_deref().unwrap_or(""),
        status = status.as_str(),
        "worker registered"
    );
    match &worker.zmq {
        Some(engine) => {
            let ranks = engine.link().live_ranks();
            tokio::spawn(follow_ranks(control.clone(), worker, ranks));
        }
        None => {
            tokio::spawn(watch(control.clone(), client.clone(), worker));
        }
    }
}

/// A ZMQ worker's status follows its ranks (spec 1: no health checks): ready while at
/// least one rank takes requests, `not_ready` while none does. Ends when the worker leaves
/// the registry or its link closes.
async fn follow_ranks(
    control: Arc<Control>,
    registered: Arc<Worker>,
    mut ranks: tokio::sync::watch::Receiver<usize>,
) {
    let id = registered.id;
    loop {
        let live = *ranks.borrow_and_update();
        let Some(worker) = control.registry.snapshot().by_id(&id).cloned() else {
            return;
        };
        if !worker.same_live(&registered) || worker.is_retired() {
            return;
        }
        let status = worker.status();
        let next = if live > 0 {
            Status::Ready
        } else {
            Status::NotReady
        };
        if status != next && status != Status::Draining {
            tracing::info!(worker = %worker.url, live_ranks = live, status = next.as_str(), "ZMQ worker status follows its engine ranks");
            control.registry.set_status(&worker, next);
        }
        if ranks.changed().await.is_err() {
            return;
        }
    }
}

/// Probes one worker for as long as it (this version of it) is registered.
/// All watchers share the control runtime's client (and its pool and TLS roots).
async fn watch(control: Arc<Control>, client: CallClient, registered: Arc<Worker>) {
    let id = registered.id;
    loop {
        // Re-read each round: a PATCH may have changed the settings or the key.
        let Some(worker) = control.registry.snapshot().by_id(&id).cloned() else {
            return;
        };
        if !worker.same_live(&registered) || worker.is_retired() {
            return;
        }
        let health = worker.health;
        let status = worker.status();
        if health.disabled || status == Status::Draining {
            sleep(IDLE_RECHECK.min(health.check_interval)).await;
            continue;
        }
        let interval = if status == Status::Pending {
            PENDING_PROBE_INTERVAL.min(health.check_interval)
        } else {
            health.check_interval
        };
        sleep(interval).await;
        let ok = match worker.transport {
            Transport::Http { .. } => probe_health(
                client.pool(worker.http2),
                &worker.spec.url,
                worker.bearer.as_ref(),
                health.timeout,
            )
            .await
            .is_ok(),
            Transport::Grpc { .. } => super::grpc::probe(&control, &worker).await,
            Transport::Zmq { .. } => return,
        };
        control.metrics.health_check(&worker, ok);
        let streak = worker.record_probe(ok);
        let status = worker.status();
        let next = match (ok, status) {
            (true, Status::Pending | Status::NotReady | Status::Failed)
                if streak >= health.success_threshold =>
            {
                Some(Status::Ready)
            }
            (false, Status::Ready | Status::Pending) if streak >= health.failure_threshold => {
                Some(Status::NotReady)
            }
            _ => None,
        };
        if let Some(next) = next {
            if !worker.is_retired() {
                let recovered = next == Status::Ready
                    && matches!(status, Status::NotReady | Status::Failed)
                    && matches!(worker.transport, Transport::Grpc { .. });
                if recovered {
                    if let Some(reread) = super::grpc::reread_kv_engine_id(&control, &worker).await
                    {
                        tracing::info!(worker = %worker.url, kv_engine_id = ?reread.spec.kv_engine_id, "the engine reports a new KV engine id");
                        control.registry.upsert(Arc::new(reread));
                    }
                }
                control.registry.set_status(&worker, next);
                tracing::info!(worker = %worker.url, id = %id, status = next.as_str(), "worker health changed");
            }
        }
    }
}
