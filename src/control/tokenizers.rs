//! The tokenizer registry of `/v1/tokenizers` (spec 1): tokenizers an administrator loaded
//! by name, and the load jobs that fill it.
//!
//! A registration is answered at once and loaded on a thread of its own (parsing a
//! tokenizer takes up to seconds; no event loop may wait for it, and shutdown never waits
//! for a load). Sources are local files only: a directory holding `tokenizer.json` or the
//! file itself; a model-hub ID fails its job, since the gateway downloads nothing.
//!
//! gRPC registration resolves a worker's `tokenizer_path` through here
//! ([`Tokenizers::language`]), so several workers share one loaded kit; a worker holds its
//! own `Arc`, so removing a tokenizer never affects workers already using it.
//!
//! Everything is bounded: loaded tokenizers plus running loads, concurrent loads, and
//! failed jobs (kept about five minutes so their reason can be read; the oldest goes
//! first when too many fail at once). Only control-plane requests and registrations touch
//! it, so one mutex is enough.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::chat::language::{Language, Sources};

/// How long a failed job stays visible by its ID (spec 1: about five minutes).
pub const FAILED_RETENTION: Duration = Duration::from_secs(300);

/// The registry's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Loaded tokenizers plus loads under way (a load's slot is reserved when it starts).
    pub max_tokenizers: usize,
    /// Loads under way at once (each runs on its own thread).
    pub max_loading: usize,
    /// Failed jobs kept; past this the oldest is forgotten early.
    pub max_failed: usize,
    /// How long a failed job is kept.
    pub retention: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_tokenizers: 64,
            max_loading: 8,
            max_failed: 32,
            retention: FAILED_RETENTION,
        }
    }
}

/// What `POST /v1/tokenizers` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddRequest {
    pub name: String,
    /// A local directory or `tokenizer.json`, as given (reported back verbatim).
    pub source: String,
    /// A chat template file that wins over the source's own.
    pub chat_template_path: Option<String>,
}

/// A loaded tokenizer.
#[derive(Debug)]
pub struct Registered {
    pub id: Uuid,
    pub name: String,
    pub source: String,
    pub language: Arc<Language>,
}

impl Registered {
    /// Tokens in the vocabulary, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.language.tokenizer.get_vocab_size(true)
    }
}

/// The `status` of a load job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// Queued: its thread has not started loading yet.
    Pending,
    /// Loading.
    Processing,
    /// Loaded; the tokenizer is registered.
    Completed,
    /// Failed; the message says why.
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Processing => "processing",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
        }
    }
}

/// What `GET /v1/tokenizers/{id}/status` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    pub id: Uuid,
    pub status: JobStatus,
    pub message: String,
    /// Only once completed.
    pub vocab_size: Option<usize>,
}

/// Why a registration was refused before any job started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddError {
    /// The name is taken by a loaded tokenizer or a load under way (its ID).
    NameTaken(Uuid),
    /// The registry is at one of its bounds, or the load thread could not start.
    Unavailable(String),
}

/// What one removal took away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removed {
    /// A loaded tokenizer, by its name.
    Tokenizer(String),
    /// A job under way or failed, by its ID; a load that finishes later is discarded.
    Job(Uuid),
}

/// A job still in the board: under way, or failed and kept for a while.
#[derive(Debug)]
struct Job {
    name: String,
    source: String,
    chat_template: Option<String>,
    state: JobState,
    /// When the state last changed (retention counts from the failure).
    changed: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum JobState {
    Pending,
    Processing,
    Failed(String),
}

impl Job {
    fn under_way(&self) -> bool {
        !matches!(self.state, JobState::Failed(_))
    }
}

#[derive(Debug, Default)]
struct State {
    /// In registration order, which is the listing order.
    loaded: Vec<Arc<Registered>>,
    jobs: HashMap<Uuid, Job>,
}

impl State {
    /// Forgets failed jobs older than `retention`.
    fn expire(&mut self, now: Instant, retention: Duration) {
        self.jobs.retain(|_, job| {
            job.under_way() || now.saturating_duration_since(job.changed) < retention
        });
    }

    fn under_way(&self) -> usize {
        self.jobs.values().filter(|job| job.under_way()).count()
    }

    /// A loaded tokenizer by ID or name (an ID is tried first).
    fn find(&self, key: &str) -> Option<usize> {
        let id = Uuid::parse_str(key).ok();
        id.and_then(|id| self.loaded.iter().position(|t| t.id == id))
            .or_else(|| self.find_name(key))
    }

    fn find_name(&self, name: &str) -> Option<usize> {
        self.loaded.iter().position(|t| t.name == name)
    }

    /// Makes room for one more failed job by forgetting the oldest ones.
    fn trim_failed(&mut self, keep: usize) {
        loop {
            let failed = self.jobs.iter().filter(|(_, job)| !job.under_way());
            if failed.clone().count() < keep.max(1) {
                return;
            }
            let oldest = failed.min_by_key(|(_, job)| job.changed).map(|(id, _)| *id);
            match oldest {
                Some(id) => self.jobs.remove(&id),
                None => return,
            };
        }
    }
}

/// The registry: loaded tokenizers and their load jobs.
#[derive(Debug, Default)]
pub struct Tokenizers {
    state: Mutex<State>,
    limits: Limits,
}

impl Tokenizers {
    pub fn new(limits: Limits) -> Tokenizers {
        Tokenizers {
            state: Mutex::new(State::default()),
            limits,
        }
    }

    /// Registers `request` and starts loading it on a thread of its own; the ID to poll.
    pub fn add(self: &Arc<Self>, request: AddRequest) -> Result<Uuid, AddError> {
        let id = self.begin(request, Instant::now())?;
        let registry = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tollgate-tokenizer-load".into())
            .spawn(move || registry.run(id));
        if let Err(err) = spawned {
            self.lock().jobs.remove(&id);
            return Err(AddError::Unavailable(format!(
                "cannot start the tokenizer load: {err}"
            )));
        }
        Ok(id)
    }

    /// Every loaded tokenizer, in registration order.
    pub fn list(&self) -> Vec<Arc<Registered>> {
        self.lock().loaded.clone()
    }

    /// A loaded tokenizer by ID or name.
    pub fn get(&self, key: &str) -> Option<Arc<Registered>> {
        let state = self.lock();
        state.find(key).map(|i| state.loaded[i].clone())
    }

    /// The language kit of the tokenizer `key` names (ID or name), if one is loaded.
    pub fn language(&self, key: &str) -> Option<Arc<Language>> {
        self.get(key).map(|t| t.language.clone())
    }

    /// A job's status: a loaded tokenizer by ID or name, a job under way or failed only by
    /// its ID.
    pub fn status(&self, key: &str) -> Option<JobView> {
        self.status_at(key, Instant::now())
    }

    /// Removes the loaded tokenizer `key` names (ID or name), or the job with that ID.
    pub fn remove(&self, key: &str) -> Option<Removed> {
        let mut state = self.lock();
        if let Some(i) = state.find(key) {
            let gone = state.loaded.remove(i);
            return Some(Removed::Tokenizer(gone.name.clone()));
        }
        let id = Uuid::parse_str(key).ok()?;
        state.jobs.remove(&id).map(|_| Removed::Job(id))
    }

    /// Checks the name and the bounds and records a pending job.
    fn begin(&self, request: AddRequest, now: Instant) -> Result<Uuid, AddError> {
        let mut state = self.lock();
        state.expire(now, self.limits.retention);
        if let Some(i) = state.find_name(&request.name) {
            return Err(AddError::NameTaken(state.loaded[i].id));
        }
        let running = state
            .jobs
            .iter()
            .find(|(_, job)| job.under_way() && job.name == request.name);
        if let Some((id, _)) = running {
            return Err(AddError::NameTaken(*id));
        }
        let under_way = state.under_way();
        if state.loaded.len() + under_way >= self.limits.max_tokenizers {
            return Err(AddError::Unavailable(format!(
                "the tokenizer registry is full ({} tokenizers); remove one first",
                self.limits.max_tokenizers
            )));
        }
        if under_way >= self.limits.max_loading {
            return Err(AddError::Unavailable(format!(
                "{under_way} tokenizers are loading already; retry when one has finished"
            )));
        }
        let id = Uuid::new_v4();
        state.jobs.insert(
            id,
            Job {
                name: request.name,
                source: request.source,
                chat_template: request.chat_template_path,
                state: JobState::Pending,
                changed: now,
            },
        );
        Ok(id)
    }

    /// The job `id`, start to end. Blocking: reads and parses the tokenizer.
    fn run(&self, id: Uuid) {
        let sources = {
            let mut state = self.lock();
            let Some(job) = state.jobs.get_mut(&id) else {
                return;
            };
            job.state = JobState::Processing;
            job.changed = Instant::now();
            sources(&job.source, job.chat_template.as_deref())
        };
        let loaded = sources.and_then(|sources| {
            Language::load(&sources).map_err(|e| format!("cannot load the tokenizer: {e}"))
        });
        self.finish(id, loaded, Instant::now());
    }

    /// Records the outcome of job `id`: registered, or failed with its reason. A job
    /// removed meanwhile is not brought back.
    fn finish(&self, id: Uuid, loaded: Result<Language, String>, now: Instant) {
        let mut state = self.lock();
        let Some(job) = state.jobs.get(&id) else {
            return;
        };
        match loaded {
            Ok(language) => {
                let vocab_size = language.tokenizer.get_vocab_size(true);
                let encoder = language.encoder.kind();
                tracing::info!(tokenizer = %job.name, %id, vocab_size, encoder, "tokenizer registered");
                let Some(job) = state.jobs.remove(&id) else {
                    return;
                };
                state.loaded.push(Arc::new(Registered {
                    id,
                    name: job.name,
                    source: job.source,
                    language: Arc::new(language),
                }));
            }
            Err(message) => {
                tracing::warn!(tokenizer = %job.name, %id, error = %message, "tokenizer load failed");
                state.trim_failed(self.limits.max_failed);
                if let Some(job) = state.jobs.get_mut(&id) {
                    job.state = JobState::Failed(message);
                    job.changed = now;
                }
            }
        }
    }

    fn status_at(&self, key: &str, now: Instant) -> Option<JobView> {
        let mut state = self.lock();
        if let Some(i) = state.find(key) {
            let tokenizer = &state.loaded[i];
            return Some(JobView {
                id: tokenizer.id,
                status: JobStatus::Completed,
                message: format!("tokenizer '{}' is loaded", tokenizer.name),
                vocab_size: Some(tokenizer.vocab_size()),
            });
        }
        state.expire(now, self.limits.retention);
        let id = Uuid::parse_str(key).ok()?;
        let job = state.jobs.get(&id)?;
        let (status, message) = match &job.state {
            JobState::Pending => (JobStatus::Pending, "queued for loading".to_owned()),
            JobState::Processing => (JobStatus::Processing, "loading".to_owned()),
            JobState::Failed(reason) => (JobStatus::Failed, reason.clone()),
        };
        Some(JobView {
            id,
            status,
            message,
            vocab_size: None,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The files a source names, or why it names none. Only local paths are read: a source
/// that does not exist here fails, and one shaped like a model-hub ID says the gateway
/// does not download.
fn sources(source: &str, chat_template: Option<&str>) -> Result<Sources, String> {
    let path = Path::new(source);
    if !path.exists() {
        return Err(if looks_like_hub_id(source) {
            format!(
                "'{source}' is not a local path; it looks like a model-hub ID, and the gateway \
                 does not download tokenizers: give a local directory holding tokenizer.json, \
                 or the tokenizer.json file itself"
            )
        } else {
            format!("tokenizer source '{source}' does not exist on the gateway's host")
        });
    }
    Ok(Sources {
        tokenizer: path.to_owned(),
        chat_template: chat_template.map(PathBuf::from),
    })
}

/// `owner/name`: two relative path segments, as model hubs name repositories.
fn looks_like_hub_id(source: &str) -> bool {
    let mut parts = source.split('/');
    let valid = |part: Option<&str>| part.is_some_and(|p| !p.is_empty() && p != "." && p != "..");
    valid(parts.next()) && valid(parts.next()) && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, source: &str) -> AddRequest {
        AddRequest {
            name: name.into(),
            source: source.into(),
            chat_template_path: None,
        }
    }

    /// A directory holding a three-word tokenizer.
    fn tokenizer_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tollgate-tokenizers-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null,
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "[UNK]": 2}, "unk_token": "[UNK]"}
        });
        std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
        dir
    }

    /// The message of a registration refused with 503.
    fn unavailable(reg: &Tokenizers, name: &str, now: Instant) -> String {
        match reg.begin(request(name, "/x"), now) {
            Err(AddError::Unavailable(message)) => message,
            other => panic!("{other:?}"),
        }
    }

    fn loaded(dir: &Path) -> Result<Language, String> {
        Language::load(&sources(dir.to_str().unwrap(), None)?).map_err(|e| e.to_string())
    }

    #[test]
    fn a_failed_job_is_visible_until_its_retention_ends() {
        let reg = Tokenizers::new(Limits {
            retention: Duration::from_secs(10),
            ..Limits::default()
        });
        let t0 = Instant::now();
        let id = reg.begin(request("a", "/no/such/dir"), t0).unwrap();
        let key = id.to_string();
        assert_eq!(reg.status_at(&key, t0).unwrap().status, JobStatus::Pending);
        reg.run(id);
        let failed_at = Instant::now();
        let view = reg.status_at(&key, failed_at).unwrap();
        assert_eq!(view.status, JobStatus::Failed);
        assert!(view.message.contains("does not exist"), "{}", view.message);
        assert_eq!(view.vocab_size, None);
        // Only by ID: the name of a failed job answers nothing.
        assert_eq!(reg.status_at("a", failed_at), None);
        let later = failed_at + Duration::from_secs(9);
        assert!(reg.status_at(&key, later).is_some());
        let expired = failed_at + Duration::from_secs(11);
        assert_eq!(reg.status_at(&key, expired), None);
    }

    #[test]
    fn the_default_retention_is_about_five_minutes() {
        assert_eq!(Limits::default().retention, Duration::from_secs(300));
    }

    #[test]
    fn a_load_registers_by_name_and_id_and_removal_keeps_held_kits() {
        let reg = Arc::new(Tokenizers::default());
        let dir = tokenizer_dir("load");
        let id = reg.add(request("words", dir.to_str().unwrap())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while reg.get("words").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let view = reg.status("words").unwrap();
        assert_eq!(view.status, JobStatus::Completed);
        assert_eq!(view.id, id);
        assert_eq!(view.vocab_size, Some(3));
        assert_eq!(reg.status(&id.to_string()), Some(view));
        assert_eq!(
            reg.begin(request("words", "/x"), Instant::now()),
            Err(AddError::NameTaken(id))
        );
        let held = reg.language(&id.to_string()).unwrap();
        assert_eq!(reg.list().len(), 1);
        assert_eq!(
            reg.remove("words"),
            Some(Removed::Tokenizer("words".into()))
        );
        assert!(reg.list().is_empty());
        assert_eq!(reg.status("words"), None);
        // A worker that took the kit keeps it.
        assert_eq!(held.tokenizer.get_vocab_size(true), 3);
    }

    #[test]
    fn a_name_under_way_is_taken_and_a_failed_one_is_free() {
        let reg = Tokenizers::default();
        let now = Instant::now();
        let id = reg.begin(request("a", "/no/such/dir"), now).unwrap();
        assert_eq!(
            reg.begin(request("a", "/elsewhere"), now),
            Err(AddError::NameTaken(id))
        );
        reg.finish(id, Err("broken".into()), now);
        assert!(reg.begin(request("a", "/elsewhere"), now).is_ok());
    }

    #[test]
    fn loads_under_way_are_bounded() {
        let reg = Tokenizers::new(Limits {
            max_loading: 2,
            ..Limits::default()
        });
        let now = Instant::now();
        let a = reg.begin(request("a", "/x"), now).unwrap();
        reg.begin(request("b", "/x"), now).unwrap();
        let refusal = unavailable(&reg, "c", now);
        assert!(refusal.contains("loading"), "{refusal}");
        reg.finish(a, Err("x".into()), now);
        assert!(reg.begin(request("c", "/x"), now).is_ok());
    }

    #[test]
    fn loaded_tokenizers_and_loads_share_one_bound() {
        let reg = Tokenizers::new(Limits {
            max_tokenizers: 2,
            ..Limits::default()
        });
        let dir = tokenizer_dir("bound");
        let now = Instant::now();
        let a = reg.begin(request("a", "/x"), now).unwrap();
        reg.finish(a, loaded(&dir), now);
        let b = reg.begin(request("b", "/x"), now).unwrap();
        let refusal = unavailable(&reg, "c", now);
        assert!(refusal.contains("full"), "{refusal}");
        reg.finish(b, loaded(&dir), now);
        assert_eq!(reg.list().len(), 2);
        assert!(reg.begin(request("c", "/x"), now).is_err());
        reg.remove("a");
        assert!(reg.begin(request("c", "/x"), now).is_ok());
    }

    #[test]
    fn failed_jobs_past_the_bound_forget_the_oldest() {
        let reg = Tokenizers::new(Limits {
            max_failed: 2,
            ..Limits::default()
        });
        let t0 = Instant::now();
        let mut ids = Vec::new();
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            let at = t0 + Duration::from_secs(i as u64);
            let id = reg.begin(request(name, "/x"), at).unwrap();
            reg.finish(id, Err("x".into()), at);
            ids.push(id);
        }
        let at = t0 + Duration::from_secs(3);
        assert_eq!(reg.status_at(&ids[0].to_string(), at), None);
        assert!(reg.status_at(&ids[1].to_string(), at).is_some());
        assert!(reg.status_at(&ids[2].to_string(), at).is_some());
    }

    #[test]
    fn a_removed_job_is_not_registered_when_its_load_ends() {
        let reg = Tokenizers::default();
        let dir = tokenizer_dir("removed");
        let now = Instant::now();
        let id = reg.begin(request("a", "/x"), now).unwrap();
        assert_eq!(reg.remove(&id.to_string()), Some(Removed::Job(id)));
        reg.finish(id, loaded(&dir), now);
        assert_eq!(reg.status_at(&id.to_string(), now), None);
        assert!(reg.list().is_empty());
    }

    #[test]
    fn hub_ids_are_told_apart_from_missing_paths() {
        let hub = sources("Qwen/Qwen3-0.6B", None).unwrap_err();
        assert!(hub.contains("does not download"), "{hub}");
        let missing = sources("/no/such/tokenizer", None).unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        assert!(!looks_like_hub_id("./tok"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("name"));
    }

    #[test]
    fn a_template_path_is_passed_on() {
        let dir = std::env::temp_dir();
        let got = sources(dir.to_str().unwrap(), Some("/t.jinja")).unwrap();
        assert_eq!(got.tokenizer, dir);
        assert_eq!(got.chat_template, Some(PathBuf::from("/t.jinja")));
    }
}
