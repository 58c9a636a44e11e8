//! The Messages response a provider returns (spec 2, "Messages response"), read to check
//! it is one and written anew.
//!
//! The schema is what spec 2 promises: `{id, type: "message", role: "assistant",
//! content: [blocks], model, stop_reason, stop_sequence, usage: {input_tokens,
//! output_tokens, ...}}`, both stop fields present (null allowed). Everything else is kept
//! as it came: fields the gateway does not model (`container`, usage's cache counters,
//! `service_tier`, ...) and block types beyond the spec's, since the provider's API grows
//! faster than this gateway. The blocks the spec names are checked for the fields a client
//! reads from them.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

#[derive(Deserialize, Serialize)]
struct Message {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    role: String,
    content: Vec<Block>,
    model: String,
    #[serde(deserialize_with = "present_or_null")]
    stop_reason: Option<String>,
    #[serde(deserialize_with = "present_or_null")]
    stop_sequence: Option<String>,
    usage: Usage,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize)]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// A string or null that must be there: serde treats a field with its own deserializer
/// as required, where a plain `Option` would let it be missing.
fn present_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// `body` checked against the Messages response schema and serialised again, or why it is
/// not a Messages response.
pub fn reserialize(body: &[u8]) -> Result<Vec<u8>, String> {
    let message: Message = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if message.kind != "message" {
        return Err(format!("type is {:?}, not \"message\"", message.kind));
    }
    if message.role != "assistant" {
        return Err(format!("role is {:?}, not \"assistant\"", message.role));
    }
    for (index, block) in message.content.iter().enumerate() {
        block
            .check()
            .map_err(|field| format!("content[{index}] ({}) has no valid {field}", block.kind))?;
    }
    serde_json::to_vec(&message).map_err(|e| e.to_string())
}

impl Block {
    /// The field of a spec block that is missing or of the wrong type, if any.
    fn check(&self) -> Result<(), &'static str> {
        let string = |field| self.rest.get(field).is_some_and(Value::is_string);
        let checks: &[(&'static str, bool)] = match self.kind.as_str() {
            "text" => &[("text", string("text"))],
            "thinking" => &[("thinking", string("thinking"))],
            "redacted_thinking" => &[("data", string("data"))],
            "tool_use" | "server_tool_use" => &[
                ("id", string("id")),
                ("name", string("name")),
                (
                    "input",
                    self.rest.get("input").is_some_and(Value::is_object),
                ),
            ],
            _ => &[],
        };
        match checks.iter().find(|(_, ok)| !ok) {
            Some((field, _)) => Err(field),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(v: &Value) -> Result<Value, String> {
        reserialize(&serde_json::to_vec(v).unwrap())
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
    }

    fn full() -> Value {
        json!({
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "text", "text": "hi", "citations": null},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": [1, 2.5]}},
                {"type": "block_from_the_future", "payload": {"x": true}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 3,
                "cache_creation_input_tokens": null,
                "cache_read_input_tokens": 0,
                "server_tool_use": {"web_search_requests": 1},
                "service_tier": "standard",
            },
            "container": {"id": "c1", "expires_at": "2026-01-01T00:00:00Z"},
            "context_management": null,
        })
    }

    #[test]
    fn unknown_fields_and_blocks_survive_unchanged() {
        let original = full();
        assert_eq!(roundtrip(&original).unwrap(), original);
        let minimal = json!({
            "id": "m", "type": "message", "role": "assistant", "model": "x", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        assert_eq!(roundtrip(&minimal).unwrap(), minimal);
    }

    #[test]
    fn what_is_not_a_messages_response() {
        assert!(reserialize(b"not json").is_err());
        assert!(reserialize(b"[]").is_err());
        let broken: [(&str, Value); 9] = [
            ("content", Value::Null),
            ("type", json!("error")),
            ("role", json!("user")),
            ("usage", json!({"input_tokens": 1})),
            ("id", json!(7)),
            ("content", json!([{"text": "no type"}])),
            ("content", json!([{"type": "text"}])),
            (
                "content",
                json!([{"type": "tool_use", "id": "t", "name": "n", "input": "{}"}]),
            ),
            ("stop_sequence", json!(3)),
        ];
        for (field, value) in broken {
            let mut body = full();
            body[field] = value.clone();
            assert!(roundtrip(&body).is_err(), "{field}: {value}");
        }
        for field in ["stop_reason", "stop_sequence", "model"] {
            let mut body = full();
            body.as_object_mut().unwrap().remove(field);
            let err = roundtrip(&body).unwrap_err();
            assert!(err.contains(field), "{err}");
        }
    }
}
