//! Bringing the gateway up and down: workers from flags, the data plane, signals, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use crate::admission::Admission;
use crate::app::Gateway;
use crate::auth::gate::Authenticator;
use crate::config::Config;
use crate::metrics::inflight::InflightAges;
use crate::metrics::{exporter, Metrics, Sources};
use crate::resilience;
use crate::routing::{self, PolicyParams};
use crate::runtime::{choose_io_driver, DataPlane};
use crate::server::health;
use crate::workers::jobs::Jobs;
use crate::workers::Registry;
use crate::workers::{lifecycle, load};

/// Resolves once SIGTERM or SIGINT arrives.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(err) => {
            tracing::error!(error = %err, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, draining"),
    }
}

/// The policy's periodic upkeep (prefix-tree trims, expiry of sticky keys), on the control
/// runtime so no data-plane thread ever pays for it.
async fn maintain_policy(gateway: Arc<Gateway>) {
    let mut ticks = tokio::time::interval(gateway.config.eviction_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        // A trim of large trees takes a while: off the runtime that runs health probes.
        let gateway = gateway.clone();
        let _ = tokio::task::spawn_blocking(move || gateway.policy.maintain()).await;
    }
}

/// Runs the gateway until a shutdown signal has been handled and connections drained.
pub fn run(config: Config) -> Result<(), String> {
    let (driver, reason) = choose_io_driver(config.io_engine)?;
    let policy = routing::build_with_params(config.policy, &PolicyParams::from_config(&config));
    let registry = Registry::with_aliases(config.model_aliases.clone());
    let threads = config.runtime_worker_threads;
    let addr = SocketAddr::new(config.host, config.port);
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("tollgate-control")
        .build()
        .map_err(|e| format!("cannot start the control runtime: {e}"))?;
    let auth = control.block_on(Authenticator::new(&config));
    let (jobs, job_queue) = Jobs::new();
    let retry = resilience::retry_config(&config);
    let admission = Arc::new(Admission::new(&config.admission));
    let metrics = Arc::new(Metrics::new(
        &config.prometheus_duration_buckets,
        Sources {
            fleet: registry.fleet(),
            policy: policy.clone(),
            admission: admission.clone(),
        },
    ));
    metrics.runtime.set_workers(threads);
    let metrics_addr = SocketAddr::new(config.prometheus_host, config.prometheus_port);
    let metrics_listener = control.block_on(exporter::bind(metrics_addr))?;
    control.spawn(exporter::serve(metrics_listener, metrics.clone()));
    control.spawn(metrics.runtime.clone().canary(None));
    control.spawn(InflightAges::sampler(metrics.inflight_ages.clone()));
    let gateway = Arc::new(Gateway {
        config,
        registry,
        policy,
        retry,
        auth,
        jobs,
        metrics,
        admission,
    });
    let health_addr = gateway
        .config
        .health_check_port
        .map(|port| SocketAddr::new(gateway.config.host, port));
    if let Some(addr) = health_addr {
        let listener = control.block_on(health::bind(addr))?;
        control.spawn(health::serve(listener, gateway.clone()));
    }
    lifecycle::register_startup(&gateway)?;
    control.spawn(lifecycle::run_jobs(gateway.clone(), job_queue));
    control.spawn(maintain_policy(gateway.clone()));
    control.spawn(load::monitor(gateway.clone()));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let plane = DataPlane::start(gateway, driver, addr, threads, shutdown_rx)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(
        addr = %plane.local_addr,
        engine = driver.as_str(),
        reason = %reason,
        threads,
        max_connections = plane.max_connections,
        metrics = %metrics_addr,
        health_checks = health_addr.map(|a| a.to_string()),
        "tollgate listening"
    );
    control.block_on(shutdown_signal());
    let _ = shutdown_tx.send(true);
    plane.join();
    tracing::info!("shutdown complete");
    Ok(())
}
