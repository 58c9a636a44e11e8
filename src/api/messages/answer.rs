//! A Messages answer from the chat pipeline's output: a whole `message`, or spec 2's
//! event stream (`message_start`, per block `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`; no `[DONE]`, no ping).
//!
//! Blocks come in the order thinking, text, tool_use, as the parsers make them final:
//! reasoning before the answer, calls after the text that precedes them. Text that is
//! only whitespace next to tool calls (the newline a model writes before its call
//! syntax) is no block of its own. Thinking blocks carry an empty `signature`. A call's
//! id `call_<suffix>` from the parser is answered as `toolu_<suffix>`, so the id a client
//! returns in its `tool_result` is the one the pipeline saw.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use crate::api::openai::{Reply, WholeChoice};
use crate::generation::delta::{Call, CallDelta, Delta, Finish, Usage};
use crate::sse;

/// Writes one generation's Messages answer; streamed, it keeps which block is open.
pub struct Speaker {
    /// The request's stop sequences, one of which `stop_sequence` may name.
    stops: Vec<String>,
    /// The block open in the stream, and its index.
    open: Option<(Open, u32)>,
    /// The index the next block gets.
    next: u32,
    /// Whitespace text not yet sent: it becomes a text block only if text follows it, or
    /// if the answer ends without calls.
    space: String,
    /// A text block has been opened.
    spoke: bool,
    /// A tool_use block has been opened.
    called: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// The parser's call index.
    Call(usize),
}

/// `usage` of a message: cache counters are 0, never null.
#[derive(Serialize)]
struct MessageUsage {
    input_tokens: u32,
    output_tokens: u32,
    cache_creation_input_tokens: u32,
    cache_read_input_tokens: u32,
}

impl MessageUsage {
    fn of(usage: Usage) -> MessageUsage {
        MessageUsage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        }
    }
}

/// `toolu_<suffix>` for the parser's `call_<suffix>`; other ids as they are.
fn tool_use_id(id: &str) -> String {
    match id.strip_prefix("call_") {
        Some(suffix) => format!("toolu_{suffix}"),
        None => id.to_owned(),
    }
}

/// A call's `input`: its arguments as JSON; arguments that are no JSON object (a parser
/// fed a malformed call) are kept whole under `arguments` rather than lost.
fn input_of(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({"arguments": arguments}),
    }
}

/// One SSE event: `event: <type>`, `data: <json>`, a blank line.
fn event(kind: &str, data: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + kind.len());
    sse::write::put(&mut out, Some(kind), data);
    out
}

impl Speaker {
    pub fn new(stops: Vec<String>) -> Speaker {
        Speaker {
            stops,
            open: None,
            next: 0,
            space: String::new(),
            spoke: false,
            called: false,
        }
    }

    /// `stop_reason` and `stop_sequence`: `tool_use` when the model called, the stop
    /// sequence that ended it, `max_tokens` at the limit, else `end_turn`.
    fn stop(&self, finish: Finish, stopped_by: Option<usize>) -> (&'static str, Value) {
        match (finish, stopped_by.and_then(|at| self.stops.get(at))) {
            (Finish::ToolCalls, _) => ("tool_use", Value::Null),
            (Finish::Length, _) => ("max_tokens", Value::Null),
            (Finish::Stop, Some(stop)) => ("stop_sequence", Value::String(stop.clone())),
            (Finish::Stop, None) => ("end_turn", Value::Null),
        }
    }

    /// The whole message of a non-streamed answer.
    pub fn body(
        &self,
        reply: &Reply,
        outcome: &WholeChoice<'_>,
        stopped_by: Option<usize>,
        usage: Usage,
    ) -> Bytes {
        let mut content = Vec::new();
        if !outcome.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": outcome.reasoning,
                                "signature": ""}));
        }
        // Whitespace beside calls is no block (see the module's notes).
        let blank = outcome.text.trim().is_empty();
        if !outcome.text.is_empty() && (!blank || outcome.calls.is_empty()) {
            content.push(json!({"type": "text", "text": outcome.text}));
        }
        for Call {
            id,
            name,
            arguments,
        } in &outcome.calls
        {
            content.push(
                json!({"type": "tool_use", "id": tool_use_id(id), "name": name,
                                "input": input_of(arguments)}),
            );
        }
        let (stop_reason, stop_sequence) = self.stop(outcome.finish, stopped_by);
        let message = json!({
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": reply.model,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": MessageUsage::of(usage),
        });
        Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
    }

    /// `message_start`: the message with no content and zero counters.
    pub fn start(&self, reply: &Reply) -> Bytes {
        let message = json!({
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": reply.model,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": MessageUsage::of(Usage::default()),
        });
        Bytes::from(event(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        ))
    }

    /// The events for what `delta` made final; `None` when it made no event.
    pub fn delta(&mut self, delta: &Delta) -> Option<Bytes> {
        let mut out = Vec::new();
        if !delta.reasoning.is_empty() {
            self.enter(Open::Thinking, None, &mut out);
            self.block_delta(
                json!({"type": "thinking_delta", "thinking": delta.reasoning}),
                &mut out,
            );
        }
        // A call already open goes on before any text of the same delta (text the model
        // wrote after it), so none of its arguments are cut off from their block.
        if matches!(self.open_kind(), Some(Open::Call(_))) {
            self.calls(&delta.calls, &mut out);
            self.text(&delta.text, &mut out);
        } else {
            self.text(&delta.text, &mut out);
            self.calls(&delta.calls, &mut out);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// Call pieces: a start opens the call's tool_use block, arguments go to it as
    /// `input_json_delta`s.
    fn calls(&mut self, calls: &[CallDelta], out: &mut Vec<u8>) {
        for piece in calls {
            match piece {
                CallDelta::Start { index, id, name } => {
                    self.space.clear();
                    let block = json!({"type": "tool_use", "id": tool_use_id(id),
                                       "name": name, "input": {}});
                    self.enter(Open::Call(*index), Some(block), out);
                    self.called = true;
                }
                CallDelta::Arguments { index, fragment } => {
                    if self.open_kind() == Some(Open::Call(*index)) {
                        self.block_delta(
                            json!({"type": "input_json_delta", "partial_json": fragment}),
                            out,
                        );
                    }
                }
            }
        }
    }

    /// The last events: what `delta` still made final, the open block closed,
    /// `message_delta` with the stop reason and the final usage, and `message_stop`.
    pub fn end(
        &mut self,
        delta: &Delta,
        finish: Finish,
        stopped_by: Option<usize>,
        usage: Usage,
    ) -> Bytes {
        let mut out = self.delta(delta).map(Vec::from).unwrap_or_default();
        if !self.space.is_empty() && !self.called && !self.spoke {
            let space = std::mem::take(&mut self.space);
            self.text_block(&space, &mut out);
        }
        self.close(&mut out);
        let (stop_reason, stop_sequence) = self.stop(finish, stopped_by);
        out.extend(event(
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": MessageUsage::of(usage)}),
        ));
        out.extend(event("message_stop", &json!({"type": "message_stop"})));
        Bytes::from(out)
    }

    /// Text made final: whitespace waits (see [`Speaker::space`]); other text goes out in
    /// a text block with the whitespace before it.
    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if text.is_empty() {
            return;
        }
        if text.trim().is_empty() && self.open_kind() != Some(Open::Text) {
            self.space.push_str(text);
            return;
        }
        let text = if self.space.is_empty() {
            text.to_owned()
        } else {
            let mut joined = std::mem::take(&mut self.space);
            joined.push_str(text);
            joined
        };
        self.text_block(&text, out);
    }

    fn text_block(&mut self, text: &str, out: &mut Vec<u8>) {
        self.enter(Open::Text, None, out);
        self.spoke = true;
        self.block_delta(json!({"type": "text_delta", "text": text}), out);
    }

    /// Makes `kind` the open block, closing another one and opening it
    /// (`content_block_start` with `block`, or the kind's empty block) when it is not.
    fn enter(&mut self, kind: Open, block: Option<Value>, out: &mut Vec<u8>) {
        if self.open_kind() == Some(kind) {
            return;
        }
        self.close(out);
        let index = self.next;
        self.next += 1;
        let block = block.unwrap_or_else(|| match kind {
            Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            _ => json!({"type": "text", "text": ""}),
        });
        out.extend(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        self.open = Some((kind, index));
    }

    fn open_kind(&self) -> Option<Open> {
        self.open.map(|(kind, _)| kind)
    }

    fn block_delta(&self, delta: Value, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open {
            out.extend(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            out.extend(event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generation::ask::Api;

    fn reply() -> Reply {
        Reply {
            route: Api::Messages,
            id: "msg_1".into(),
            created: 0,
            model: "m".into(),
            spelling: None,
        }
    }

    /// `(event, data)` of every event in `sse`, checking each is `event:`, `data:`, blank.
    fn events(sse: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(sse).unwrap();
        assert!(text.ends_with("\n\n"), "{text}");
        text.split_terminator("\n\n")
            .map(|e| {
                let (kind, data) = e.split_once('\n').unwrap();
                let kind = kind.strip_prefix("event: ").unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(data["type"], kind, "{e}");
                (kind.to_owned(), data)
            })
            .collect()
    }

    fn delta(reasoning: &str, text: &str, calls: Vec<CallDelta>) -> Delta {
        Delta {
            text: text.into(),
            reasoning: reasoning.into(),
            calls,
            ..Delta::default()
        }
    }

    fn start(index: usize, id: &str) -> CallDelta {
        CallDelta::Start {
            index,
            id: id.into(),
            name: "get_weather".into(),
        }
    }

    fn args(index: usize, fragment: &str) -> CallDelta {
        CallDelta::Arguments {
            index,
            fragment: fragment.into(),
        }
    }

    #[test]
    fn a_whole_message_orders_blocks_and_maps_ids() {
        let calls = vec![
            Call {
                id: "call_abc",
                name: "get_weather",
                arguments: "{\"city\":\"Oslo\"}".into(),
            },
            Call {
                id: "functions.get_time:1",
                name: "get_time",
                arguments: String::new(),
            },
        ];
        let outcome = WholeChoice {
            text: "Let me look.",
            logprobs: &[],
            finish: Finish::ToolCalls,
            reasoning: "hmm",
            calls,
        };
        let speaker = Speaker::new(Vec::new());
        let body: Value =
            serde_json::from_slice(&speaker.body(&reply(), &outcome, None, Usage::new(7, 3)))
                .unwrap();
        assert_eq!(
            body,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                   "content": [
                       {"type": "thinking", "thinking": "hmm", "signature": ""},
                       {"type": "text", "text": "Let me look."},
                       {"type": "tool_use", "id": "toolu_abc", "name": "get_weather",
                        "input": {"city": "Oslo"}},
                       {"type": "tool_use", "id": "functions.get_time:1", "name": "get_time",
                        "input": {}}],
                   "stop_reason": "tool_use", "stop_sequence": null,
                   "usage": {"input_tokens": 7, "output_tokens": 3,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
        );
    }

    #[test]
    fn stop_reasons() {
        let speaker = Speaker::new(vec!["END".into(), "STOP".into()]);
        let reason = |finish, by| {
            let outcome = WholeChoice {
                text: "x",
                logprobs: &[],
                finish,
                reasoning: "",
                calls: Vec::new(),
            };
            let body: Value =
                serde_json::from_slice(&speaker.body(&reply(), &outcome, by, Usage::default()))
                    .unwrap();
            (body["stop_reason"].clone(), body["stop_sequence"].clone())
        };
        assert_eq!(reason(Finish::Stop, None), (json!("end_turn"), Value::Null));
        assert_eq!(
            reason(Finish::Stop, Some(1)),
            (json!("stop_sequence"), json!("STOP"))
        );
        assert_eq!(
            reason(Finish::Length, None),
            (json!("max_tokens"), Value::Null)
        );
        assert_eq!(
            reason(Finish::ToolCalls, Some(0)),
            (json!("tool_use"), Value::Null)
        );
    }

    #[test]
    fn a_stream_opens_and_closes_each_block_in_order() {
        let r = reply();
        let mut speaker = Speaker::new(Vec::new());
        let mut sse = speaker.start(&r).to_vec();
        for d in [
            delta("thin", "", Vec::new()),
            delta("king", "", Vec::new()),
            delta("", "\n", Vec::new()),
            delta("", "Hi", Vec::new()),
            delta(
                "",
                " there",
                vec![start(0, "call_x"), args(0, "{\"city\":")],
            ),
            delta("", "", vec![args(0, "\"Oslo\"}")]),
        ] {
            if let Some(frame) = speaker.delta(&d) {
                sse.extend_from_slice(&frame);
            }
        }
        sse.extend_from_slice(&speaker.end(
            &delta("", "\n", vec![start(1, "call_y")]),
            Finish::ToolCalls,
            None,
            Usage::new(5, 9),
        ));
        let seen = events(&sse);
        let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let start = &seen[0].1["message"];
        assert_eq!(start["content"], json!([]));
        assert_eq!(start["usage"]["input_tokens"], 0);
        assert_eq!(start["usage"]["output_tokens"], 0);
        assert_eq!(
            seen[1].1["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            seen[2].1["delta"],
            json!({"type": "thinking_delta", "thinking": "thin"})
        );
        // The newline before the text waited for it.
        assert_eq!(
            seen[6].1["delta"],
            json!({"type": "text_delta", "text": "\nHi"})
        );
        assert_eq!(seen[6].1["index"], 1);
        assert_eq!(
            seen[9].1["content_block"],
            json!({"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {}})
        );
        let json: String = seen[10..12]
            .iter()
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(json, "{\"city\":\"Oslo\"}");
        assert_eq!(seen[13].1["index"], 3);
        assert_eq!(
            seen[15].1,
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"input_tokens": 5, "output_tokens": 9,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
        );
    }

    #[test]
    fn text_after_a_call_does_not_cut_its_arguments_off() {
        let mut speaker = Speaker::new(Vec::new());
        let mut sse = speaker
            .delta(&delta("", "", vec![start(0, "call_a"), args(0, "{\"a\":")]))
            .unwrap()
            .to_vec();
        sse.extend_from_slice(
            &speaker
                .delta(&delta("", "done", vec![args(0, "1}")]))
                .unwrap(),
        );
        let seen = events(&sse);
        let kinds: Vec<(&str, u64)> = seen
            .iter()
            .map(|(k, d)| (k.as_str(), d["index"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("content_block_start", 0),
                ("content_block_delta", 0),
                ("content_block_delta", 0),
                ("content_block_stop", 0),
                ("content_block_start", 1),
                ("content_block_delta", 1),
            ]
        );
        assert_eq!(seen[2].1["delta"]["partial_json"], "1}");
    }

    #[test]
    fn a_whitespace_answer_is_still_a_text_block() {
        let mut speaker = Speaker::new(vec!["x".into()]);
        assert!(speaker.delta(&delta("", " ", Vec::new())).is_none());
        let end = speaker.end(&Delta::default(), Finish::Stop, Some(0), Usage::new(1, 1));
        let seen = events(&end);
        assert_eq!(seen[1].1["delta"]["text"], " ");
        assert_eq!(seen[3].1["delta"]["stop_sequence"], "x");
    }
}
