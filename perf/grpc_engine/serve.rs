//! HTTP/2 (cleartext, prior knowledge, as gRPC clients speak it) serving the generated
//! `SglangSchedulerServer`, until SIGTERM or SIGINT.
//!
//! tonic is built without its transport, so the service is handed to hyper directly: the
//! generated server is a tower `Service` that is always ready, and `service_fn` calls it.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tollgate::grpc::sglang::sglang_scheduler_server::SglangSchedulerServer;
use tonic::codegen::Service;

use crate::service::{Engine, Scheduler};

/// Streams one gateway connection may multiplex.
const MAX_STREAMS: u32 = 4096;

pub async fn serve(listener: TcpListener, engine: Arc<Engine>) {
    let server = SglangSchedulerServer::new(Scheduler(engine));
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder.max_concurrent_streams(MAX_STREAMS);
    let builder = Arc::new(builder);

    let shutdown = crate::shared::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _peer)) = accepted else {
            // Typically EMFILE: back off briefly instead of spinning.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        // Token chunks are tiny; do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let server = server.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let mut server = server.clone();
                async move { server.call(request).await }
            });
            // Errors here are clients hanging up or speaking something else than h2.
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
