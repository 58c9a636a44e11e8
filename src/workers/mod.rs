//! The worker fleet.
//!
//! Readers on the data plane load an immutable [`Snapshot`] through an atomic pointer swap
//! and never lock; writers (the control plane) build a new snapshot and publish it. Live
//! per-worker figures that change on every request (in-flight load, status) are atomics
//! inside the shared [`Worker`], so publishing a snapshot is only needed when membership
//! or a worker's static description changes.

pub mod spec;
mod url;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::uri::{Authority, Scheme};
use http::HeaderValue;
use uuid::Uuid;

pub use url::{parse_worker_url, Transport, WorkerUrl, WorkerUrlError};

/// How the gateway reaches a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionMode {
    Http,
    Grpc,
    Zmq,
}

impl ConnectionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionMode::Http => "http",
            ConnectionMode::Grpc => "grpc",
            ConnectionMode::Zmq => "zmq",
        }
    }
}

/// The role a worker plays in (dis)aggregated serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerType {
    Regular,
    Prefill,
    Decode,
    Encode,
}

impl WorkerType {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerType::Regular => "regular",
            WorkerType::Prefill => "prefill",
            WorkerType::Decode => "decode",
            WorkerType::Encode => "encode",
        }
    }
}

/// The engine behind a worker. `Unspecified` means "detect at registration".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeType {
    Sglang,
    Vllm,
    Trtllm,
    Mlx,
    Tokenspeed,
    Generic,
    External,
    Unspecified,
}

impl RuntimeType {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeType::Sglang => "sglang",
            RuntimeType::Vllm => "vllm",
            RuntimeType::Trtllm => "trtllm",
            RuntimeType::Mlx => "mlx",
            RuntimeType::Tokenspeed => "tokenspeed",
            RuntimeType::Generic => "generic",
            RuntimeType::External => "external",
            RuntimeType::Unspecified => "unspecified",
        }
    }
}

/// Worker status; only `Ready` workers receive traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Pending = 0,
    Ready = 1,
    NotReady = 2,
    Failed = 3,
    Draining = 4,
}

impl Status {
    fn from_u8(v: u8) -> Status {
        match v {
            1 => Status::Ready,
            2 => Status::NotReady,
            3 => Status::Failed,
            4 => Status::Draining,
            _ => Status::Pending,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Ready => "ready",
            Status::NotReady => "not_ready",
            Status::Failed => "failed",
            Status::Draining => "draining",
        }
    }
}

/// One registered worker. Shared by every snapshot that lists it.
#[derive(Debug)]
pub struct Worker {
    pub id: Uuid,
    /// The URL exactly as registered (normalised: no trailing slash).
    pub url: String,
    pub transport: Transport,
    pub worker_type: WorkerType,
    pub runtime: RuntimeType,
    /// Pre-built `Bearer <key>` for the gateway's own calls and for client requests that
    /// carry no `Authorization`; marked sensitive so it never shows in debug output.
    pub bearer: Option<HeaderValue>,
    status: AtomicU8,
    load: AtomicUsize,
}

impl Worker {
    pub fn new(
        url: WorkerUrl,
        worker_type: WorkerType,
        runtime: RuntimeType,
        api_key: Option<&str>,
    ) -> Worker {
        let bearer = api_key.and_then(|k| {
            let mut v = HeaderValue::try_from(format!("Bearer {k}")).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        Worker {
            id: Uuid::new_v4(),
            url: url.normalized,
            transport: url.transport,
            worker_type,
            runtime,
            bearer,
            status: AtomicU8::new(Status::Pending as u8),
            load: AtomicUsize::new(0),
        }
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Ordering::Acquire))
    }

    /// Stores a status without republishing; use [`Registry::set_status`] for workers that
    /// are already registered.
    pub fn set_status(&self, status: Status) {
        self.status.store(status as u8, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.status() == Status::Ready
    }

    /// Requests the gateway has in flight to this worker.
    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// Counts one request in flight until the returned guard drops (response fully relayed,
    /// failed, or abandoned by the client).
    pub fn track(self: &Arc<Self>) -> LoadGuard {
        self.load.fetch_add(1, Ordering::Relaxed);
        LoadGuard(self.clone())
    }

    pub fn connection_mode(&self) -> ConnectionMode {
        match self.transport {
            Transport::Http { .. } => ConnectionMode::Http,
            Transport::Grpc { .. } => ConnectionMode::Grpc,
            Transport::Zmq { .. } => ConnectionMode::Zmq,
        }
    }

    /// Scheme and authority of an HTTP worker, for building upstream URIs without
    /// re-parsing the URL per request.
    pub fn http_origin(&self) -> Option<(&Scheme, &Authority)> {
        match &self.transport {
            Transport::Http { scheme, authority } => Some((scheme, authority)),
            _ => None,
        }
    }
}

/// Decrements a worker's in-flight load when dropped.
#[derive(Debug)]
pub struct LoadGuard(Arc<Worker>);

impl LoadGuard {
    pub fn worker(&self) -> &Arc<Worker> {
        &self.0
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.load.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An immutable view of the fleet.
///
/// `routable` is computed when the snapshot is built, so selection on the hot path works
/// on a ready-made slice. Every status change goes through [`Registry::set_status`], which
/// republishes.
#[derive(Debug, Default)]
pub struct Snapshot {
    workers: Vec<Arc<Worker>>,
    routable: Vec<Arc<Worker>>,
}

impl Snapshot {
    fn new(workers: Vec<Arc<Worker>>) -> Snapshot {
        let routable = workers.iter().filter(|w| w.is_ready()).cloned().collect();
        Snapshot { workers, routable }
    }

    pub fn all(&self) -> &[Arc<Worker>] {
        &self.workers
    }

    /// Workers that may receive traffic now.
    pub fn routable(&self) -> &[Arc<Worker>] {
        &self.routable
    }

    pub fn by_id(&self, id: &Uuid) -> Option<&Arc<Worker>> {
        self.workers.iter().find(|w| w.id == *id)
    }

    pub fn by_url(&self, url: &str) -> Option<&Arc<Worker>> {
        self.workers.iter().find(|w| w.url == url)
    }

    pub fn ready_count(&self) -> usize {
        self.routable.len()
    }
}

/// The registry: one atomically swapped snapshot.
#[derive(Debug, Default)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The current fleet. Lock-free; hold the guard only for the duration of a decision.
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// Adds a worker. Writers are rare (control plane), so copying the list is fine.
    pub fn insert(&self, worker: Arc<Worker>) {
        self.current.rcu(|snap| {
            let mut workers = snap.workers.clone();
            workers.push(worker.clone());
            Snapshot::new(workers)
        });
    }

    /// Changes a worker's status and republishes so selection sees it.
    pub fn set_status(&self, worker: &Worker, status: Status) {
        worker.set_status(status);
        self.current.rcu(|snap| Snapshot::new(snap.workers.clone()));
    }

    /// Removes a worker by id; returns it if it was present.
    pub fn remove(&self, id: &Uuid) -> Option<Arc<Worker>> {
        let mut removed = None;
        self.current.rcu(|snap| {
            let mut workers = snap.workers.clone();
            removed = workers
                .iter()
                .position(|w| w.id == *id)
                .map(|i| workers.remove(i));
            Snapshot::new(workers)
        });
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(url: &str) -> Arc<Worker> {
        let parsed = parse_worker_url(url).unwrap();
        Arc::new(Worker::new(
            parsed,
            WorkerType::Regular,
            RuntimeType::Unspecified,
            None,
        ))
    }

    #[test]
    fn insert_and_remove_publish_new_snapshots() {
        let reg = Registry::new();
        let a = worker("http://127.0.0.1:1");
        let b = worker("http://127.0.0.1:2");
        reg.insert(a.clone());
        let before = reg.snapshot();
        reg.insert(b.clone());
        assert_eq!(before.all().len(), 1, "an old snapshot never changes");
        assert_eq!(reg.snapshot().all().len(), 2);
        assert!(reg.snapshot().by_url("http://127.0.0.1:2").is_some());
        assert_eq!(reg.remove(&a.id).map(|w| w.id), Some(a.id));
        assert!(reg.remove(&a.id).is_none());
        assert_eq!(reg.snapshot().all().len(), 1);
    }

    #[test]
    fn routable_follows_status_changes() {
        let reg = Registry::new();
        let a = worker("http://127.0.0.1:1");
        reg.insert(a.clone());
        assert!(
            reg.snapshot().routable().is_empty(),
            "pending is not routable"
        );
        reg.set_status(&a, Status::Ready);
        assert_eq!(reg.snapshot().routable().len(), 1);
        reg.set_status(&a, Status::Draining);
        assert_eq!(reg.snapshot().ready_count(), 0);
    }

    #[test]
    fn load_guard_counts_in_flight() {
        let w = worker("http://127.0.0.1:1");
        let g1 = w.track();
        let g2 = w.track();
        assert_eq!(w.load(), 2);
        drop(g1);
        assert_eq!(w.load(), 1);
        drop(g2);
        assert_eq!(w.load(), 0);
    }

    #[test]
    fn status_round_trips_and_readiness() {
        let w = worker("http://127.0.0.1:1");
        assert_eq!(w.status(), Status::Pending);
        w.set_status(Status::Ready);
        assert!(w.is_ready());
        w.set_status(Status::Draining);
        assert_eq!(w.status().as_str(), "draining");
    }

    #[test]
    fn api_key_is_not_in_debug_output() {
        let parsed = parse_worker_url("http://127.0.0.1:1").unwrap();
        let w = Worker::new(
            parsed,
            WorkerType::Regular,
            RuntimeType::Generic,
            Some("sk-very-secret"),
        );
        assert!(!format!("{w:?}").contains("sk-very-secret"));
    }
}
