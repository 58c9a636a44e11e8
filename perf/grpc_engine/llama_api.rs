//! llama-server's HTTP API as the adapter uses it: the `POST /completion` body built from
//! a `GenerateRequest`, and the shapes of its answers. Pure, so the mapping is tested
//! without a server.
//!
//! Sampling, SGLang's field → llama.cpp's:
//! - `temperature` → `temperature`; below 1e-6 it is 0, which both engines treat as greedy
//!   (SGLang switches to argmax there, llama.cpp samples greedily at temperature ≤ 0);
//! - `top_k` → `top_k`; SGLang's "disabled" is -1, llama.cpp's is 0 (any k ≤ 0 keeps the
//!   whole vocabulary), so every k ≤ 0 becomes 0;
//! - `top_p`, `min_p`, `presence_penalty`, `frequency_penalty` → the same names;
//! - `repetition_penalty` → `repeat_penalty` (1 is off in both; a non-positive value, which
//!   only a sender that left the field unset produces, is read as off);
//! - `max_new_tokens` → `n_predict`, -1 (until EOS or the context ends) when absent;
//! - `stop` → `stop` (llama-server then stops on them itself, as SGLang's scheduler does),
//!   `ignore_eos` → `ignore_eos`, `logit_bias` → `logit_bias` as `[id, bias]` pairs;
//! - `json_schema` → `json_schema`, `ebnf_grammar` → `grammar` (GBNF);
//! - `stop_token_ids` are the adapter's own job (llama-server has no such field): see
//!   `llama.rs`.
//!
//! Refused with a 400, not approximated: `regex` and `structural_tag` constraints, and
//! `n` > 1. Not carried (no llama-server equivalent): `min_new_tokens`, logprobs.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tollgate::engine::grpc::sglang::sampling_params::Constraint;
use tollgate::engine::grpc::sglang::{GenerateRequest, SamplingParams};

/// SGLang's defaults, for a request that carries no sampling params at all.
fn sglang_defaults() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: -1,
        repetition_penalty: 1.0,
        ..SamplingParams::default()
    }
}

/// The `POST /completion` body for `request`, or why it cannot be served (a 400).
pub fn completion_body(request: &GenerateRequest, stream: bool) -> Result<Value, String> {
    let prompt = request
        .tokenized
        .as_ref()
        .map_or(&[][..], |tokenized| &tokenized.input_ids[..]);
    if prompt.is_empty() {
        return Err("the request has no input_ids".to_string());
    }
    let defaults = sglang_defaults();
    let p = request.sampling_params.as_ref().unwrap_or(&defaults);
    if p.n > 1 {
        return Err(format!(
            "n = {} is not supported by the llama.cpp adapter",
            p.n
        ));
    }
    if request.return_logprob {
        return Err("logprobs are not supported by the llama.cpp adapter".to_string());
    }
    let n_predict = match p.max_new_tokens {
        None => -1,
        Some(n) if n >= 0 => i64::from(n),
        Some(n) => return Err(format!("max_new_tokens = {n}")),
    };
    let temperature = if p.temperature < 1e-6 {
        0.0
    } else {
        p.temperature
    };
    let repeat_penalty = if p.repetition_penalty > 0.0 {
        p.repetition_penalty
    } else {
        1.0
    };
    let mut body = json!({
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": temperature,
        "top_k": p.top_k.max(0),
        "top_p": p.top_p,
        "min_p": p.min_p,
        "repeat_penalty": repeat_penalty,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "stop": p.stop,
        "ignore_eos": p.ignore_eos,
        "stream": stream,
        "return_tokens": true,
        "cache_prompt": true,
    });
    let fields = body
        .as_object_mut()
        .ok_or_else(|| "internal: body is not an object".to_string())?;
    if !p.logit_bias.is_empty() {
        fields.insert("logit_bias".into(), logit_bias(p)?);
    }
    constrain(fields, p.constraint.as_ref())?;
    Ok(body)
}

fn logit_bias(p: &SamplingParams) -> Result<Value, String> {
    let mut pairs = Vec::with_capacity(p.logit_bias.len());
    for (key, bias) in &p.logit_bias {
        let id: u32 = key
            .parse()
            .map_err(|_| format!("logit_bias key {key:?} is not a token id"))?;
        pairs.push(json!([id, bias]));
    }
    // Map order is random; a stable body is easier to debug and to test.
    pairs.sort_by_key(|pair| pair[0].as_u64());
    Ok(Value::Array(pairs))
}

fn constrain(
    fields: &mut Map<String, Value>,
    constraint: Option<&Constraint>,
) -> Result<(), String> {
    match constraint {
        None => Ok(()),
        Some(Constraint::JsonSchema(schema)) => {
            let schema: Value = serde_json::from_str(schema)
                .map_err(|e| format!("json_schema is not JSON: {e}"))?;
            fields.insert("json_schema".into(), schema);
            Ok(())
        }
        Some(Constraint::EbnfGrammar(grammar)) => {
            fields.insert("grammar".into(), Value::String(grammar.clone()));
            Ok(())
        }
        Some(Constraint::Regex(_)) => {
            Err("regex constraints are not supported by the llama.cpp adapter".to_string())
        }
        Some(Constraint::StructuralTag(_)) => {
            Err("structural_tag constraints are not supported by the llama.cpp adapter".to_string())
        }
    }
}

/// One `/completion` answer: a streamed chunk, or the whole non-streamed answer. Every
/// field is optional so that a missing one reads as absent rather than failing the chunk.
#[derive(Debug, Default, Deserialize)]
pub struct Completion {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tokens: Vec<u32>,
    #[serde(default)]
    pub stop: bool,
    /// Cumulative generated tokens, EOS included.
    pub tokens_predicted: Option<u64>,
    /// The prompt's length, cached part included.
    pub tokens_evaluated: Option<u64>,
    /// "eos", "word" or "limit" on the final answer.
    pub stop_type: Option<String>,
    #[serde(default)]
    pub stopping_word: String,
    pub timings: Option<Timings>,
    pub error: Option<ApiError>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Timings {
    /// Prompt tokens served from the slot's cache.
    pub cache_n: Option<u64>,
}

/// llama-server's error object, alone in an error response or a stream's `data:`.
#[derive(Debug, Default, Deserialize)]
pub struct ApiError {
    #[serde(default)]
    pub message: String,
    pub code: Option<u16>,
}

/// The body of an error response.
#[derive(Debug, Default, Deserialize)]
pub struct ErrorBody {
    pub error: Option<ApiError>,
}

/// `GET /props`, the parts GetModelInfo reports.
#[derive(Debug, Default, Deserialize)]
pub struct Props {
    pub default_generation_settings: Option<GenerationSettings>,
    pub model_path: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct GenerationSettings {
    /// The context window of one slot.
    pub n_ctx: Option<u32>,
}

/// `GET /v1/models`, for the vocabulary size.
#[derive(Debug, Default, Deserialize)]
pub struct Models {
    #[serde(default)]
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ModelCard {
    pub meta: Option<ModelMeta>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ModelMeta {
    pub n_vocab: Option<u32>,
}

/// `POST /tokenize`.
#[derive(Debug, Default, Deserialize)]
pub struct Tokenized {
    #[serde(default)]
    pub tokens: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tollgate::engine::grpc::sglang::TokenizedInput;

    use super::*;

    fn request(params: Option<SamplingParams>) -> GenerateRequest {
        GenerateRequest {
            request_id: "r".into(),
            tokenized: Some(TokenizedInput {
                original_text: String::new(),
                input_ids: vec![1, 2, 3],
            }),
            sampling_params: params,
            ..Default::default()
        }
    }

    #[test]
    fn greedy_request_maps_field_by_field() {
        let p = SamplingParams {
            temperature: 0.0,
            top_p: 0.9,
            top_k: -1,
            min_p: 0.05,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            repetition_penalty: 1.1,
            max_new_tokens: Some(24),
            stop: vec![".".into()],
            ignore_eos: true,
            ..Default::default()
        };
        let body = completion_body(&request(Some(p)), true).unwrap();
        assert_eq!(body["prompt"], json!([1, 2, 3]));
        assert_eq!(body["n_predict"], 24);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["top_k"], 0);
        assert_eq!(body["repeat_penalty"].as_f64().unwrap() as f32, 1.1);
        assert_eq!(body["presence_penalty"], 0.5);
        assert_eq!(body["frequency_penalty"], 0.25);
        assert_eq!(body["stop"], json!(["."]));
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream"], true);
        assert_eq!(body["return_tokens"], true);
        assert_eq!(body["cache_prompt"], true);
        assert!(body.get("logit_bias").is_none() && body.get("grammar").is_none());
    }

    #[test]
    fn absent_params_are_sglang_defaults() {
        let body = completion_body(&request(None), false).unwrap();
        assert_eq!(body["n_predict"], -1);
        assert_eq!(body["temperature"], 1.0);
        assert_eq!(body["top_p"], 1.0);
        assert_eq!(body["top_k"], 0);
        assert_eq!(body["repeat_penalty"], 1.0);
        assert_eq!(body["stream"], false);
    }

    #[test]
    fn tiny_temperature_is_greedy_and_unset_penalty_is_off() {
        let p = SamplingParams {
            temperature: 1e-9,
            top_k: 5,
            ..Default::default()
        };
        let body = completion_body(&request(Some(p)), true).unwrap();
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["repeat_penalty"], 1.0);
    }

    #[test]
    fn logit_bias_and_constraints() {
        let p = SamplingParams {
            logit_bias: HashMap::from([("7".to_string(), -100.0), ("3".to_string(), 2.5)]),
            constraint: Some(Constraint::JsonSchema(r#"{"type":"object"}"#.into())),
            ..sglang_defaults()
        };
        let body = completion_body(&request(Some(p)), true).unwrap();
        assert_eq!(body["logit_bias"], json!([[3, 2.5], [7, -100.0]]));
        assert_eq!(body["json_schema"], json!({"type": "object"}));

        let p = SamplingParams {
            constraint: Some(Constraint::EbnfGrammar("root ::= \"a\"".into())),
            ..sglang_defaults()
        };
        let body = completion_body(&request(Some(p)), true).unwrap();
        assert_eq!(body["grammar"], "root ::= \"a\"");
    }

    #[test]
    fn unsupported_requests_are_refused() {
        let refused = [
            SamplingParams {
                n: 2,
                ..sglang_defaults()
            },
            SamplingParams {
                max_new_tokens: Some(-5),
                ..sglang_defaults()
            },
            SamplingParams {
                constraint: Some(Constraint::Regex("a+".into())),
                ..sglang_defaults()
            },
            SamplingParams {
                constraint: Some(Constraint::StructuralTag("{}".into())),
                ..sglang_defaults()
            },
            SamplingParams {
                constraint: Some(Constraint::JsonSchema("{".into())),
                ..sglang_defaults()
            },
            SamplingParams {
                logit_bias: HashMap::from([("x".to_string(), 1.0)]),
                ..sglang_defaults()
            },
        ];
        for p in refused {
            assert!(
                completion_body(&request(Some(p.clone())), true).is_err(),
                "{p:?}"
            );
        }
        let mut empty = request(None);
        empty.tokenized = None;
        assert!(completion_body(&empty, true).is_err());
        let mut scored = request(None);
        scored.return_logprob = true;
        let refusal = completion_body(&scored, true).unwrap_err();
        assert!(refusal.contains("logprobs"), "{refusal}");
    }

    #[test]
    fn answers_parse_with_missing_fields() {
        let c: Completion = serde_json::from_str(
            r#"{"index":0,"content":"Yes","tokens":[10539],"stop":false,"id_slot":-1,
                "tokens_predicted":1,"tokens_evaluated":15}"#,
        )
        .unwrap();
        assert_eq!(
            (c.tokens, c.tokens_predicted, c.stop),
            (vec![10539], Some(1), false)
        );
        let c: Completion = serde_json::from_str(
            r#"{"content":"","tokens":[],"stop":true,"stop_type":"word","stopping_word":".",
                "timings":{"cache_n":9,"prompt_n":1},"generation_settings":{"n_ctx":2048}}"#,
        )
        .unwrap();
        assert_eq!(c.stop_type.as_deref(), Some("word"));
        assert_eq!(c.timings.unwrap().cache_n, Some(9));
        let c: Completion =
            serde_json::from_str(r#"{"error":{"code":400,"message":"bad"}}"#).unwrap();
        assert_eq!(c.error.unwrap().code, Some(400));
        assert!(serde_json::from_str::<Completion>("[]").is_err());
    }
}
