//! Registration and health of gRPC engines: the engine is asked what it serves
//! (`GetModelInfo`) until it answers, its runtime settled, and the tokenizer and chat
//! template the gateway will use for it loaded (once per set of files, shared by every
//! worker that names them). Health is the engine's own `HealthCheck`.
//!
//! Detection over gRPC would try SGLang, vLLM, TensorRT-LLM, TokenSpeed and MLX in that
//! order (spec 1); this build speaks SGLang's scheduler service only, so an engine that
//! does not answer it, or a worker registered with another gRPC runtime, fails
//! registration with a message saying so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chat::language::{Language, Sources};
use crate::fleet::spec::WorkerSpec;
use crate::fleet::{Discovered, LanguageRef, RuntimeType, Transport, Worker};
use crate::grpc::sglang::GetModelInfoResponse;
use crate::grpc::{self, Scheduler, Wire};

use super::tokenizers::Tokenizers;
use super::{Control, LanguageSettings};

/// Distinct tokenizer/template sets kept loaded; past this, kits are loaded per worker
/// and not kept for sharing.
const MAX_LANGUAGES: usize = 64;

/// The control plane's gRPC side: its client, the loaded language kits, and the
/// tokenizers registered through `/v1/tokenizers` that workers can name.
pub struct GrpcControl {
    wire: Wire,
    languages: Mutex<HashMap<Sources, Arc<Language>>>,
    tokenizers: Arc<Tokenizers>,
}

impl GrpcControl {
    /// Its registered tokenizers are the ones `/v1/tokenizers` manages, shared, not a copy.
    pub fn new(tokenizers: Arc<Tokenizers>) -> GrpcControl {
        GrpcControl {
            wire: grpc::client::wire(Some(Duration::from_secs(30))),
            languages: Mutex::new(HashMap::new()),
            tokenizers,
        }
    }

    fn scheduler(&self, spec_url: &Transport) -> Result<Scheduler, String> {
        match spec_url {
            Transport::Grpc {
                tls: false,
                authority,
            } => Ok(Scheduler::new(self.wire.clone(), authority)),
            Transport::Grpc { tls: true, .. } => {
                Err("grpcs:// workers are not served by this build yet (use grpc://)".into())
            }
            _ => Err("not a gRPC worker".into()),
        }
    }

    /// The kit `sources` names, loaded on the blocking pool on first use.
    async fn language(&self, sources: Sources) -> Result<Arc<Language>, String> {
        if let Some(kit) = self.lock().get(&sources) {
            return Ok(kit.clone());
        }
        let load = sources.clone();
        let kit = tokio::task::spawn_blocking(move || Language::load(&load))
            .await
            .map_err(|_| "loading the tokenizer failed".to_owned())?
            .map_err(|e| format!("tokenizer: {e}"))?;
        tracing::info!(
            tokenizer = %kit.source.display(),
            vocab_size = kit.tokenizer.get_vocab_size(true),
            chat_template = kit.template.is_some(),
            detokenizer = %kit.bytes.mode(),
            "tokenizer loaded"
        );
        let kit = Arc::new(kit);
        let mut loaded = self.lock();
        if loaded.len() < MAX_LANGUAGES {
            loaded.entry(sources).or_insert_with(|| kit.clone());
        }
        Ok(kit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Sources, Arc<Language>>> {
        self.languages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Registers a gRPC engine: waits (as HTTP registration does, within
/// `--worker-startup-timeout-secs`) until it answers `GetModelInfo`, then loads its
/// tokenizer.
pub async fn discover(
    control: &Control,
    spec: &WorkerSpec,
    timeout: Duration,
) -> Result<Discovered, String> {
    match spec.effective_runtime() {
        RuntimeType::Unspecified | RuntimeType::Sglang => {}
        other => {
            return Err(format!(
                "gRPC runtime {} is not served by this build yet (sglang is)",
                other.as_str()
            ))
        }
    }
    let scheduler = control.grpc.scheduler(&spec.url.transport)?;
    let info = wait_for_model_info(control, &scheduler, spec, timeout).await?;
    let flags = &control.settings.language;
    let registry = &control.grpc.tokenizers;
    let registered = registered_name(spec, flags).and_then(|name| registry.language(name));
    let language = match (registered, sources(spec, &info, flags)) {
        (Some(kit), _) => kit,
        (None, Some(sources)) => control.grpc.language(sources).await?,
        // Last resort: a registered tokenizer named after the model the engine serves.
        (None, None) => Some(info.served_model_name.as_str())
            .filter(|name| !name.is_empty())
            .and_then(|name| registry.language(name))
            .ok_or_else(|| {
                "no tokenizer for this gRPC worker: give it a tokenizer_path or model_path \
                 label, start the gateway with --model-path or --tokenizer-path, or register \
                 a tokenizer named after the model through /v1/tokenizers"
                    .to_owned()
            })?,
    };
    let served = [&info.served_model_name, &info.model_path]
        .into_iter()
        .find(|name| !name.is_empty())
        .cloned();
    let mut labels = std::collections::BTreeMap::new();
    if info.max_context_length > 0 {
        labels.insert(
            "max_context_length".to_owned(),
            info.max_context_length.to_string(),
        );
    }
    Ok(Discovered {
        runtime: RuntimeType::Sglang,
        models: served.into_iter().collect(),
        labels,
        http2: true,
        language: Some(LanguageRef(language)),
    })
}

/// `GetModelInfo`, asked every `--worker-startup-check-interval` until it answers.
async fn wait_for_model_info(
    control: &Control,
    scheduler: &Scheduler,
    spec: &WorkerSpec,
    timeout: Duration,
) -> Result<GetModelInfoResponse, String> {
    let settings = &control.settings;
    let deadline = Instant::now() + settings.startup_timeout;
    loop {
        match scheduler.model_info(timeout).await {
            Ok(info) => return Ok(info),
            Err(err) if err.is_unimplemented() => {
                return Err(format!(
                    "the engine does not serve SGLang's scheduler service ({err}); other gRPC \
                     runtimes are not served by this build yet"
                ))
            }
            Err(err) => {
                let next = Instant::now() + settings.startup_check_interval;
                if next >= deadline {
                    return Err(format!(
                        "worker did not answer GetModelInfo within {} s: {err}",
                        settings.startup_timeout.as_secs()
                    ));
                }
                tracing::info!(worker = %spec.url.normalized, error = %err, "waiting for gRPC worker to answer");
                tokio::time::sleep_until(next.into()).await;
            }
        }
    }
}

/// One health probe: `HealthCheck` answered healthy within the probe timeout.
pub async fn probe(control: &Control, worker: &Worker) -> bool {
    match control.grpc.scheduler(&worker.transport) {
        Ok(scheduler) => scheduler
            .health(worker.health.timeout)
            .await
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The name a worker's tokenizer source is looked up by in the tokenizer registry: its
/// card's or labels' `tokenizer_path`, else `--tokenizer-path` unless a `model_path` label
/// comes first (the order of [`sources`]).
fn registered_name<'a>(spec: &'a WorkerSpec, flags: &'a LanguageSettings) -> Option<&'a str> {
    let named = |value: Option<&'a String>| value.map(String::as_str).filter(|v| !v.is_empty());
    let card = spec.models.first().and_then(|c| c.tokenizer_path.as_ref());
    if let Some(name) = named(card).or_else(|| named(spec.labels.get("tokenizer_path"))) {
        return Some(name);
    }
    if named(spec.labels.get("model_path")).is_some() {
        return None;
    }
    flags.tokenizer_path.as_deref().and_then(Path::to_str)
}

/// Where a worker's tokenizer comes from, first found: its model card's or labels'
/// `tokenizer_path`, its `model_path` label, `--tokenizer-path`, `--model-path`, then the
/// tokenizer or model path the engine reports, when that path exists on this host.
fn sources(
    spec: &WorkerSpec,
    info: &GetModelInfoResponse,
    flags: &LanguageSettings,
) -> Option<Sources> {
    let card = spec.models.first();
    let named = card
        .and_then(|c| c.tokenizer_path.clone())
        .or_else(|| spec.labels.get("tokenizer_path").cloned())
        .or_else(|| spec.labels.get("model_path").cloned())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let reported = [&info.tokenizer_path, &info.model_path]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .find(|p| Path::new(p).exists());
    let tokenizer = named
        .or_else(|| flags.tokenizer_path.clone())
        .or_else(|| flags.model_path.clone())
        .or(reported)?;
    let chat_template = card
        .and_then(|c| c.chat_template.clone())
        .map(PathBuf::from)
        .or_else(|| flags.chat_template.clone());
    Some(Sources {
        tokenizer,
        chat_template,
    })
}
