//! Serving one client connection: HTTP/1.1 with keep-alive or h2c by preface, the edge
//! limits, the idle timeout, and graceful drain on shutdown.

pub mod h1_framing;
pub mod listener;
mod sniff;
pub mod tokio_io;

pub use sniff::{Sniffer, CONFLICT_REPLY};

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use crate::app::ThreadCtx;
use crate::config::Config;

/// Largest request head (request line and headers) accepted; larger → 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields accepted in one request; more → 431.
pub const MAX_HEADER_FIELDS: usize = 100;

/// The connection builder every connection of a thread shares.
pub type ConnBuilder = auto::Builder<TokioExecutor>;

/// Builds hyper's connection settings from the edge limits.
pub fn builder(config: &Config) -> ConnBuilder {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADER_FIELDS)
        .header_read_timeout(config.header_read_timeout);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(1024)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    b
}

/// Counts a connection's requests so the idle timer knows when nothing is happening.
#[derive(Debug, Default)]
pub struct ConnState {
    active: AtomicUsize,
    /// Bumped on every request start and end; an unchanged value across a whole idle
    /// period with nothing active means the connection sat idle.
    epoch: AtomicU64,
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

/// Serves one connection until the client leaves, it idles out, or shutdown drains it.
pub async fn serve<I>(
    io: I,
    ctx: Arc<ThreadCtx>,
    builder: &ConnBuilder,
    mut shutdown: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
{
    let state = Arc::new(ConnState::default());
    let idle_timeout = ctx.gateway.config.keep_alive_timeout;
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
    let mut last_epoch = state.epoch.load(Ordering::Relaxed);
    loop {
        tokio::select! {
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
            _ = tokio::time::sleep(idle_timeout), if !draining => {
                let epoch = state.epoch.load(Ordering::Relaxed);
                if state.active.load(Ordering::Relaxed) == 0 && epoch == last_epoch {
                    tracing::trace!("closing idle connection");
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                last_epoch = epoch;
            }
        }
    }
}
