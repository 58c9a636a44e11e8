//! Serving one client connection: HTTP/1.1 with keep-alive or h2 by preface (h2c, or over
//! TLS by ALPN), the edge limits, the header-read and keep-alive timeouts, and graceful
//! drain on shutdown.

pub mod h1_framing;
pub mod health;
pub mod limit;
pub mod listener;
pub mod side_listener;
mod smuggling_guard;
mod timeouts;
pub mod tls;
pub mod tokio_io;

pub use smuggling_guard::{SmugglingGuard, CONFLICT_REPLY};

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use crate::http::body::RespBody;
use crate::http::guard::{Guard, Release};
use h1_framing::Phase;
use timeouts::{Expiry, Timeouts};

/// Largest request head (request line and headers) accepted; larger → 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields accepted in one request; more → 431.
pub const MAX_HEADER_FIELDS: usize = 100;

/// The Listener flag group and the edge limits of client connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// `--host`: address of the main listener.
    pub host: IpAddr,
    /// `--port`: port of the main listener; 0 asks the OS for a free port.
    pub port: u16,
    /// `--header-read-timeout-secs`: time a client has to send the request head.
    pub header_read_timeout: Duration,
    /// `--keep-alive-timeout-secs`: idle keep-alive client connections are closed after this.
    pub keep_alive_timeout: Duration,
    /// `--max-connections`: client connections open at once over all data-plane threads;
    /// `None` derives it from the open-file limit at startup
    /// ([`limit::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// `--health-check-port`: port of the probe-only listener on `--host`; `None`: off.
    pub health_check_port: Option<u16>,
    /// `--tls-cert-path` / `--tls-key-path`: the main listener speaks TLS when both are set.
    pub tls: tls::TlsSettings,
}

impl Default for ServerSettings {
    fn default() -> ServerSettings {
        ServerSettings {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 30000,
            header_read_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(75),
            max_connections: None,
            health_check_port: None,
            tls: tls::TlsSettings::default(),
        }
    }
}

/// What answers the requests of client connections. The server owns connections, edge
/// limits and timeouts and knows nothing of routes; the layer above implements this (one
/// value per data-plane thread, shared by that thread's connections).
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. Never fails: every error is a response.
    fn handle(&self, req: Request<Incoming>) -> impl Future<Output = Response<RespBody>> + Send;
}

/// The connection builder every connection of a thread shares.
pub type ConnBuilder = auto::Builder<TokioExecutor>;

/// Builds hyper's connection settings from the edge limits.
///
/// hyper's own HTTP/1 header-read timeout is off: it also runs while a keep-alive
/// connection waits for its next request, which would make it the idle timeout, and it
/// does not cover the wait for the first bytes before hyper knows the protocol.
/// [`Timeouts`] in [`serve`] applies both limits instead.
pub fn builder() -> ConnBuilder {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADER_FIELDS)
        .header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(1024)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    b
}

/// What the connection's timers need to know, shared by its IO adapter, its requests and
/// [`serve`]: requests in flight, a count of request starts and ends, and where the
/// client's byte stream stands.
#[derive(Debug, Default)]
pub struct ConnState {
    active: AtomicUsize,
    /// Bumped on every request start and end.
    epoch: AtomicU64,
    /// The stream's [`Phase`] as the IO adapter last saw it.
    phase: AtomicU8,
}

impl ConnState {
    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            1 => Phase::InHead,
            2 => Phase::Unfollowed,
            _ => Phase::NoHead,
        }
    }
}

/// The IO adapter's side of [`ConnState`]: publishes the stream's [`Phase`] after each read,
/// touching the shared state only when it changes.
pub struct PhaseReport {
    state: Arc<ConnState>,
    last: Phase,
}

impl PhaseReport {
    pub fn new(state: Arc<ConnState>) -> PhaseReport {
        PhaseReport {
            state,
            last: Phase::NoHead,
        }
    }

    pub fn update(&mut self, phase: Phase) {
        if phase != self.last {
            self.last = phase;
            let code = match phase {
                Phase::NoHead => 0,
                Phase::InHead => 1,
                Phase::Unfollowed => 2,
            };
            self.state.phase.store(code, Ordering::Relaxed);
        }
    }
}

impl ConnState {
    /// Marks one request as active on its connection until the returned guard goes (with
    /// the response body, when it is finished or abandoned). The guard holds the
    /// connection's `Arc`, so counting a request allocates nothing.
    fn enter(state: &Arc<ConnState>) -> Guard {
        state.active.fetch_add(1, Ordering::Relaxed);
        state.epoch.fetch_add(1, Ordering::Relaxed);
        Guard::counted(state.clone())
    }
}

/// A request's end, called only by the guard [`ConnState::enter`] returned.
impl Release for ConnState {
    fn release(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves one connection until the client leaves, a timeout closes it, or shutdown drains
/// it. `state` is the one its IO adapter reports to; `accepted` is when the connection was
/// accepted, so a TLS handshake counts against the first request's header-read timeout.
pub async fn serve<I, H>(
    io: I,
    state: Arc<ConnState>,
    accepted: tokio::time::Instant,
    handler: Arc<H>,
    settings: &ServerSettings,
    builder: &ConnBuilder,
    mut shutdown: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    H: Handler,
{
    let mut timeouts = Timeouts::new(
        accepted,
        settings.header_read_timeout,
        settings.keep_alive_timeout,
    );
    let sleep = tokio::time::sleep_until(timeouts.first_check());
    tokio::pin!(sleep);
    let svc = {
        let state = state.clone();
        service_fn(move |req| {
            let handler = handler.clone();
            let activity = ConnState::enter(&state);
            async move {
                let resp = handler.handle(req).await;
                Ok::<_, Infallible>(resp.map(|b| b.with_activity(activity)))
            }
        })
    };
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let mut draining = *shutdown.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    let mut closing = false;
    loop {
        let expiry = std::future::poll_fn(|cx| timeouts.poll_expired(&state, sleep.as_mut(), cx));
        // `biased`: the connection runs first, so the timers see what it just read.
        tokio::select! {
            biased;
            res = conn.as_mut() => {
                if let Err(err) = res {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.changed(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            expired = expiry => {
                match expired {
                    Expiry::Header => {
                        tracing::debug!("no request head within the header read timeout; closing");
                        return;
                    }
                    Expiry::Idle if closing => return,
                    Expiry::Idle => {
                        tracing::trace!("closing idle connection");
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                        timeouts.closing();
                    }
                }
            }
        }
    }
}
