//! Accept loop: HTTP/1.1 keep-alive and h2c (prior knowledge) on one port,
//! until SIGTERM or SIGINT.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::routes;
use crate::state::AppState;

pub async fn serve(listener: TcpListener, state: Arc<AppState>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Benchmarks multiplex many streams over few h2 connections.
    builder.http2().max_concurrent_streams(4096);
    let builder = Arc::new(builder);

    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Typically EMFILE under a connection storm: back off
                // briefly instead of spinning.
                if state.verbose {
                    eprintln!("accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        // Token events are tiny; do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| routes::handle(state.clone(), request));
            // Errors here are clients hanging up or deliberate aborts.
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
