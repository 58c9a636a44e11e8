//! Thread-per-core data plane.
//!
//! One OS thread per core, each with its own single-threaded runtime and its own
//! `SO_REUSEPORT` listener; connections never move between threads. The runtime is
//! tokio-uring (io_uring) or plain tokio (epoll), chosen once at startup. The main thread
//! runs the control runtime: signals now, health checks and other background jobs later.

mod uring_io;

use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::app::{Gateway, ThreadCtx};
use crate::config::IoEngine;
use crate::server::limit::{self, ConnLimit};
use crate::server::{self, listener, tokio_io::CheckedStream, ConnState, PhaseReport};

pub use uring_io::UringIo;

/// The IO driver the data-plane threads run: what `--io-engine` ([`IoEngine`], which may
/// say `auto`) resolved to on this machine. Named for tokio's IO driver, which is what the
/// two differ in, and so as not to read as an inference engine (the workers' engines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDriver {
    /// tokio-uring's runtime on an io_uring instance.
    Uring,
    /// A current-thread tokio runtime on epoll.
    Epoll,
}

impl IoDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            IoDriver::Uring => "io_uring",
            IoDriver::Epoll => "epoll",
        }
    }
}

/// Whether this kernel and sandbox let us create an io_uring instance.
fn probe_uring() -> Result<(), io::Error> {
    io_uring::IoUring::new(8).map(|_| ())
}

/// Resolves `--io-engine` to an IO driver, with the reason for the log line.
///
/// `auto` prefers the engine measured faster for this workload where both work. Today that
/// is epoll: a proxied request costs less CPU on it than on the io_uring adapter (see
/// docs/performance.md), so `auto` only reports whether io_uring would have been available
/// and `--io-engine uring` stays an explicit choice.
pub fn choose_io_driver(requested: IoEngine) -> Result<(IoDriver, String), String> {
    match requested {
        IoEngine::Epoll => Ok((IoDriver::Epoll, "requested with --io-engine epoll".into())),
        IoEngine::Uring => match probe_uring() {
            Ok(()) => Ok((IoDriver::Uring, "requested with --io-engine uring".into())),
            Err(e) => Err(format!(
                "--io-engine uring: io_uring is not available here ({e}); use --io-engine epoll or auto"
            )),
        },
        IoEngine::Auto => Ok(match probe_uring() {
            Ok(()) => (
                IoDriver::Epoll,
                "io_uring is available, but epoll costs less CPU per proxied request in this \
                 build (--io-engine uring forces io_uring)"
                    .into(),
            ),
            Err(e) => (IoDriver::Epoll, format!("io_uring is not available ({e})")),
        }),
    }
}

/// Counts a thread's open connections, so shutdown can wait for them, and every
/// thread's together against `--max-connections`.
#[derive(Clone)]
struct OpenConns(Rc<Conns>);

struct Conns {
    here: Cell<usize>,
    all: Arc<ConnLimit>,
}

/// One open connection, counted until dropped.
struct OpenConn(OpenConns);

impl OpenConns {
    fn new(all: Arc<ConnLimit>) -> OpenConns {
        OpenConns(Rc::new(Conns {
            here: Cell::new(0),
            all,
        }))
    }

    /// Counts a new connection; `None` when `--max-connections` are open already.
    fn open(&self) -> Option<OpenConn> {
        if !self.0.all.try_open() {
            self.0.all.log_refusal();
            return None;
        }
        self.0.here.set(self.0.here.get() + 1);
        Some(OpenConn(self.clone()))
    }

    fn count(&self) -> usize {
        self.0.here.get()
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        let conns = &(self.0).0;
        conns.here.set(conns.here.get().saturating_sub(1));
        conns.all.close();
    }
}

/// After shutdown: waits for this thread's connections to finish, at most `grace`.
async fn drain(open: &OpenConns, grace: Duration) {
    let waited = tokio::time::timeout(grace, async {
        while open.count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!(
            connections = open.count(),
            "shutdown grace period over; closing remaining connections"
        );
    }
}

/// Logs an accept error (rate-limited) and backs off briefly so a full fd table does not
/// spin the thread.
async fn accept_failed(err: io::Error) {
    limit::log_accept_error(&err);
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Time the io_uring engine gives the write of a [`limit::REFUSAL`] (it fits a fresh
/// socket's send buffer, so this is only a bound).
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

async fn run_epoll(
    listener: TcpListener,
    ctx: Arc<ThreadCtx>,
    open: OpenConns,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let builder = Rc::new(server::builder());
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(guard) = open.open() else {
                        // Non-blocking, and a fresh socket's send buffer takes it whole.
                        let _ = stream.try_write(limit::REFUSAL);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let state = Arc::new(ConnState::default());
                    let report = PhaseReport::new(state.clone());
                    let io = TokioIo::new(CheckedStream::new(stream, report));
                    let (ctx, builder, rx) = (ctx.clone(), builder.clone(), shutdown.clone());
                    tokio::task::spawn_local(async move {
                        server::serve(io, state, ctx, &builder, rx).await;
                        drop(guard);
                    });
                }
                Err(err) => accept_failed(err).await,
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    drain(&open, ctx.gateway.config.shutdown_grace_period).await;
    Ok(())
}

async fn run_uring(
    listener: TcpListener,
    ctx: Arc<ThreadCtx>,
    open: OpenConns,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // A pending io_uring accept keeps the listening socket open after it is dropped; a
    // second handle lets shutdown stop the socket itself, so new connections are refused
    // at once instead of queueing unanswered.
    let stopper = listener.try_clone()?;
    let listener = tokio_uring::net::TcpListener::from_std(listener);
    let builder = Rc::new(server::builder());
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(guard) = open.open() else {
                        let write = stream.write_all(limit::REFUSAL);
                        let _ = tokio::time::timeout(REFUSAL_WRITE, write).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let state = Arc::new(ConnState::default());
                    let io = UringIo::new(stream, PhaseReport::new(state.clone()));
                    let (ctx, builder, rx) = (ctx.clone(), builder.clone(), shutdown.clone());
                    tokio_uring::spawn(async move {
                        server::serve(io, state, ctx, &builder, rx).await;
                        drop(guard);
                    });
                }
                Err(err) => accept_failed(err).await,
            },
            _ = shutdown.changed() => break,
        }
    }
    let _ = socket2::SockRef::from(&stopper).shutdown(std::net::Shutdown::Both);
    drop(stopper);
    drop(listener);
    drain(&open, ctx.gateway.config.shutdown_grace_period).await;
    Ok(())
}

/// Runs one data-plane thread to completion (shutdown drained).
fn run_thread(
    driver: IoDriver,
    index: usize,
    listener: TcpListener,
    gateway: Arc<Gateway>,
    limit: Arc<ConnLimit>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let canary = gateway.metrics.runtime.clone().canary(Some(index));
    match driver {
        IoDriver::Epoll => {
            let runtime = gateway.metrics.runtime.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(move || {
                    if let Some(stats) = runtime.thread(index) {
                        stats.parked();
                    }
                })
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                tokio::task::spawn_local(canary);
                let ctx = Arc::new(ThreadCtx::new(gateway));
                run_epoll(listener, ctx, OpenConns::new(limit), shutdown).await
            })
        }
        IoDriver::Uring => tokio_uring::start(async move {
            tokio::task::spawn_local(canary);
            let ctx = Arc::new(ThreadCtx::new(gateway));
            run_uring(listener, ctx, OpenConns::new(limit), shutdown).await
        }),
    }
}

/// The running data plane: its address, its connection cap and its threads.
pub struct DataPlane {
    pub local_addr: SocketAddr,
    /// `--max-connections`, or its default for this process's open-file limit.
    pub max_connections: usize,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl DataPlane {
    /// Binds the listeners and starts `threads` data-plane threads.
    pub fn start(
        gateway: Arc<Gateway>,
        driver: IoDriver,
        addr: SocketAddr,
        threads: usize,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<DataPlane> {
        let (local_addr, listeners) = listener::bind_reuseport(addr, threads)?;
        let nofile = limit::raise_open_file_limit();
        let max_connections = gateway
            .config
            .max_connections
            .unwrap_or_else(|| limit::default_max_connections(nofile));
        let conn_limit = Arc::new(ConnLimit::new(max_connections));
        let mut handles = Vec::with_capacity(listeners.len());
        for (i, listener) in listeners.into_iter().enumerate() {
            let (gateway, limit, shutdown) =
                (gateway.clone(), conn_limit.clone(), shutdown.clone());
            let handle = std::thread::Builder::new()
                .name(format!("tollgate-data-{i}"))
                .spawn(move || run_thread(driver, i, listener, gateway, limit, shutdown))?;
            handles.push(handle);
        }
        Ok(DataPlane {
            local_addr,
            max_connections,
            threads: handles,
        })
    }

    /// Waits for every data-plane thread to finish draining.
    pub fn join(self) {
        for handle in self.threads {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::error!(error = %err, "data-plane thread failed"),
                Err(_) => tracing::error!("data-plane thread panicked"),
            }
        }
    }
}
