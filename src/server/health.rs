//! `--health-check-port`: probes (`GET /health`, `/liveness`, `/readiness`) on a listener of
//! their own, answered as on the main listener but outside the HTTP metrics layer (spec 3),
//! so a load balancer's probes neither fill the request metrics nor queue behind clients.

use std::net::SocketAddr;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use super::side_listener;
use crate::http::body::RespBody;
use crate::http::{error, reply};

/// Binds the probe listener. Fails (and so does startup) when the address is taken.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    side_listener::bind(addr, "health checks").await
}

/// Serves probes until the runtime stops.
/// `readiness` answers `/readiness` as the main listener does.
pub async fn serve<R>(listener: TcpListener, readiness: R)
where
    R: Fn() -> Response<RespBody> + Send + Sync + 'static,
{
    let readiness = std::sync::Arc::new(readiness);
    side_listener::serve(listener, "health checks", move |req| {
        answer(readiness.as_ref(), req)
    })
    .await;
}

fn answer(
    readiness: &impl Fn() -> Response<RespBody>,
    req: &Request<Incoming>,
) -> Response<RespBody> {
    let probe = matches!(req.uri().path(), "/health" | "/liveness" | "/readiness");
    match (probe, req.method() == Method::GET) {
        (false, _) => error::respond::not_found(),
        (true, false) => error::respond::method_not_allowed("GET"),
        (true, true) if req.uri().path() == "/readiness" => readiness(),
        (true, true) => reply::empty(StatusCode::OK),
    }
}
