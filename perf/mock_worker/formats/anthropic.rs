//! Anthropic Messages API.
//!
//! Anthropic's `input_tokens` counts only prompt tokens that were not
//! read from cache; those are reported in `cache_read_input_tokens`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{text_of, token_text, Completion, Finish};
use crate::sse;

fn stop_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
    }
}

fn usage(c: &Completion, output_tokens: u64) -> Value {
    json!({
        "input_tokens": c.prompt_tokens.saturating_sub(c.cached_tokens),
        "output_tokens": output_tokens,
        "cache_read_input_tokens": c.cached_tokens,
        "cache_creation_input_tokens": 0,
    })
}

pub fn response(c: &Completion) -> Value {
    json!({
        "id": format!("msg_{}", c.id),
        "type": "message",
        "role": "assistant",
        "model": c.model,
        "content": [{"type": "text", "text": text_of(c.completion_tokens)}],
        "stop_reason": stop_reason(c.finish),
        "stop_sequence": null,
        "usage": usage(c, c.completion_tokens),
    })
}

pub fn start_events(c: &Completion) -> Vec<Bytes> {
    let message = json!({
        "id": format!("msg_{}", c.id),
        "type": "message",
        "role": "assistant",
        "model": c.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage(c, 0),
    });
    vec![
        sse::named(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        ),
        sse::named(
            "content_block_start",
            &json!({
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }),
        ),
    ]
}

pub fn token_event(i: u64) -> Bytes {
    sse::named(
        "content_block_delta",
        &json!({
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": token_text(i)},
        }),
    )
}

pub fn end_events(c: &Completion) -> Vec<Bytes> {
    vec![
        sse::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        sse::named(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(c.finish), "stop_sequence": null},
                "usage": {"output_tokens": c.completion_tokens},
            }),
        ),
        sse::named("message_stop", &json!({"type": "message_stop"})),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{completion, data_of, name_of};
    use crate::prompt::Api;

    #[test]
    fn non_stream_shape() {
        let v = completion(Api::Messages, 2).response();
        assert_eq!(v["type"], "message");
        assert_eq!(v["id"], "msg_abc");
        assert_eq!(v["content"][0]["text"], "tok0 tok1 ");
        assert_eq!(v["stop_reason"], "max_tokens");
        assert_eq!(v["usage"]["input_tokens"], 6);
        assert_eq!(v["usage"]["output_tokens"], 2);
        assert_eq!(v["usage"]["cache_read_input_tokens"], 4);
    }

    #[test]
    fn stream_event_sequence() {
        let events = completion(Api::Messages, 2).stream_all();
        let names: Vec<&str> = events.iter().map(|e| name_of(e)).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for event in &events {
            assert_eq!(data_of(event)["type"], name_of(event));
        }
        assert_eq!(data_of(&events[3])["delta"]["text"], "tok1 ");
        assert_eq!(data_of(&events[5])["delta"]["stop_reason"], "max_tokens");
        assert_eq!(data_of(&events[5])["usage"]["output_tokens"], 2);
    }
}
