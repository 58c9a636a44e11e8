//! One round of a streamed tool loop: the provider's events relayed to the client as they
//! come, while the round's answer is rebuilt for the next turn.
//!
//! Content blocks are forwarded with the indexes of the client's stream (which also holds
//! the MCP blocks of earlier rounds); a `tool_use` of an MCP tool is held back, since the
//! client gets the call as an `mcp_tool_use` block once it has run. `ping`s pass;
//! `message_start`, `message_delta` and `message_stop` of the round are the loop's to write
//! once, at the ends of the whole answer, and their usage and stop fields are kept.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::events::event;
use crate::sse::SseParser;

/// Largest single event of a provider stream.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
/// Most content blocks of one round.
const MAX_BLOCKS: usize = 4096;

/// A block of the round: its content as far as the deltas built it, its index in the
/// client's stream (none when held back), its tool input as streamed so far.
struct Slot {
    block: Value,
    ours: Option<usize>,
    input_json: String,
}

/// What came of one provider event.
pub enum Step {
    /// Nothing for the client.
    Quiet,
    /// An event for the client.
    Send(Bytes),
    /// The provider sent an `error` event: its message.
    Failed(String),
}

/// The state of a round's stream.
pub struct Round {
    parser: SseParser,
    slots: Vec<Option<Slot>>,
    stop_reason: Value,
    stop_sequence: Value,
    usage: Map<String, Value>,
    ended: bool,
}

impl Round {
    pub fn new() -> Round {
        Round {
            parser: SseParser::new(MAX_EVENT_BYTES),
            slots: Vec::new(),
            stop_reason: Value::Null,
            stop_sequence: Value::Null,
            usage: Map::new(),
            ended: false,
        }
    }

    /// Whether the provider sent `message_stop`.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Feeds a chunk of the provider's stream: the steps of the events it completed.
    /// `owners` names the MCP tools; `next` is the client stream's next block index.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        owners: &HashMap<String, usize>,
        next: &mut usize,
    ) -> Result<Vec<Step>, String> {
        let mut events: Vec<(String, Value)> = Vec::new();
        self.parser
            .feed(chunk, |frame| {
                if let Ok(data) = serde_json::from_slice::<Value>(frame.data) {
                    events.push((String::from_utf8_lossy(frame.event).into_owned(), data));
                }
            })
            .map_err(|err| err.to_string())?;
        let mut steps = Vec::with_capacity(events.len());
        for (name, data) in events {
            steps.push(self.step(&name, data, owners, next)?);
        }
        Ok(steps)
    }

    fn step(
        &mut self,
        name: &str,
        mut data: Value,
        owners: &HashMap<String, usize>,
        next: &mut usize,
    ) -> Result<Step, String> {
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                merge(&mut self.usage, data.pointer("/message/usage"));
                Ok(Step::Quiet)
            }
            "message_delta" => {
                if let Some(delta) = data.get("delta") {
                    self.stop_reason = delta.get("stop_reason").cloned().unwrap_or(Value::Null);
                    self.stop_sequence = delta.get("stop_sequence").cloned().unwrap_or(Value::Null);
                }
                merge(&mut self.usage, data.get("usage"));
                Ok(Step::Quiet)
            }
            "message_stop" => {
                self.ended = true;
                Ok(Step::Quiet)
            }
            "ping" => Ok(Step::Send(event(name, &data))),
            "error" => Ok(Step::Failed(
                data.pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the provider's stream failed")
                    .to_owned(),
            )),
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                let held = block.get("type").and_then(Value::as_str) == Some("tool_use")
                    && block
                        .get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| owners.contains_key(n));
                let ours = (!held).then(|| {
                    *next += 1;
                    *next - 1
                });
                if self.slots.len() <= index {
                    self.slots.resize_with(index + 1, || None);
                }
                self.slots[index] = Some(Slot {
                    block,
                    ours,
                    input_json: String::new(),
                });
                Ok(self.forward(name, &mut data, ours))
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
                    return Err(format!("a delta for block {index}, which never started"));
                };
                if let Some(delta) = data.get("delta") {
                    apply(slot, delta);
                }
                let ours = slot.ours;
                Ok(self.forward(name, &mut data, ours))
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
                    return Err(format!("block {index} stopped without starting"));
                };
                if !slot.input_json.is_empty() {
                    let input = serde_json::from_str(&slot.input_json)
                        .map_err(|err| format!("a tool input that is not JSON: {err}"))?;
                    slot.block["input"] = input;
                }
                let ours = slot.ours;
                Ok(self.forward(name, &mut data, ours))
            }
            // An event type this gateway does not know: not a block's, so not the client's.
            _ => Ok(Step::Quiet),
        }
    }

    /// The event with the client stream's index, or nothing for a held-back block.
    fn forward(&self, name: &str, data: &mut Value, ours: Option<usize>) -> Step {
        match ours {
            Some(index) => {
                data["index"] = json!(index);
                Step::Send(event(name, data))
            }
            None => Step::Quiet,
        }
    }

    /// The round's answer as a whole Messages response would give it.
    pub fn answer(self) -> Value {
        let content: Vec<Value> = self.slots.into_iter().flatten().map(|s| s.block).collect();
        json!({"content": content, "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence, "usage": self.usage})
    }
}

/// A block event's `index`, bounded.
fn index_of(data: &Value) -> Result<usize, String> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < MAX_BLOCKS)
        .ok_or_else(|| "a block event without a usable index".to_owned())
}

/// A delta applied to its block, so the round's answer holds what the client saw.
fn apply(slot: &mut Slot, delta: &Value) {
    let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
    let append = |block: &mut Value, field: &str, more: &str| {
        let mut now = block
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        now.push_str(more);
        block[field] = json!(now);
    };
    match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => append(&mut slot.block, "text", text("text")),
        Some("thinking_delta") => append(&mut slot.block, "thinking", text("thinking")),
        Some("signature_delta") => slot.block["signature"] = json!(text("signature")),
        Some("input_json_delta") => slot.input_json.push_str(text("partial_json")),
        Some("citations_delta") => {
            if let Some(citation) = delta.get("citation") {
                match slot.block.get_mut("citations") {
                    Some(Value::Array(list)) => list.push(citation.clone()),
                    _ => slot.block["citations"] = json!([citation]),
                }
            }
        }
        _ => {}
    }
}

/// Later usage figures replace earlier ones (a stream's counts are running totals).
fn merge(usage: &mut Map<String, Value>, more: Option<&Value>) {
    if let Some(Value::Object(more)) = more {
        for (key, value) in more {
            if !value.is_null() {
                usage.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: ping\ndata: {\"type\":\"ping\"}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"add.\"}}\n\n\
        event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"add\",\"input\":{}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 2,\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" \\\"b\\\": 3}\"}}\n\n\
        event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    fn owners() -> HashMap<String, usize> {
        HashMap::from([("add".to_owned(), 0)])
    }

    #[test]
    fn blocks_are_relayed_renumbered_and_mcp_calls_held_back() {
        for cut in [1, 7, 100, 333, STREAM.len() - 3] {
            let mut round = Round::new();
            let mut next = 4;
            let (a, b) = STREAM.as_bytes().split_at(cut);
            let mut sent = Vec::new();
            for chunk in [a, b] {
                for step in round.feed(chunk, &owners(), &mut next).unwrap() {
                    match step {
                        Step::Send(bytes) => sent.push(String::from_utf8(bytes.to_vec()).unwrap()),
                        Step::Quiet => {}
                        Step::Failed(m) => panic!("{m}"),
                    }
                }
            }
            assert!(round.ended());
            assert_eq!(next, 5, "one block relayed");
            assert_eq!(sent.len(), 5, "start, ping, two deltas, stop: {sent:?}");
            assert!(sent
                .iter()
                .filter(|e| !e.starts_with("event: ping"))
                .all(|e| e.contains("\"index\":4")));
            let answer = round.answer();
            assert_eq!(
                answer["content"][0],
                json!({"type": "text", "text": "Let me add."})
            );
            assert_eq!(answer["content"][1]["input"], json!({"a": 2, "b": 3}));
            assert_eq!(answer["stop_reason"], "tool_use");
            assert_eq!(
                answer["usage"],
                json!({"input_tokens": 12, "output_tokens": 9})
            );
        }
    }

    #[test]
    fn errors_and_broken_streams() {
        let mut round = Round::new();
        let mut next = 0;
        let steps = round
            .feed(
                b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
                &owners(),
                &mut next,
            )
            .unwrap();
        assert!(matches!(&steps[0], Step::Failed(m) if m == "Overloaded"));
        let mut round = Round::new();
        let orphan = b"data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{}}\n\n";
        assert!(round.feed(orphan, &owners(), &mut next).is_err());
        let mut round = Round::new();
        let far =
            b"data: {\"type\":\"content_block_start\",\"index\":99999,\"content_block\":{}}\n\n";
        assert!(round.feed(far, &owners(), &mut next).is_err());
    }
}
