//! HTTP/2 (cleartext, prior knowledge, as gRPC clients speak it, or TLS) serving the
//! generated server of the one service asked for, until SIGTERM or SIGINT. It answers
//! UNIMPLEMENTED for the other services' methods, which is how a gateway tells them apart.
//!
//! tonic is built without its transport, so the service is handed to hyper directly: the
//! generated server is a tower `Service` that is always ready, and `service_fn` calls it.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tollgate::engine::grpc::mlx::mlx_engine_server::MlxEngineServer;
use tollgate::engine::grpc::sglang::sglang_scheduler_server::SglangSchedulerServer;
use tollgate::engine::grpc::tokenspeed::token_speed_scheduler_server::TokenSpeedSchedulerServer;
use tollgate::engine::grpc::trtllm::trtllm_service_server::TrtllmServiceServer;
use tollgate::engine::grpc::vllm::vllm_engine_server::VllmEngineServer;
use tonic::body::Body;
use tonic::codegen::Service;

use crate::cli;
use crate::mlx::MlxService;
use crate::service::{Engine, Scheduler};
use crate::tokenspeed::TsService;
use crate::trtllm::TrtService;
use crate::vllm::VllmService;

/// Streams one gateway connection may multiplex.
const MAX_STREAMS: u32 = 4096;

pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    service: cli::Service,
    tls: Option<TlsAcceptor>,
) {
    match service {
        cli::Service::Sglang => {
            accept(listener, SglangSchedulerServer::new(Scheduler(engine)), tls).await
        }
        cli::Service::Vllm => {
            accept(listener, VllmEngineServer::new(VllmService(engine)), tls).await
        }
        cli::Service::Trtllm => {
            accept(listener, TrtllmServiceServer::new(TrtService(engine)), tls).await
        }
        cli::Service::Tokenspeed => {
            let server = TokenSpeedSchedulerServer::new(TsService(engine));
            accept(listener, server, tls).await
        }
        cli::Service::Mlx => accept(listener, MlxEngineServer::new(MlxService(engine)), tls).await,
    }
}

async fn accept<S>(listener: TcpListener, server: S, tls: Option<TlsAcceptor>)
where
    S: Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
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
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let mut server = server.clone();
                async move { server.call(request).await }
            });
            // Errors here are clients hanging up, failed handshakes or peers speaking
            // something else than h2.
            match tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(tls) => {
                    let handshake = tls.accept(stream);
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(crate::shared::HANDSHAKE_TIMEOUT, handshake).await
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
