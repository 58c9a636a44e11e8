//! A provider's Responses answer read as the chat pipeline's deltas, so the gateway's own
//! writer makes the client's items and events from it whatever their source.
//!
//! Streamed, the provider's events map as follows (every other event carries nothing the
//! gateway's items need): `response.output_text.delta` and `response.refusal.delta` are
//! answer text; `response.reasoning_text.delta` and `response.reasoning_summary_text.delta`
//! reasoning; a `function_call` opened by `response.output_item.added` is a call whose
//! arguments come from `response.function_call_arguments.delta` (or whole, from
//! `response.output_item.done`, when none streamed); `response.completed`,
//! `response.incomplete`, `response.failed` and `error` end the turn. Whole, the answer's
//! `output` items give the same deltas in order.
//!
//! Items of the provider's own tools (a `web_search_call`, say) are not carried over: the
//! client gets the text they led to.

use serde_json::Value;

use crate::generation::delta::{CallDelta, Delta, Finish, TurnEnd, Usage};
use crate::http::error::GatewayError;
use crate::sse::SseParser;

/// Largest single event of a provider stream.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
/// Most function calls one turn may open; later ones are dropped.
const MAX_CALLS: usize = 1024;

/// A function call opened by the stream: its `output_index`, and whether any of its
/// arguments streamed.
struct OpenCall {
    index: usize,
    streamed: bool,
}

/// The state of one streamed turn.
pub struct Reading {
    parser: SseParser,
    /// What the events read since the caller last took it made.
    pub delta: Delta,
    calls: Vec<OpenCall>,
    end: Option<TurnEnd>,
    /// An ending event came: the rest of the stream is not read.
    ended: bool,
}

impl Default for Reading {
    fn default() -> Self {
        Reading {
            parser: SseParser::new(MAX_EVENT_BYTES),
            delta: Delta::default(),
            calls: Vec::new(),
            end: None,
            ended: false,
        }
    }
}

impl Reading {
    /// Reads a chunk of the stream; an error when it is no event stream within bounds.
    /// Events after the end are ignored.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut events: Vec<Value> = Vec::new();
        self.parser
            .feed(chunk, |frame| {
                if let Ok(Value::Object(mut data)) = serde_json::from_slice::<Value>(frame.data) {
                    if !data.contains_key("type") && !frame.event.is_empty() {
                        let name = String::from_utf8_lossy(frame.event).into_owned();
                        data.insert("type".into(), Value::String(name));
                    }
                    events.push(Value::Object(data));
                }
            })
            .map_err(|err| err.to_string())?;
        for event in &events {
            if self.ended {
                break;
            }
            self.event(event);
            self.ended = self.end.is_some();
        }
        Ok(())
    }

    /// How the turn ended, once an ending event came.
    pub fn take_end(&mut self) -> Option<TurnEnd> {
        self.end.take()
    }

    fn event(&mut self, event: &Value) {
        let index = event
            .get("output_index")
            .and_then(Value::as_u64)
            .map(|i| usize::try_from(i).unwrap_or(usize::MAX));
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "response.output_text.delta" | "response.refusal.delta" => {
                self.delta.text.push_str(text("delta"));
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                self.delta.reasoning.push_str(text("delta"));
            }
            "response.output_item.added" => {
                if let (Some(index), Some(item)) = (index, event.get("item")) {
                    if is_call(item) {
                        self.open(index, item);
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                let fragment = text("delta");
                if let Some(call) = self.calls.iter_mut().find(|c| Some(c.index) == index) {
                    call.streamed = true;
                    self.delta.calls.push(CallDelta::Arguments {
                        index: call.index,
                        fragment: fragment.to_owned(),
                    });
                }
            }
            "response.output_item.done" => {
                if let (Some(index), Some(item)) = (index, event.get("item")) {
                    if is_call(item) {
                        self.close(index, item);
                    }
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.end = Some(end_of(event.get("response").unwrap_or(&Value::Null)));
            }
            "error" => {
                let message = event
                    .get("message")
                    .or_else(|| event.pointer("/error/message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the provider's stream failed");
                self.end = Some(failed(message));
            }
            _ => {}
        }
    }

    /// A call opened: its start, and its arguments when the opening carries them.
    fn open(&mut self, index: usize, item: &Value) {
        if self.calls.len() >= MAX_CALLS || self.calls.iter().any(|c| c.index == index) {
            return;
        }
        self.delta.calls.push(CallDelta::Start {
            index,
            id: field(item, "call_id").to_owned(),
            name: field(item, "name").to_owned(),
        });
        let arguments = field(item, "arguments");
        if !arguments.is_empty() {
            self.delta.calls.push(CallDelta::Arguments {
                index,
                fragment: arguments.to_owned(),
            });
        }
        self.calls.push(OpenCall {
            index,
            streamed: !arguments.is_empty(),
        });
    }

    /// A call done: its arguments, when none streamed (opened here if it never was).
    fn close(&mut self, index: usize, item: &Value) {
        match self.calls.iter_mut().find(|c| c.index == index) {
            Some(call) if call.streamed => {}
            Some(call) => {
                call.streamed = true;
                self.delta.calls.push(CallDelta::Arguments {
                    index,
                    fragment: field(item, "arguments").to_owned(),
                });
            }
            None => self.open(index, item),
        }
    }
}

/// A whole (unstreamed) answer: the deltas of its `output` in order, and its ending.
pub fn whole(answer: &Value) -> (Delta, TurnEnd) {
    let mut delta = Delta::default();
    let output = answer
        .get("output")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, item) in output.iter().enumerate().take(MAX_CALLS) {
        match field(item, "type") {
            "message" => {
                for part in parts(item, "content") {
                    let text = part
                        .get("text")
                        .or_else(|| part.get("refusal"))
                        .and_then(Value::as_str);
                    delta.text.push_str(text.unwrap_or_default());
                }
            }
            "reasoning" => {
                for part in parts(item, "summary").iter().chain(parts(item, "content")) {
                    delta.reasoning.push_str(field(part, "text"));
                }
            }
            "function_call" => {
                delta.calls.push(CallDelta::Start {
                    index,
                    id: field(item, "call_id").to_owned(),
                    name: field(item, "name").to_owned(),
                });
                delta.calls.push(CallDelta::Arguments {
                    index,
                    fragment: field(item, "arguments").to_owned(),
                });
            }
            _ => {}
        }
    }
    (delta, end_of(answer))
}

/// How a response object's `status` ends the turn.
fn end_of(response: &Value) -> TurnEnd {
    let usage = usage_of(response.get("usage"));
    let finish = match field(response, "status") {
        "completed" => Finish::Stop,
        "incomplete" => match response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
        {
            Some("max_output_tokens") => Finish::Length,
            _ => Finish::Stop,
        },
        "failed" => {
            let message = response
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the provider failed the response");
            return TurnEnd {
                usage,
                ..failed(message)
            };
        }
        other => {
            return TurnEnd {
                usage,
                ..failed(&format!("the provider ended the response as `{other}`"))
            }
        }
    };
    TurnEnd {
        finish: Some(finish),
        error: None,
        usage,
    }
}

/// A turn the provider failed, with its message (bounded).
pub fn failed(message: &str) -> TurnEnd {
    TurnEnd {
        finish: None,
        error: Some(GatewayError::EngineFailed {
            message: crate::bounded::prefix_within(message, 512).to_owned(),
        }),
        usage: Usage::default(),
    }
}

fn usage_of(usage: Option<&Value>) -> Usage {
    let count = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    Usage::new(count("input_tokens"), count("output_tokens"))
}

fn is_call(item: &Value) -> bool {
    field(item, "type") == "function_call"
}

fn field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn parts<'a>(item: &'a Value, key: &str) -> &'a [Value] {
    item.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect()
    }

    /// Everything a stream gives, fed `step` bytes at a time.
    fn read(stream: &str, step: usize) -> (String, String, Vec<String>, Option<TurnEnd>) {
        let mut reading = Reading::default();
        let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        let mut end = None;
        for chunk in stream.as_bytes().chunks(step) {
            reading.feed(chunk).unwrap();
            text.push_str(&reading.delta.text);
            reasoning.push_str(&reading.delta.reasoning);
            for call in &reading.delta.calls {
                calls.push(match call {
                    CallDelta::Start { index, id, name } => format!("start {index} {id} {name}"),
                    CallDelta::Arguments { index, fragment } => format!("args {index} {fragment}"),
                });
            }
            reading.delta.clear();
            if let Some(e) = reading.take_end() {
                end = Some(e);
            }
        }
        (text, reasoning, calls, end)
    }

    fn stream() -> String {
        sse(&[
            json!({"type": "response.created", "response": {"status": "in_progress"}}),
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "hm"}),
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "Hel"}),
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "lo"}),
            json!({"type": "response.output_item.added", "output_index": 2,
                   "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{\"a\""}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": ":1}"}),
            json!({"type": "response.output_item.done", "output_index": 2,
                   "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"}}),
            json!({"type": "response.output_item.done", "output_index": 3,
                   "item": {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"}}),
            json!({"type": "response.completed", "response": {"status": "completed",
                   "usage": {"input_tokens": 7, "output_tokens": 5}}}),
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "late"}),
        ])
    }

    #[test]
    fn a_stream_reads_the_same_in_any_chunking() {
        let whole = stream();
        for step in [1, 3, 64, whole.len()] {
            let (text, reasoning, calls, end) = read(&whole, step);
            assert_eq!(text, "Hello", "step {step}");
            assert_eq!(reasoning, "hm");
            assert_eq!(
                calls,
                [
                    "start 2 c1 f",
                    "args 2 {\"a\"",
                    "args 2 :1}",
                    "start 3 c2 g",
                    "args 3 {}"
                ]
            );
            let end = end.unwrap();
            assert_eq!(end.finish, Some(Finish::Stop));
            assert!(end.error.is_none());
            assert_eq!(
                (end.usage.prompt_tokens, end.usage.completion_tokens),
                (7, 5)
            );
        }
    }

    #[test]
    fn incomplete_failed_and_error_events_end_the_turn() {
        let cut = sse(&[
            json!({"type": "response.incomplete", "response": {"status": "incomplete",
                               "incomplete_details": {"reason": "max_output_tokens"}}}),
        ]);
        assert_eq!(read(&cut, 5).3.unwrap().finish, Some(Finish::Length));
        let failed = sse(&[
            json!({"type": "response.failed", "response": {"status": "failed",
                                  "error": {"code": "server_error", "message": "boom"}}}),
        ]);
        let end = read(&failed, 5).3.unwrap();
        assert_eq!(end.finish, None);
        assert!(end.error.unwrap().to_string().contains("boom"));
        let error = sse(&[json!({"type": "error", "code": "x", "message": "bad"})]);
        assert!(read(&error, 2).3.unwrap().error.is_some());
        // Frames without `event:` lines are read by their `type`; junk is skipped.
        let bare =
            "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\ndata: [DONE]\n\n";
        let (text, _, _, end) = read(bare, 4);
        assert_eq!(text, "x");
        assert!(end.is_none());
    }

    #[test]
    fn an_oversized_event_is_an_error() {
        let mut reading = Reading::default();
        let big = vec![b'a'; MAX_EVENT_BYTES + 10];
        let mut failed = false;
        for chunk in big.chunks(1 << 20) {
            if reading.feed(b"data: ").is_err() || reading.feed(chunk).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
    }

    #[test]
    fn a_whole_answer_gives_its_items_in_order() {
        let answer = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "message", "content": [{"type": "output_text", "text": "Hi "},
                                                {"type": "refusal", "refusal": "no"}]},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
                {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        });
        let (delta, end) = whole(&answer);
        assert_eq!(delta.reasoning, "think");
        assert_eq!(delta.text, "Hi no");
        assert_eq!(delta.calls.len(), 2);
        assert!(
            matches!(&delta.calls[0], CallDelta::Start { index: 3, id, name } if id == "c9" && name == "f")
        );
        assert_eq!(end.finish, Some(Finish::Stop));
        assert_eq!(end.usage.total_tokens, 7);
        let queued = whole(&json!({"status": "queued"})).1;
        assert!(queued.error.is_some());
    }
}
