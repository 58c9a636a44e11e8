//! `GET /metrics` on its own listener (`--prometheus-host`:`--prometheus-port`), served on
//! the control runtime so a scrape never takes time from a data-plane thread.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;

use super::Metrics;
use crate::server::side_listener;

/// Binds the metrics listener. Fails (and so does startup) when the address is taken.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    side_listener::bind(addr, "metrics").await
}

/// Serves scrapes until the runtime stops.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    side_listener::serve(listener, "metrics", move |req| answer(&metrics, req)).await;
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
        let mut resp = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            Bytes::from_static(b"Method Not Allowed"),
        );
        resp.headers_mut().insert(
            http::header::ALLOW,
            http::HeaderValue::from_static("GET, HEAD"),
        );
        return resp;
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
