//! The Messages stream events the tool loop writes (spec 2, "Messages stream"): each event
//! an `event:` line naming its type and a `data:` line of JSON.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::sse;

/// One event.
pub fn event(name: &str, data: &Value) -> Bytes {
    sse::write::event(64 + name.len(), Some(name), data)
}

/// `message_start`: the message with no content yet and zero counters.
pub fn message_start(id: &str, model: &str) -> Bytes {
    event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    )
}

/// The events of one whole content block at `index`: its start, its content as one delta
/// where the type streams (text, tool input, thinking), its stop.
pub fn block(index: usize, block: &Value) -> Vec<Bytes> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let field = |name: &str| block.get(name).cloned().unwrap_or(Value::Null);
    let (start, deltas): (Value, Vec<Value>) = match kind {
        "text" => (
            json!({"type": "text", "text": ""}),
            vec![json!({"type": "text_delta", "text": field("text")})],
        ),
        "tool_use" => (
            json!({"type": "tool_use", "id": field("id"), "name": field("name"), "input": {}}),
            vec![json!({"type": "input_json_delta",
                "partial_json": field("input").to_string()})],
        ),
        "thinking" => (
            json!({"type": "thinking", "thinking": ""}),
            vec![
                json!({"type": "thinking_delta", "thinking": field("thinking")}),
                json!({"type": "signature_delta", "signature": field("signature")}),
            ],
        ),
        _ => (block.clone(), Vec::new()),
    };
    let mut events = vec![event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": start}),
    )];
    for delta in deltas {
        events.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    events.push(event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    ));
    events
}

/// `message_delta` with the final stop and usage, then `message_stop`.
pub fn end(stop_reason: &Value, stop_sequence: &Value, usage: &Value) -> [Bytes; 2] {
    [
        event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": usage}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ]
}

/// `error`: a failure after the stream started.
pub fn error(message: &str) -> Bytes {
    event(
        "error",
        &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &Bytes) -> (String, Value) {
        let text = std::str::from_utf8(bytes).unwrap();
        let mut lines = text.lines();
        let name = lines
            .next()
            .unwrap()
            .strip_prefix("event: ")
            .unwrap()
            .to_owned();
        let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
        assert!(text.ends_with("\n\n"));
        (name, serde_json::from_str(data).unwrap())
    }

    #[test]
    fn blocks_stream_as_start_delta_stop() {
        let events = block(
            2,
            &json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}),
        );
        let parsed: Vec<_> = events.iter().map(parse).collect();
        assert_eq!(parsed[0].0, "content_block_start");
        assert_eq!(parsed[0].1["content_block"]["input"], json!({}));
        assert_eq!(parsed[1].1["delta"]["partial_json"], r#"{"a":1}"#);
        assert_eq!(
            parsed[2].1,
            json!({"type": "content_block_stop", "index": 2})
        );

        let mcp = json!({"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "add",
            "server_name": "s", "input": {}});
        let events = block(0, &mcp);
        assert_eq!(
            events.len(),
            2,
            "a block that does not stream is started whole"
        );
        assert_eq!(parse(&events[0]).1["content_block"], mcp);

        let text = block(1, &json!({"type": "text", "text": "hi"}));
        assert_eq!(
            parse(&text[1]).1["delta"],
            json!({"type": "text_delta", "text": "hi"})
        );
    }

    #[test]
    fn start_end_and_error() {
        let (name, start) = parse(&message_start("msg_1", "m"));
        assert_eq!(name, "message_start");
        assert_eq!(start["message"]["usage"]["output_tokens"], 0);
        let [delta, stop] = end(
            &json!("end_turn"),
            &Value::Null,
            &json!({"output_tokens": 3}),
        );
        assert_eq!(parse(&delta).1["delta"]["stop_reason"], "end_turn");
        assert_eq!(parse(&stop).0, "message_stop");
        assert_eq!(parse(&error("x")).1["error"]["type"], "api_error");
    }
}
