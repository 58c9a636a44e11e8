//! Bringing the gateway up and down: workers from flags, the data plane, signals, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::admin::Admin;
use crate::admission::Admission;
use crate::app::{readiness, Gateway};
use crate::auth::gate::Authenticator;
use crate::config::Config;
use crate::control::grpc::GrpcControl;
use crate::control::jobs::Jobs;
use crate::control::tokenizers::Tokenizers;
use crate::control::{lifecycle, load, Control, LoadDemand};
use crate::fleet::Registry;
use crate::http::tls::UpstreamTls;
use crate::metrics::inflight::InflightAges;
use crate::metrics::{exporter, Metrics, Sources};
use crate::pipeline::{FleetModes, PdDispatch, Pipeline};
use crate::routing::{self, Policy};
use crate::runtime::{choose_io_driver, DataPlane};
use crate::server::health;
use crate::server::tls::Tls;
use crate::transport::pd::body::Rooms;

/// The signals the gateway acts on, registered before it announces that it listens, so
/// none that arrives after the announcement takes the default action (SIGHUP's would end
/// the process).
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        let on = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"))
        };
        Ok(Signals {
            term: on(SignalKind::terminate(), "SIGTERM")?,
            int: on(SignalKind::interrupt(), "SIGINT")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Resolves once SIGTERM or SIGINT arrives; each SIGHUP meanwhile reloads the
    /// listener's certificate.
    async fn until_shutdown(mut self, tls: Option<&Tls>) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return tracing::info!("SIGTERM received, draining"),
                _ = self.int.recv() => return tracing::info!("SIGINT received, draining"),
                _ = self.hup.recv() => reload(tls),
            }
        }
    }
}

/// SIGHUP: new handshakes get the certificate now in the files, if it is valid.
fn reload(tls: Option<&Tls>) {
    let Some(tls) = tls else {
        tracing::info!("SIGHUP received; the listener has no TLS certificate, nothing to reload");
        return;
    };
    let path = tls.cert_path().display();
    match tls.reload() {
        Ok(()) => tracing::info!(path = %path, "TLS certificate reloaded"),
        Err(err) => tracing::error!(
            path = %path,
            error = %err,
            "TLS certificate not reloaded; still serving the previous one"
        ),
    }
}

/// The policy's periodic upkeep (prefix-tree trims, expiry of sticky keys), on the control
/// runtime so no data-plane thread ever pays for it.
async fn maintain_policy(policy: Arc<dyn Policy>, every: std::time::Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        // A trim of large trees takes a while: off the runtime that runs health probes.
        let policy = policy.clone();
        let _ = tokio::task::spawn_blocking(move || policy.maintain()).await;
    }
}

/// Runs the gateway until a shutdown signal has been handled and connections drained.
///
/// Prefill/decode dispatch when the fleet is disaggregated (and not under `--enable-igw`):
/// `--prefill-policy` and `--decode-policy` where given, else the main policy (shared, so
/// one prefix tree serves both roles and is maintained once; a round robin gets an
/// instance per role).
fn pd_dispatch(config: &Config, policy: &Arc<dyn Policy>) -> Option<PdDispatch> {
    if !config.fleet.pd_disaggregation || config.fleet.enable_igw {
        return None;
    }
    let routing = &config.routing;
    let role = |name: Option<routing::PolicyName>| {
        let name = name.unwrap_or(routing.policy);
        // A round robin's counter is never shared: the pair's two picks would advance it
        // twice per request and leave every other worker of a role without traffic.
        if name == routing.policy && name != routing::PolicyName::RoundRobin {
            policy.clone()
        } else {
            routing::build_with_params(name, &routing.params)
        }
    };
    Some(PdDispatch {
        prefill: role(routing.prefill_policy),
        decode: role(routing.decode_policy),
        rooms: Arc::new(Rooms::starting_at(crate::rng::next_u64())),
        admission_wait: config.admission.pd_admission_wait,
    })
}

/// This is the one place that sees the whole [`Config`]: it builds each module's state from
/// that module's settings and hands every owner only the handles it uses.
pub fn run(config: Config) -> Result<(), String> {
    let (driver, reason) = choose_io_driver(config.runtime.io_engine)?;
    let upstream_tls = UpstreamTls::load(config.pipeline.upstream_ca_cert_path.as_deref())?;
    let builtins = Arc::new(crate::mcp::builtins::Builtins::load(
        config.pipeline.mcp_config_path.as_deref(),
    )?);
    let tls = Tls::from_settings(&config.server.tls).map_err(|e| format!("TLS listener: {e}"))?;
    // Before anything listens: a store that cannot be reached stops the gateway here.
    let history = crate::history::open(&config.history)
        .map_err(|e| format!("history store ({}): {e}", config.history.backend.as_str()))?;
    tracing::info!(backend = history.backend(), "history store ready");
    let routing_settings = &config.routing;
    let policy = routing::build_with_params(routing_settings.policy, &routing_settings.params);
    let registry = Arc::new(Registry::with_aliases(config.fleet.model_aliases.clone()));
    let pd = pd_dispatch(&config, &policy);
    // The role policies of prefill/decode dispatch that are not the main one need their
    // own upkeep.
    let role_policies: Vec<Arc<dyn Policy>> = pd
        .iter()
        .flat_map(|d| [d.prefill.clone(), d.decode.clone()])
        .filter(|p| !Arc::ptr_eq(p, &policy))
        .collect();
    let threads = config.runtime.worker_threads;
    crate::chat::encode_cache::configure(&config.tokenizer_cache, threads);
    let control_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("tollgate-control")
        .build()
        .map_err(|e| format!("cannot start the control runtime: {e}"))?;
    let auth = control_rt.block_on(Authenticator::new(&config.auth));
    let (jobs, job_queue) = Jobs::new();
    let jobs = Arc::new(jobs);
    let admission = Arc::new(Admission::new(&config.admission));
    // Before any series is made: each gets a shard per data-plane thread.
    crate::metrics::shard::set_writers(threads);
    let metrics = Arc::new(Metrics::new(
        &config.metrics.duration_buckets,
        Sources {
            fleet: registry.fleet(),
            policy: policy.clone(),
            admission: admission.clone(),
        },
    ));
    metrics.runtime.set_workers(threads);
    let metrics_addr = SocketAddr::new(config.metrics.host, config.metrics.port);
    let metrics_listener = control_rt.block_on(exporter::bind(metrics_addr))?;
    control_rt.spawn(exporter::serve(metrics_listener, metrics.clone()));
    control_rt.spawn(metrics.runtime.clone().canary(None));
    control_rt.spawn(InflightAges::sampler(metrics.inflight_ages.clone()));

    let pipeline = Arc::new(Pipeline {
        settings: config.pipeline.clone(),
        modes: FleetModes {
            enable_igw: config.fleet.enable_igw,
            dp_aware: config.fleet.dp_aware,
            backend: config.fleet.backend,
            routing_key_headers: routing_settings.routing_key_headers.clone(),
            overload_retry_after: config.control.load_monitor_interval,
        },
        registry: registry.clone(),
        policy: policy.clone(),
        pd,
        admission,
        retry: config.resilience.retry_in_force(),
        metrics: metrics.clone(),
        tls: upstream_tls.clone(),
        history,
        builtins,
    });
    let tokenizers = Arc::new(Tokenizers::default());
    let admin = Arc::new(Admin {
        registry: registry.clone(),
        jobs: jobs.clone(),
        tokenizers: tokenizers.clone(),
        call_timeout: config.pipeline.request_timeout,
        pd_disaggregation: config.fleet.pd_disaggregation,
        dp_aware: config.fleet.dp_aware,
        gateway_key_set: config.auth.api_key.is_some(),
    });
    let control = Arc::new(Control {
        registry: registry.clone(),
        jobs,
        policy: policy.clone(),
        metrics: metrics.clone(),
        settings: config.control.clone(),
        defaults: config.worker_defaults(),
        dp_aware: config.fleet.dp_aware,
        upstream_http2: config.fleet.upstream_http2,
        startup_api_key: config.auth.api_key.clone(),
        backend: config.fleet.backend,
        grpc: GrpcControl::new(tokenizers, &upstream_tls),
        tls: upstream_tls,
        load_demand: LoadDemand {
            disabled: config.control.disable_load_monitoring,
            overload_on: config.fleet.overload.on(),
            regular: routing_settings.policy,
            prefill: routing_settings
                .prefill_policy
                .unwrap_or(routing_settings.policy),
            decode: routing_settings
                .decode_policy
                .unwrap_or(routing_settings.policy),
        },
    });
    let gateway = Arc::new(Gateway {
        pipeline,
        admin,
        auth,
        registry: registry.clone(),
        metrics,
    });

    let health_addr = config
        .server
        .health_check_port
        .map(|port| SocketAddr::new(config.server.host, port));
    if let Some(addr) = health_addr {
        let listener = control_rt.block_on(health::bind(addr))?;
        let registry = registry.clone();
        control_rt.spawn(health::serve(listener, move || readiness(&registry)));
    }
    lifecycle::register_startup(&control)?;
    control_rt.spawn(lifecycle::run_jobs(control.clone(), job_queue));
    for role in role_policies {
        control_rt.spawn(maintain_policy(
            role,
            routing_settings.params.eviction_interval,
        ));
    }
    control_rt.spawn(maintain_policy(
        policy,
        routing_settings.params.eviction_interval,
    ));
    control_rt.spawn(load::monitor(control));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let addr = SocketAddr::new(config.server.host, config.server.port);
    let plane = DataPlane::start(
        gateway,
        driver,
        &config.server,
        tls.clone(),
        &config.runtime,
        shutdown_rx,
    )
    .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let signals = control_rt.block_on(async { Signals::install() })?;
    tracing::info!(
        addr = %plane.local_addr,
        engine = driver.as_str(),
        reason = %reason,
        threads,
        max_connections = plane.max_connections,
        metrics = %metrics_addr,
        health_checks = health_addr.map(|a| a.to_string()),
        tls = tls.is_some(),
        "tollgate listening"
    );
    control_rt.block_on(signals.until_shutdown(tls.as_ref()));
    let _ = shutdown_tx.send(true);
    plane.join();
    tracing::info!("shutdown complete");
    Ok(())
}
