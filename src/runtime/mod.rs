//! Thread-per-core data plane.
//!
//! One OS thread per core, each with its own single-threaded runtime and its own
//! `SO_REUSEPORT` listener; connections never move between threads. The runtime is
//! tokio-uring (io_uring) or plain tokio (epoll), chosen once at startup. The main thread
//! runs the control runtime: signals now, health checks and other background jobs later.

mod uring_io;

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::server::drain::{Drain, DrainWait};
use crate::server::limit::{self, ConnLimit};
use crate::server::tls::Tls;
use crate::server::{
    self, listener,
    tokio_io::{CheckedStream, PlainTcp},
    ConnState, Handler, PhaseReport, ServerSettings,
};

pub use uring_io::UringIo;

/// Which I/O engine the per-core runtimes use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoEngine {
    /// Probe io_uring once at startup; fall back to epoll when it is unavailable.
    Auto,
    /// Require io_uring.
    Uring,
    /// Plain tokio (epoll).
    Epoll,
}

impl IoEngine {
    pub const ALL: &'static [IoEngine] = &[IoEngine::Auto, IoEngine::Uring, IoEngine::Epoll];

    pub fn as_str(&self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "uring",
            IoEngine::Epoll => "epoll",
        }
    }
}

impl fmt::Display for IoEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the data plane runs (the Runtime flag group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// `--runtime-worker-threads`: data-plane threads, one runtime each (>= 1).
    pub worker_threads: usize,
    /// `--io-engine`: io_uring, epoll, or probe.
    pub io_engine: IoEngine,
    /// `--shutdown-grace-period-secs`: how long in-flight requests may finish on shutdown.
    pub shutdown_grace_period: Duration,
}

impl Default for RuntimeSettings {
    fn default() -> RuntimeSettings {
        RuntimeSettings {
            worker_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            io_engine: IoEngine::Auto,
            shutdown_grace_period: Duration::from_secs(180),
        }
    }
}

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

thread_local! {
    /// Client connections open on this thread, each served by a task of its own.
    static OPEN_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Client connections open on the calling data-plane thread. Each is a task spawned on the
/// thread's local task set, which the runtime's own count of alive tasks does not see.
pub fn connection_tasks() -> usize {
    OPEN_HERE.with(Cell::get)
}

/// Counts a thread's open connections, so shutdown can wait for them, and every
/// thread's together against `--max-connections`.
#[derive(Clone)]
struct OpenConns(Arc<ConnLimit>);

/// One open connection, counted until dropped.
struct OpenConn(OpenConns);

impl OpenConns {
    /// Counts a new connection; `None` when `--max-connections` are open already.
    fn open(&self) -> Option<OpenConn> {
        if !self.0.try_open() {
            self.0.log_refusal();
            return None;
        }
        OPEN_HERE.with(|here| here.set(here.get() + 1));
        Some(OpenConn(self.clone()))
    }

    fn count(&self) -> usize {
        connection_tasks()
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        OPEN_HERE.with(|here| here.set(here.get().saturating_sub(1)));
        (self.0).0.close();
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

async fn run_epoll<H: Handler>(
    listener: TcpListener,
    serving: Rc<Serving<H>>,
    open: OpenConns,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let builder = Rc::new(server::builder());
    let draining = Drain::default();
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
                    let accepted = Instant::now();
                    let state = Arc::new(ConnState::default());
                    let report = PhaseReport::new(state.clone());
                    let (serving, builder, mut rx) = (serving.clone(), builder.clone(), draining.waiter());
                    match serving.tls.clone() {
                        None => {
                            let io = TokioIo::new(CheckedStream::new(PlainTcp::new(stream), report));
                            tokio::task::spawn_local(async move {
                                serving.serve(io, state, accepted, &builder, rx).await;
                                drop(guard);
                            });
                        }
                        Some(tls) => {
                            tokio::task::spawn_local(async move {
                                let deadline = serving.handshake_deadline(accepted);
                                if let Some(stream) = tls.accept(stream, deadline, &mut rx).await {
                                    let io = TokioIo::new(CheckedStream::new(stream, report));
                                    serving.serve(io, state, accepted, &builder, rx).await;
                                }
                                drop(guard);
                            });
                        }
                    }
                }
                Err(err) => accept_failed(err).await,
            },
            _ = shutdown.changed() => break,
        }
    }
    draining.fire();
    drop(listener);
    drain(&open, serving.grace).await;
    Ok(())
}

async fn run_uring<H: Handler>(
    listener: TcpListener,
    serving: Rc<Serving<H>>,
    open: OpenConns,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // A pending io_uring accept keeps the listening socket open after it is dropped; a
    // second handle lets shutdown stop the socket itself, so new connections are refused
    // at once instead of queueing unanswered.
    let stopper = listener.try_clone()?;
    let listener = tokio_uring::net::TcpListener::from_std(listener);
    let builder = Rc::new(server::builder());
    let draining = Drain::default();
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
                    let accepted = Instant::now();
                    let state = Arc::new(ConnState::default());
                    let report = PhaseReport::new(state.clone());
                    let (serving, builder, mut rx) = (serving.clone(), builder.clone(), draining.waiter());
                    match serving.tls.clone() {
                        None => {
                            let io = UringIo::new(stream, report);
                            tokio_uring::spawn(async move {
                                serving.serve(io, state, accepted, &builder, rx).await;
                                drop(guard);
                            });
                        }
                        // TLS over the unchecked socket, the check over the decrypted stream.
                        Some(tls) => {
                            tokio_uring::spawn(async move {
                                let deadline = serving.handshake_deadline(accepted);
                                let raw = TokioIo::new(UringIo::unchecked(stream));
                                if let Some(stream) = tls.accept(raw, deadline, &mut rx).await {
                                    let io = TokioIo::new(CheckedStream::new(stream, report));
                                    serving.serve(io, state, accepted, &builder, rx).await;
                                }
                                drop(guard);
                            });
                        }
                    }
                }
                Err(err) => accept_failed(err).await,
            },
            _ = shutdown.changed() => break,
        }
    }
    draining.fire();
    let _ = socket2::SockRef::from(&stopper).shutdown(std::net::Shutdown::Both);
    drop(stopper);
    drop(listener);
    drain(&open, serving.grace).await;
    Ok(())
}

/// What one data-plane thread needs from the layers above. The runtime owns threads,
/// listeners and connection counts; the request handler and the thread's observability
/// hooks come from the wiring through this trait, so the runtime imports nothing above the
/// server.
pub trait ThreadSetup: Send + Sync + 'static {
    type Handler: Handler;
    /// Builds this thread's handler, on the thread (it owns per-thread upstream pools).
    fn handler(self: Arc<Self>) -> Self::Handler;
    /// A task run beside the accept loop of thread `index` (the event-loop canary, the
    /// upstream pool sweep).
    fn companion(&self, index: usize) -> impl std::future::Future<Output = ()> + 'static;
    /// Thread `index`'s runtime is about to park (epoll only: its busy-ratio sampler).
    fn parked(&self, index: usize);
}

/// What a thread's connections share: the handler, the edge settings, the listener's TLS
/// (if on), the drain grace.
struct Serving<H> {
    handler: Arc<H>,
    settings: ServerSettings,
    tls: Option<Tls>,
    grace: Duration,
}

impl<H: Handler> Serving<H> {
    /// Serves one connection whose IO is ready (past its TLS handshake, if any).
    async fn serve<I>(
        &self,
        io: I,
        state: Arc<ConnState>,
        accepted: Instant,
        builder: &server::ConnBuilder,
        drain: DrainWait,
    ) where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    {
        let handler = self.handler.clone();
        server::serve(io, state, accepted, handler, &self.settings, builder, drain).await;
    }

    /// A TLS handshake must end within the header-read timeout from accept.
    fn handshake_deadline(&self, accepted: Instant) -> Instant {
        accepted + self.settings.header_read_timeout
    }
}

/// Runs one data-plane thread until shutdown has drained its connections.
fn run_thread<S: ThreadSetup>(
    driver: IoDriver,
    index: usize,
    listener: TcpListener,
    setup: Arc<S>,
    settings: (ServerSettings, Option<Tls>, Duration),
    limit: Arc<ConnLimit>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let serving = move |setup: &Arc<S>| {
        Rc::new(Serving {
            handler: Arc::new(setup.clone().handler()),
            settings: settings.0,
            tls: settings.1,
            grace: settings.2,
        })
    };
    match driver {
        IoDriver::Epoll => {
            let parker = setup.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(move || parker.parked(index))
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let accept = run_epoll(listener, serving(&setup), OpenConns(limit), shutdown);
                run_tasks(setup.companion(index), accept).await
            })
        }
        IoDriver::Uring => tokio_uring::start(async move {
            let accept = run_uring(listener, serving(&setup), OpenConns(limit), shutdown);
            run_tasks(setup.companion(index), accept).await
        }),
    }
}

/// Runs the thread's companion, its park sweep and its accept loop as tasks of the thread's
/// local set and waits for the accept loop. The future a `LocalSet` is driven with is polled
/// again whenever any task of the thread is woken; were it the accept loop, every wake of every
/// connection would poll the listener and the shutdown signal again (about 1.3k
/// instructions a request). A join handle is one state check (about 0.3k).
async fn run_tasks(
    companion: impl Future<Output = ()> + 'static,
    accept: impl Future<Output = io::Result<()>> + 'static,
) -> io::Result<()> {
    tokio::task::spawn_local(companion);
    tokio::task::spawn_local(crate::server::park_sweep::run());
    tokio::task::spawn_local(accept)
        .await
        .unwrap_or_else(|err| Err(io::Error::other(format!("the accept loop failed: {err}"))))
}

/// The running data plane: its address, its connection cap and its threads.
pub struct DataPlane {
    pub local_addr: SocketAddr,
    /// `--max-connections`, or its default for this process's open-file limit.
    pub max_connections: usize,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl DataPlane {
    /// Binds the listeners of `server` and starts one data-plane thread per
    /// `runtime.worker_threads`, each serving with its own handler from `setup`, over `tls`
    /// when it is set.
    pub fn start<S: ThreadSetup>(
        setup: Arc<S>,
        driver: IoDriver,
        server: &ServerSettings,
        tls: Option<Tls>,
        runtime: &RuntimeSettings,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<DataPlane> {
        let addr = SocketAddr::new(server.host, server.port);
        let (local_addr, listeners) = listener::bind_reuseport(addr, runtime.worker_threads)?;
        let nofile = limit::raise_open_file_limit();
        let max_connections = server
            .max_connections
            .unwrap_or_else(|| limit::default_max_connections(nofile));
        let conn_limit = Arc::new(ConnLimit::new(max_connections));
        let mut handles = Vec::with_capacity(listeners.len());
        for (i, listener) in listeners.into_iter().enumerate() {
            let (setup, limit, shutdown) = (setup.clone(), conn_limit.clone(), shutdown.clone());
            let settings = (server.clone(), tls.clone(), runtime.shutdown_grace_period);
            let handle = std::thread::Builder::new()
                .name(format!("tollgate-data-{i}"))
                .spawn(move || run_thread(driver, i, listener, setup, settings, limit, shutdown))?;
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
