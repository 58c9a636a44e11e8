//! OpenAI Responses API.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{text_of, token_text, Completion};
use crate::sse;

fn item_id(c: &Completion) -> String {
    format!("msg_{}", c.id)
}

/// The response object; `done` selects the final form (completed, with
/// output and usage) over the initial in-progress one.
fn response_object(c: &Completion, done: bool) -> Value {
    let (status, output, usage) = if done {
        let output = json!([{
            "type": "message",
            "id": item_id(c),
            "status": "completed",
            "role": "assistant",
            "content": [{
                "type": "output_text",
                "text": text_of(c.completion_tokens),
                "annotations": [],
            }],
        }]);
        let usage = json!({
            "input_tokens": c.prompt_tokens,
            "input_tokens_details": {"cached_tokens": c.cached_tokens},
            "output_tokens": c.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.prompt_tokens + c.completion_tokens,
        });
        ("completed", output, usage)
    } else {
        ("in_progress", json!([]), Value::Null)
    };
    json!({
        "id": format!("resp_{}", c.id),
        "object": "response",
        "created_at": c.created,
        "status": status,
        "model": c.model,
        "output": output,
        "usage": usage,
        "error": null,
        "incomplete_details": null,
    })
}

pub fn response(c: &Completion) -> Value {
    response_object(c, true)
}

pub fn created_event(c: &Completion) -> Bytes {
    sse::named(
        "response.created",
        &json!({
            "type": "response.created",
            "sequence_number": 0,
            "response": response_object(c, false),
        }),
    )
}

pub fn delta_event(c: &Completion, i: u64) -> Bytes {
    sse::named(
        "response.output_text.delta",
        &json!({
            "type": "response.output_text.delta",
            "sequence_number": i + 1,
            "item_id": item_id(c),
            "output_index": 0,
            "content_index": 0,
            "delta": token_text(i),
        }),
    )
}

pub fn completed_event(c: &Completion) -> Bytes {
    sse::named(
        "response.completed",
        &json!({
            "type": "response.completed",
            "sequence_number": c.completion_tokens + 1,
            "response": response_object(c, true),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{completion, data_of, name_of};
    use crate::prompt::Api;

    #[test]
    fn non_stream_shape() {
        let v = completion(Api::Responses, 2).response();
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["output"][0]["type"], "message");
        assert_eq!(v["output"][0]["content"][0]["text"], "tok0 tok1 ");
        assert_eq!(v["usage"]["input_tokens"], 10);
        assert_eq!(v["usage"]["output_tokens"], 2);
        assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 4);
    }

    #[test]
    fn stream_event_sequence() {
        let events = completion(Api::Responses, 2).stream_all();
        let names: Vec<&str> = events.iter().map(|e| name_of(e)).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.completed"
            ]
        );
        assert_eq!(data_of(&events[0])["response"]["status"], "in_progress");
        assert_eq!(data_of(&events[2])["delta"], "tok1 ");
        assert_eq!(data_of(&events[3])["sequence_number"], 3);
        assert_eq!(data_of(&events[3])["response"]["usage"]["total_tokens"], 12);
    }
}
