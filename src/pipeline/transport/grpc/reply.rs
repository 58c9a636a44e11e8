//! The answers the gateway builds from a generation: one JSON body, or SSE chunks (the
//! role chunk, text deltas, the finishing chunk, the usage chunk, `[DONE]`), in the shapes
//! of OpenAI's chat completions and completions; and SGLang's `/generate` shape, whose
//! stream repeats the whole text so far in every event.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::request::Route;

/// Token counts of a generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// Why a generation ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// EOS, a stop token or a stop string.
    Stop,
    /// `max_tokens` or the context window.
    Length,
}

/// What every chunk and body of one answer repeats.
pub struct Reply {
    pub route: Route,
    /// `chatcmpl-…` or `cmpl-…`; also the engine's request id.
    pub id: String,
    pub created: u64,
    pub model: String,
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
    logprobs: Option<()>,
    finish_reason: Finish,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct ChatDelta<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<Finish>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
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
    logprobs: Option<()>,
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
            (Route::Chat, false) => "chat.completion",
            (Route::Chat, true) => "chat.completion.chunk",
            (Route::Completions | Route::Generate, _) => "text_completion",
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

    /// The whole answer of a non-streamed request; `ids` are the generated ids
    /// (`/generate` shows them).
    pub fn body(&self, text: &str, ids: &[u32], finish: Finish, usage: Usage) -> Bytes {
        let json = match self.route {
            Route::Generate => serde_json::to_vec(&self.generated(text, ids, Some(finish), usage)),
            Route::Chat => serde_json::to_vec(&self.envelope(
                false,
                [ChatChoice {
                    index: 0,
                    message: Message {
                        role: "assistant",
                        content: text,
                    },
                    logprobs: None,
                    finish_reason: finish,
                }],
                Some(usage),
            )),
            Route::Completions => serde_json::to_vec(&self.envelope(
                false,
                [TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
                    finish_reason: Some(finish),
                }],
                Some(usage),
            )),
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
        let mut out = BytesMut::with_capacity(128 + text.len() + ids.len() * 6).writer();
        out.get_mut().put_slice(b"data: ");
        let _ = serde_json::to_writer(&mut out, &self.generated(text, ids, finish, usage));
        let mut out = out.into_inner();
        out.put_slice(b"\n\n");
        out.freeze()
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
                    Finish::Stop => FinishInfo {
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

    /// The first event of a chat stream: the assistant role with empty content. Other
    /// streams have none (`None`).
    pub fn role_event(&self) -> Option<Bytes> {
        (self.route == Route::Chat).then(|| {
            self.event(
                [ChatDelta {
                    index: 0,
                    delta: Delta {
                        role: Some("assistant"),
                        content: Some(""),
                    },
                    logprobs: None,
                    finish_reason: None,
                }],
                None,
            )
        })
    }

    /// A text delta; with `finish`, the stream's finishing event (its text may be empty).
    pub fn delta_event(&self, text: &str, finish: Option<Finish>) -> Bytes {
        match self.route {
            Route::Chat => self.event(
                [ChatDelta {
                    index: 0,
                    delta: Delta {
                        role: None,
                        content: (!text.is_empty() || finish.is_none()).then_some(text),
                    },
                    logprobs: None,
                    finish_reason: finish,
                }],
                None,
            ),
            Route::Completions | Route::Generate => self.event(
                [TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
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
        Bytes::from_static(b"data: [DONE]\n\n")
    }

    fn event<C: Serialize>(&self, choices: C, usage: Option<Usage>) -> Bytes {
        let mut out = BytesMut::with_capacity(256).writer();
        out.get_mut().put_slice(b"data: ");
        // Serialising plain structs into memory cannot fail.
        let _ = serde_json::to_writer(&mut out, &self.envelope(true, choices, usage));
        let mut out = out.into_inner();
        out.put_slice(b"\n\n");
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn reply(route: Route) -> Reply {
        Reply {
            route,
            id: "chatcmpl-1".into(),
            created: 7,
            model: "m".into(),
        }
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
        let body = reply(Route::Chat).body("hé", &[], Finish::Stop, Usage::new(3, 2));
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
        let r = reply(Route::Chat);
        let role = event_json(&r.role_event().unwrap());
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(
            role["choices"][0]["delta"],
            json!({"role":"assistant","content":""})
        );
        let delta = event_json(&r.delta_event("x", None));
        assert_eq!(delta["choices"][0]["delta"], json!({"content":"x"}));
        assert_eq!(delta["choices"][0]["finish_reason"], Value::Null);
        let last = event_json(&r.delta_event("", Some(Finish::Length)));
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        let usage = event_json(&r.usage_event(Usage::new(1, 2)));
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 3);
        assert!(usage.get("usage").is_some() && last.get("usage").is_none());
    }

    #[test]
    fn completion_shapes() {
        let r = reply(Route::Completions);
        assert!(r.role_event().is_none());
        let v: Value =
            serde_json::from_slice(&r.body("t", &[], Finish::Length, Usage::new(1, 1))).unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "t");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let e = event_json(&r.delta_event("u", None));
        assert_eq!(e["object"], "text_completion");
        assert_eq!(e["choices"][0]["text"], "u");
    }

    #[test]
    fn generate_shapes() {
        let r = reply(Route::Generate);
        let v: Value =
            serde_json::from_slice(&r.body("ab", &[1, 2], Finish::Length, Usage::new(3, 2)))
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
}
