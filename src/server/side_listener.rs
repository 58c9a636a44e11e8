//! A small HTTP/1.1 listener on the control runtime for side traffic (metrics scrapes,
//! health probes): a bounded number of connections, a header-read timeout and one answer
//! function, so that traffic never takes time from a data-plane thread nor passes through
//! the data plane's request handling and metrics.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::http::BoxError;
use crate::logging::Throttle;

/// Time a client has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the accept backlog.
const MAX_CONNECTIONS: usize = 64;

/// Binds a side listener. Fails (and so does startup) when the address is taken; `what`
/// names the listener in the error.
pub async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for {what}: {e}"))
}

/// Serves requests with `answer` until the runtime stops.
pub async fn serve<F, B>(listener: TcpListener, what: &'static str, answer: F)
where
    F: Fn(&Request<Incoming>) -> Response<B> + Clone + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    static ACCEPT_FAILED: Throttle = Throttle::per_second();
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(err) => {
                if let Some(suppressed) = ACCEPT_FAILED.admit() {
                    tracing::warn!(listener = what, error = %err, suppressed, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let resp = answer(&req);
                async move { Ok::<_, Infallible>(resp) }
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
