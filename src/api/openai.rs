//! The answers the gateway builds from a generation: one JSON body, or SSE chunks (the
//! role chunk, text deltas, the finishing chunk, the usage chunk, `[DONE]`), in the shapes
//! of OpenAI's chat completions and completions; and SGLang's `/generate` shape, whose
//! stream repeats the whole text so far in every event.
//!
//! With `n` > 1 each choice has its `index`: a non-streamed body lists them in order, a
//! stream's chunks carry one choice each. Log probabilities take OpenAI's shapes: chat's
//! `logprobs.content` (token, logprob, bytes, top_logprobs) and the legacy completions'
//! `logprobs` (tokens, token_logprobs, top_logprobs as `{token: logprob}`, text_offset).
//! A token is spelled from its own bytes (the tokenizer's byte table, else its lone
//! decode), so a token holding part of a character has its true `bytes` and a `token`
//! with U+FFFD for the part.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::chat::language::Language;
use crate::generation::ask::Api;
use crate::generation::delta::{Call, CallDelta, Delta, Finish, Usage};
use crate::generation::scores::Scored;
use crate::sse;

/// What every chunk and body of one answer repeats.
pub struct Reply {
    pub route: Api,
    /// `chatcmpl-…` or `cmpl-…`; also the engine's request id.
    pub id: String,
    pub created: u64,
    pub model: String,
    /// Present when the request asked for log probabilities.
    pub spelling: Option<Spelling>,
}

/// How tokens are written in log probabilities.
pub struct Spelling {
    pub language: Arc<Language>,
    /// Alternatives per token asked for (an engine sending more is cut to this).
    pub top: usize,
}

impl Spelling {
    /// The token's own bytes.
    fn bytes(&self, id: u32) -> Cow<'_, [u8]> {
        match self.language.bytes.token_bytes(id) {
            Some(bytes) => Cow::Borrowed(bytes),
            None => Cow::Owned(
                self.language
                    .tokenizer
                    .decode(&[id], false)
                    .unwrap_or_default()
                    .into_bytes(),
            ),
        }
    }

    fn token(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.bytes(id).into_owned();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    fn chat(&self, scored: &[Scored]) -> ChatLogprobs {
        let content = scored
            .iter()
            .map(|s| {
                let (token, bytes) = self.token(s.id);
                let top_logprobs = s
                    .score
                    .top
                    .iter()
                    .take(self.top)
                    .map(|&(id, logprob)| {
                        let (token, bytes) = self.token(id);
                        ChatTop {
                            token,
                            logprob,
                            bytes,
                        }
                    })
                    .collect();
                ChatToken {
                    token,
                    logprob: s.score.logprob,
                    bytes,
                    top_logprobs,
                }
            })
            .collect();
        ChatLogprobs { content }
    }

    fn text(&self, scored: &[Scored]) -> TextLogprobs {
        TextLogprobs {
            tokens: scored.iter().map(|s| self.token(s.id).0).collect(),
            token_logprobs: scored.iter().map(|s| s.score.logprob).collect(),
            top_logprobs: scored
                .iter()
                .map(|s| {
                    TopMap(
                        s.score
                            .top
                            .iter()
                            .take(self.top)
                            .map(|&(id, logprob)| (self.token(id).0, logprob))
                            .collect(),
                    )
                })
                .collect(),
            text_offset: scored.iter().map(|s| s.offset).collect(),
        }
    }
}

/// One choice of a whole answer.
pub struct WholeChoice<'a> {
    pub text: &'a str,
    pub logprobs: &'a [Scored],
    pub finish: Finish,
    /// A chat choice's reasoning (empty when none).
    pub reasoning: &'a str,
    /// A chat choice's tool calls.
    pub calls: Vec<Call<'a>>,
}

#[derive(Serialize)]
struct ChatLogprobs {
    content: Vec<ChatToken>,
}

#[derive(Serialize)]
struct ChatToken {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    top_logprobs: Vec<ChatTop>,
}

#[derive(Serialize)]
struct ChatTop {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

#[derive(Serialize)]
struct TextLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<TopMap>,
    text_offset: Vec<u32>,
}

/// `{token: logprob}` in the engine's order; a token spelled like an earlier one (two
/// partial characters both shown as U+FFFD) keeps the earlier, likelier value, so the
/// object has no duplicate keys.
struct TopMap(Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (at, (token, logprob)) in self.0.iter().enumerate() {
            if self.0[..at].iter().all(|(seen, _)| seen != token) {
                map.serialize_entry(token, logprob)?;
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct Envelope<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Finish,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    /// Null when the model only called functions, as OpenAI answers.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallOut<'a>>>,
}

/// One call of a whole answer, in OpenAI's shape.
#[derive(Serialize)]
struct ToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// A piece of a streamed call: the first names it (id, type, name, empty arguments), the
/// others carry arguments.
#[derive(Serialize)]
struct ToolCallChunk<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionChunk<'a>,
}

#[derive(Serialize)]
struct FunctionChunk<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl<'a> ToolCallChunk<'a> {
    fn of(piece: &'a CallDelta) -> ToolCallChunk<'a> {
        match piece {
            CallDelta::Start { index, id, name } => ToolCallChunk {
                index: *index,
                id: Some(id),
                kind: Some("function"),
                function: FunctionChunk {
                    name: Some(name),
                    arguments: "",
                },
            },
            CallDelta::Arguments { index, fragment } => ToolCallChunk {
                index: *index,
                id: None,
                kind: None,
                function: FunctionChunk {
                    name: None,
                    arguments: fragment,
                },
            },
        }
    }
}

#[derive(Serialize)]
struct ChatDelta<'a> {
    index: u32,
    delta: DeltaBody<'a>,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Option<Finish>,
}

#[derive(Serialize)]
struct DeltaBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallChunk<'a>>>,
}

/// SGLang's `/generate` answer.
#[derive(Serialize)]
struct Generated<'a> {
    text: &'a str,
    output_ids: &'a [u32],
    meta_info: MetaInfo<'a>,
}

#[derive(Serialize)]
struct MetaInfo<'a> {
    id: &'a str,
    finish_reason: Option<FinishInfo>,
    prompt_tokens: u32,
    completion_tokens: u32,
    cached_tokens: u32,
}

#[derive(Serialize)]
struct FinishInfo {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    length: Option<u32>,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<TextLogprobs>,
    finish_reason: Option<Finish>,
}

impl Reply {
    fn envelope<C: Serialize>(
        &self,
        streaming: bool,
        choices: C,
        usage: Option<Usage>,
    ) -> Envelope<'_, C> {
        let object = match (self.route, streaming) {
            // Messages answers are written by `super::messages`, not in this envelope.
            (Api::Chat | Api::Messages, false) => "chat.completion",
            (Api::Chat | Api::Messages, true) => "chat.completion.chunk",
            (Api::Completions | Api::Generate, _) => "text_completion",
        };
        Envelope {
            id: &self.id,
            object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
        }
    }

    /// The whole answer of a non-streamed request, its choices in index order; `ids` are
    /// the generated ids (`/generate`, one choice, shows them).
    pub fn body(&self, choices: &[WholeChoice<'_>], ids: &[u32], usage: Usage) -> Bytes {
        let json = match self.route {
            Api::Generate => {
                let (text, finish) = choices
                    .first()
                    .map_or(("", None), |c| (c.text, Some(c.finish)));
                serde_json::to_vec(&self.generated(text, ids, finish, usage))
            }
            Api::Chat | Api::Messages => {
                let list: Vec<ChatChoice<'_>> = (0u32..)
                    .zip(choices)
                    .map(|(index, c)| ChatChoice {
                        index,
                        message: Message {
                            role: "assistant",
                            content: (!c.text.is_empty() || c.calls.is_empty()).then_some(c.text),
                            reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
                            tool_calls: (!c.calls.is_empty()).then(|| {
                                c.calls
                                    .iter()
                                    .map(|call| ToolCallOut {
                                        id: call.id,
                                        kind: "function",
                                        function: FunctionOut {
                                            name: call.name,
                                            arguments: &call.arguments,
                                        },
                                    })
                                    .collect()
                            }),
                        },
                        logprobs: self.spelling.as_ref().map(|s| s.chat(c.logprobs)),
                        finish_reason: c.finish,
                    })
                    .collect();
                serde_json::to_vec(&self.envelope(false, list, Some(usage)))
            }
            Api::Completions => {
                let list: Vec<TextChoice<'_>> = (0u32..)
                    .zip(choices)
                    .map(|(index, c)| TextChoice {
                        index,
                        text: c.text,
                        logprobs: self.spelling.as_ref().map(|s| s.text(c.logprobs)),
                        finish_reason: Some(c.finish),
                    })
                    .collect();
                serde_json::to_vec(&self.envelope(false, list, Some(usage)))
            }
        };
        json.map(Bytes::from).unwrap_or_default()
    }

    /// An event of a `/generate` stream: the whole text and ids so far; the last one
    /// carries the finish reason.
    pub fn generate_event(
        &self,
        text: &str,
        ids: &[u32],
        finish: Option<Finish>,
        usage: Usage,
    ) -> Bytes {
        let capacity = 128 + text.len() + ids.len() * 6;
        sse::write::event(capacity, None, &self.generated(text, ids, finish, usage))
    }

    fn generated<'a>(
        &'a self,
        text: &'a str,
        ids: &'a [u32],
        finish: Option<Finish>,
        usage: Usage,
    ) -> Generated<'a> {
        Generated {
            text,
            output_ids: ids,
            meta_info: MetaInfo {
                id: &self.id,
                finish_reason: finish.map(|finish| match finish {
                    Finish::Stop | Finish::ToolCalls => FinishInfo {
                        kind: "stop",
                        length: None,
                    },
                    Finish::Length => FinishInfo {
                        kind: "length",
                        length: Some(usage.completion_tokens),
                    },
                }),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: 0,
            },
        }
    }

    /// The first event of choice `index` of a chat stream: the assistant role with empty
    /// content. Other streams have none (`None`).
    pub fn role_event(&self, index: u32) -> Option<Bytes> {
        (self.route == Api::Chat).then(|| {
            self.event(
                [ChatDelta {
                    index,
                    delta: DeltaBody {
                        role: Some("assistant"),
                        content: Some(""),
                        reasoning_content: None,
                        tool_calls: None,
                    },
                    logprobs: None,
                    finish_reason: None,
                }],
                None,
            )
        })
    }

    /// A delta of choice `index` (its text and the scores of the tokens that text
    /// completes); with `finish`, the choice's finishing event (its text may be empty).
    pub fn delta_event(&self, index: u32, delta: &Delta, finish: Option<Finish>) -> Bytes {
        let text = delta.text.as_str();
        let scored = (!delta.logprobs.is_empty()).then_some(&delta.logprobs[..]);
        let spelling = self.spelling.as_ref();
        match self.route {
            Api::Chat | Api::Messages => self.event(
                [ChatDelta {
                    index,
                    delta: DeltaBody {
                        role: None,
                        // Plain deltas always carry content; a finishing or a
                        // reasoning or call delta only when it has text.
                        content: (!text.is_empty()
                            || (finish.is_none()
                                && delta.reasoning.is_empty()
                                && delta.calls.is_empty()))
                        .then_some(text),
                        reasoning_content: (!delta.reasoning.is_empty())
                            .then_some(delta.reasoning.as_str()),
                        tool_calls: (!delta.calls.is_empty())
                            .then(|| delta.calls.iter().map(ToolCallChunk::of).collect()),
                    },
                    logprobs: spelling.zip(scored).map(|(s, scored)| s.chat(scored)),
                    finish_reason: finish,
                }],
                None,
            ),
            Api::Completions | Api::Generate => self.event(
                [TextChoice {
                    index,
                    text,
                    logprobs: spelling.zip(scored).map(|(s, scored)| s.text(scored)),
                    finish_reason: finish,
                }],
                None,
            ),
        }
    }

    /// The usage event of `stream_options.include_usage`: no choices, the counts.
    pub fn usage_event(&self, usage: Usage) -> Bytes {
        self.event([(); 0], Some(usage))
    }

    /// The terminator of every OpenAI stream.
    pub fn done_event() -> Bytes {
        Bytes::from_static(sse::write::DONE)
    }

    fn event<C: Serialize>(&self, choices: C, usage: Option<Usage>) -> Bytes {
        sse::write::event(256, None, &self.envelope(true, choices, usage))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn reply(route: Api) -> Reply {
        Reply {
            route,
            id: "chatcmpl-1".into(),
            created: 7,
            model: "m".into(),
            spelling: None,
        }
    }

    fn text(text: &str) -> Delta {
        Delta {
            text: text.into(),
            ..Delta::default()
        }
    }

    fn one<'a>(text: &'a str, finish: Finish) -> [WholeChoice<'a>; 1] {
        [WholeChoice {
            text,
            logprobs: &[],
            finish,
            reasoning: "",
            calls: Vec::new(),
        }]
    }

    #[test]
    fn reasoning_and_tool_calls_take_openais_shapes() {
        let r = reply(Api::Chat);
        let calls = [
            CallDelta::Start {
                index: 0,
                id: "call_1".into(),
                name: "get_weather".into(),
            },
            CallDelta::Arguments {
                index: 0,
                fragment: "{\"city\": \"Paris\"}".into(),
            },
        ];
        let whole = [WholeChoice {
            text: "",
            logprobs: &[],
            finish: Finish::ToolCalls,
            reasoning: "hmm",
            calls: crate::generation::delta::calls(&calls),
        }];
        let v: Value = serde_json::from_slice(&r.body(&whole, &[], Usage::new(1, 2))).unwrap();
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(
            choice["message"],
            json!({"role": "assistant", "content": null, "reasoning_content": "hmm",
                   "tool_calls": [{"id": "call_1", "type": "function", "function":
                       {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]})
        );
        // Plain answers keep their shape: content, no reasoning or calls fields.
        let plain: Value =
            serde_json::from_slice(&r.body(&one("hi", Finish::Stop), &[], Usage::new(1, 1)))
                .unwrap();
        assert_eq!(
            plain["choices"][0]["message"],
            json!({"role": "assistant", "content": "hi"})
        );

        // Streamed: the start names the call, the next pieces carry arguments only.
        let delta = Delta {
            reasoning: "r".into(),
            calls: calls.to_vec(),
            ..Delta::default()
        };
        let e = event_json(&r.delta_event(0, &delta, None));
        assert_eq!(
            e["choices"][0]["delta"],
            json!({"reasoning_content": "r", "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": ""}},
                {"index": 0, "function": {"arguments": "{\"city\": \"Paris\"}"}}]})
        );
        let e = event_json(&r.delta_event(0, &Delta::default(), Some(Finish::ToolCalls)));
        assert_eq!(e["choices"][0]["delta"], json!({}));
        assert_eq!(e["choices"][0]["finish_reason"], "tool_calls");
    }

    fn event_json(event: &Bytes) -> Value {
        let text = std::str::from_utf8(event).unwrap();
        let body = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn chat_body_has_openai_shape() {
        let body = reply(Api::Chat).body(&one("hé", Finish::Stop), &[], Usage::new(3, 2));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"m",
                   "choices":[{"index":0,"message":{"role":"assistant","content":"hé"},
                               "logprobs":null,"finish_reason":"stop"}],
                   "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})
        );
    }

    #[test]
    fn chat_stream_events() {
        let r = reply(Api::Chat);
        let role = event_json(&r.role_event(0).unwrap());
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(
            role["choices"][0]["delta"],
            json!({"role":"assistant","content":""})
        );
        let delta = event_json(&r.delta_event(0, &text("x"), None));
        assert_eq!(delta["choices"][0]["delta"], json!({"content":"x"}));
        assert_eq!(delta["choices"][0]["finish_reason"], Value::Null);
        let last = event_json(&r.delta_event(0, &text(""), Some(Finish::Length)));
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        let usage = event_json(&r.usage_event(Usage::new(1, 2)));
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 3);
        assert!(usage.get("usage").is_some() && last.get("usage").is_none());
    }

    #[test]
    fn completion_shapes() {
        let r = reply(Api::Completions);
        assert!(r.role_event(0).is_none());
        let v: Value =
            serde_json::from_slice(&r.body(&one("t", Finish::Length), &[], Usage::new(1, 1)))
                .unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "t");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let e = event_json(&r.delta_event(0, &text("u"), None));
        assert_eq!(e["object"], "text_completion");
        assert_eq!(e["choices"][0]["text"], "u");
    }

    #[test]
    fn generate_shapes() {
        let r = reply(Api::Generate);
        let v: Value =
            serde_json::from_slice(&r.body(&one("ab", Finish::Length), &[1, 2], Usage::new(3, 2)))
                .unwrap();
        assert_eq!(
            v,
            json!({"text":"ab","output_ids":[1,2],"meta_info":{"id":"chatcmpl-1",
                   "finish_reason":{"type":"length","length":2},"prompt_tokens":3,
                   "completion_tokens":2,"cached_tokens":0}})
        );
        let e = event_json(&r.generate_event("a", &[1], None, Usage::new(3, 1)));
        assert_eq!(e["text"], "a");
        assert_eq!(e["meta_info"]["finish_reason"], Value::Null);
        let e = event_json(&r.generate_event("ab", &[1, 2], Some(Finish::Stop), Usage::new(3, 2)));
        assert_eq!(e["meta_info"]["finish_reason"], json!({"type":"stop"}));
    }

    fn spelled(route: Api, top: usize) -> Reply {
        Reply {
            spelling: Some(Spelling {
                language: Arc::new(crate::generation::choices::tests::language()),
                top,
            }),
            ..reply(route)
        }
    }

    fn scored(id: u32, offset: u32) -> Scored {
        Scored {
            id,
            score: crate::engine::TokenLogprob {
                logprob: -0.5,
                top: vec![(id, -0.5), (id + 1, -1.5)],
            },
            offset,
        }
    }

    #[test]
    fn chat_logprobs_and_choices_in_order() {
        let r = spelled(Api::Chat, 1);
        let entries = [scored(1, 0)];
        let choices = [
            WholeChoice {
                text: "b",
                logprobs: &entries,
                finish: Finish::Stop,
                reasoning: "",
                calls: Vec::new(),
            },
            WholeChoice {
                text: "",
                logprobs: &[],
                finish: Finish::Length,
                reasoning: "",
                calls: Vec::new(),
            },
        ];
        let v: Value = serde_json::from_slice(&r.body(&choices, &[], Usage::new(1, 2))).unwrap();
        assert_eq!(
            v["choices"][0]["logprobs"],
            json!({"content": [{"token": "b", "logprob": -0.5, "bytes": [98],
                                "top_logprobs": [{"token": "b", "logprob": -0.5, "bytes": [98]}]}]})
        );
        assert_eq!(v["choices"][1]["index"], 1);
        assert_eq!(v["choices"][1]["logprobs"], json!({"content": []}));
        assert_eq!(v["choices"][1]["finish_reason"], "length");
        // Streamed, a delta without entries has none.
        let e = event_json(&r.delta_event(1, &text(""), Some(Finish::Stop)));
        assert_eq!(e["choices"][0]["index"], 1);
        assert_eq!(e["choices"][0]["logprobs"], Value::Null);
        assert_eq!(
            event_json(&r.role_event(1).unwrap())["choices"][0]["index"],
            1
        );
    }

    #[test]
    fn completion_logprobs_take_the_legacy_shape() {
        let r = spelled(Api::Completions, 2);
        let delta = Delta {
            text: "b c".into(),
            logprobs: vec![scored(1, 0), scored(2, 2)],
            ..Delta::default()
        };
        let e = event_json(&r.delta_event(0, &delta, None));
        assert_eq!(
            e["choices"][0]["logprobs"],
            json!({"tokens": ["b", "c"], "token_logprobs": [-0.5, -0.5],
                   "top_logprobs": [{"b": -0.5, "c": -1.5}, {"c": -0.5, "d": -1.5}],
                   "text_offset": [0, 2]})
        );
        let plain = event_json(&reply(Api::Completions).delta_event(0, &delta, None));
        assert_eq!(plain["choices"][0]["logprobs"], Value::Null);
    }

    #[test]
    fn top_maps_keep_the_first_of_equal_spellings() {
        let map = TopMap(vec![
            ("\u{fffd}".into(), -1.0),
            ("\u{fffd}".into(), -2.0),
            ("x".into(), -3.0),
        ]);
        assert_eq!(
            serde_json::to_value(&map).unwrap(),
            json!({"\u{fffd}": -1.0, "x": -3.0})
        );
    }
}
