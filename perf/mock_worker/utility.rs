//! Non-generative inference endpoints: embeddings, rerank, classify,
//! token counting and (de)tokenisation, transcription.
//!
//! Outputs are deterministic functions of the input (hash-derived), so
//! tests can compare responses across workers and runs. Each function
//! returns the JSON body, or a message for a 400 response.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{json, Value};

use crate::prompt::{self, Api};

/// The non-generative inference endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    CountTokens,
    Embeddings,
    Rerank,
    Classify,
    Tokenize,
    Detokenize,
    Transcription,
}

impl Task {
    /// The response body for a (parsed) request body, or a message for a
    /// 400. `body_len` is the raw body size, `model` the name to report.
    pub fn run(self, body: &Value, body_len: usize, model: &str) -> Result<Value, String> {
        match self {
            Task::CountTokens => Ok(count_tokens(body)),
            Task::Embeddings => embeddings(body, model),
            Task::Rerank => rerank(body, model),
            Task::Classify => classify(body, model),
            Task::Tokenize => tokenize(body),
            Task::Detokenize => detokenize(body),
            Task::Transcription => Ok(transcription(body_len)),
        }
    }
}

/// Dimension of the mock embeddings.
pub const EMBEDDING_DIM: usize = 8;

const VOCAB_SIZE: u64 = 32_000;

fn hash_of(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A text view of one input item (strings as-is, anything else as JSON).
fn item_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A unit-length vector derived from the text.
fn embed(text: &str) -> Vec<f64> {
    let seed = hash_of(text);
    let raw: Vec<f64> = (0..EMBEDDING_DIM)
        .map(|k| {
            let bits = seed.rotate_left(8 * k as u32) & 0xffff;
            bits as f64 / 65_535.0 * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        raw
    } else {
        raw.iter().map(|x| x / norm).collect()
    }
}

/// `/v1/embeddings`: one embedding per input (an array input is a batch,
/// unless it is a single list of token ids).
pub fn embeddings(body: &Value, model: &str) -> Result<Value, String> {
    let input = body
        .get("input")
        .ok_or_else(|| "'input' is required".to_string())?;
    let items: Vec<&Value> = match input {
        Value::Array(items) if !items.iter().all(Value::is_number) => items.iter().collect(),
        other => vec![other],
    };
    let mut prompt_tokens = 0;
    let data: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let text = item_text(item);
            prompt_tokens += prompt::text_tokens(&text).max(1);
            json!({"object": "embedding", "index": index, "embedding": embed(&text)})
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }))
}

/// `/rerank` and `/v1/rerank`: a relevance score per document, best first.
pub fn rerank(body: &Value, model: &str) -> Result<Value, String> {
    let query = body.get("query").map(item_text).unwrap_or_default();
    let documents = body
        .get("documents")
        .or_else(|| body.get("texts"))
        .and_then(Value::as_array)
        .ok_or_else(|| "'documents' must be an array".to_string())?;
    let mut results: Vec<Value> = documents
        .iter()
        .enumerate()
        .map(|(index, doc)| {
            let text = match doc {
                Value::Object(obj) => obj.get("text").map(item_text).unwrap_or_default(),
                other => item_text(other),
            };
            let score = (hash_of((&query, &text)) % 10_000) as f64 / 10_000.0;
            json!({"index": index, "relevance_score": score, "document": {"text": text}})
        })
        .collect();
    results.sort_by(|a, b| {
        let score = |v: &Value| v["relevance_score"].as_f64().unwrap_or(0.0);
        score(b).total_cmp(&score(a))
    });
    if let Some(top_n) = body.get("top_n").and_then(Value::as_u64) {
        results.truncate(top_n as usize);
    }
    Ok(json!({"model": model, "results": results}))
}

/// `/v1/classify`: a two-class distribution per input.
pub fn classify(body: &Value, model: &str) -> Result<Value, String> {
    let input = body
        .get("input")
        .or_else(|| body.get("text"))
        .ok_or_else(|| "'input' is required".to_string())?;
    let items: Vec<&Value> = match input {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let data: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let positive = (hash_of(item_text(item)) % 1000) as f64 / 1000.0;
            let probs = [1.0 - positive, positive];
            let label = if positive >= 0.5 {
                "positive"
            } else {
                "negative"
            };
            json!({"index": index, "label": label, "probs": probs, "num_classes": 2})
        })
        .collect();
    Ok(json!({"object": "list", "model": model, "data": data}))
}

/// `/v1/messages/count_tokens`.
pub fn count_tokens(body: &Value) -> Value {
    json!({"input_tokens": prompt::extract(Api::Messages, body).tokens()})
}

/// Mock token ids: one per four characters of the text.
pub fn tokenize_text(text: &str) -> Vec<u64> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    // The last token absorbs the remainder, so the count matches
    // `prompt::text_tokens` (never zero for non-empty text).
    let count = (prompt::text_tokens(text) as usize).max(1);
    (0..count)
        .map(|i| {
            let end = if i + 1 == count {
                chars.len()
            } else {
                (i + 1) * 4
            };
            let piece: String = chars[i * 4..end].iter().collect();
            hash_of(piece) % VOCAB_SIZE
        })
        .collect()
}

/// `/v1/tokenize` and `/tokenize`: vLLM (`prompt` or `messages`),
/// llama.cpp (`content`) and SGLang (`text`) request shapes.
pub fn tokenize(body: &Value) -> Result<Value, String> {
    let text = ["prompt", "content", "text"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| {
            body.get("messages")
                .map(|_| prompt::extract(Api::Chat, body).text)
        })
        .ok_or_else(|| {
            "one of 'prompt', 'content', 'text' or 'messages' is required".to_string()
        })?;
    let tokens = tokenize_text(&text);
    Ok(json!({
        "count": tokens.len(),
        "tokens": tokens,
        "max_model_len": crate::state::CONTEXT_LENGTH,
    }))
}

/// `/v1/detokenize` and `/detokenize`: `tok<id> ` per token. Reported as
/// `text`, and as `content` for llama.cpp clients.
pub fn detokenize(body: &Value) -> Result<Value, String> {
    let tokens = body
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| "'tokens' must be an array of integers".to_string())?;
    let mut text = String::new();
    for token in tokens {
        let id = token
            .as_u64()
            .ok_or_else(|| "'tokens' must be an array of integers".to_string())?;
        text.push_str(&format!("tok{id} "));
    }
    Ok(json!({"text": text, "content": text}))
}

/// `/v1/audio/transcriptions`: the multipart body is not parsed.
pub fn transcription(body_len: usize) -> Value {
    json!({"text": format!("mock transcription of {body_len} bytes")})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_single_and_batch() {
        let one = embeddings(&json!({"input": "hello"}), "m").unwrap();
        assert_eq!(one["object"], "list");
        assert_eq!(one["model"], "m");
        let data = one["data"].as_array().unwrap();
        assert_eq!(data.len(), 1);
        assert_eq!(data[0]["object"], "embedding");
        let vector = data[0]["embedding"].as_array().unwrap();
        assert_eq!(vector.len(), EMBEDDING_DIM);
        let norm: f64 = vector.iter().map(|x| x.as_f64().unwrap().powi(2)).sum();
        assert!((norm - 1.0).abs() < 1e-9);

        let batch = embeddings(&json!({"input": ["a", "b", "c"]}), "m").unwrap();
        assert_eq!(batch["data"].as_array().unwrap().len(), 3);
        assert_eq!(batch["data"][2]["index"], 2);
        // Deterministic.
        assert_eq!(
            embeddings(&json!({"input": "a"}), "m").unwrap()["data"][0],
            batch["data"][0]
        );
        // A single list of token ids is one input.
        let ids = embeddings(&json!({"input": [1, 2, 3]}), "m").unwrap();
        assert_eq!(ids["data"].as_array().unwrap().len(), 1);
        assert!(embeddings(&json!({}), "m").is_err());
    }

    #[test]
    fn rerank_scores_every_document_best_first() {
        let v = rerank(
            &json!({"query": "q", "documents": ["a", "b", {"text": "c"}]}),
            "m",
        )
        .unwrap();
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        let mut indices: Vec<u64> = results
            .iter()
            .map(|r| r["index"].as_u64().unwrap())
            .collect();
        indices.sort();
        assert_eq!(indices, [0, 1, 2]);
        let scores: Vec<f64> = results
            .iter()
            .map(|r| r["relevance_score"].as_f64().unwrap())
            .collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]));
        let top = rerank(
            &json!({"query": "q", "documents": ["a", "b"], "top_n": 1}),
            "m",
        )
        .unwrap();
        assert_eq!(top["results"].as_array().unwrap().len(), 1);
        assert!(rerank(&json!({"query": "q"}), "m").is_err());
    }

    #[test]
    fn classify_probs_sum_to_one() {
        let v = classify(&json!({"input": ["x", "y"]}), "m").unwrap();
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        for item in data {
            let probs = item["probs"].as_array().unwrap();
            let sum: f64 = probs.iter().map(|p| p.as_f64().unwrap()).sum();
            assert!((sum - 1.0).abs() < 1e-9);
            assert!(item["label"].is_string());
        }
    }

    #[test]
    fn tokenize_counts_like_prompt_estimate() {
        assert_eq!(tokenize_text("").len(), 0);
        assert_eq!(tokenize_text("abc").len(), 1);
        assert_eq!(tokenize_text("abcdefghi").len(), 2);
        let v = tokenize(&json!({"prompt": "abcdefgh"})).unwrap();
        assert_eq!(v["count"], 2);
        let v = tokenize(&json!({"content": "abcdefgh"})).unwrap();
        assert_eq!(v["tokens"].as_array().unwrap().len(), 2);
        let v = tokenize(&json!({"messages": [{"role": "user", "content": "abcd"}]})).unwrap();
        assert_eq!(v["count"], 1);
        assert!(tokenize(&json!({})).is_err());
    }

    #[test]
    fn detokenize_and_count() {
        let v = detokenize(&json!({"tokens": [1, 22]})).unwrap();
        assert_eq!(v["text"], "tok1 tok22 ");
        assert!(detokenize(&json!({"tokens": ["x"]})).is_err());
        assert!(detokenize(&json!({})).is_err());
        let count = count_tokens(&json!({"messages": [{"role": "user", "content": "12345678"}]}));
        assert_eq!(count["input_tokens"], 2);
        assert_eq!(transcription(42)["text"], "mock transcription of 42 bytes");
    }
}
