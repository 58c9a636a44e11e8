//! Bringing the gateway up and down: workers from flags, the data plane, signals, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use crate::app::Gateway;
use crate::auth::gate::Authenticator;
use crate::config::Config;
use crate::routing;
use crate::runtime::{choose_engine, DataPlane};
use crate::workers::{parse_worker_url, Registry, RuntimeType, Status, Worker, WorkerType};

/// Registers the `--worker-urls` workers. They carry the gateway `--api-key` as their key.
fn register_startup_workers(config: &Config, registry: &Registry) -> Result<(), String> {
    for raw in &config.worker_urls {
        let url = parse_worker_url(raw).map_err(|e| format!("--worker-urls {raw}: {e}"))?;
        let key = config.api_key.as_ref().map(|k| k.expose());
        let worker = Arc::new(Worker::new(
            url,
            WorkerType::Regular,
            RuntimeType::Unspecified,
            key,
        ));
        registry.insert(worker.clone());
        registry.set_status(&worker, Status::Ready);
        tracing::info!(worker = %worker.url, id = %worker.id, "worker registered");
    }
    Ok(())
}

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

/// Runs the gateway until a shutdown signal has been handled and connections drained.
pub fn run(config: Config) -> Result<(), String> {
    let (engine, reason) = choose_engine(config.io_engine)?;
    let (policy, built) = routing::build(config.policy);
    if !built {
        tracing::warn!(
            policy = config.policy.as_str(),
            "policy not available in this build yet; routing with round_robin"
        );
    }
    let registry = Registry::new();
    register_startup_workers(&config, &registry)?;
    let threads = config.runtime_worker_threads;
    let addr = SocketAddr::new(config.host, config.port);
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("tollgate-control")
        .build()
        .map_err(|e| format!("cannot start the control runtime: {e}"))?;
    let auth = control.block_on(Authenticator::new(&config));
    let gateway = Arc::new(Gateway {
        config,
        registry,
        policy,
        auth,
    });
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let plane = DataPlane::start(gateway, engine, addr, threads, shutdown_rx)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(
        addr = %plane.local_addr,
        engine = engine.as_str(),
        reason = %reason,
        threads,
        "tollgate listening"
    );
    control.block_on(shutdown_signal());
    let _ = shutdown_tx.send(true);
    plane.join();
    tracing::info!("shutdown complete");
    Ok(())
}
