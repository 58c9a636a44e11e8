//! The worker spec as the admin API receives it: the JSON body of `POST /workers` and
//! `PUT /workers/{id}`, the partial body of `PATCH /workers/{id}`, and the checks a
//! registration job makes before it talks to the worker.
//!
//! Parsing is pure (no I/O) so the control plane can answer 415/400/422 before it queues a
//! job, and so the same rules can be fuzzed. Fields are read one by one from the parsed
//! JSON object rather than through a derived `Deserialize`: that lets every 422 name the
//! offending field (`health.timeout_secs: invalid type ...`), keeps the `api_key` value out
//! of every message, and lets the URL rule answer 400 with the worker error code after all
//! type checks have passed. Leaf values still go through serde, so type rules are serde's.
//!
//! Rules shared by every field: unknown fields are ignored; JSON `null` means "not given"
//! (clients often serialise unset optionals as null) except for `url`, which is required;
//! a known field with a wrong type or an unknown enum value is a 422.

use std::fmt;

use http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::fleet::parse_worker_url;
use crate::fleet::spec::{
    runtime_from_name, worker_type_from_name, HealthOverrides, HttpPoolOverrides, ModelCapability,
    ModelCard, OverloadOverrides, ResilienceOverrides, WorkerPatch, WorkerSpec, DEFAULT_COST,
    DEFAULT_PRIORITY,
};
use crate::fleet::{RuntimeType, Transport, WorkerType};
use crate::secret::Secret;

/// Labels that are really spec fields; registration moves them out of `labels`.
const KV_LABELS: [&str; 3] = ["kv_connector", "kv_role", "kv_engine_id"];

/// Why a worker spec or patch body was refused at request time.
///
/// The first three are answered as plain text, like the body extractor of the reference
/// gateway; `BadRequest` is a worker-endpoint error answered as `{error, code}`. No message
/// ever contains the `api_key` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// The request did not say `Content-Type: application/json`.
    UnsupportedMediaType,
    /// The body is not syntactically valid JSON (or is empty).
    Malformed(String),
    /// Valid JSON that is not a valid spec: not an object, missing `url`, a field of the
    /// wrong type, an unknown enum value.
    Unprocessable(String),
    /// The spec is well-formed but the URL is unusable (`code: BAD_REQUEST`).
    BadRequest(String),
}

impl SpecError {
    pub fn status(&self) -> StatusCode {
        match self {
            SpecError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            SpecError::Malformed(_) | SpecError::BadRequest(_) => StatusCode::BAD_REQUEST,
            SpecError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// The worker error code for a `{error, code}` body; `None` means "answer plain text".
    pub fn code(&self) -> Option<&'static str> {
        match self {
            SpecError::BadRequest(_) => Some("BAD_REQUEST"),
            _ => None,
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::UnsupportedMediaType => {
                f.write_str("request body must be sent with Content-Type: application/json")
            }
            SpecError::Malformed(m) | SpecError::Unprocessable(m) | SpecError::BadRequest(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for SpecError {}

/// Parses the body of `POST /workers` or `PUT /workers/{id}`.
///
/// Order of checks: content type (415), JSON syntax (400), field types and enum values
/// (422), then the URL (400 `BAD_REQUEST`), so a body with several problems reports the
/// one the client would hit first with a strict JSON extractor.
pub fn parse_spec(content_type: Option<&[u8]>, body: &[u8]) -> Result<WorkerSpec, SpecError> {
    let mut f = parse_object(content_type, body)?;

    let raw_url = match f.obj.remove("url") {
        None | Some(Value::Null) => {
            return Err(SpecError::Unprocessable(
                "url: required field is missing".into(),
            ))
        }
        Some(Value::String(s)) => s,
        Some(_) => return Err(f.invalid("url", "expected a string")),
    };

    let runtime_type = f.named("runtime_type", runtime_from_name, RUNTIME_NAMES)?;
    let runtime_alias = f.named("runtime", runtime_from_name, RUNTIME_NAMES)?;
    let runtime_type = match (runtime_type, runtime_alias) {
        (Some(_), Some(_)) => {
            return Err(f.invalid(
                "runtime",
                "is an alias of runtime_type; give only one of them",
            ))
        }
        (a, b) => a.or(b).unwrap_or(RuntimeType::Unspecified),
    };
    let worker_type = f
        .named("worker_type", worker_type_from_name, WORKER_TYPE_NAMES)?
        .unwrap_or(WorkerType::Regular);
    let api_key = non_empty(f.secret("api_key")?).map(Secret::new);

    let models = match f.obj.remove("models") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(obj) => model_card(Fields {
                    obj,
                    prefix: format!("models[{i}]."),
                }),
                _ => Err(SpecError::Unprocessable(format!(
                    "models[{i}]: expected an object"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(f.invalid("models", "expected an array")),
    };

    let mut spec = WorkerSpec {
        runtime_type,
        worker_type,
        api_key,
        models,
        labels: f.value("labels")?.unwrap_or_default(),
        priority: f.value("priority")?.unwrap_or(DEFAULT_PRIORITY),
        cost: f.value("cost")?.unwrap_or(DEFAULT_COST),
        health: f.block("health", health)?.unwrap_or_default(),
        overload: f.block("overload", overload)?.unwrap_or_default(),
        http_pool: f.block("http_pool", http_pool)?.unwrap_or_default(),
        resilience: f.block("resilience", resilience)?.unwrap_or_default(),
        dp_size: f.value("dp_size")?,
        zmq_handshake_address: non_empty(f.value("zmq_handshake_address")?),
        bootstrap_port: f.value("bootstrap_port")?,
        kv_connector: non_empty(f.value("kv_connector")?),
        kv_role: non_empty(f.value("kv_role")?),
        kv_engine_id: non_empty(f.value("kv_engine_id")?),
        url: parse_worker_url(&raw_url).map_err(|e| SpecError::BadRequest(e.to_string()))?,
    };
    move_kv_labels(&mut spec);
    Ok(spec)
}

/// Parses the body of `PATCH /workers/{id}` with the same 415/400/422 rules as a spec.
pub fn parse_patch(content_type: Option<&[u8]>, body: &[u8]) -> Result<WorkerPatch, SpecError> {
    let mut f = parse_object(content_type, body)?;
    Ok(WorkerPatch {
        priority: f.value("priority")?,
        cost: f.value("cost")?,
        labels: f.value("labels")?,
        api_key: f
            .secret("api_key")?
            .map(|k| (!k.is_empty()).then(|| Secret::new(k))),
        health: f.block("health", health)?,
    })
}

/// Checks that the spec allows but registration must refuse. They run in the background
/// job (after the 202), so a failure removes the reserved worker instead of answering the
/// request. Checks that need gateway state (a model ID from `--model-path`, `--dp-aware`,
/// a handshake address bound by another worker, parser names) belong to the caller.
pub fn check_for_registration(spec: &WorkerSpec) -> Result<(), String> {
    if spec.overload.waiting_requests == Some(0) {
        return Err("overload.waiting_requests must be at least 1".into());
    }
    if let Some(t) = spec.overload.token_usage {
        // Written so that NaN fails too.
        if !(t > 0.0 && t <= 1.0) {
            return Err(format!(
                "overload.token_usage must be in (0.0, 1.0], got {t}"
            ));
        }
    }
    let is_zmq = matches!(spec.url.transport, Transport::Zmq { .. });
    if !is_zmq {
        if spec.zmq_handshake_address.is_some() {
            return Err("zmq_handshake_address is only valid for ipc:// (ZMQ) workers".into());
        }
        return Ok(());
    }
    let runtime = spec.effective_runtime();
    if !matches!(runtime, RuntimeType::Vllm | RuntimeType::Tokenspeed) {
        return Err(format!(
            "ZMQ workers must run vllm or tokenspeed, not {}",
            runtime.as_str()
        ));
    }
    if spec.worker_type != WorkerType::Regular {
        return Err(format!(
            "ZMQ workers must be regular workers, not {}",
            spec.worker_type.as_str()
        ));
    }
    if let Some(addr) = &spec.zmq_handshake_address {
        if !addr.starts_with("tcp://") {
            return Err("zmq_handshake_address must be a tcp:// address".into());
        }
    }
    Ok(())
}

const RUNTIME_NAMES: &str =
    "sglang, vllm, trtllm, mlx, tokenspeed (or rt_a..rt_e), generic, external, unspecified";
const WORKER_TYPE_NAMES: &str = "regular, prefill, decode, encode";

fn capability_names() -> String {
    ModelCapability::ALL
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks the content type, then parses the body as a JSON object.
fn parse_object(content_type: Option<&[u8]>, body: &[u8]) -> Result<Fields, SpecError> {
    if !content_type.is_some_and(is_json_content_type) {
        return Err(SpecError::UnsupportedMediaType);
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => SpecError::Unprocessable(e.to_string()),
        _ => SpecError::Malformed(format!("malformed JSON body: {e}")),
    })?;
    match value {
        Value::Object(obj) => Ok(Fields {
            obj,
            prefix: String::new(),
        }),
        _ => Err(SpecError::Unprocessable(
            "request body must be a JSON object".into(),
        )),
    }
}

/// `application/json`, any case, parameters such as `charset` allowed.
pub fn is_json_content_type(value: &[u8]) -> bool {
    let essence = value.split(|&b| b == b';').next().unwrap_or_default();
    essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
}

/// Registration moves the KV labels into the spec fields of the same name; a spec field
/// that is already set wins, and the label is dropped either way so it is not reported
/// twice.
fn move_kv_labels(spec: &mut WorkerSpec) {
    let slots = [
        &mut spec.kv_connector,
        &mut spec.kv_role,
        &mut spec.kv_engine_id,
    ];
    for (key, slot) in KV_LABELS.into_iter().zip(slots) {
        if let Some(value) = spec.labels.remove(key) {
            if slot.is_none() && !value.is_empty() {
                *slot = Some(value);
            }
        }
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// One entry of `models`.
fn model_card(mut f: Fields) -> Result<ModelCard, SpecError> {
    let id: String = f.required_string("id")?;
    if id.trim().is_empty() {
        return Err(f.invalid("id", "must not be empty"));
    }
    let model_type = match f.value::<Vec<String>>("model_type")? {
        None => ModelCapability::DEFAULT.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| {
                ModelCapability::from_name(n).ok_or_else(|| {
                    f.invalid(
                        "model_type",
                        &format!(
                            "unknown capability {n:?}, expected one of {}",
                            capability_names()
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(ModelCard {
        id,
        aliases: f.value("aliases")?.unwrap_or_default(),
        model_type,
        context_length: f.value("context_length")?,
        chat_template: f.value("chat_template")?,
        tool_parser: f.value("tool_parser")?,
        reasoning_parser: f.value("reasoning_parser")?,
        display_name: f.value("display_name")?,
        hf_model_type: f.value("hf_model_type")?,
        architectures: f.value("architectures")?,
        provider: f.value("provider")?,
        tokenizer_path: f.value("tokenizer_path")?,
        metadata: f.any("metadata"),
        id2label: f.any("id2label"),
        num_labels: f.value("num_labels")?,
    })
}

/// The `health` block.
fn health(mut f: Fields) -> Result<HealthOverrides, SpecError> {
    Ok(HealthOverrides {
        timeout_secs: f.value("timeout_secs")?,
        check_interval_secs: f.value("check_interval_secs")?,
        success_threshold: f.value("success_threshold")?,
        failure_threshold: f.value("failure_threshold")?,
        disable_health_check: f.value("disable_health_check")?,
        drain_settle_secs: f.value("drain_settle_secs")?,
    })
}

/// The `overload` block; its ranges are checked by [`check_for_registration`].
fn overload(mut f: Fields) -> Result<OverloadOverrides, SpecError> {
    Ok(OverloadOverrides {
        waiting_requests: f.value("waiting_requests")?,
        token_usage: f.value("token_usage")?,
    })
}

/// The `http_pool` block.
fn http_pool(mut f: Fields) -> Result<HttpPoolOverrides, SpecError> {
    Ok(HttpPoolOverrides {
        http2: f.value("http2")?,
        pool_max_idle_per_host: f.value("pool_max_idle_per_host")?,
        pool_idle_timeout_secs: f.value("pool_idle_timeout_secs")?,
        timeout_secs: f.value("timeout_secs")?,
        connect_timeout_secs: f.value("connect_timeout_secs")?,
    })
}

/// The `resilience` block.
fn resilience(mut f: Fields) -> Result<ResilienceOverrides, SpecError> {
    Ok(ResilienceOverrides {
        cb_failure_threshold: f.value("cb_failure_threshold")?,
        cb_success_threshold: f.value("cb_success_threshold")?,
        cb_timeout_secs: f.value("cb_timeout_secs")?,
        cb_window_secs: f.value("cb_window_secs")?,
        retryable_status_codes: f.value("retryable_status_codes")?,
        capacity_status_codes: f.value("capacity_status_codes")?,
    })
}

/// The remaining fields of one JSON object, with the path used to name them in errors.
/// Each reader removes the field it reads.
struct Fields {
    obj: Map<String, Value>,
    /// `""` at the top level, `"health."`, `"models[0]."` inside.
    prefix: String,
}

impl Fields {
    fn invalid(&self, key: &str, problem: &str) -> SpecError {
        SpecError::Unprocessable(format!("{}{key}: {problem}", self.prefix))
    }

    /// An optional field of any serde type; `null` counts as absent.
    fn value<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, SpecError> {
        match self.obj.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| self.invalid(key, &e.to_string())),
        }
    }

    /// A required string field.
    fn required_string(&mut self, key: &str) -> Result<String, SpecError> {
        self.value(key)?
            .ok_or_else(|| self.invalid(key, "required field is missing"))
    }

    /// An optional field kept as raw JSON for echoing.
    fn any(&mut self, key: &str) -> Option<Value> {
        self.obj.remove(key).filter(|v| !v.is_null())
    }

    /// An optional string naming an enum value.
    fn named<T>(
        &mut self,
        key: &str,
        parse: fn(&str) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>, SpecError> {
        let Some(name) = self.value::<String>(key)? else {
            return Ok(None);
        };
        parse(&name).map(Some).ok_or_else(|| {
            self.invalid(
                key,
                &format!("unknown value {name:?}, expected one of {expected}"),
            )
        })
    }

    /// A credential: the error never shows the value, whatever its type.
    fn secret(&mut self, key: &str) -> Result<Option<String>, SpecError> {
        match self.obj.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(key, "expected a string")),
        }
    }

    /// A nested object block read by `read`; `null` counts as absent.
    fn block<T>(
        &mut self,
        key: &str,
        read: fn(Fields) -> Result<T, SpecError>,
    ) -> Result<Option<T>, SpecError> {
        match self.obj.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(obj)) => read(Fields {
                obj,
                prefix: format!("{}{key}.", self.prefix),
            })
            .map(Some),
            Some(_) => Err(self.invalid(key, "expected an object")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use serde_json::json;

    const JSON: Option<&[u8]> = Some(b"application/json");

    fn spec(body: Value) -> Result<WorkerSpec, SpecError> {
        parse_spec(JSON, body.to_string().as_bytes())
    }

    fn ok(body: Value) -> WorkerSpec {
        match spec(body) {
            Ok(s) => s,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn err(body: Value) -> SpecError {
        match spec(body) {
            Ok(s) => panic!("unexpected success: {s:?}"),
            Err(e) => e,
        }
    }

    fn unprocessable(body: Value) -> String {
        match err(body) {
            SpecError::Unprocessable(m) => m,
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn minimal_spec_takes_every_default() {
        let s = ok(json!({"url": "http://127.0.0.1:8000/"}));
        assert_eq!(s.url.normalized, "http://127.0.0.1:8000");
        assert!(matches!(s.url.transport, Transport::Http { .. }));
        assert_eq!(s.runtime_type, RuntimeType::Unspecified);
        assert_eq!(s.worker_type, WorkerType::Regular);
        assert!(s.api_key.is_none());
        assert!(s.models.is_empty());
        assert!(s.labels.is_empty());
        assert_eq!(s.priority, 50);
        assert_eq!(s.cost, 1.0);
        assert_eq!(s.health, HealthOverrides::default());
        assert_eq!(s.overload, OverloadOverrides::default());
        assert_eq!(s.http_pool, HttpPoolOverrides::default());
        assert_eq!(s.resilience, ResilienceOverrides::default());
        assert_eq!(s.dp_size, None);
        assert_eq!(s.zmq_handshake_address, None);
        assert_eq!(s.bootstrap_port, None);
        assert_eq!(
            (s.kv_connector, s.kv_role, s.kv_engine_id),
            (None, None, None)
        );
    }

    #[test]
    fn full_spec_reads_every_field() {
        let s = ok(json!({
            "url": "grpc://10.0.0.1:50051",
            "runtime_type": "sglang",
            "worker_type": "prefill",
            "api_key": "sk-worker",
            "models": [{"id": "m1", "aliases": ["a"], "model_type": ["chat", "image_gen"],
                        "context_length": 8192, "chat_template": "/t.jinja",
                        "tool_parser": "tp", "reasoning_parser": "rp"}],
            "labels": {"zone": "a"},
            "priority": -3,
            "cost": 2,
            "health": {"timeout_secs": 1, "check_interval_secs": 2, "success_threshold": 3,
                       "failure_threshold": 4, "disable_health_check": true,
                       "drain_settle_secs": 0},
            "overload": {"waiting_requests": 7, "token_usage": 0.5},
            "http_pool": {"http2": true, "pool_max_idle_per_host": 8,
                          "pool_idle_timeout_secs": 0, "timeout_secs": 9,
                          "connect_timeout_secs": 10},
            "resilience": {"cb_failure_threshold": 1, "cb_success_threshold": 2,
                           "cb_timeout_secs": 3, "cb_window_secs": 4,
                           "retryable_status_codes": [500], "capacity_status_codes": []},
            "dp_size": 4,
            "bootstrap_port": 8998,
            "kv_connector": "c", "kv_role": "r", "kv_engine_id": "e"
        }));
        assert_eq!(s.runtime_type, RuntimeType::Sglang);
        assert_eq!(s.worker_type, WorkerType::Prefill);
        assert_eq!(s.api_key.as_ref().map(Secret::expose), Some("sk-worker"));
        let card = &s.models[0];
        assert_eq!(card.id, "m1");
        assert_eq!(card.aliases, ["a"]);
        assert_eq!(
            card.model_type,
            [ModelCapability::Chat, ModelCapability::ImageGen]
        );
        assert_eq!(card.context_length, Some(8192));
        assert_eq!(card.chat_template.as_deref(), Some("/t.jinja"));
        assert_eq!(card.tool_parser.as_deref(), Some("tp"));
        assert_eq!(card.reasoning_parser.as_deref(), Some("rp"));
        assert_eq!(s.labels.get("zone").map(String::as_str), Some("a"));
        assert_eq!(s.priority, -3);
        assert_eq!(s.cost, 2.0);
        assert_eq!(
            s.health,
            HealthOverrides {
                timeout_secs: Some(1),
                check_interval_secs: Some(2),
                success_threshold: Some(3),
                failure_threshold: Some(4),
                disable_health_check: Some(true),
                drain_settle_secs: Some(0),
            }
        );
        assert_eq!(s.overload.waiting_requests, Some(7));
        assert_eq!(s.overload.token_usage, Some(0.5));
        assert_eq!(
            s.http_pool,
            HttpPoolOverrides {
                http2: Some(true),
                pool_max_idle_per_host: Some(8),
                pool_idle_timeout_secs: Some(0),
                timeout_secs: Some(9),
                connect_timeout_secs: Some(10),
            }
        );
        assert_eq!(
            s.resilience,
            ResilienceOverrides {
                cb_failure_threshold: Some(1),
                cb_success_threshold: Some(2),
                cb_timeout_secs: Some(3),
                cb_window_secs: Some(4),
                retryable_status_codes: Some(vec![500]),
                capacity_status_codes: Some(vec![]),
            }
        );
        assert_eq!(s.dp_size, Some(4));
        assert_eq!(s.bootstrap_port, Some(8998));
        assert_eq!(s.kv_connector.as_deref(), Some("c"));
        assert_eq!(s.kv_role.as_deref(), Some("r"));
        assert_eq!(s.kv_engine_id.as_deref(), Some("e"));
    }

    #[test]
    fn runtime_accepts_tokens_real_names_and_alias_key() {
        let cases = [
            ("rt_a", RuntimeType::Sglang),
            ("sglang", RuntimeType::Sglang),
            ("rt_b", RuntimeType::Vllm),
            ("vllm", RuntimeType::Vllm),
            ("rt_c", RuntimeType::Trtllm),
            ("trtllm", RuntimeType::Trtllm),
            ("tensorrt-llm", RuntimeType::Trtllm),
            ("rt_d", RuntimeType::Mlx),
            ("mlx", RuntimeType::Mlx),
            ("rt_e", RuntimeType::Tokenspeed),
            ("tokenspeed", RuntimeType::Tokenspeed),
            ("generic", RuntimeType::Generic),
            ("external", RuntimeType::External),
            ("unspecified", RuntimeType::Unspecified),
        ];
        for (name, want) in cases {
            let s = ok(json!({"url": "http://h", "runtime_type": name}));
            assert_eq!(s.runtime_type, want, "{name}");
            let s = ok(json!({"url": "http://h", "runtime": name}));
            assert_eq!(s.runtime_type, want, "alias key with {name}");
        }
        let m = unprocessable(json!({"url": "http://h", "runtime_type": "SGLang"}));
        assert!(m.starts_with("runtime_type: unknown value"), "{m}");
        let m = unprocessable(json!({"url": "http://h", "runtime": "rt_f"}));
        assert!(m.starts_with("runtime: unknown value \"rt_f\""), "{m}");
        let m =
            unprocessable(json!({"url": "http://h", "runtime": "vllm", "runtime_type": "vllm"}));
        assert!(m.contains("alias"), "{m}");
        let m = unprocessable(json!({"url": "http://h", "runtime_type": 3}));
        assert!(m.starts_with("runtime_type: invalid type"), "{m}");
    }

    #[test]
    fn worker_type_values() {
        for (name, want) in [
            ("regular", WorkerType::Regular),
            ("prefill", WorkerType::Prefill),
            ("decode", WorkerType::Decode),
            ("encode", WorkerType::Encode),
        ] {
            assert_eq!(
                ok(json!({"url": "http://h", "worker_type": name})).worker_type,
                want
            );
        }
        let m = unprocessable(json!({"url": "http://h", "worker_type": "prefil"}));
        assert!(m.contains("unknown value \"prefil\""), "{m}");
    }

    #[test]
    fn echo_prints_real_runtime_names() {
        let s = ok(json!({"url": "http://h", "runtime": "rt_c"}));
        assert_eq!(s.echo_json()["runtime_type"], "trtllm");
        let s = ok(json!({"url": "http://h", "runtime_type": "tensorrt-llm"}));
        assert_eq!(s.echo_json()["runtime_type"], "trtllm");
        let s = ok(json!({"url": "http://h", "runtime_type": "rt_e"}));
        assert_eq!(s.echo_json()["runtime_type"], "tokenspeed");
    }

    #[test]
    fn content_type_must_be_json() {
        let body = br#"{"url":"http://h"}"#;
        for ct in [
            &b"application/json"[..],
            b"Application/JSON",
            b"application/json; charset=utf-8",
            b"  application/json ;charset=UTF-8",
        ] {
            assert!(parse_spec(Some(ct), body).is_ok(), "{ct:?}");
        }
        for ct in [
            None,
            Some(&b"text/plain"[..]),
            Some(b"application/jsonx"),
            Some(b"application/x-www-form-urlencoded"),
            Some(b""),
            Some(b"\xff\xfe"),
        ] {
            let e = match parse_spec(ct, body) {
                Err(e) => e,
                Ok(_) => panic!("accepted {ct:?}"),
            };
            assert_eq!(e, SpecError::UnsupportedMediaType);
            assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert_eq!(e.code(), None);
        }
        assert!(matches!(
            parse_patch(None, b"{}"),
            Err(SpecError::UnsupportedMediaType)
        ));
    }

    #[test]
    fn malformed_json_is_400_plain_text() {
        for body in [
            &b""[..],
            b"   ",
            b"{",
            b"{\"url\": }",
            b"{\"url\":\"http://h\"} x",
            b"\xff",
            b"{\"url\":\"http://h\",}",
        ] {
            let e = match parse_spec(JSON, body) {
                Err(e) => e,
                Ok(_) => panic!("accepted {body:?}"),
            };
            assert!(matches!(e, SpecError::Malformed(_)), "{body:?}: {e:?}");
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert_eq!(e.code(), None);
        }
        assert!(matches!(
            parse_patch(JSON, b"{"),
            Err(SpecError::Malformed(_))
        ));
    }

    #[test]
    fn non_object_body_and_missing_url_are_422() {
        for body in [
            json!([]),
            json!(["http://h"]),
            json!("http://h"),
            json!(1),
            json!(null),
        ] {
            let e = err(body);
            assert!(matches!(e, SpecError::Unprocessable(_)), "{e:?}");
            assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(e.code(), None);
        }
        assert_eq!(unprocessable(json!({})), "url: required field is missing");
        assert_eq!(
            unprocessable(json!({"url": null})),
            "url: required field is missing"
        );
        assert_eq!(unprocessable(json!({"url": 5})), "url: expected a string");
        assert!(matches!(
            parse_patch(JSON, b"[]"),
            Err(SpecError::Unprocessable(_))
        ));
    }

    #[test]
    fn wrong_types_are_422_and_name_the_field() {
        let cases = [
            (json!({"priority": "high"}), "priority: "),
            (json!({"priority": 1.5}), "priority: "),
            (
                json!({"priority": 9_223_372_036_854_775_808u64}),
                "priority: ",
            ),
            (json!({"cost": "cheap"}), "cost: "),
            (json!({"labels": {"a": 1}}), "labels: "),
            (json!({"labels": []}), "labels: "),
            (json!({"health": 1}), "health: expected an object"),
            (
                json!({"health": {"timeout_secs": -1}}),
                "health.timeout_secs: ",
            ),
            (
                json!({"health": {"disable_health_check": "yes"}}),
                "health.disable_health_check: ",
            ),
            (
                json!({"overload": {"waiting_requests": -1}}),
                "overload.waiting_requests: ",
            ),
            (
                json!({"overload": {"token_usage": "x"}}),
                "overload.token_usage: ",
            ),
            (json!({"http_pool": {"http2": 1}}), "http_pool.http2: "),
            (
                json!({"resilience": {"retryable_status_codes": [70000]}}),
                "resilience.retryable_status_codes: ",
            ),
            (
                json!({"resilience": {"capacity_status_codes": 429}}),
                "resilience.capacity_status_codes: ",
            ),
            (json!({"models": {}}), "models: expected an array"),
            (json!({"models": [1]}), "models[0]: expected an object"),
            (
                json!({"models": [{}]}),
                "models[0].id: required field is missing",
            ),
            (
                json!({"models": [{"id": ""}]}),
                "models[0].id: must not be empty",
            ),
            (
                json!({"models": [{"id": "a"}, {"id": 1}]}),
                "models[1].id: ",
            ),
            (
                json!({"models": [{"id": "a", "model_type": ["chat", "video"]}]}),
                "models[0].model_type: unknown capability \"video\"",
            ),
            (
                json!({"models": [{"id": "a", "model_type": "chat"}]}),
                "models[0].model_type: ",
            ),
            (
                json!({"models": [{"id": "a", "num_labels": "2"}]}),
                "models[0].num_labels: ",
            ),
            (json!({"dp_size": -2}), "dp_size: "),
            (json!({"bootstrap_port": 70000}), "bootstrap_port: "),
            (
                json!({"zmq_handshake_address": 1}),
                "zmq_handshake_address: ",
            ),
            (json!({"kv_role": true}), "kv_role: "),
        ];
        for (mut body, prefix) in cases {
            body["url"] = json!("http://h");
            let m = unprocessable(body.clone());
            assert!(m.starts_with(prefix), "{body}: {m}");
            assert!(!m.contains('\n'), "{m:?}");
        }
    }

    #[test]
    fn unknown_fields_ignored_nulls_are_absent_blocks_partial() {
        let s = ok(json!({
            "url": "http://h",
            "colour": "blue",
            "priority": null,
            "runtime_type": null,
            "health": {"timeout_secs": 9, "unknown": [1]},
            "http_pool": null,
            "models": [{"id": "m", "future_field": {"x": 1}, "metadata": null}],
        }));
        assert_eq!(s.priority, 50);
        assert_eq!(s.runtime_type, RuntimeType::Unspecified);
        assert_eq!(s.health.timeout_secs, Some(9));
        assert_eq!(s.health.check_interval_secs, None);
        assert_eq!(s.http_pool, HttpPoolOverrides::default());
        assert_eq!(s.models[0].metadata, None);
        assert!(!s.echo_json().contains_key("colour"));
    }

    #[test]
    fn url_problems_are_400_bad_request() {
        for (url, want) in [
            ("", "worker URL is empty"),
            ("127.0.0.1:8000", "worker URL has no scheme"),
            ("HTTP://h", "worker URL scheme must be lowercase"),
            ("ftp://h", "worker URL scheme must be"),
            ("http://", "worker URL has no host"),
            ("ipc://", "ipc:// worker URL has no path"),
            ("http://a b", "worker URL is not a valid URL"),
        ] {
            let e = err(json!({"url": url}));
            assert!(
                matches!(&e, SpecError::BadRequest(m) if m.starts_with(want)),
                "{url}: {e:?}"
            );
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert_eq!(e.code(), Some("BAD_REQUEST"));
        }
    }

    #[test]
    fn type_errors_win_over_url_errors() {
        let e = err(json!({"url": "HTTP://h", "priority": "x"}));
        assert!(matches!(e, SpecError::Unprocessable(_)), "{e:?}");
    }

    #[test]
    fn api_key_never_appears_in_errors_or_debug() {
        for bad in [
            json!(123456789),
            json!(true),
            json!(["sk-abc"]),
            json!({"k": "sk-abc"}),
        ] {
            let m = unprocessable(json!({"url": "http://h", "api_key": bad.clone()}));
            assert_eq!(m, "api_key: expected a string");
            let e = match parse_patch(JSON, json!({"api_key": bad}).to_string().as_bytes()) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("patch accepted a non-string key"),
            };
            assert_eq!(e, "api_key: expected a string");
        }
        // A valid key with another field broken, or with a bad URL.
        let m = err(json!({"url": "http://h", "api_key": "sk-secret-1", "priority": "x"}));
        assert!(!m.to_string().contains("sk-secret-1"));
        let m = err(json!({"url": "ftp://sk-secret-1", "api_key": "sk-secret-1"}));
        assert!(!m.to_string().contains("sk-secret-1"));
        let s = ok(json!({"url": "http://h", "api_key": "sk-secret-1"}));
        assert!(!format!("{s:?}").contains("sk-secret-1"));
        let echo = Value::Object(s.echo_json()).to_string();
        assert!(!echo.contains("sk-secret-1") && !echo.contains("api_key"));
        let p = parse_patch(JSON, br#"{"api_key":"sk-secret-1"}"#);
        assert!(!format!("{p:?}").contains("sk-secret-1"));
    }

    #[test]
    fn empty_api_key_means_no_key() {
        assert!(ok(json!({"url": "http://h", "api_key": ""}))
            .api_key
            .is_none());
    }

    #[test]
    fn kv_labels_move_into_empty_spec_fields() {
        let s = ok(json!({
            "url": "http://h",
            "kv_role": "spec-role",
            "kv_engine_id": "",
            "labels": {"kv_connector": "lbl-conn", "kv_role": "lbl-role",
                       "kv_engine_id": "lbl-eng", "zone": "z"},
        }));
        assert_eq!(s.kv_connector.as_deref(), Some("lbl-conn"));
        assert_eq!(
            s.kv_role.as_deref(),
            Some("spec-role"),
            "non-empty spec wins"
        );
        assert_eq!(
            s.kv_engine_id.as_deref(),
            Some("lbl-eng"),
            "empty spec loses"
        );
        assert_eq!(
            s.labels.len(),
            1,
            "moved labels are removed: {:?}",
            s.labels
        );
        let s = ok(json!({"url": "http://h", "labels": {"kv_role": ""}}));
        assert_eq!(s.kv_role, None);
        assert!(s.labels.is_empty());
    }

    #[test]
    fn model_cards_fill_defaults_and_keep_extra_fields() {
        let s = ok(json!({"url": "http://h", "models": [{
            "id": "llama",
            "display_name": "Llama", "hf_model_type": "llama",
            "architectures": ["LlamaForCausalLM"], "provider": "meta",
            "tokenizer_path": "/tok", "metadata": {"a": [1, 2]},
            "id2label": {"0": "neg"}, "num_labels": 2
        }]}));
        let card = &s.models[0];
        assert!(card.aliases.is_empty());
        assert_eq!(card.model_type, ModelCapability::DEFAULT);
        let echo = card.to_json();
        assert_eq!(
            echo,
            json!({
                "id": "llama", "aliases": [],
                "model_type": ["chat", "completions", "responses", "tools"],
                "display_name": "Llama", "hf_model_type": "llama",
                "architectures": ["LlamaForCausalLM"], "provider": "meta",
                "tokenizer_path": "/tok", "metadata": {"a": [1, 2]},
                "id2label": {"0": "neg"}, "num_labels": 2
            })
        );
        let explicit_empty =
            ok(json!({"url": "http://h", "models": [{"id": "m", "model_type": []}]}));
        assert!(explicit_empty.models[0].model_type.is_empty());
    }

    #[test]
    fn model_id_prefers_cards_then_labels_in_order() {
        let s = ok(
            json!({"url": "http://h", "models": [{"id": "a"}, {"id": "b"}],
                          "labels": {"served_model_name": "x"}}),
        );
        assert_eq!(s.model_id(), Some("a"));
        let s = ok(json!({"url": "http://h", "labels": {
            "model_path": "/p", "model_id": "mid", "served_model_name": "smn"}}));
        assert_eq!(s.model_id(), Some("smn"));
        let s = ok(json!({"url": "http://h", "labels": {
            "model_path": "/p", "model_id": "mid", "served_model_name": ""}}));
        assert_eq!(s.model_id(), Some("mid"));
        let s = ok(json!({"url": "http://h", "labels": {"model_path": "/p"}}));
        assert_eq!(s.model_id(), Some("/p"));
        assert_eq!(ok(json!({"url": "http://h"})).model_id(), None);
    }

    #[test]
    fn echo_shows_spec_fields_but_not_hidden_blocks() {
        let s = ok(json!({
            "url": "http://h:1/", "runtime": "rt_b", "worker_type": "decode",
            "api_key": "k", "labels": {"z": "1"}, "priority": 7, "cost": 0.25,
            "health": {"timeout_secs": 1}, "http_pool": {"http2": true},
            "resilience": {"cb_timeout_secs": 1}, "dp_size": 2,
            "kv_engine_id": "e", "models": [{"id": "m"}],
        }));
        let echo = Value::Object(s.echo_json());
        assert_eq!(
            echo,
            json!({
                "url": "http://h:1", "runtime_type": "vllm", "worker_type": "decode",
                "models": [{"id": "m", "aliases": [],
                            "model_type": ["chat", "completions", "responses", "tools"]}],
                "labels": {"z": "1"}, "priority": 7, "cost": 0.25, "dp_size": 2,
                "kv_engine_id": "e"
            })
        );
        let s = ok(json!({"url": "http://h", "overload": {}}));
        assert!(
            !s.echo_json().contains_key("overload"),
            "empty block is not set"
        );
        let s = ok(json!({"url": "http://h", "overload": {"token_usage": 0.8}}));
        assert_eq!(s.echo_json()["overload"], json!({"token_usage": 0.8}));
    }

    #[test]
    fn echo_parses_back_to_the_same_echo() {
        let s = ok(json!({
            "url": "ipc:///tmp/e.sock", "runtime": "rt_e", "models": [{"id": "m",
            "metadata": {"x": null}}], "labels": {"kv_role": "r", "a": "b"},
            "priority": 1, "cost": 3.5, "overload": {"waiting_requests": 4},
            "zmq_handshake_address": "tcp://127.0.0.1:20001", "bootstrap_port": 1,
        }));
        let echo = Value::Object(s.echo_json());
        let again = ok(echo.clone());
        assert_eq!(Value::Object(again.echo_json()), echo);
    }

    fn registration(body: Value) -> Result<(), String> {
        check_for_registration(&ok(body))
    }

    #[test]
    fn registration_checks_overload_ranges() {
        assert!(
            registration(json!({"url": "http://h", "overload": {"waiting_requests": 1}})).is_ok()
        );
        assert!(
            registration(json!({"url": "http://h", "overload": {"waiting_requests": 0}})).is_err()
        );
        for ok_usage in [1.0, 0.9, 1e-9] {
            assert!(
                registration(json!({"url": "http://h", "overload": {"token_usage": ok_usage}}))
                    .is_ok(),
                "{ok_usage}"
            );
        }
        for bad in [0.0, -0.5, 1.0000001, 2.0] {
            assert!(
                registration(json!({"url": "http://h", "overload": {"token_usage": bad}})).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn registration_checks_zmq_constraints() {
        let zmq = |extra: Value| {
            let mut body = json!({"url": "ipc:///tmp/w.sock"});
            if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                b.extend(e);
            }
            registration(body)
        };
        assert!(
            zmq(json!({})).is_ok(),
            "unspecified runtime defaults to vllm"
        );
        assert_eq!(
            ok(json!({"url": "ipc:///tmp/w.sock"})).effective_runtime(),
            RuntimeType::Vllm
        );
        assert_eq!(
            ok(json!({"url": "http://h"})).effective_runtime(),
            RuntimeType::Unspecified
        );
        assert!(zmq(json!({"runtime": "rt_b"})).is_ok());
        assert!(zmq(json!({"runtime": "tokenspeed"})).is_ok());
        for rt in ["sglang", "trtllm", "mlx", "generic", "external"] {
            let e = zmq(json!({ "runtime_type": rt })).err();
            assert!(e.as_deref().is_some_and(|m| m.contains(rt)), "{rt}: {e:?}");
        }
        for wt in ["prefill", "decode", "encode"] {
            assert!(zmq(json!({ "worker_type": wt })).is_err(), "{wt}");
        }
        assert!(zmq(json!({"zmq_handshake_address": "tcp://127.0.0.1:20000"})).is_ok());
        assert!(zmq(json!({"zmq_handshake_address": "ipc:///x"})).is_err());
        assert!(
            zmq(json!({"zmq_handshake_address": ""})).is_ok(),
            "empty means derived"
        );
        assert!(
            registration(json!({"url": "http://h", "zmq_handshake_address": "tcp://a:1"})).is_err()
        );
        assert!(
            registration(json!({"url": "grpc://h:1", "zmq_handshake_address": "tcp://a:1"}))
                .is_err()
        );
        assert!(registration(
            json!({"url": "grpc://h:1", "runtime": "sglang", "worker_type": "prefill"})
        )
        .is_ok());
    }

    #[test]
    fn patch_reads_only_its_fields() {
        let p = match parse_patch(
            JSON,
            json!({
                "priority": 9, "cost": 0.5, "labels": {"a": "b"}, "api_key": "new",
                "health": {"drain_settle_secs": 0},
                "overload": "ignored, even with a wrong type", "url": 12, "models": 1
            })
            .to_string()
            .as_bytes(),
        ) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(p.priority, Some(9));
        assert_eq!(p.cost, Some(0.5));
        assert_eq!(
            p.labels
                .as_ref()
                .and_then(|l| l.get("a"))
                .map(String::as_str),
            Some("b")
        );
        assert!(matches!(&p.api_key, Some(Some(k)) if k.expose() == "new"));
        assert_eq!(p.health.and_then(|h| h.drain_settle_secs), Some(0));

        let empty = parse_patch(JSON, b"{}").map_err(|e| e.to_string());
        assert!(matches!(
            empty,
            Ok(WorkerPatch {
                priority: None,
                cost: None,
                labels: None,
                api_key: None,
                health: None
            })
        ));
        for (body, prefix) in [
            (json!({"priority": "x"}), "priority: "),
            (json!({"cost": []}), "cost: "),
            (json!({"labels": {"a": null}}), "labels: "),
            (
                json!({"health": {"failure_threshold": "x"}}),
                "health.failure_threshold: ",
            ),
            (json!({"health": []}), "health: expected an object"),
        ] {
            match parse_patch(JSON, body.to_string().as_bytes()) {
                Err(SpecError::Unprocessable(m)) => assert!(m.starts_with(prefix), "{m}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn apply_patch_merges() {
        let mut s = ok(json!({
            "url": "http://h", "api_key": "old", "labels": {"a": "1", "b": "2"},
            "health": {"timeout_secs": 3, "check_interval_secs": 4},
        }));
        let patch = |body: Value| match parse_patch(JSON, body.to_string().as_bytes()) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        s.apply_patch(patch(json!({
            "priority": 1, "cost": 2.5, "labels": {"b": "20", "c": "3"},
            "health": {"timeout_secs": 30, "disable_health_check": true}
        })));
        assert_eq!((s.priority, s.cost), (1, 2.5));
        assert_eq!(
            s.labels,
            BTreeMap::from([
                ("a".into(), "1".into()),
                ("b".into(), "20".into()),
                ("c".into(), "3".into())
            ])
        );
        assert_eq!(s.health.timeout_secs, Some(30));
        assert_eq!(
            s.health.check_interval_secs,
            Some(4),
            "omitted health field kept"
        );
        assert_eq!(s.health.disable_health_check, Some(true));
        assert_eq!(
            s.api_key.as_ref().map(Secret::expose),
            Some("old"),
            "absent key kept"
        );
        s.apply_patch(patch(json!({"api_key": "rotated"})));
        assert_eq!(s.api_key.as_ref().map(Secret::expose), Some("rotated"));
        s.apply_patch(patch(json!({"api_key": null})));
        assert_eq!(
            s.api_key.as_ref().map(Secret::expose),
            Some("rotated"),
            "null keeps"
        );
        s.apply_patch(patch(json!({"api_key": ""})));
        assert!(s.api_key.is_none(), "empty string removes the key");
        assert_eq!((s.priority, s.cost), (1, 2.5), "unset fields untouched");
    }

    #[test]
    fn error_statuses() {
        assert_eq!(SpecError::UnsupportedMediaType.status().as_u16(), 415);
        assert_eq!(SpecError::Malformed(String::new()).status().as_u16(), 400);
        assert_eq!(
            SpecError::Unprocessable(String::new()).status().as_u16(),
            422
        );
        assert_eq!(SpecError::BadRequest(String::new()).status().as_u16(), 400);
    }
}
