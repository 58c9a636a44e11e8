//! The worker job board: asynchronous worker changes (`POST`, `PATCH`, `PUT`, `DELETE` on
//! `/workers`) are queued here and executed on the control runtime.
//!
//! The queue is bounded: a full queue is refused at submission (500), never blocks a
//! data-plane thread. The board keeps what `GET /workers/{id}` shows about a job: its
//! status while queued or running, and for five minutes after it failed. It is touched
//! only by control-plane requests and jobs, so a mutex is fine here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::fleet::spec::{WorkerPatch, WorkerSpec};

/// Jobs waiting to run at most.
pub const QUEUE_CAPACITY: usize = 1024;
/// How long a failed job stays visible.
pub const FAILED_RETENTION: Duration = Duration::from_secs(300);

/// The `job_type` of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Add,
    Update,
    Remove,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Add => "AddWorker",
            JobKind::Update => "UpdateWorker",
            JobKind::Remove => "RemoveWorker",
        }
    }
}

/// The `status` of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Processing,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Processing => "processing",
            JobState::Failed => "failed",
        }
    }
}

/// What `job_status` shows.
#[derive(Clone, Debug, PartialEq)]
pub struct JobStatus {
    pub kind: JobKind,
    pub worker_url: String,
    pub state: JobState,
    pub message: Option<String>,
    /// Unix seconds of the last change.
    pub timestamp: u64,
}

impl JobStatus {
    pub fn to_json(&self) -> Value {
        json!({
            "job_type": self.kind.as_str(),
            "worker_url": self.worker_url,
            "status": self.state.as_str(),
            "message": self.message,
            "timestamp": self.timestamp,
        })
    }
}

/// A queued change.
#[derive(Debug)]
pub enum Job {
    Add { id: Uuid, spec: Box<WorkerSpec> },
    Patch { id: Uuid, patch: WorkerPatch },
    Replace { id: Uuid, spec: Box<WorkerSpec> },
    Remove { id: Uuid },
}

impl Job {
    pub fn id(&self) -> Uuid {
        match self {
            Job::Add { id, .. }
            | Job::Patch { id, .. }
            | Job::Replace { id, .. }
            | Job::Remove { id } => *id,
        }
    }

    fn kind(&self) -> JobKind {
        match self {
            Job::Add { .. } => JobKind::Add,
            Job::Patch { .. } | Job::Replace { .. } => JobKind::Update,
            Job::Remove { .. } => JobKind::Remove,
        }
    }
}

/// Why a job was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// A registration of this URL is already running under this id.
    InProgress(Uuid),
    /// The queue is full (or its executor is gone).
    QueueFull,
}

struct Entry {
    status: JobStatus,
    /// Set when the job failed: the entry disappears then.
    expires: Option<Instant>,
}

#[derive(Default)]
struct Board {
    entries: HashMap<Uuid, Entry>,
    /// URLs whose registration job is queued or running.
    registering: HashMap<String, Uuid>,
}

/// The queue's sending side and the board.
pub struct Jobs {
    tx: mpsc::Sender<Job>,
    board: Mutex<Board>,
}

impl Jobs {
    /// The board and the receiving end the executor drains.
    pub fn new() -> (Jobs, mpsc::Receiver<Job>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let jobs = Jobs {
            tx,
            board: Mutex::new(Board::default()),
        };
        (jobs, rx)
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the board, so a poisoned lock is simply taken over.
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a job for `worker_url`. A registration (`Add`) is refused while another
    /// registration of the same URL runs.
    pub fn submit(&self, worker_url: &str, job: Job) -> Result<(), SubmitError> {
        let id = job.id();
        let kind = job.kind();
        let mut board = self.board();
        if kind == JobKind::Add {
            if let Some(existing) = board.registering.get(worker_url) {
                return Err(SubmitError::InProgress(*existing));
            }
        }
        self.tx.try_send(job).map_err(|_| SubmitError::QueueFull)?;
        if kind == JobKind::Add {
            board.registering.insert(worker_url.to_owned(), id);
        }
        board.entries.insert(
            id,
            Entry {
                status: JobStatus {
                    kind,
                    worker_url: worker_url.to_owned(),
                    state: JobState::Pending,
                    message: None,
                    timestamp: unix_now(),
                },
                expires: None,
            },
        );
        Ok(())
    }

    /// The job status shown for worker `id`, if any (expired failures are dropped here).
    pub fn status(&self, id: &Uuid) -> Option<JobStatus> {
        let mut board = self.board();
        let now = Instant::now();
        board
            .entries
            .retain(|_, e| e.expires.is_none_or(|at| at > now));
        board.entries.get(id).map(|e| e.status.clone())
    }

    /// The URL being registered under `id` and its job's status, while the registration
    /// job runs. Both are read under one lock: read apart, a job finishing in between
    /// showed a registering worker without its job.
    pub fn registering(&self, id: &Uuid) -> Option<(String, Option<JobStatus>)> {
        let board = self.board();
        let url = board
            .registering
            .iter()
            .find(|(_, job)| *job == id)
            .map(|(url, _)| url.clone())?;
        let status = board.entries.get(id).map(|e| e.status.clone());
        Some((url, status))
    }

    /// Whether `url` is being registered (and under which id).
    pub fn registering_url(&self, url: &str) -> Option<Uuid> {
        self.board().registering.get(url).copied()
    }

    /// The executor took the job up.
    pub fn processing(&self, id: &Uuid) {
        if let Some(entry) = self.board().entries.get_mut(id) {
            entry.status.state = JobState::Processing;
            entry.status.timestamp = unix_now();
        }
    }

    /// The job finished well: nothing more to show.
    pub fn succeeded(&self, id: &Uuid) {
        let mut board = self.board();
        board.entries.remove(id);
        board.registering.retain(|_, job| job != id);
    }

    /// The job failed. A failed registration releases its id (the worker never existed);
    /// other failures stay visible for [`FAILED_RETENTION`].
    pub fn failed(&self, id: &Uuid, message: String) {
        let mut board = self.board();
        board.registering.retain(|_, job| job != id);
        let Some(entry) = board.entries.get_mut(id) else {
            return;
        };
        if entry.status.kind == JobKind::Add {
            board.entries.remove(id);
            return;
        }
        entry.status.state = JobState::Failed;
        entry.status.message = Some(message);
        entry.status.timestamp = unix_now();
        entry.expires = Some(Instant::now() + FAILED_RETENTION);
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::parse_worker_url;

    fn spec(url: &str) -> Box<WorkerSpec> {
        Box::new(WorkerSpec::new(parse_worker_url(url).unwrap()))
    }

    #[test]
    fn a_second_registration_of_one_url_is_refused_while_the_first_runs() {
        let (jobs, _rx) = Jobs::new();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let url = "http://127.0.0.1:1";
        jobs.submit(
            url,
            Job::Add {
                id: a,
                spec: spec(url),
            },
        )
        .unwrap();
        assert_eq!(
            jobs.submit(
                url,
                Job::Add {
                    id: b,
                    spec: spec(url)
                }
            ),
            Err(SubmitError::InProgress(a))
        );
        let (registering, job) = jobs.registering(&a).unwrap();
        assert_eq!(registering, url);
        assert_eq!(job.map(|j| j.state), Some(JobState::Pending));
        assert_eq!(jobs.registering_url(url), Some(a));
        assert_eq!(jobs.status(&a).unwrap().state, JobState::Pending);
        jobs.processing(&a);
        assert_eq!(jobs.status(&a).unwrap().state, JobState::Processing);
        jobs.succeeded(&a);
        assert!(jobs.status(&a).is_none());
        assert!(jobs.registering_url(url).is_none());
    }

    #[test]
    fn failed_registration_releases_the_id_other_failures_stay_visible() {
        let (jobs, _rx) = Jobs::new();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        jobs.submit(
            "http://h:1",
            Job::Add {
                id: a,
                spec: spec("http://h:1"),
            },
        )
        .unwrap();
        jobs.failed(&a, "never answered".into());
        assert!(jobs.status(&a).is_none());
        assert!(jobs.registering(&a).is_none());
        jobs.submit("http://h:2", Job::Remove { id: b }).unwrap();
        jobs.failed(&b, "boom".into());
        let status = jobs.status(&b).unwrap();
        assert_eq!(status.state, JobState::Failed);
        assert_eq!(status.kind.as_str(), "RemoveWorker");
        assert_eq!(status.to_json()["message"], "boom");
    }

    #[test]
    fn a_full_queue_refuses_and_leaves_no_trace() {
        let (jobs, _rx) = Jobs::new();
        for _ in 0..QUEUE_CAPACITY {
            jobs.submit("http://h:1", Job::Remove { id: Uuid::new_v4() })
                .unwrap();
        }
        let id = Uuid::new_v4();
        let url = "http://h:9";
        assert_eq!(
            jobs.submit(
                url,
                Job::Add {
                    id,
                    spec: spec(url)
                }
            ),
            Err(SubmitError::QueueFull)
        );
        assert!(jobs.status(&id).is_none());
        assert!(jobs.registering_url(url).is_none());
    }
}
