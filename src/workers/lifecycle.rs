//! Worker lifecycles on the control runtime: the job executor (register, update, replace,
//! remove) and one health watcher per registered worker. Nothing here runs on a data-plane
//! thread; the data plane only sees the snapshots these tasks publish.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::time::{sleep, Instant};
use uuid::Uuid;

use super::calls::{probe_health, CallClient};
use super::detect::{detect, is_external_provider, server_dp_size};
use super::dp::DpSize;
use super::jobs::Job;
use super::protocol::{self, Unsettled, Want};
use super::spec::{check_for_registration, WorkerSpec};
use super::{Discovered, RuntimeType, Status, Transport, Worker, WorkerType};
use crate::app::Gateway;
use crate::config::Config;

/// Jobs that may run at once (registrations can wait on a worker for a long time).
const CONCURRENT_JOBS: usize = 64;
/// Probe spacing while a worker is pending, so a fresh worker is routable within seconds
/// even with a long `check_interval`.
const PENDING_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How often a watcher whose probes are disabled re-reads the worker's settings.
const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// Drains the job queue until the gateway stops. Each job runs as its own task.
pub async fn run_jobs(gateway: Arc<Gateway>, mut rx: mpsc::Receiver<Job>) {
    let permits = Arc::new(Semaphore::new(CONCURRENT_JOBS));
    let client = CallClient::new();
    while let Some(job) = rx.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let gateway = gateway.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let id = job.id();
            gateway.jobs.processing(&id);
            match execute(&gateway, &client, job).await {
                Ok(()) => gateway.jobs.succeeded(&id),
                Err(reason) => {
                    tracing::warn!(worker_id = %id, reason = %reason, "worker job failed");
                    gateway.jobs.failed(&id, reason);
                }
            }
            drop(permit);
        });
    }
}

async fn execute(gateway: &Arc<Gateway>, client: &CallClient, job: Job) -> Result<(), String> {
    match job {
        Job::Add { id, spec } => {
            let snapshot = gateway.registry.snapshot();
            if let Some(existing) = snapshot.by_url(&spec.url.normalized) {
                return Err(format!("URL already registered as worker {}", existing.id));
            }
            drop(snapshot);
            let registered = register(gateway, client, id, *spec).await?;
            for worker in registered.into_workers(id, &gateway.config) {
                admit(gateway, client, worker);
            }
            Ok(())
        }
        Job::Replace { id, spec } => {
            let before = current(gateway, &id)?;
            let registered = register(gateway, client, id, *spec).await?;
            // The admin route refuses PUT under --dp-aware, so nothing here has ranks.
            let [worker] = <[Worker; 1]>::try_from(registered.into_workers(id, &gateway.config))
                .map_err(|_| {
                    "a data-parallel engine cannot be replaced; remove and add it".to_owned()
                })?;
            let now = current(gateway, &id)?;
            if !now.same_live(&before) {
                return Err("the worker was replaced while this job ran".into());
            }
            admit(gateway, client, worker);
            Ok(())
        }
        Job::Patch { id, patch } => {
            let worker = current(gateway, &id)?;
            // A rank's spec is its engine's: the patch applies to every rank.
            for target in gateway.registry.snapshot().engine_targets(&worker) {
                let patched = Arc::new(target.patched(patch.clone(), &gateway.config));
                gateway.registry.upsert(patched.clone());
                if patched.health.disabled && patched.status() == Status::Pending {
                    gateway.registry.set_status(&patched, Status::Ready);
                }
                tracing::info!(worker = %patched.url, id = %patched.id, "worker updated");
            }
            Ok(())
        }
        Job::Remove { id } => {
            let worker = current(gateway, &id)?;
            // Removing one rank of a data-parallel engine removes the engine: all ranks
            // drain together, then leave.
            let targets = gateway.registry.snapshot().engine_targets(&worker);
            let mut settle = std::time::Duration::ZERO;
            for target in &targets {
                if target.status() == Status::Ready && !target.health.drain_settle.is_zero() {
                    gateway.registry.set_status(target, Status::Draining);
                    tracing::info!(worker = %target.url, id = %target.id, "worker draining");
                    settle = settle.max(target.health.drain_settle);
                }
            }
            sleep(settle).await;
            for target in &targets {
                gateway.registry.remove(&target.id);
                gateway.policy.remove_worker(&target.url);
                tracing::info!(worker = %target.url, id = %target.id, "worker removed");
            }
            Ok(())
        }
    }
}

/// The registered worker with this id.
fn current(gateway: &Gateway, id: &Uuid) -> Result<Arc<Worker>, String> {
    gateway
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
    fn into_workers(self, id: Uuid, config: &Config) -> Vec<Worker> {
        let Some(size) = self.dp else {
            return vec![Worker::new(id, self.spec, self.discovered, config)];
        };
        size.ranks()
            .map(|rank| {
                let rank_id = if rank.rank() == 0 { id } else { Uuid::new_v4() };
                let (spec, discovered) = (self.spec.clone(), self.discovered.clone());
                Worker::for_rank(rank_id, spec, discovered, config, rank)
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

/// Full registration: checks, startup probing, detection, and under `--dp-aware` the
/// engine's data-parallel size.
async fn register(
    gateway: &Gateway,
    client: &CallClient,
    id: Uuid,
    mut spec: WorkerSpec,
) -> Result<Registered, String> {
    check_for_registration(&spec)?;
    let config = &gateway.config;
    if spec.runtime_type == RuntimeType::Unspecified && is_external_provider(&spec.url) {
        spec.runtime_type = RuntimeType::External;
    }
    let bearer = super::bearer(spec.api_key.as_ref());
    let probe_worker = Worker::new(id, spec.clone(), Discovered::default(), config);
    let mut dp = None;
    let discovered = match &spec.url.transport {
        Transport::Http { .. } => {
            let want = Want::from_settings(spec.http_pool.http2, config.upstream_http2);
            let timeout = probe_worker.health.timeout;
            let http2 = if probe_worker.health.disabled {
                protocol::settle_once(client, &spec.url, bearer.as_ref(), timeout, want).await?
            } else {
                wait_until_answering(gateway, client, &spec, bearer.as_ref(), timeout, want).await?
            };
            let discovered = detect(
                client.pool(http2),
                &spec.url,
                bearer.as_ref(),
                spec.effective_runtime(),
                timeout,
            )
            .await;
            if config.dp_aware {
                dp = dp_size(client.pool(http2), &spec, bearer.as_ref(), timeout).await?;
            }
            Discovered {
                http2,
                ..discovered
            }
        }
        // Spec 1: a ZMQ worker has no server to pin ranks through.
        Transport::Zmq { .. } if config.dp_aware && spec.dp_size.is_some_and(|n| n > 1) => {
            return Err("a ZMQ worker cannot have dp_size above 1 on a --dp-aware gateway".into());
        }
        // Stored so operators see them; no traffic until their transports exist.
        Transport::Grpc { .. } | Transport::Zmq { .. } => Discovered::default(),
    };
    Ok(Registered {
        spec,
        discovered,
        dp,
    })
}

/// Startup probing: `/health` every `--worker-startup-check-interval` until it answers or
/// `--worker-startup-timeout-secs` runs out. Returns whether the worker is spoken to over
/// HTTP/2.
async fn wait_until_answering(
    gateway: &Gateway,
    client: &CallClient,
    spec: &WorkerSpec,
    bearer: Option<&http::HeaderValue>,
    timeout: Duration,
    want: Want,
) -> Result<bool, String> {
    let config = &gateway.config;
    let deadline = Instant::now() + config.worker_startup_timeout;
    loop {
        match protocol::check(client, &spec.url, bearer, timeout, want).await {
            Ok(http2) => return Ok(http2),
            Err(Unsettled::Http1Only) => return Err(protocol::HTTP1_ONLY.into()),
            Err(Unsettled::NotYet(err)) => {
                let next = Instant::now() + config.worker_startup_check_interval;
                if next >= deadline {
                    return Err(format!(
                        "worker did not answer /health within {} s: {err}",
                        config.worker_startup_timeout.as_secs()
                    ));
                }
                tracing::info!(worker = %spec.url.normalized, error = %err, "waiting for worker to answer");
                tokio::time::sleep_until(next).await;
            }
        }
    }
}

/// Registers the workers named on the command line (`--worker-urls`, and `--prefill` /
/// `--decode` with their worker types) before the gateway listens. They carry the gateway
/// `--api-key`, are detected (a dead worker simply learns nothing) and are routable at
/// once, as the operator listed them; their health watchers then take over. Detection runs
/// for all of them at the same time, so startup waits for one probe timeout at most.
pub async fn register_startup(gateway: &Arc<Gateway>) -> Result<(), String> {
    let config = &gateway.config;
    let client = CallClient::new();
    let mut pending = Vec::new();
    for startup in startup_specs(config)? {
        let mut spec = startup;
        spec.api_key = config.api_key.clone();
        if is_external_provider(&spec.url) {
            spec.runtime_type = RuntimeType::External;
        }
        let timeout = config.health_check_timeout;
        let want = Want::from_settings(None, config.upstream_http2);
        let dp_aware = config.dp_aware;
        let client = client.clone();
        pending.push(tokio::spawn(async move {
            let bearer = super::bearer(spec.api_key.as_ref());
            // Unset `http2` never fails to settle: HTTP/1.1 is the fallback.
            let http2 = protocol::settle_once(&client, &spec.url, bearer.as_ref(), timeout, want)
                .await
                .unwrap_or(false);
            let discovered = detect(
                client.pool(http2),
                &spec.url,
                bearer.as_ref(),
                spec.effective_runtime(),
                timeout,
            )
            .await;
            let dp = if dp_aware {
                dp_size(client.pool(http2), &spec, bearer.as_ref(), timeout).await
            } else {
                Ok(None)
            };
            let discovered = Discovered {
                http2,
                ..discovered
            };
            dp.map(|dp| Registered {
                spec,
                discovered,
                dp,
            })
        }));
    }
    for handle in pending {
        let registered = handle
            .await
            .map_err(|e| format!("startup worker detection stopped: {e}"))??;
        let spec = &registered.spec;
        if gateway
            .registry
            .snapshot()
            .by_url(&spec.url.normalized)
            .is_some()
        {
            continue;
        }
        for worker in registered.into_workers(Uuid::new_v4(), config) {
            publish(gateway, &client, Arc::new(worker), Status::Ready);
        }
    }
    Ok(())
}

/// The specs of the command-line workers, in flag order: regular, prefill, decode.
fn startup_specs(config: &Config) -> Result<Vec<WorkerSpec>, String> {
    let parse = |flag: &str, raw: &str| {
        super::parse_worker_url(raw).map_err(|e| format!("{flag} {raw}: {e}"))
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
fn admit(gateway: &Arc<Gateway>, client: &CallClient, worker: Worker) {
    let worker = Arc::new(worker);
    let status = match (&worker.transport, worker.health.disabled) {
        (Transport::Grpc { .. } | Transport::Zmq { .. }, _) => Status::NotReady,
        (_, true) => Status::Ready,
        // The registration probe counts as the first success.
        (_, false) if worker.record_probe(true) >= worker.health.success_threshold => Status::Ready,
        (_, false) => Status::Pending,
    };
    publish(gateway, client, worker, status);
}

/// Puts the worker in the registry with `status` and starts its health watcher.
fn publish(gateway: &Arc<Gateway>, client: &CallClient, worker: Arc<Worker>, status: Status) {
    worker.set_status(status);
    gateway.registry.upsert(worker.clone());
    tracing::info!(
        worker = %worker.url,
        id = %worker.id,
        runtime = worker.runtime.as_str(),
        model = worker.model_id.as_deref().unwrap_or(""),
        status = status.as_str(),
        "worker registered"
    );
    if matches!(worker.transport, Transport::Http { .. }) {
        tokio::spawn(watch(gateway.clone(), client.clone(), worker));
    }
}

/// Probes one worker for as long as it (this version of it) is registered.
/// All watchers share the control runtime's client (and its pool and TLS roots).
async fn watch(gateway: Arc<Gateway>, client: CallClient, registered: Arc<Worker>) {
    let id = registered.id;
    loop {
        // Re-read each round: a PATCH may have changed the settings or the key.
        let Some(worker) = gateway.registry.snapshot().by_id(&id).cloned() else {
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
        let Transport::Http { .. } = worker.transport else {
            return;
        };
        let ok = probe_health(
            client.pool(worker.http2),
            &worker.spec.url,
            worker.bearer.as_ref(),
            health.timeout,
        )
        .await
        .is_ok();
        gateway.metrics.health_check(&worker, ok);
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
                gateway.registry.set_status(&worker, next);
                tracing::info!(worker = %worker.url, id = %id, status = next.as_str(), "worker health changed");
            }
        }
    }
}
