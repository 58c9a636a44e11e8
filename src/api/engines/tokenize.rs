//! `/v1/tokenize` and `/v1/detokenize` on a gRPC fleet: answered by the gateway with the
//! worker's tokenizer, in SGLang's shapes (`{tokens, count, max_model_len}` and `{text}`);
//! the engine is not called.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::chat::encode_cache;
use crate::chat::language::Language;
use crate::http::error::GatewayError;

#[derive(Deserialize)]
struct TokenizeBody {
    prompt: String,
    #[serde(default = "yes")]
    add_special_tokens: bool,
}

#[derive(Deserialize)]
struct DetokenizeBody {
    tokens: Vec<u32>,
    #[serde(default = "yes")]
    skip_special_tokens: bool,
}

fn yes() -> bool {
    true
}

#[derive(Serialize)]
struct Tokenized<'a> {
    tokens: &'a [u32],
    count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_model_len: Option<u64>,
}

#[derive(Serialize)]
struct Detokenized<'a> {
    text: &'a str,
}

fn invalid(err: impl std::fmt::Display) -> GatewayError {
    GatewayError::InvalidRequest {
        message: format!("invalid request body: {err}"),
    }
}

/// The answer to a tokenize body; `max_model_len` is the engine's context window when
/// known, and a prompt that cannot fit it is refused before it is tokenized, as a chat's.
pub fn tokenize(
    language: &Language,
    body: &[u8],
    max_model_len: Option<u32>,
) -> Result<Bytes, GatewayError> {
    let body: TokenizeBody = serde_json::from_slice(body).map_err(invalid)?;
    crate::generation::prompt::fits(language, max_model_len, body.prompt.len())?;
    let ids =
        encode_cache::encode(language, &body.prompt, body.add_special_tokens).map_err(invalid)?;
    let tokens = ids.as_slice();
    serde_json::to_vec(&Tokenized {
        tokens,
        count: tokens.len(),
        max_model_len: max_model_len.map(u64::from),
    })
    .map(Bytes::from)
    .map_err(invalid)
}

/// The answer to a detokenize body.
pub fn detokenize(language: &Language, body: &[u8]) -> Result<Bytes, GatewayError> {
    let body: DetokenizeBody = serde_json::from_slice(body).map_err(invalid)?;
    let text = language
        .tokenizer
        .decode(&body.tokens, body.skip_special_tokens)
        .map_err(invalid)?;
    serde_json::to_vec(&Detokenized { text: &text })
        .map(Bytes::from)
        .map_err(invalid)
}
