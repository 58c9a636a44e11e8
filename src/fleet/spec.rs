//! The worker spec as the fleet keeps it: what a worker was registered with (its URL,
//! runtime, models, labels and per-worker overrides) and the partial update a PATCH
//! applies. Reading these from admin-API request bodies, with the 415/400/422 rules, is
//! `control::spec_body`'s job; the types here carry none of those rules, so the data path can
//! read them without it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{RuntimeType, Transport, WorkerType, WorkerUrl};
use crate::secret::Secret;

/// Default `priority` of a worker.
pub const DEFAULT_PRIORITY: i64 = 50;
/// Default `cost` of a worker.
pub const DEFAULT_COST: f64 = 1.0;

/// Labels that name the model when `models` is empty, in priority order.
const MODEL_ID_LABELS: [&str; 3] = ["served_model_name", "model_id", "model_path"];

/// A capability listed in a model card's `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelCapability {
    Chat,
    Completions,
    Responses,
    Embeddings,
    Rerank,
    Generate,
    Vision,
    Tools,
    Reasoning,
    ImageGen,
    Audio,
    Moderation,
}

impl ModelCapability {
    /// Every capability, in the order the spec lists them (also the order of the 422 hint).
    pub const ALL: [ModelCapability; 12] = [
        ModelCapability::Chat,
        ModelCapability::Completions,
        ModelCapability::Responses,
        ModelCapability::Embeddings,
        ModelCapability::Rerank,
        ModelCapability::Generate,
        ModelCapability::Vision,
        ModelCapability::Tools,
        ModelCapability::Reasoning,
        ModelCapability::ImageGen,
        ModelCapability::Audio,
        ModelCapability::Moderation,
    ];

    /// What a card without `model_type` serves: a plain text-generation model.
    pub const DEFAULT: [ModelCapability; 4] = [
        ModelCapability::Chat,
        ModelCapability::Completions,
        ModelCapability::Responses,
        ModelCapability::Tools,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ModelCapability::Chat => "chat",
            ModelCapability::Completions => "completions",
            ModelCapability::Responses => "responses",
            ModelCapability::Embeddings => "embeddings",
            ModelCapability::Rerank => "rerank",
            ModelCapability::Generate => "generate",
            ModelCapability::Vision => "vision",
            ModelCapability::Tools => "tools",
            ModelCapability::Reasoning => "reasoning",
            ModelCapability::ImageGen => "image_gen",
            ModelCapability::Audio => "audio",
            ModelCapability::Moderation => "moderation",
        }
    }

    pub fn from_name(name: &str) -> Option<ModelCapability> {
        ModelCapability::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
    }
}

/// Parses a runtime name as the API accepts it: the spec's neutral tokens (`rt_a`..`rt_e`)
/// and the real engine names are both valid, plus `tensorrt-llm` for `trtllm`. Exact,
/// lowercase match: anything else is an unknown enum value.
pub fn runtime_from_name(name: &str) -> Option<RuntimeType> {
    Some(match name {
        "sglang" | "rt_a" => RuntimeType::Sglang,
        "vllm" | "rt_b" => RuntimeType::Vllm,
        "trtllm" | "tensorrt-llm" | "rt_c" => RuntimeType::Trtllm,
        "mlx" | "rt_d" => RuntimeType::Mlx,
        "tokenspeed" | "rt_e" => RuntimeType::Tokenspeed,
        "generic" => RuntimeType::Generic,
        "external" => RuntimeType::External,
        "unspecified" => RuntimeType::Unspecified,
        _ => return None,
    })
}

/// Parses a `worker_type` value.
pub fn worker_type_from_name(name: &str) -> Option<WorkerType> {
    Some(match name {
        "regular" => WorkerType::Regular,
        "prefill" => WorkerType::Prefill,
        "decode" => WorkerType::Decode,
        "encode" => WorkerType::Encode,
        _ => return None,
    })
}

/// One entry of `models`.
///
/// The descriptive fields the gateway does not interpret (`display_name` .. `num_labels`)
/// are kept so the worker object can echo them back.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelCard {
    pub id: String,
    pub aliases: Vec<String>,
    pub model_type: Vec<ModelCapability>,
    pub context_length: Option<u64>,
    pub chat_template: Option<String>,
    pub tool_parser: Option<String>,
    pub reasoning_parser: Option<String>,
    pub display_name: Option<String>,
    pub hf_model_type: Option<String>,
    pub architectures: Option<Vec<String>>,
    pub provider: Option<String>,
    pub tokenizer_path: Option<String>,
    pub metadata: Option<Value>,
    pub id2label: Option<Value>,
    pub num_labels: Option<u64>,
}

impl ModelCard {
    /// The card as the worker object shows it: defaults filled, unset optionals omitted.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert("aliases".into(), self.aliases.clone().into());
        m.insert(
            "model_type".into(),
            self.model_type.iter().map(|c| c.as_str()).collect(),
        );
        put(&mut m, "context_length", self.context_length);
        put(&mut m, "chat_template", self.chat_template.clone());
        put(&mut m, "tool_parser", self.tool_parser.clone());
        put(&mut m, "reasoning_parser", self.reasoning_parser.clone());
        put(&mut m, "display_name", self.display_name.clone());
        put(&mut m, "hf_model_type", self.hf_model_type.clone());
        put(&mut m, "architectures", self.architectures.clone());
        put(&mut m, "provider", self.provider.clone());
        put(&mut m, "tokenizer_path", self.tokenizer_path.clone());
        put(&mut m, "metadata", self.metadata.clone());
        put(&mut m, "id2label", self.id2label.clone());
        put(&mut m, "num_labels", self.num_labels);
        Value::Object(m)
    }
}

/// Per-worker health overrides; `None` takes the gateway flag's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthOverrides {
    pub timeout_secs: Option<u64>,
    pub check_interval_secs: Option<u64>,
    pub success_threshold: Option<u64>,
    pub failure_threshold: Option<u64>,
    pub disable_health_check: Option<bool>,
    pub drain_settle_secs: Option<u64>,
}

impl HealthOverrides {
    /// Applies a PATCH's health block: fields it sets win, the others are kept.
    pub fn merge(&mut self, patch: &HealthOverrides) {
        fn over<T: Copy>(slot: &mut Option<T>, new: Option<T>) {
            if new.is_some() {
                *slot = new;
            }
        }
        over(&mut self.timeout_secs, patch.timeout_secs);
        over(&mut self.check_interval_secs, patch.check_interval_secs);
        over(&mut self.success_threshold, patch.success_threshold);
        over(&mut self.failure_threshold, patch.failure_threshold);
        over(&mut self.disable_health_check, patch.disable_health_check);
        over(&mut self.drain_settle_secs, patch.drain_settle_secs);
    }
}

/// Per-worker overload thresholds. Either field turns overload protection on for the
/// worker. Ranges are checked by the registration job
/// (`control::spec_body::check_for_registration`), not at request time, because the spec
/// makes an out-of-range value fail the background job.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OverloadOverrides {
    pub waiting_requests: Option<u64>,
    pub token_usage: Option<f64>,
}

impl OverloadOverrides {
    /// Whether the block turns overload protection on (and is echoed).
    pub fn is_set(&self) -> bool {
        self.waiting_requests.is_some() || self.token_usage.is_some()
    }
}

/// HTTP client settings of one worker; `None` takes the gateway default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpPoolOverrides {
    pub http2: Option<bool>,
    pub pool_max_idle_per_host: Option<usize>,
    pub pool_idle_timeout_secs: Option<u64>,
    pub timeout_secs: Option<u64>,
    pub connect_timeout_secs: Option<u64>,
}

/// Circuit-breaker settings of one worker; `None` takes the gateway default. A status list,
/// when given, replaces the default set rather than extending it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResilienceOverrides {
    pub cb_failure_threshold: Option<u64>,
    pub cb_success_threshold: Option<u64>,
    pub cb_timeout_secs: Option<u64>,
    pub cb_window_secs: Option<u64>,
    pub retryable_status_codes: Option<Vec<u16>>,
    pub capacity_status_codes: Option<Vec<u16>>,
}

/// A validated worker spec with every default filled in.
///
/// `Debug` is safe to log: the key is a [`Secret`].
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    pub url: WorkerUrl,
    pub runtime_type: RuntimeType,
    pub worker_type: WorkerType,
    /// Key the gateway presents to the worker; write-only (never echoed). An empty string
    /// in the body means no key, since `Bearer ` with nothing after it is not a credential.
    pub api_key: Option<Secret>,
    pub models: Vec<ModelCard>,
    /// Labels as given, minus the KV labels moved into the fields below.
    pub labels: BTreeMap<String, String>,
    pub priority: i64,
    pub cost: f64,
    pub health: HealthOverrides,
    pub overload: OverloadOverrides,
    pub http_pool: HttpPoolOverrides,
    pub resilience: ResilienceOverrides,
    pub dp_size: Option<usize>,
    /// `None` (also for an empty string) means "derive from the `ipc://` path".
    pub zmq_handshake_address: Option<String>,
    pub bootstrap_port: Option<u16>,
    pub kv_connector: Option<String>,
    pub kv_role: Option<String>,
    pub kv_engine_id: Option<String>,
}

impl WorkerSpec {
    /// A spec with every default, as `--worker-urls` workers get (their key is added by the
    /// caller).
    pub fn new(url: WorkerUrl) -> WorkerSpec {
        WorkerSpec {
            url,
            runtime_type: RuntimeType::Unspecified,
            worker_type: WorkerType::Regular,
            api_key: None,
            models: Vec::new(),
            labels: BTreeMap::new(),
            priority: DEFAULT_PRIORITY,
            cost: DEFAULT_COST,
            health: HealthOverrides::default(),
            overload: OverloadOverrides::default(),
            http_pool: HttpPoolOverrides::default(),
            resilience: ResilienceOverrides::default(),
            dp_size: None,
            zmq_handshake_address: None,
            bootstrap_port: None,
            kv_connector: None,
            kv_role: None,
            kv_engine_id: None,
        }
    }

    /// The model ID the spec itself provides: the first card's ID, else the first non-empty
    /// label among `served_model_name`, `model_id`, `model_path`. `None` means the engine
    /// (or the gateway's `--model-path`) must supply it.
    pub fn model_id(&self) -> Option<&str> {
        if let Some(card) = self.models.first() {
            return Some(&card.id);
        }
        MODEL_ID_LABELS
            .iter()
            .filter_map(|k| self.labels.get(*k))
            .map(String::as_str)
            .find(|v| !v.is_empty())
    }

    /// The runtime registration will use without detection: ZMQ workers speak the vLLM
    /// engine-core protocol, so an unspecified runtime means vLLM there. Other transports
    /// keep the given value (`Unspecified` still means "detect").
    pub fn effective_runtime(&self) -> RuntimeType {
        match (&self.url.transport, self.runtime_type) {
            (Transport::Zmq { .. }, RuntimeType::Unspecified) => RuntimeType::Vllm,
            (_, runtime) => runtime,
        }
    }

    /// The spec fields as the worker object echoes them: never `api_key`; `health`,
    /// `http_pool` and `resilience` take effect but are not shown; `overload` only when it
    /// sets something; unset optional fields are omitted. Runtime names are the real ones.
    pub fn echo_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("url".into(), self.url.normalized.clone().into());
        m.insert("runtime_type".into(), self.runtime_type.as_str().into());
        m.insert("worker_type".into(), self.worker_type.as_str().into());
        m.insert(
            "models".into(),
            self.models.iter().map(ModelCard::to_json).collect(),
        );
        m.insert(
            "labels".into(),
            Value::Object(
                self.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                    .collect(),
            ),
        );
        m.insert("priority".into(), self.priority.into());
        m.insert("cost".into(), self.cost.into());
        if self.overload.is_set() {
            let mut o = Map::new();
            put(&mut o, "waiting_requests", self.overload.waiting_requests);
            put(&mut o, "token_usage", self.overload.token_usage);
            m.insert("overload".into(), Value::Object(o));
        }
        put(&mut m, "dp_size", self.dp_size);
        put(
            &mut m,
            "zmq_handshake_address",
            self.zmq_handshake_address.clone(),
        );
        put(&mut m, "bootstrap_port", self.bootstrap_port);
        put(&mut m, "kv_connector", self.kv_connector.clone());
        put(&mut m, "kv_role", self.kv_role.clone());
        put(&mut m, "kv_engine_id", self.kv_engine_id.clone());
        m
    }

    /// Applies a PATCH in place: priority and cost replace, labels merge (keys added or
    /// overwritten, none removed), the key rotates, health fields merge.
    pub fn apply_patch(&mut self, patch: WorkerPatch) {
        if let Some(p) = patch.priority {
            self.priority = p;
        }
        if let Some(c) = patch.cost {
            self.cost = c;
        }
        if let Some(labels) = patch.labels {
            self.labels.extend(labels);
        }
        if let Some(key) = patch.api_key {
            self.api_key = key;
        }
        if let Some(h) = &patch.health {
            self.health.merge(h);
        }
    }
}

/// The body of `PATCH /workers/{id}`. `None` keeps the current value; fields the PATCH
/// route ignores (overload, http_pool, resilience, models, url, ...) are not read at all,
/// so they cannot cause a 422 either.
#[derive(Clone, Debug, Default)]
pub struct WorkerPatch {
    pub priority: Option<i64>,
    pub cost: Option<f64>,
    /// Merged into the worker's labels as given.
    pub labels: Option<BTreeMap<String, String>>,
    /// `Some(None)` removes the key (body `"api_key": ""`); `Some(Some(k))` rotates it.
    pub api_key: Option<Option<Secret>>,
    pub health: Option<HealthOverrides>,
}

/// Inserts `value` under `key` when it is set.
fn put<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(v) = value {
        m.insert(key.into(), v.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_name_parses() {
        for c in ModelCapability::ALL {
            assert_eq!(ModelCapability::from_name(c.as_str()), Some(c));
        }
        assert_eq!(ModelCapability::from_name("Chat"), None);
    }
}
