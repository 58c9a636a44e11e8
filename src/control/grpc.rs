//! Registration and health of gRPC engines: the engine is asked what it serves
//! (`GetModelInfo`) until it answers, its runtime settled, and the tokenizer and chat
//! template the gateway will use for it loaded (once per set of files, shared by every
//! worker that names them). Health is the engine's own `HealthCheck`.
//!
//! Detection over gRPC tries SGLang, vLLM, TensorRT-LLM, TokenSpeed and MLX in that
//! order (spec 1): a service the engine does not serve answers UNIMPLEMENTED and the next
//! is tried. An engine that answers none fails registration with a message saying so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chat::language::{Language, Sources};
use crate::engine::grpc::service::{KvFacts, ModelInfo};
use crate::engine::grpc::{self, Engine, Service, Wire};
use crate::fleet::spec::WorkerSpec;
use crate::fleet::{
    Discovered, LanguageRef, ParsersRef, RuntimeType, Transport, Worker, WorkerType,
};

use super::engine_tokenizer::{self, Fetched};
use super::tokenizers::Tokenizers;
use super::{Control, LanguageSettings};
use crate::http::tls::UpstreamTls;
use crate::parsers::Choice;

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
    /// `tls`: the roots `grpcs://` engines are verified against.
    pub fn new(tokenizers: Arc<Tokenizers>, tls: &UpstreamTls) -> GrpcControl {
        GrpcControl {
            wire: grpc::client::wire(Some(Duration::from_secs(30)), tls),
            languages: Mutex::new(HashMap::new()),
            tokenizers,
        }
    }

    fn engine(&self, service: Service, spec_url: &Transport) -> Result<Engine, String> {
        match spec_url {
            Transport::Grpc { tls, authority } => {
                Ok(Engine::new(service, self.wire.clone(), authority, *tls))
            }
            _ => Err("not a gRPC worker".into()),
        }
    }

    /// The kit a worker names, first found: a registered tokenizer under its
    /// [`registered_name`], the files its [`sources`] name, a registered tokenizer named
    /// after the model it serves (`served`); `None` when it names none.
    pub(super) async fn named_language(
        &self,
        spec: &WorkerSpec,
        info: &ModelInfo,
        flags: &LanguageSettings,
        served: &str,
    ) -> Result<Option<Arc<Language>>, String> {
        if let Some(kit) = registered_name(spec, flags).and_then(|n| self.tokenizers.language(n)) {
            return Ok(Some(kit));
        }
        if let Some(sources) = sources(spec, info, flags) {
            return self.language(sources).await.map(Some);
        }
        Ok(Some(served)
            .filter(|name| !name.is_empty())
            .and_then(|name| self.tokenizers.language(name)))
    }

    /// The kit `sources` names, loaded on the blocking pool on first use.
    async fn language(&self, sources: Sources) -> Result<Arc<Language>, String> {
        let files = sources.clone();
        self.kit(sources, move || {
            Language::load(&files).map_err(|e| format!("tokenizer: {e}"))
        })
        .await
    }

    /// The kit an engine streamed, shared by every engine that sent the same archive.
    async fn streamed_language(
        &self,
        archive: engine_tokenizer::Archive,
        chat_template: Option<PathBuf>,
    ) -> Result<Arc<Language>, String> {
        let key = engine_tokenizer::sources_of(&archive, chat_template.clone());
        self.kit(key, move || engine_tokenizer::load(&archive, chat_template))
            .await
    }

    /// The kit kept under `key`, or the one `load` gives, run on the blocking pool.
    async fn kit(
        &self,
        key: Sources,
        load: impl FnOnce() -> Result<Language, String> + Send + 'static,
    ) -> Result<Arc<Language>, String> {
        if let Some(kit) = self.lock().get(&key) {
            return Ok(kit.clone());
        }
        let kit = tokio::task::spawn_blocking(load)
            .await
            .map_err(|_| "loading the tokenizer failed".to_owned())??;
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
            loaded.entry(key).or_insert_with(|| kit.clone());
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
    // An explicit runtime skips detection.
    let candidates = match spec.effective_runtime() {
        RuntimeType::Unspecified => Service::DETECTION_ORDER.to_vec(),
        explicit => match explicit.grpc_service() {
            Some(service) => vec![service],
            None => {
                return Err(format!(
                    "runtime {} has no gRPC service; gRPC workers are sglang, vllm, trtllm, \
                     tokenspeed or mlx (or unspecified, to detect)",
                    explicit.as_str()
                ))
            }
        },
    };
    let mut engines = Vec::with_capacity(candidates.len());
    for service in candidates {
        engines.push((service, control.grpc.engine(service, &spec.url.transport)?));
    }
    let (service, info) = wait_for_model_info(control, &engines, spec, timeout).await?;
    let flags = &control.settings.language;
    let named = control
        .grpc
        .named_language(spec, &info, flags, &info.served_model_name)
        .await?;
    let language = match named {
        Some(kit) => kit,
        // Last: the engine's own files, streamed.
        None => {
            let engine = &engines
                .iter()
                .find(|(s, _)| *s == service)
                .ok_or("detected service not among the candidates")?
                .1;
            let fetched = engine_tokenizer::fetch(engine, timeout)
                .await
                .map_err(|reason| format!("no tokenizer for this gRPC worker: {reason}"))?;
            match fetched {
                Fetched::Archive(archive) => {
                    tracing::info!(
                        worker = %spec.url.normalized,
                        sha256 = %archive.sha256,
                        bytes = archive.bytes.len(),
                        "the engine sent its tokenizer"
                    );
                    let template = chat_template(spec, flags);
                    control.grpc.streamed_language(archive, template).await?
                }
                Fetched::NotOffered => {
                    return Err("no tokenizer for this gRPC worker, and the engine does \
                         not stream its own: give it a tokenizer_path or model_path \
                         label, start the gateway with --model-path or --tokenizer-path, \
                         or register a tokenizer named after the model through \
                         /v1/tokenizers"
                        .to_owned())
                }
            }
        }
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
    let runtime = match service {
        Service::Sglang => RuntimeType::Sglang,
        Service::Vllm => RuntimeType::Vllm,
        Service::Trtllm => RuntimeType::Trtllm,
        Service::Tokenspeed => RuntimeType::Tokenspeed,
        Service::Mlx => RuntimeType::Mlx,
    };
    let parsers = parsers(spec, flags, served.as_deref())?;
    let kv = match spec.worker_type {
        WorkerType::Prefill | WorkerType::Decode => {
            let engine = &engines
                .iter()
                .find(|(s, _)| *s == service)
                .ok_or("detected service not among the candidates")?
                .1;
            kv_facts(engine, &spec.url.normalized, timeout).await
        }
        _ => KvFacts::default(),
    };
    Ok(Discovered {
        kv,
        runtime,
        models: served.into_iter().collect(),
        labels,
        http2: true,
        language: Some(LanguageRef(language)),
        parsers: Some(ParsersRef(Arc::new(parsers))),
        zmq: None,
    })
}

/// The worker's output parsers: its model card's `tool_parser` / `reasoning_parser`, else
/// its labels', else `--tool-call-parser` / `--reasoning-parser`, else what its model's
/// name suggests. An unknown name fails registration (spec 1).
pub(super) fn parsers(
    spec: &WorkerSpec,
    flags: &LanguageSettings,
    served: Option<&str>,
) -> Result<Choice, String> {
    let card = spec.models.first();
    let tool = named(
        card.and_then(|c| c.tool_parser.as_ref()),
        spec.labels.get("tool_parser"),
        flags.tool_call_parser.as_ref(),
    );
    let reasoning = named(
        card.and_then(|c| c.reasoning_parser.as_ref()),
        spec.labels.get("reasoning_parser"),
        flags.reasoning_parser.as_ref(),
    );
    let model = card.map(|c| c.id.as_str()).or(served).unwrap_or_default();
    Choice::resolve(tool, reasoning, model)
}

/// The first of a card's, a label's and a flag's value that is set and not empty.
fn named<'a>(
    card: Option<&'a String>,
    label: Option<&'a String>,
    flag: Option<&'a String>,
) -> Option<&'a str> {
    [card, label, flag]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .find(|name| !name.is_empty())
}

/// `GetModelInfo` of each candidate service in turn, the round repeated every
/// `--worker-startup-check-interval` until one answers; a service answering UNIMPLEMENTED
/// is not the engine's and the next is tried.
async fn wait_for_model_info(
    control: &Control,
    engines: &[(Service, Engine)],
    spec: &WorkerSpec,
    timeout: Duration,
) -> Result<(Service, ModelInfo), String> {
    let settings = &control.settings;
    let deadline = Instant::now() + settings.startup_timeout;
    loop {
        match ask_model_info(engines, timeout).await {
            Ok(found) => return Ok(found),
            Err(None) => {
                let tried: Vec<&str> = engines.iter().map(|(s, _)| s.runtime()).collect();
                return Err(format!(
                    "the engine serves none of the gRPC services this build speaks (tried {}; \
                     each answered UNIMPLEMENTED)",
                    tried.join(", ")
                ));
            }
            Err(Some(err)) => {
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

/// One round of detection: the first service that answers `GetModelInfo`; `Err(None)`
/// when every one answered UNIMPLEMENTED, `Err(Some(_))` when the engine could not be
/// asked (it may still be starting).
async fn ask_model_info(
    engines: &[(Service, Engine)],
    timeout: Duration,
) -> Result<(Service, ModelInfo), Option<grpc::CallError>> {
    for (service, engine) in engines {
        match engine.model_info(timeout).await {
            Ok(info) => return Ok((*service, info)),
            Err(err) if err.is_unimplemented() => continue,
            Err(err) => return Err(Some(err)),
        }
    }
    Err(None)
}

/// One health probe: `HealthCheck` answered healthy within the probe timeout.
pub async fn probe(control: &Control, worker: &Worker) -> bool {
    let Some(service) = worker.runtime.grpc_service() else {
        return false;
    };
    match control.grpc.engine(service, &worker.transport) {
        Ok(engine) => engine.health(worker.health.timeout).await.unwrap_or(false),
        Err(_) => false,
    }
}

/// A prefill or decode engine's KV-transfer configuration; an engine that cannot say
/// (an older servicer without the RPC, a failed call) reports nothing, and the spec's
/// values stand.
async fn kv_facts(engine: &Engine, url: &str, timeout: Duration) -> KvFacts {
    match engine.kv_facts(timeout).await {
        Ok(facts) => facts.unwrap_or_default(),
        Err(err) => {
            tracing::warn!(worker = %url, error = %err, "the engine did not report its KV-transfer configuration");
            KvFacts::default()
        }
    }
}

/// Spec 1: when a gRPC prefill or decode worker recovers from `failed` or `not_ready`, its
/// KV engine id is read again (an engine restarted with a new one pairs under it); the
/// worker version carrying the engine's value, when it changed.
pub async fn reread_kv_engine_id(control: &Control, worker: &Worker) -> Option<Worker> {
    if !matches!(worker.worker_type, WorkerType::Prefill | WorkerType::Decode) {
        return None;
    }
    let engine = control
        .grpc
        .engine(worker.runtime.grpc_service()?, &worker.transport)
        .ok()?;
    let reported = kv_facts(&engine, &worker.url, worker.health.timeout)
        .await
        .engine_id?;
    (worker.spec.kv_engine_id.as_ref() != Some(&reported))
        .then(|| worker.with_kv_engine_id(reported))
}

/// The name a worker's tokenizer source is looked up by in the tokenizer registry: its
/// card's or labels' `tokenizer_path`, else `--tokenizer-path` unless a `model_path` label
/// comes first (the order of [`sources`]).
pub(super) fn registered_name<'a>(
    spec: &'a WorkerSpec,
    flags: &'a LanguageSettings,
) -> Option<&'a str> {
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
pub(super) fn sources(
    spec: &WorkerSpec,
    info: &ModelInfo,
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
    Some(Sources {
        tokenizer,
        chat_template: chat_template(spec, flags),
    })
}

/// The chat template a worker names (its model card's), else `--chat-template`.
fn chat_template(spec: &WorkerSpec, flags: &LanguageSettings) -> Option<PathBuf> {
    spec.models
        .first()
        .and_then(|c| c.chat_template.clone())
        .map(PathBuf::from)
        .or_else(|| flags.chat_template.clone())
}
