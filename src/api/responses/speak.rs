//! The output of a Responses turn, item by item, and spec 2's event stream for it.
//!
//! The chat pipeline's deltas arrive final (decoded, cut at stops, split by the parsers),
//! so each becomes its events at once: reasoning first as its own item, the answer as a
//! `message` item, each tool call as a `function_call` item. An item opens with
//! `response.output_item.added` and closes with `response.output_item.done`, exactly once,
//! even when the generation fails (its status then says so). Every event carries the
//! next `sequence_number`. Whitespace the model writes before a call (the newline before
//! its call syntax) opens no message of its own.
//!
//! Unstreamed, the same writer builds the items and writes no events.

use std::collections::HashSet;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use super::mcp::HeldCall;
use crate::generation::delta::{CallDelta, Delta};
use crate::history::new_item_id;
use crate::mcp::builtins::BuiltinKind;
use crate::sse;

/// How the turn ended, for the status of the item still open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Finished normally.
    Done,
    /// `max_output_tokens` cut it.
    Cut,
    /// Generation failed partway.
    Failed,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
    Call,
}

struct Open {
    kind: Kind,
    /// A call's index among the parser's calls.
    call: Option<usize>,
    /// The item's `output_index`.
    index: usize,
    item: Value,
    /// Reasoning or answer text, or a call's arguments, so far.
    text: String,
}

/// Writes one response's output items and, streamed, their events.
pub struct Writer {
    streaming: bool,
    /// The next event's `sequence_number`.
    seq: u64,
    items: Vec<Value>,
    open: Option<Open>,
    /// Namespaces of the request's `namespace` tools: a call of `<namespace>.<name>` is
    /// answered with `name` and `namespace` apart.
    namespaces: HashSet<String>,
    /// Whitespace text not yet shown: a message only if text follows, or if the turn
    /// ends without calls.
    space: String,
    /// Calls made this turn.
    called: bool,
    /// Tools the gateway runs (MCP): their calls are held back, not shown as
    /// `function_call` items.
    gateway_tools: HashSet<String>,
    /// This turn's calls of gateway tools, and which parser index each is.
    held: Vec<(usize, HeldCall)>,
    frames: Vec<u8>,
}

impl Writer {
    pub fn new(
        streaming: bool,
        namespaces: HashSet<String>,
        gateway_tools: HashSet<String>,
    ) -> Writer {
        Writer {
            streaming,
            seq: 0,
            items: Vec::new(),
            open: None,
            namespaces,
            space: String::new(),
            called: false,
            gateway_tools,
            held: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// How many items are finished: where the next turn's items start.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Items finished from `from` on.
    pub fn since(&self, from: usize) -> &[Value] {
        self.items.get(from..).unwrap_or_default()
    }

    /// The calls of gateway tools this turn made, in order.
    pub fn take_held(&mut self) -> Vec<HeldCall> {
        self.held.drain(..).map(|(_, call)| call).collect()
    }

    /// A new model turn begins.
    pub fn next_turn(&mut self) {
        self.called = false;
        self.space.clear();
        self.held.clear();
    }

    /// An `mcp_list_tools` item, whole, with its events.
    pub fn listing(&mut self, item: Value) {
        let index = self.items.len();
        let id = item["id"].clone();
        let mut opening = item.clone();
        opening["tools"] = json!([]);
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        );
        self.event(
            "response.mcp_list_tools.in_progress",
            json!({"item_id": id, "output_index": index}),
        );
        self.event(
            "response.mcp_list_tools.completed",
            json!({"item_id": id, "output_index": index, "tools": item["tools"]}),
        );
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.items.push(item);
    }

    /// A call the gateway ran (an `mcp_call`, or a built-in's item), with its events.
    pub fn ran(&mut self, item: Value) {
        if item["type"] == "mcp_call" {
            self.mcp_call(item);
        } else {
            self.builtin_call(item);
        }
    }

    /// A built-in call's item, with spec 2's events: `response.<type>.in_progress`, the
    /// searching/interpreting/generating event, `response.<type>.completed`.
    fn builtin_call(&mut self, item: Value) {
        self.close(Ending::Done);
        let index = self.items.len();
        let id = item["id"].clone();
        let kind = item["type"].as_str().unwrap_or_default().to_owned();
        let working =
            BuiltinKind::of_item_type(&kind).map_or("searching", BuiltinKind::working_event);
        let mut opening = item.clone();
        opening["status"] = Value::String("in_progress".into());
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        );
        for step in ["in_progress", working, "completed"] {
            self.event(
                &format!("response.{kind}.{step}"),
                json!({"item_id": id, "output_index": index}),
            );
        }
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.items.push(item);
    }

    /// An `mcp_call` item the gateway ran, with its events: the arguments as a single
    /// delta, then `completed` or `failed`.
    fn mcp_call(&mut self, item: Value) {
        let index = self.items.len();
        let id = item["id"].clone();
        let mut opening = item.clone();
        opening["status"] = Value::String("in_progress".into());
        opening["output"] = Value::Null;
        opening["error"] = Value::Null;
        opening["arguments"] = Value::String(String::new());
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        );
        self.event(
            "response.mcp_call.in_progress",
            json!({"item_id": id, "output_index": index}),
        );
        self.event(
            "response.mcp_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": item["arguments"]}),
        );
        self.event(
            "response.mcp_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": item["arguments"]}),
        );
        if item["status"] == "failed" {
            let message = item["error"]["content"][0]["text"].clone();
            self.event(
                "response.mcp_call.failed",
                json!({"item_id": id, "output_index": index, "error": message}),
            );
        } else {
            self.event(
                "response.mcp_call.completed",
                json!({"item_id": id, "output_index": index}),
            );
        }
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.items.push(item);
    }

    /// An `mcp_approval_request` item, whole: a call held back for the client's approval.
    pub fn approval_request(&mut self, item: Value) {
        self.close(Ending::Done);
        let index = self.items.len();
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.items.push(item);
    }

    /// An event of `kind`; `data` gets its `type` and `sequence_number`.
    pub fn event(&mut self, kind: &str, mut data: Value) {
        if !self.streaming {
            return;
        }
        if let Value::Object(map) = &mut data {
            map.insert("type".into(), Value::String(kind.to_owned()));
            map.insert("sequence_number".into(), Value::from(self.seq));
        }
        self.seq += 1;
        write_frame(&mut self.frames, kind, &data);
    }

    /// The events written since the last call, if any.
    pub fn take_frames(&mut self) -> Option<Bytes> {
        (!self.frames.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.frames)))
    }

    pub fn take_items(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.items)
    }

    /// What one delta of the chat pipeline made final.
    pub fn delta(&mut self, delta: &Delta) {
        if !delta.reasoning.is_empty() {
            self.enter(Kind::Reasoning);
            self.grow(&delta.reasoning);
        }
        let in_call = self.open.as_ref().is_some_and(|o| o.kind == Kind::Call);
        if in_call {
            self.calls(&delta.calls);
            self.text(&delta.text);
        } else {
            self.text(&delta.text);
            self.calls(&delta.calls);
        }
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let in_message = self.open.as_ref().is_some_and(|o| o.kind == Kind::Message);
        if !in_message && text.trim().is_empty() {
            self.space.push_str(text);
            return;
        }
        self.enter(Kind::Message);
        let pending = std::mem::take(&mut self.space);
        if !pending.is_empty() {
            self.grow(&pending);
        }
        self.grow(text);
    }

    fn calls(&mut self, calls: &[CallDelta]) {
        for piece in calls {
            match piece {
                CallDelta::Start { index, id, name } if self.gateway_tools.contains(name) => {
                    self.space.clear();
                    self.called = true;
                    let call = HeldCall {
                        call_id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                    };
                    self.held.push((*index, call));
                }
                CallDelta::Arguments { index, fragment }
                    if self.held.iter().any(|(at, _)| at == index) =>
                {
                    if let Some((_, call)) = self.held.iter_mut().find(|(at, _)| at == index) {
                        call.arguments.push_str(fragment);
                    }
                }
                CallDelta::Start { index, id, name } => {
                    self.close(Ending::Done);
                    self.space.clear();
                    self.called = true;
                    let mut item = json!({"id": new_item_id("function_call"), "type": "function_call",
                                          "status": "in_progress", "arguments": "",
                                          "call_id": id, "name": name});
                    if let Some((namespace, member)) = name.split_once('.') {
                        if self.namespaces.contains(namespace) {
                            item["name"] = Value::String(member.to_owned());
                            item["namespace"] = Value::String(namespace.to_owned());
                        }
                    }
                    self.open_item(Kind::Call, Some(*index), item);
                }
                CallDelta::Arguments { index, fragment } => {
                    if self.open.as_ref().is_some_and(|o| o.call == Some(*index)) {
                        self.grow(fragment);
                    }
                }
            }
        }
    }

    /// Opens an item of `kind` unless one is open; closes any other first.
    fn enter(&mut self, kind: Kind) {
        if self.open.as_ref().is_some_and(|o| o.kind == kind) {
            return;
        }
        self.close(Ending::Done);
        let item = match kind {
            Kind::Reasoning => json!({"id": new_item_id("reasoning"), "type": "reasoning",
                                      "summary": [], "content": []}),
            _ => json!({"id": new_item_id("message"), "type": "message", "role": "assistant",
                        "status": "in_progress", "content": []}),
        };
        self.open_item(kind, None, item);
    }

    fn open_item(&mut self, kind: Kind, call: Option<usize>, item: Value) {
        let index = self.items.len();
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        let id = item["id"].clone();
        match kind {
            Kind::Reasoning => self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "reasoning_text", "text": ""}}),
            ),
            Kind::Message => self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": [],
                                "logprobs": []}}),
            ),
            Kind::Call => {}
        }
        self.open = Some(Open {
            kind,
            call,
            index,
            item,
            text: String::new(),
        });
    }

    /// Adds `piece` to the open item, with its delta event.
    fn grow(&mut self, piece: &str) {
        let Some(open) = &mut self.open else {
            return;
        };
        open.text.push_str(piece);
        if !self.streaming {
            return;
        }
        // The one event per delta is written straight from borrowed fields: no JSON value
        // is built for it.
        let kind = match open.kind {
            Kind::Reasoning => "response.reasoning_text.delta",
            Kind::Message => "response.output_text.delta",
            Kind::Call => "response.function_call_arguments.delta",
        };
        let event = DeltaEvent {
            kind,
            sequence_number: self.seq,
            item_id: open.item["id"].as_str().unwrap_or_default(),
            output_index: open.index,
            content_index: (open.kind != Kind::Call).then_some(0),
            delta: piece,
            logprobs: (open.kind == Kind::Message).then_some([]),
        };
        self.seq += 1;
        write_frame(&mut self.frames, kind, &event);
    }

    /// Closes the open item with the status `ending` gives it.
    fn close(&mut self, ending: Ending) {
        let Some(Open {
            kind,
            index,
            mut item,
            text,
            ..
        }) = self.open.take()
        else {
            return;
        };
        let id = item["id"].clone();
        match kind {
            Kind::Reasoning => {
                self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "text": text}),
                );
                let part = json!({"type": "reasoning_text", "text": text});
                self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": part}),
                );
                item["content"] = json!([part]);
                item["status"] = Value::String("completed".into());
            }
            Kind::Message => {
                self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "text": text, "logprobs": []}),
                );
                let part = json!({"type": "output_text", "text": text, "annotations": [],
                                  "logprobs": []});
                self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": part}),
                );
                item["content"] = json!([part]);
                item["status"] = Value::String(
                    if ending == Ending::Failed {
                        "in_progress"
                    } else {
                        "completed"
                    }
                    .into(),
                );
            }
            Kind::Call => {
                self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": text}),
                );
                item["arguments"] = Value::String(text);
                item["status"] = Value::String(
                    match ending {
                        Ending::Done => "completed",
                        Ending::Cut => "incomplete",
                        Ending::Failed => "in_progress",
                    }
                    .into(),
                );
            }
        }
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.items.push(item);
    }

    /// The end of the turn: whitespace alone becomes the answer when nothing was called;
    /// the item still open closes with the status `ending` gives it.
    pub fn finish(&mut self, ending: Ending) {
        if !self.space.is_empty() && !self.called && self.open.is_none() {
            let space = std::mem::take(&mut self.space);
            self.enter(Kind::Message);
            self.grow(&space);
        }
        self.close(ending);
    }
}

/// A delta event (`response.output_text.delta`, `response.reasoning_text.delta`,
/// `response.function_call_arguments.delta`), borrowed.
#[derive(Serialize)]
struct DeltaEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<u32>,
    delta: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<[u8; 0]>,
}

/// One SSE frame: `event: <kind>` and the JSON of `data`.
fn write_frame(frames: &mut Vec<u8>, kind: &str, data: &impl Serialize) {
    sse::write::put(frames, Some(kind), data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str, reasoning: &str, calls: Vec<CallDelta>) -> Delta {
        Delta {
            text: text.into(),
            reasoning: reasoning.into(),
            calls,
            ..Delta::default()
        }
    }

    fn events(frames: &[u8]) -> Vec<Value> {
        std::str::from_utf8(frames)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.split("data: ").nth(1).unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn reasoning_then_text_then_a_namespaced_call() {
        let mut w = Writer::new(true, HashSet::from(["ns".to_owned()]), HashSet::new());
        w.delta(&delta("", "think", vec![]));
        w.delta(&delta("Hello", "", vec![]));
        w.delta(&delta(
            "\n",
            "",
            vec![
                CallDelta::Start {
                    index: 0,
                    id: "call_1".into(),
                    name: "ns.f".into(),
                },
                CallDelta::Arguments {
                    index: 0,
                    fragment: "{}".into(),
                },
            ],
        ));
        w.finish(Ending::Done);
        let items = w.since(0);
        assert_eq!(items.len(), 3);
        assert_eq!(items[0]["content"][0]["text"], "think");
        assert_eq!(items[1]["content"][0]["text"], "Hello\n");
        assert_eq!(items[2]["name"], "f");
        assert_eq!(items[2]["namespace"], "ns");
        assert_eq!(items[2]["status"], "completed");
        let frames = w.take_frames().unwrap();
        let events = events(&frames);
        for (n, e) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], n as u64);
        }
        let added = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .count();
        let done = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .count();
        assert_eq!((added, done), (3, 3));
    }

    #[test]
    fn delta_events_carry_exactly_their_fields() {
        let mut w = Writer::new(true, HashSet::new(), HashSet::new());
        w.delta(&delta("", "hm", vec![]));
        w.delta(&delta("Hi \"there\"\n", "", vec![]));
        w.delta(&delta(
            "",
            "",
            vec![
                CallDelta::Start {
                    index: 0,
                    id: "call_1".into(),
                    name: "f".into(),
                },
                CallDelta::Arguments {
                    index: 0,
                    fragment: "{}".into(),
                },
            ],
        ));
        w.finish(Ending::Done);
        let events = events(&w.take_frames().unwrap());
        let items = w.since(0);
        let keys = |kind: &str| -> (Value, Vec<String>) {
            let e = events.iter().find(|e| e["type"] == kind).unwrap().clone();
            let mut keys: Vec<String> = e.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            (e, keys)
        };
        let (text, fields) = keys("response.output_text.delta");
        assert_eq!(
            fields,
            [
                "content_index",
                "delta",
                "item_id",
                "logprobs",
                "output_index",
                "sequence_number",
                "type"
            ]
        );
        assert_eq!(text["delta"], "Hi \"there\"\n");
        assert_eq!(text["logprobs"], json!([]));
        assert_eq!(text["item_id"], items[1]["id"]);
        assert_eq!(text["output_index"], 1);
        let (reasoning, fields) = keys("response.reasoning_text.delta");
        assert_eq!(
            fields,
            [
                "content_index",
                "delta",
                "item_id",
                "output_index",
                "sequence_number",
                "type"
            ]
        );
        assert_eq!(reasoning["item_id"], items[0]["id"]);
        let (call, fields) = keys("response.function_call_arguments.delta");
        assert_eq!(
            fields,
            [
                "delta",
                "item_id",
                "output_index",
                "sequence_number",
                "type"
            ]
        );
        assert_eq!(call["delta"], "{}");
        assert_eq!(call["output_index"], 2);
    }

    #[test]
    fn whitespace_before_a_call_is_no_message_and_a_cut_call_is_incomplete() {
        let mut w = Writer::new(false, HashSet::new(), HashSet::new());
        w.delta(&delta(
            "\n",
            "",
            vec![CallDelta::Start {
                index: 0,
                id: "call_1".into(),
                name: "a.b".into(),
            }],
        ));
        w.finish(Ending::Cut);
        assert_eq!(w.since(0).len(), 1);
        assert_eq!(w.since(0)[0]["name"], "a.b");
        assert_eq!(w.since(0)[0]["status"], "incomplete");
        assert!(w.take_frames().is_none());
    }

    #[test]
    fn output_text_parts_carry_annotations_and_logprobs() {
        let mut w = Writer::new(true, HashSet::new(), HashSet::new());
        w.delta(&delta("Hi", "", vec![]));
        w.finish(Ending::Done);
        let events = events(&w.take_frames().unwrap());
        for kind in ["response.content_part.added", "response.content_part.done"] {
            let part = &events.iter().find(|e| e["type"] == kind).unwrap()["part"];
            assert_eq!(part["type"], "output_text", "{kind}");
            assert_eq!(part["annotations"], json!([]), "{kind}");
            assert_eq!(part["logprobs"], json!([]), "{kind}");
        }
    }

    #[test]
    fn a_failed_message_stays_in_progress() {
        let mut w = Writer::new(false, HashSet::new(), HashSet::new());
        w.delta(&delta("partial", "", vec![]));
        w.finish(Ending::Failed);
        assert_eq!(w.since(0)[0]["status"], "in_progress");
        assert_eq!(w.since(0)[0]["content"][0]["text"], "partial");
    }
}
