//! OpenAI chat completions and legacy text completions.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{text_of, token_text, Completion};
use crate::sse;

pub fn usage(c: &Completion) -> Value {
    json!({
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "total_tokens": c.prompt_tokens + c.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": c.cached_tokens},
    })
}

pub fn chat_response(c: &Completion) -> Value {
    json!({
        "id": format!("chatcmpl-{}", c.id),
        "object": "chat.completion",
        "created": c.created,
        "model": c.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text_of(c.completion_tokens)},
            "logprobs": null,
            "finish_reason": c.finish.openai(),
        }],
        "usage": usage(c),
    })
}

fn chat_chunk(c: &Completion, delta: Value, finish_reason: Value) -> Bytes {
    sse::data(&json!({
        "id": format!("chatcmpl-{}", c.id),
        "object": "chat.completion.chunk",
        "created": c.created,
        "model": c.model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
    }))
}

pub fn chat_role_chunk(c: &Completion) -> Bytes {
    chat_chunk(c, json!({"role": "assistant", "content": ""}), Value::Null)
}

pub fn chat_token_chunk(c: &Completion, i: u64) -> Bytes {
    chat_chunk(c, json!({"content": token_text(i)}), Value::Null)
}

pub fn chat_end_events(c: &Completion) -> Vec<Bytes> {
    let mut events = vec![chat_chunk(c, json!({}), json!(c.finish.openai()))];
    if c.include_usage {
        events.push(usage_chunk(c, "chat.completion.chunk", "chatcmpl"));
    }
    events.push(sse::done());
    events
}

pub fn text_response(c: &Completion) -> Value {
    json!({
        "id": format!("cmpl-{}", c.id),
        "object": "text_completion",
        "created": c.created,
        "model": c.model,
        "choices": [{
            "index": 0,
            "text": text_of(c.completion_tokens),
            "logprobs": null,
            "finish_reason": c.finish.openai(),
        }],
        "usage": usage(c),
    })
}

fn text_chunk(c: &Completion, text: String, finish_reason: Value) -> Bytes {
    sse::data(&json!({
        "id": format!("cmpl-{}", c.id),
        "object": "text_completion",
        "created": c.created,
        "model": c.model,
        "choices": [{
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
    }))
}

pub fn text_token_chunk(c: &Completion, i: u64) -> Bytes {
    text_chunk(c, token_text(i), Value::Null)
}

pub fn text_end_events(c: &Completion) -> Vec<Bytes> {
    let mut events = vec![text_chunk(c, String::new(), json!(c.finish.openai()))];
    if c.include_usage {
        events.push(usage_chunk(c, "text_completion", "cmpl"));
    }
    events.push(sse::done());
    events
}

/// The trailing usage-only chunk of `stream_options.include_usage`.
fn usage_chunk(c: &Completion, object: &str, id_prefix: &str) -> Bytes {
    sse::data(&json!({
        "id": format!("{id_prefix}-{}", c.id),
        "object": object,
        "created": c.created,
        "model": c.model,
        "choices": [],
        "usage": usage(c),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{completion, data_of};
    use crate::prompt::Api;

    #[test]
    fn chat_non_stream_shape() {
        let v = completion(Api::Chat, 2).response();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["id"], "chatcmpl-abc");
        assert_eq!(v["choices"][0]["message"]["content"], "tok0 tok1 ");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["prompt_tokens"], 10);
        assert_eq!(v["usage"]["completion_tokens"], 2);
        assert_eq!(v["usage"]["total_tokens"], 12);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
    }

    #[test]
    fn chat_stream_sequence() {
        let events = completion(Api::Chat, 2).stream_all();
        assert_eq!(events.len(), 6);
        let role = data_of(&events[0]);
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            data_of(&events[1])["choices"][0]["delta"]["content"],
            "tok0 "
        );
        assert_eq!(
            data_of(&events[2])["choices"][0]["delta"]["content"],
            "tok1 "
        );
        assert_eq!(data_of(&events[3])["choices"][0]["finish_reason"], "length");
        let usage = data_of(&events[4]);
        assert_eq!(usage["choices"].as_array().map(Vec::len), Some(0));
        assert_eq!(usage["usage"]["completion_tokens"], 2);
        assert_eq!(events[5], "data: [DONE]\n\n");
    }

    #[test]
    fn chat_stream_without_usage() {
        let mut c = completion(Api::Chat, 1);
        c.include_usage = false;
        let events = c.stream_all();
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|e| !e.contains("\"usage\"")));
    }

    #[test]
    fn completions_shapes() {
        let v = completion(Api::Completions, 3).response();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "tok0 tok1 tok2 ");
        let events = completion(Api::Completions, 1).stream_all();
        assert_eq!(events.len(), 4);
        assert_eq!(data_of(&events[0])["choices"][0]["text"], "tok0 ");
        assert_eq!(data_of(&events[1])["choices"][0]["finish_reason"], "length");
        assert_eq!(data_of(&events[2])["usage"]["total_tokens"], 11);
        assert_eq!(events[3], "data: [DONE]\n\n");
    }
}
