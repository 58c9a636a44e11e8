//! What registration learns from an HTTP engine: which runtime it is, which models it serves,
//! and a few facts it reports about itself (spec 1, "Worker spec": `runtime_type`, `url`).
//!
//! Identification relies on what real engines answer, in this order:
//!
//! 1. `GET /v1/models`: the model list (`data[].id`) and `owned_by`, which every engine
//!    fills with its own name by default — `sglang`, `vllm`, `tensorrt_llm`, llama.cpp's
//!    `llamacpp`. This is the cheap, decisive signal.
//! 2. `GET /server_info` (older SGLang: `/get_server_info`): SGLang answers its server
//!    arguments (`model_path`, `tp_size`, `dp_size`, …); vLLM's development-mode route
//!    answers `{vllm_config}`; TensorRT-LLM answers `{disaggregated_params}`.
//! 3. `GET /version`: `{version}` — vLLM's own route (SGLang, which may also have it, was
//!    recognised by step 2 already).
//!
//! An OpenAI-compatible server that none of this identifies is `generic`, not a failure,
//! and a call that fails only costs what it would have told.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use http::{HeaderValue, Method};
use serde_json::Value;

use super::calls::{call_url, CallError, CallPool};
use crate::fleet::spec::runtime_from_name;
use crate::fleet::{Discovered, RuntimeType, Transport, WorkerUrl};

/// Domains of third-party inference APIs. A worker URL on one of them (or a subdomain)
/// registers as `external` without being asked anything: these APIs have no `/health`,
/// `/server_info` or `/version`, and probing them would only spend the caller's quota.
const EXTERNAL_PROVIDER_DOMAINS: &[&str] = &[
    "api.openai.com",
    "openai.azure.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    "api.x.ai",
    "api.groq.com",
    "api.mistral.ai",
    "api.deepseek.com",
    "api.together.xyz",
    "api.together.ai",
    "openrouter.ai",
    "api.fireworks.ai",
    "api.cohere.com",
    "api.cohere.ai",
    "api.perplexity.ai",
    "api.cerebras.ai",
    "api.deepinfra.com",
    "api.moonshot.ai",
    "dashscope.aliyuncs.com",
];

/// Whether the URL points at a recognised external provider: an HTTP(S) URL whose host
/// is one of [`EXTERNAL_PROVIDER_DOMAINS`] or a subdomain of one, compared
/// case-insensitively (a trailing root dot is ignored).
pub fn is_external_provider(url: &WorkerUrl) -> bool {
    EXTERNAL_PROVIDER_DOMAINS
        .iter()
        .any(|domain| url.host_within(domain))
}

/// Learns what it can about the engine at `url`, presenting `bearer` (`Bearer <key>`) on
/// every call.
///
/// - `known` is `External`, or `Unspecified` on an external provider's host: no calls at
///   all; the result says `External`.
/// - `known` is another runtime: identification is skipped (an explicit value wins), but
///   the model list is still read.
/// - `known` is `Unspecified`: the engine is identified as described in the module docs;
///   anything unidentified, unreachable included, is `Generic`.
/// - A gRPC or ZMQ URL: nothing is learnt over HTTP; `known` is returned as is.
///
/// Each call is bounded by `timeout`, and once the engine proved unreachable (connect
/// failure or timeout) no further call is made, so a dead worker costs one timeout, not
/// one per probe. An SGLang engine is also asked for its server information, whose
/// `served_model_name` and `model_path` become labels.
pub async fn detect(
    client: &CallPool,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    known: RuntimeType,
    timeout: Duration,
) -> Discovered {
    let external = known == RuntimeType::External
        || (known == RuntimeType::Unspecified && is_external_provider(url));
    if external {
        return Discovered {
            runtime: RuntimeType::External,
            ..Discovered::default()
        };
    }
    if !matches!(url.transport, Transport::Http { .. }) {
        return Discovered {
            runtime: known,
            ..Discovered::default()
        };
    }
    let mut engine = Engine::new(client, url, bearer, timeout);
    let models = engine.get_json("/v1/models").await;
    let mut server_info = None;
    let runtime = match known {
        RuntimeType::Unspecified => identify(&mut engine, models.as_ref(), &mut server_info).await,
        explicit => explicit,
    };
    if runtime == RuntimeType::Sglang && server_info.is_none() {
        server_info = engine.server_info().await;
    }
    Discovered {
        runtime,
        models: models.as_ref().map(model_ids).unwrap_or_default(),
        labels: server_info.as_ref().map(info_labels).unwrap_or_default(),
        http2: false,
        ..Discovered::default()
    }
}

/// The engine's data-parallel size as its `/server_info` (or `/get_server_info`) states
/// it, for `--dp-aware` registration; `None` when it does not answer or states none. The
/// calls carry the worker's key and are bounded by `timeout` and the call client's body
/// cap.
pub async fn server_dp_size(
    client: &CallPool,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    timeout: Duration,
) -> Option<u64> {
    let mut engine = Engine::new(client, url, bearer, timeout);
    let info = engine.server_info().await?;
    crate::fleet::dp::dp_size_of_server_info(&info)
}

/// Steps 1 to 3 of the module docs, stopping at the first that names the runtime. The
/// server information fetched on the way is left in `server_info` for the labels.
async fn identify(
    engine: &mut Engine<'_>,
    models: Option<&Value>,
    server_info: &mut Option<Value>,
) -> RuntimeType {
    if let Some(runtime) = models.and_then(runtime_from_models) {
        return runtime;
    }
    *server_info = engine.server_info().await;
    if let Some(runtime) = server_info.as_ref().and_then(runtime_from_server_info) {
        return runtime;
    }
    let version = engine.get_json("/version").await;
    version
        .as_ref()
        .and_then(runtime_from_version)
        .unwrap_or(RuntimeType::Generic)
}

/// One engine under detection, remembering whether it still answers.
struct Engine<'a> {
    client: &'a CallPool,
    url: &'a WorkerUrl,
    bearer: Option<&'a HeaderValue>,
    timeout: Duration,
    reachable: bool,
}

impl<'a> Engine<'a> {
    fn new(
        client: &'a CallPool,
        url: &'a WorkerUrl,
        bearer: Option<&'a HeaderValue>,
        timeout: Duration,
    ) -> Engine<'a> {
        Engine {
            client,
            url,
            bearer,
            timeout,
            reachable: true,
        }
    }

    /// `GET path` parsed as JSON; `None` for any failure (non-2xx, not JSON, no answer).
    /// A connect failure or timeout marks the engine unreachable, which skips later calls.
    async fn get_json(&mut self, path: &str) -> Option<Value> {
        if !self.reachable {
            return None;
        }
        let reply = call_url(
            self.client,
            self.url,
            self.bearer,
            Method::GET,
            path,
            None,
            self.timeout,
        )
        .await;
        match reply {
            Ok(reply) if reply.status.is_success() => {
                let parsed = serde_json::from_slice(&reply.body).ok();
                if parsed.is_none() {
                    tracing::debug!(url = %self.url.normalized, path, "detection: reply is not JSON");
                }
                parsed
            }
            Ok(reply) => {
                tracing::debug!(url = %self.url.normalized, path, status = reply.status.as_u16(), "detection: no answer");
                None
            }
            Err(err) => {
                if matches!(
                    err,
                    CallError::Connect(_) | CallError::Timeout | CallError::NotHttp
                ) {
                    self.reachable = false;
                }
                tracing::debug!(url = %self.url.normalized, path, error = %err, "detection: call failed");
                None
            }
        }
    }

    /// `/server_info`, or `/get_server_info` on SGLang versions that only have the older
    /// name.
    async fn server_info(&mut self) -> Option<Value> {
        match self.get_json("/server_info").await {
            Some(info) => Some(info),
            None => self.get_json("/get_server_info").await,
        }
    }
}

/// Most model IDs kept from one `/v1/models` reply: an engine lists one, a provider tens
/// to a few hundred; the bound keeps one registration from growing the registry without
/// limit.
pub const MAX_LISTED_MODELS: usize = 4096;

/// The model IDs of a `/v1/models` reply (`data[].id`, the shape of OpenAI's list and of
/// Anthropic's alike), in order, without repeats, at most [`MAX_LISTED_MODELS`].
pub fn model_ids(reply: &Value) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let cards = reply.get("data").and_then(Value::as_array);
    for id in cards
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("id")?.as_str())
    {
        if ids.len() >= MAX_LISTED_MODELS {
            break;
        }
        if !id.is_empty() && seen.insert(id) {
            ids.push(id.to_owned());
        }
    }
    ids
}

/// The runtime a `/v1/models` reply names in `owned_by` (the first card that names one).
fn runtime_from_models(reply: &Value) -> Option<RuntimeType> {
    reply
        .get("data")?
        .as_array()?
        .iter()
        .filter_map(|card| card.get("owned_by")?.as_str())
        .find_map(runtime_from_owner)
}

/// An engine's name as it writes it into `owned_by`: the runtime names the API accepts
/// (and the spec's tokens), TensorRT-LLM's `tensorrt_llm`, and the MLX servers' `mlx…`
/// spellings (`mlx`, `mlx-lm`, `mlx-vlm`). Anything else (llama.cpp's `llamacpp`, a
/// provider's organisation name) names no runtime.
fn runtime_from_owner(owner: &str) -> Option<RuntimeType> {
    let owner = owner.trim().to_ascii_lowercase();
    match owner.as_str() {
        "tensorrt_llm" | "tensorrt" | "trt-llm" | "trt_llm" => Some(RuntimeType::Trtllm),
        name if name.starts_with("mlx") => Some(RuntimeType::Mlx),
        name => runtime_from_name(name).filter(|runtime| {
            matches!(
                runtime,
                RuntimeType::Sglang
                    | RuntimeType::Vllm
                    | RuntimeType::Trtllm
                    | RuntimeType::Mlx
                    | RuntimeType::Tokenspeed
            )
        }),
    }
}

/// Fields of SGLang's server arguments that, next to `model_path`, mark a `/server_info`
/// reply as SGLang's.
const SGLANG_SERVER_ARGS: &[&str] = &[
    "tp_size",
    "dp_size",
    "max_total_num_tokens",
    "max_running_requests",
    "disaggregation_mode",
    "internal_states",
];

/// The runtime a `/server_info` reply's shape belongs to.
fn runtime_from_server_info(reply: &Value) -> Option<RuntimeType> {
    let info = reply.as_object()?;
    if info.contains_key("vllm_config") {
        Some(RuntimeType::Vllm)
    } else if info.contains_key("model_path")
        && SGLANG_SERVER_ARGS.iter().any(|k| info.contains_key(*k))
    {
        Some(RuntimeType::Sglang)
    } else if info.contains_key("disaggregated_params") {
        Some(RuntimeType::Trtllm)
    } else {
        None
    }
}

/// A `/version` reply `{"version": "<string>"}` is vLLM's (engines that also answer it are
/// recognised earlier, by `owned_by` or `/server_info`).
fn runtime_from_version(reply: &Value) -> Option<RuntimeType> {
    reply.get("version")?.as_str().map(|_| RuntimeType::Vllm)
}

/// Labels from an engine's server information: only the model names, which name the
/// worker's model when the spec gives none.
fn info_labels(info: &Value) -> BTreeMap<String, String> {
    ["served_model_name", "model_path"]
        .iter()
        .filter_map(|key| {
            let value = info.get(*key)?.as_str()?.trim();
            (!value.is_empty()).then(|| ((*key).to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use http::header::AUTHORIZATION;
    use http::HeaderMap;
    use serde_json::json;

    use super::*;
    use crate::control::calls::tests::plain_pool;
    use crate::control::calls::tests::{bearer, dead_url, serve};
    use crate::fleet::parse_worker_url;

    fn url(raw: &str) -> WorkerUrl {
        parse_worker_url(raw).unwrap()
    }

    const TIMEOUT: Duration = Duration::from_secs(2);

    #[test]
    fn external_providers_by_host_and_subdomain() {
        for raw in [
            "https://api.openai.com",
            "https://API.OpenAI.com/v1",
            "https://api.anthropic.com.",
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "https://api.x.ai",
            "https://api.groq.com/openai",
            "https://api.mistral.ai",
            "https://api.deepseek.com",
            "https://api.together.xyz",
            "https://openrouter.ai/api",
            "https://api.fireworks.ai/inference",
            "https://eu.api.openai.com",
            "https://my-resource.openai.azure.com",
            "http://api.openai.com:8080",
        ] {
            assert!(is_external_provider(&url(raw)), "{raw}");
        }
        for raw in [
            "http://127.0.0.1:8000",
            "https://notapi.openai.com.evil.example",
            "https://xapi.openai.com",
            "https://api.openai.co",
            "https://openai.com",
            "https://myopenrouter.ai",
            "grpc://api.openai.com:443",
            "ipc:///tmp/api.openai.com",
        ] {
            assert!(!is_external_provider(&url(raw)), "{raw}");
        }
    }

    #[test]
    fn owned_by_names_the_engine() {
        let cases = [
            ("sglang", Some(RuntimeType::Sglang)),
            ("vllm", Some(RuntimeType::Vllm)),
            ("VLLM ", Some(RuntimeType::Vllm)),
            ("tensorrt_llm", Some(RuntimeType::Trtllm)),
            ("tensorrt-llm", Some(RuntimeType::Trtllm)),
            ("trtllm", Some(RuntimeType::Trtllm)),
            ("mlx-vlm", Some(RuntimeType::Mlx)),
            ("mlx", Some(RuntimeType::Mlx)),
            ("tokenspeed", Some(RuntimeType::Tokenspeed)),
            ("rt_a", Some(RuntimeType::Sglang)),
            ("rt_e", Some(RuntimeType::Tokenspeed)),
            ("llamacpp", None),
            ("openai", None),
            ("system", None),
            ("generic", None),
            ("external", None),
            ("", None),
        ];
        for (owner, expected) in cases {
            assert_eq!(runtime_from_owner(owner), expected, "{owner:?}");
        }
    }

    #[test]
    fn models_replies_of_real_engines() {
        // SGLang: ModelCard{id, object, created, owned_by: "sglang", root, max_model_len}.
        let sglang = json!({"object": "list", "data": [{"id": "qwen/qwen2.5-0.5b-instruct",
            "object": "model", "created": 1, "owned_by": "sglang",
            "root": "qwen/qwen2.5-0.5b-instruct", "max_model_len": 32768}]});
        assert_eq!(runtime_from_models(&sglang), Some(RuntimeType::Sglang));
        assert_eq!(model_ids(&sglang), ["qwen/qwen2.5-0.5b-instruct"]);
        // vLLM: owned_by "vllm"; LoRA adapters are further cards with a parent.
        let vllm = json!({"object": "list", "data": [
            {"id": "served", "owned_by": "vllm", "root": "/models/llama", "parent": null},
            {"id": "lora-a", "owned_by": "vllm", "root": "/adapters/a", "parent": "served"},
            {"id": "served", "owned_by": "vllm"}]});
        assert_eq!(runtime_from_models(&vllm), Some(RuntimeType::Vllm));
        assert_eq!(
            model_ids(&vllm),
            ["served", "lora-a"],
            "repeats are dropped"
        );
        // llama.cpp: owned_by "llamacpp" names no runtime, but the models count.
        let llamacpp =
            json!({"object": "list", "data": [{"id": "gemma.gguf", "owned_by": "llamacpp"}]});
        assert_eq!(runtime_from_models(&llamacpp), None);
        assert_eq!(model_ids(&llamacpp), ["gemma.gguf"]);
        // mlx_lm.server omits owned_by altogether.
        let mlx = json!({"object": "list", "data": [{"id": "mlx-community/x", "object": "model"}]});
        assert_eq!(runtime_from_models(&mlx), None);
        // Odd shapes yield nothing rather than failing.
        for odd in [
            json!({}),
            json!({"data": {}}),
            json!([1]),
            json!({"data": [{"id": 3}]}),
        ] {
            assert_eq!(runtime_from_models(&odd), None);
            assert!(model_ids(&odd).is_empty());
        }
    }

    #[test]
    fn server_info_shapes() {
        let sglang = json!({"model_path": "/m", "served_model_name": "m", "tp_size": 1,
            "dp_size": 2, "version": "0.5.0", "internal_states": [{}]});
        assert_eq!(runtime_from_server_info(&sglang), Some(RuntimeType::Sglang));
        let vllm_dev = json!({"vllm_config": "model='x', ..."});
        assert_eq!(runtime_from_server_info(&vllm_dev), Some(RuntimeType::Vllm));
        let trtllm = json!({"disaggregated_params": null});
        assert_eq!(runtime_from_server_info(&trtllm), Some(RuntimeType::Trtllm));
        for other in [
            json!({"model_path": "/m"}),
            json!({"status": "ok"}),
            json!("x"),
        ] {
            assert_eq!(runtime_from_server_info(&other), None, "{other}");
        }
    }

    #[test]
    fn version_replies() {
        assert_eq!(
            runtime_from_version(&json!({"version": "0.9.2"})),
            Some(RuntimeType::Vllm)
        );
        assert_eq!(runtime_from_version(&json!({"version": 1})), None);
        assert_eq!(runtime_from_version(&json!({"build": "x"})), None);
    }

    #[test]
    fn labels_keep_only_model_names() {
        let info = json!({"model_path": "/models/llama", "served_model_name": "llama",
            "tokenizer_path": "/t", "tp_size": 8});
        let labels = info_labels(&info);
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["served_model_name"], "llama");
        assert_eq!(labels["model_path"], "/models/llama");
        assert!(info_labels(&json!({"model_path": " ", "served_model_name": null})).is_empty());
    }

    /// Canned replies of one engine flavour, per path; `None` is a 404.
    type Routes = fn(&str) -> Option<Value>;

    fn sglang_routes(path: &str) -> Option<Value> {
        match path {
            "/v1/models" => {
                Some(json!({"object": "list", "data": [{"id": "qwen", "owned_by": "sglang"}]}))
            }
            "/server_info" | "/get_server_info" => Some(json!({"model_path": "/models/qwen",
                "served_model_name": "qwen", "tp_size": 1, "dp_size": 1, "version": "0.5.0"})),
            "/version" => Some(json!({"version": "0.5.0"})),
            _ => None,
        }
    }

    fn vllm_routes(path: &str) -> Option<Value> {
        match path {
            "/v1/models" => Some(json!({"object": "list", "data": [
                {"id": "llama", "owned_by": "vllm", "max_model_len": 4096}]})),
            "/version" => Some(json!({"version": "0.9.0"})),
            _ => None,
        }
    }

    fn llamacpp_routes(path: &str) -> Option<Value> {
        match path {
            "/v1/models" => Some(
                json!({"object": "list", "data": [{"id": "gemma.gguf", "owned_by": "llamacpp"}]}),
            ),
            "/props" => Some(json!({})),
            _ => None,
        }
    }

    /// An engine answering `routes`, demanding `Bearer <key>` on every path when `key` is set.
    async fn engine(
        routes: Routes,
        key: Option<&'static str>,
    ) -> (
        WorkerUrl,
        std::sync::Arc<std::sync::Mutex<Vec<super::super::calls::tests::Seen>>>,
    ) {
        let (base, seen) = serve(move |_, path, headers: &HeaderMap| {
            if let Some(key) = key {
                let expected = format!("Bearer {key}");
                if headers
                    .get(AUTHORIZATION)
                    .is_none_or(|v| v.as_bytes() != expected.as_bytes())
                {
                    return (401, br#"{"error":"unauthorized"}"#.to_vec());
                }
            }
            match routes(path) {
                Some(body) => (200, body.to_string().into_bytes()),
                None => (404, b"Not Found".to_vec()),
            }
        })
        .await;
        (url(&base), seen)
    }

    fn paths(seen: &std::sync::Mutex<Vec<super::super::calls::tests::Seen>>) -> Vec<String> {
        seen.lock()
            .unwrap()
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }

    #[tokio::test]
    async fn detects_sglang_with_models_and_labels() {
        let (url, seen) = engine(sglang_routes, None).await;
        let found = detect(&plain_pool(), &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Sglang);
        assert_eq!(found.models, ["qwen"]);
        assert_eq!(found.labels["served_model_name"], "qwen");
        assert_eq!(found.labels["model_path"], "/models/qwen");
        assert_eq!(paths(&seen), ["/v1/models", "/server_info"]);
    }

    #[tokio::test]
    async fn detects_vllm_and_llamacpp_as_generic() {
        let client = plain_pool();
        let (url, seen) = engine(vllm_routes, None).await;
        let found = detect(&client, &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(
            (found.runtime, found.models.as_slice()),
            (RuntimeType::Vllm, &["llama".to_owned()][..])
        );
        assert!(found.labels.is_empty());
        assert_eq!(paths(&seen), ["/v1/models"], "owned_by settles it");

        let (url, seen) = engine(llamacpp_routes, None).await;
        let found = detect(&client, &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Generic);
        assert_eq!(found.models, ["gemma.gguf"]);
        assert_eq!(
            paths(&seen),
            ["/v1/models", "/server_info", "/get_server_info", "/version"]
        );
    }

    #[tokio::test]
    async fn falls_back_to_server_info_and_version_when_owned_by_is_unknown() {
        fn sglang_renamed(path: &str) -> Option<Value> {
            match path {
                "/v1/models" => Some(json!({"data": [{"id": "qwen", "owned_by": "acme"}]})),
                "/server_info" => None,
                other => sglang_routes(other),
            }
        }
        fn vllm_renamed(path: &str) -> Option<Value> {
            match path {
                "/v1/models" => Some(json!({"data": [{"id": "llama", "owned_by": "acme"}]})),
                other => vllm_routes(other),
            }
        }
        let client = plain_pool();
        let (url, seen) = engine(sglang_renamed, None).await;
        let found = detect(&client, &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(
            found.runtime,
            RuntimeType::Sglang,
            "older SGLang: /get_server_info"
        );
        assert_eq!(found.labels["model_path"], "/models/qwen");
        assert_eq!(
            paths(&seen),
            ["/v1/models", "/server_info", "/get_server_info"]
        );

        let (url, _) = engine(vllm_renamed, None).await;
        let found = detect(&client, &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Vllm);
        assert_eq!(found.models, ["llama"]);
    }

    #[tokio::test]
    async fn presents_the_worker_key_on_every_call() {
        let client = plain_pool();
        let (url, seen) = engine(sglang_routes, Some("sk-engine")).await;
        let key = bearer("sk-engine");
        let found = detect(&client, &url, Some(&key), RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Sglang);
        assert_eq!(found.models, ["qwen"]);
        let sent: Vec<_> = seen.lock().unwrap().drain(..).collect();
        assert_eq!(sent.len(), 2, "/v1/models, /server_info");
        assert!(sent
            .iter()
            .all(|s| s.headers[AUTHORIZATION] == "Bearer sk-engine"));

        // Without the key every call is refused: nothing is learnt, and that is no failure.
        let found = detect(&client, &url, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Generic);
        assert!(found.models.is_empty());
    }

    #[tokio::test]
    async fn an_explicit_runtime_skips_identification_but_reads_models() {
        let (url, seen) = engine(vllm_routes, None).await;
        let found = detect(&plain_pool(), &url, None, RuntimeType::Trtllm, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Trtllm);
        assert_eq!(found.models, ["llama"]);
        assert_eq!(paths(&seen), ["/v1/models"]);
    }

    #[tokio::test]
    async fn external_workers_are_never_called() {
        let client = plain_pool();
        let (local, seen) = engine(vllm_routes, None).await;
        let found = detect(&client, &local, None, RuntimeType::External, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::External);
        assert!(found.models.is_empty());
        assert!(paths(&seen).is_empty());
        // A provider host needs no network at all (the call would fail in a sandbox).
        let provider = url("https://api.openai.com");
        let found = detect(&client, &provider, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::External);
    }

    #[tokio::test]
    async fn a_dead_worker_is_generic_without_models() {
        let client = plain_pool();
        let dead = url(&dead_url().await);
        let key = bearer("sk");
        assert!(
            crate::control::calls::probe_health(&client, &dead, Some(&key), TIMEOUT)
                .await
                .is_err()
        );
        let found = detect(
            &client,
            &dead,
            Some(&key),
            RuntimeType::Unspecified,
            TIMEOUT,
        )
        .await;
        assert_eq!(
            found,
            Discovered {
                runtime: RuntimeType::Generic,
                ..Discovered::default()
            }
        );
        let found = detect(&client, &dead, None, RuntimeType::Sglang, TIMEOUT).await;
        assert_eq!(
            (found.runtime, found.models.len()),
            (RuntimeType::Sglang, 0)
        );
    }

    #[tokio::test]
    async fn non_http_urls_learn_nothing() {
        let client = plain_pool();
        let grpc = url("grpc://127.0.0.1:1");
        let found = detect(&client, &grpc, None, RuntimeType::Unspecified, TIMEOUT).await;
        assert_eq!(found, Discovered::default());
        let zmq = url("ipc:///tmp/engine.sock");
        let found = detect(&client, &zmq, None, RuntimeType::Vllm, TIMEOUT).await;
        assert_eq!(found.runtime, RuntimeType::Vllm);
    }
}
