//! Accept loop: HTTP/1.1 keep-alive and h2c (prior knowledge) on one port, or
//! HTTPS with HTTP/2 or HTTP/1.1 by ALPN, until SIGTERM or SIGINT.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use tokio_rustls::TlsAcceptor;

use crate::routes;

use crate::state::AppState;

pub async fn serve(listener: TcpListener, state: Arc<AppState>, tls: Option<TlsAcceptor>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Benchmarks multiplex many streams over few h2 connections.
    builder.http2().max_concurrent_streams(4096);
    let builder = Arc::new(builder);

    let shutdown = crate::shared::shutdown_signal();
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
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| routes::handle(state.clone(), request));
            // Errors here are clients hanging up, failed handshakes or deliberate aborts.
            match tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(tls) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(crate::shared::HANDSHAKE_TIMEOUT, tls.accept(stream))
                            .await
                    else {
                        return;
                    };
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}
