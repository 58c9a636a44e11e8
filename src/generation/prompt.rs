//! A request's prompt as token ids: the body read by its front-end, a chat rendered with the
//! model's template, the text tokenized (through the encode cache), ids checked against the
//! vocabulary, and a prompt that cannot fit the context window refused before it is
//! tokenized. Bodies share a process-wide budget of prompt bytes being worked on
//! ([`budget`]); a large one is worked on the blocking pool, so one long prompt does not
//! stall the other connections of its thread.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::ask::{Ask, Input, Invalid};
use crate::chat::language::Language;
use crate::chat::template::RenderInput;
use crate::chat::{budget, encode_cache};
use crate::http::error::GatewayError;

/// The request cannot be served as asked: the client's answer, never retried.
#[derive(Debug)]
pub struct Refused(pub GatewayError);

/// Request bodies up to this size are rendered and tokenized on the event loop; larger
/// ones (long chats, long documents) on the blocking pool, so one big prompt does not
/// stall every other connection of its thread.
const INLINE_BODY_BYTES: usize = 32 * 1024;
/// The request read and its prompt rendered and tokenized: on the event loop for a small
/// body, on the blocking pool for a large one (parsing a long chat costs as much as
/// tokenizing it), so one long prompt does not stall the other connections of its thread.
/// A prompt that cannot fit `window` is refused before it is tokenized.
pub async fn understand(
    language: &Arc<Language>,
    window: Option<u32>,
    read: impl FnOnce(&[u8]) -> Result<Ask, GatewayError> + Send + 'static,
    body: Bytes,
    deadline: Instant,
) -> Result<(Ask, Vec<u32>), Refused> {
    on_budget(language, body, deadline, move |language, body| {
        read_request(language, read, window, body)
    })
    .await
}

/// A chat the gateway built (a Responses turn's), of about `size` bytes, taken as its
/// ask and its prompt's ids made, like [`understand`] does for a client's body.
pub async fn understand_chat(
    language: &Arc<Language>,
    window: Option<u32>,
    chat: serde_json::Value,
    size: usize,
    deadline: Instant,
) -> Result<(Ask, Vec<u32>), Refused> {
    on_share(language, size, deadline, move |language| {
        let ask =
            Ask::chat(chat).map_err(|Invalid(message)| GatewayError::InvalidRequest { message })?;
        with_prompt(language, window, ask)
    })
    .await
}

/// `work` on `body` with the body's share of the process's prompt budget
/// ([`budget`]): inline for a small body, on the blocking pool for a large one.
pub async fn on_budget<T: Send + 'static>(
    language: &Arc<Language>,
    body: Bytes,
    deadline: Instant,
    work: impl FnOnce(&Language, &[u8]) -> Result<T, GatewayError> + Send + 'static,
) -> Result<T, Refused> {
    on_share(language, body.len(), deadline, move |language| {
        work(language, &body)
    })
    .await
}

/// `work` with a share of `size` bytes of the process's prompt budget: inline when small,
/// on the blocking pool when large.
async fn on_share<T: Send + 'static>(
    language: &Arc<Language>,
    size: usize,
    deadline: Instant,
    work: impl FnOnce(&Language) -> Result<T, GatewayError> + Send + 'static,
) -> Result<T, Refused> {
    let share = budget::share(size, deadline)
        .await
        .map_err(|budget::Full| Refused(GatewayError::PromptBudgetFull))?;
    if size <= INLINE_BODY_BYTES {
        return work(language).map_err(Refused);
    }
    let kit = language.clone();
    let pooled = move || {
        let _share = share;
        encode_cache::on_pool(|| work(&kit))
    };
    tokio::task::spawn_blocking(pooled)
        .await
        .map_err(|_| {
            Refused(GatewayError::ChatTemplate {
                message: "rendering the prompt failed".into(),
            })
        })?
        .map_err(Refused)
}

/// [`understand`]'s work: the body parsed by its front-end's `read`, the prompt's ids
/// made (`ask.input` is taken).
fn read_request(
    language: &Language,
    read: impl FnOnce(&[u8]) -> Result<Ask, GatewayError>,
    window: Option<u32>,
    body: &[u8],
) -> Result<(Ask, Vec<u32>), GatewayError> {
    with_prompt(language, window, read(body)?)
}

/// The prompt's ids made from `ask.input` (which is taken).
fn with_prompt(
    language: &Language,
    window: Option<u32>,
    mut ask: Ask,
) -> Result<(Ask, Vec<u32>), GatewayError> {
    let input = std::mem::replace(&mut ask.input, Input::Ids(Vec::new()));
    let (prompt, opened) = prompt_ids(language, window, input)?;
    ask.opened_by_prompt = opened;
    Ok((ask, prompt))
}

/// Refuses a prompt of `bytes` that cannot fit `window` whatever its tokens.
pub fn fits(language: &Language, window: Option<u32>, bytes: usize) -> Result<(), GatewayError> {
    let Some(window) = window else {
        return Ok(());
    };
    let at_least = language.tokens_at_least(bytes);
    if at_least > window as usize {
        return Err(GatewayError::PromptTooLong {
            bytes,
            at_least,
            window,
        });
    }
    Ok(())
}

/// Whether a rendered chat prompt ends inside a reasoning block: templates of thinking
/// models (DeepSeek-R1, Qwen3's Thinking models, MiniMax-M2) end the generation prompt
/// with the opening tag.
fn opens_reasoning(rendered: &str) -> bool {
    let end = rendered.trim_end();
    ["<think>", "\u{25c1}think\u{25b7}"]
        .iter()
        .any(|tag| end.ends_with(tag))
}

/// The prompt's token ids: a chat rendered by the model's template then tokenized as is
/// (the template writes any BOS itself), a text prompt tokenized with the tokenizer's
/// special tokens, token ids as given; and whether the prompt opened a reasoning block.
fn prompt_ids(
    language: &Language,
    window: Option<u32>,
    input: Input,
) -> Result<(Vec<u32>, bool), GatewayError> {
    let (text, add_special) = match input {
        Input::Ids(ids) => {
            if let Some(id) = language.unknown_id(&ids) {
                return Err(GatewayError::InvalidRequest {
                    message: format!(
                        "token id {id} is outside the model's vocabulary (ids below {})",
                        language.vocab_end
                    ),
                });
            }
            return Ok((ids, false));
        }
        Input::Text(text) => (text, true),
        Input::Chat {
            messages,
            tools,
            add_generation_prompt,
            kwargs,
        } => {
            let Some(template) = &language.template else {
                return Err(GatewayError::ChatTemplate {
                    message: "the model has no chat template; use /v1/completions".into(),
                });
            };
            let rendered = template
                .render(&RenderInput {
                    messages: &messages,
                    tools: tools.as_ref(),
                    add_generation_prompt,
                    kwargs: kwargs.as_ref(),
                    bos_token: language.bos_token.as_deref(),
                    eos_token: language.eos_token.as_deref(),
                })
                .map_err(|err| GatewayError::ChatTemplate {
                    message: err.to_string(),
                })?;
            (rendered, false)
        }
    };
    fits(language, window, text.len())?;
    let opened = !add_special && opens_reasoning(&text);
    encode_cache::encode(language, &text, add_special)
        .map(|ids| (ids, opened))
        .map_err(|err| GatewayError::InvalidRequest {
            message: format!("the prompt could not be tokenized: {err}"),
        })
}
