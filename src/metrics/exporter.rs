//! `GET /metrics` on its own listener (`--prometheus-host`:`--prometheus-port`), served on
//! the control runtime so a scrape never takes time from a data-plane thread.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::Metrics;

/// Time a scraper has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrapers served at once; more wait in the accept backlog.
const MAX_CONNECTIONS: usize = 64;

/// Binds the metrics listener. Fails (and so does startup) when the address is taken.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for metrics: {e}"))
}

/// Serves scrapes until the runtime stops.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(err) => {
                tracing::warn!(error = %err, "metrics listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(answer(&metrics, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

fn answer(metrics: &Metrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &'static str, body: Bytes| {
        let mut resp = Response::new(Full::new(body));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        resp
    };
    if req.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"Not Found"),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            Bytes::from_static(b"Method Not Allowed"),
        );
    }
    match metrics.encode() {
        Ok(text) => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Bytes::from(text),
        ),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            Bytes::from_static(b"metrics encoding failed"),
        ),
    }
}
