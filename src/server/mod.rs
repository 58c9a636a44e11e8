//! Serving one client connection: HTTP/1.1 with keep-alive or h2c by preface, the edge
//! limits, the header-read and keep-alive timeouts, and graceful drain on shutdown.

pub mod h1_framing;
pub mod health;
pub mod limit;
pub mod listener;
pub mod side_listener;
mod smuggling_guard;
mod timeouts;
pub mod tokio_io;

pub use smuggling_guard::{SmugglingGuard, CONFLICT_REPLY};

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use crate::app::ThreadCtx;
use h1_framing::Phase;
use timeouts::{Expiry, Timeouts};

/// Largest request head (request line and headers) accepted; larger → 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields accepted in one request; more → 431.
pub const MAX_HEADER_FIELDS: usize = 100;

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

/// Marks one request as active on its connection until dropped (when the response body
/// is finished or abandoned).
#[derive(Debug)]
pub struct ConnActivity(Arc<ConnState>);

impl ConnActivity {
    fn enter(state: &Arc<ConnState>) -> ConnActivity {
        state.active.fetch_add(1, Ordering::Relaxed);
        state.epoch.fetch_add(1, Ordering::Relaxed);
        ConnActivity(state.clone())
    }
}

impl Drop for ConnActivity {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.epoch.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves one connection until the client leaves, a timeout closes it, or shutdown drains
/// it. `state` is the one its IO adapter reports to.
pub async fn serve<I>(
    io: I,
    state: Arc<ConnState>,
    ctx: Arc<ThreadCtx>,
    builder: &ConnBuilder,
    mut shutdown: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
{
    let config = &ctx.gateway.config;
    let mut timeouts = Timeouts::new(config.header_read_timeout, config.keep_alive_timeout);
    let sleep = tokio::time::sleep_until(timeouts.first_check());
    tokio::pin!(sleep);
    let svc = {
        let state = state.clone();
        service_fn(move |req| {
            let ctx = ctx.clone();
            let activity = ConnActivity::enter(&state);
            async move {
                let resp = crate::app::handle(&ctx, req).await;
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
