//! Request bodies: the API template (path, JSON shape, which stream events are tokens) and
//! the prompt workload (fixed, prefix-sharing groups, growing conversations).
//!
//! Bodies are a pure function of the request's sequence number, so every target of a
//! side-by-side run sees the same request sequence for the same seed.

use bytes::Bytes;
use serde_json::{json, Value};
use tollgate::sse::Frame;

/// The API a request is shaped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    Chat,
    Completions,
    Generate,
    Messages,
    Responses,
}

impl Template {
    pub fn from_name(name: &str) -> Result<Template, String> {
        Ok(match name {
            "chat" => Template::Chat,
            "completions" => Template::Completions,
            "generate" => Template::Generate,
            "messages" => Template::Messages,
            "responses" => Template::Responses,
            other => return Err(format!("unknown --template '{other}'")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Template::Chat => "chat",
            Template::Completions => "completions",
            Template::Generate => "generate",
            Template::Messages => "messages",
            Template::Responses => "responses",
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Template::Chat => "/v1/chat/completions",
            Template::Completions => "/v1/completions",
            Template::Generate => "/generate",
            Template::Messages => "/v1/messages",
            Template::Responses => "/v1/responses",
        }
    }

    /// Whether a stream frame carries generated text (one token event). Byte searches,
    /// not JSON parsing: a stream load of 1,000 streams sees hundreds of thousands of
    /// events a second on the same cores as the target.
    pub fn is_token(self, frame: &Frame<'_>) -> bool {
        match self {
            // OpenAI chat: role chunk and finish chunk have no (or empty) content.
            Template::Chat => has_nonempty_string(frame.data, b"\"content\":\""),
            Template::Completions => has_nonempty_string(frame.data, b"\"text\":\""),
            // SGLang: every event but the sentinel is the cumulative state after a token.
            Template::Generate => !frame.is_done(),
            Template::Messages => frame.event == b"content_block_delta",
            Template::Responses => frame.event == b"response.output_text.delta",
        }
    }

    /// The JSON body for `turns` of (role, text).
    fn body(self, model: &str, turns: &[(&str, String)], max_tokens: u64, stream: bool) -> Value {
        let flat = || {
            turns
                .iter()
                .map(|(role, text)| format!("{role}: {text}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let messages = |skip_system: bool| {
            turns
                .iter()
                .filter(|(role, _)| !(skip_system && *role == "system"))
                .map(|(role, text)| json!({"role": role, "content": text}))
                .collect::<Vec<_>>()
        };
        match self {
            Template::Chat => json!({"model": model, "messages": messages(false),
                "max_tokens": max_tokens, "stream": stream}),
            Template::Completions => json!({"model": model, "prompt": flat(),
                "max_tokens": max_tokens, "stream": stream}),
            Template::Generate => json!({"text": flat(),
                "sampling_params": {"max_new_tokens": max_tokens}, "stream": stream}),
            Template::Messages => {
                let mut body = json!({"model": model, "messages": messages(true),
                    "max_tokens": max_tokens, "stream": stream});
                if let Some((_, system)) = turns.iter().find(|(role, _)| *role == "system") {
                    body["system"] = json!(system);
                }
                body
            }
            Template::Responses => json!({"model": model, "input": flat(),
                "max_output_tokens": max_tokens, "stream": stream}),
        }
    }
}

/// Which prompts the requests carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadKind {
    Fixed,
    Prefix {
        groups: usize,
        prefix_bytes: usize,
    },
    Conversation {
        conversations: usize,
        turns: usize,
        turn_bytes: usize,
    },
}

/// Builds the body of request number `seq`.
pub struct Workload {
    template: Template,
    kind: WorkloadKind,
    model: String,
    max_tokens: u64,
    stream: bool,
    seed: u64,
    /// The fixed workload's body, built once (it may be a 1 MiB prompt).
    fixed: Option<Bytes>,
    /// The prefix workload's shared prefixes.
    prefixes: Vec<String>,
}

impl Workload {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        template: Template,
        kind: WorkloadKind,
        model: &str,
        prompt_bytes: usize,
        max_tokens: u64,
        stream: bool,
        seed: u64,
    ) -> Workload {
        let mut workload = Workload {
            template,
            kind: kind.clone(),
            model: model.to_string(),
            max_tokens,
            stream,
            seed,
            fixed: None,
            prefixes: Vec::new(),
        };
        match kind {
            WorkloadKind::Fixed => {
                let turns = [("user", filler(prompt_bytes, seed))];
                workload.fixed = Some(workload.encode(&turns));
            }
            WorkloadKind::Prefix {
                groups,
                prefix_bytes,
            } => {
                workload.prefixes = (0..groups as u64)
                    .map(|g| filler(prefix_bytes, mix(seed ^ mix(g + 1))))
                    .collect();
            }
            WorkloadKind::Conversation { .. } => {}
        }
        workload
    }

    pub fn template(&self) -> Template {
        self.template
    }

    /// The body of the `seq`-th request.
    pub fn body(&self, seq: u64) -> Bytes {
        match &self.kind {
            WorkloadKind::Fixed => self.fixed.clone().unwrap_or_default(),
            WorkloadKind::Prefix { groups, .. } => {
                let group = (mix(self.seed ^ seq) % (*groups as u64)) as usize;
                let prefix = self.prefixes.get(group).cloned().unwrap_or_default();
                let turns = [
                    ("system", prefix),
                    ("user", format!("question {seq} of group {group}")),
                ];
                self.encode(&turns)
            }
            WorkloadKind::Conversation {
                conversations,
                turns,
                turn_bytes,
            } => {
                let (c, t) = (*conversations as u64, *turns as u64);
                let (id, turn, epoch) = (seq % c, (seq / c) % t, seq / (c * t));
                let mut dialogue = Vec::new();
                for k in 0..=turn {
                    let salt = mix(self.seed ^ mix(id << 32 ^ epoch << 16 ^ k));
                    let head = format!("dialogue {id}.{epoch} turn {k}: ");
                    dialogue.push(("user", head + &filler(*turn_bytes, salt)));
                    if k < turn {
                        dialogue.push(("assistant", filler(*turn_bytes, !salt)));
                    }
                }
                self.encode(&dialogue)
            }
        }
    }

    fn encode(&self, turns: &[(&str, String)]) -> Bytes {
        let value = self
            .template
            .body(&self.model, turns, self.max_tokens, self.stream);
        // Serialising a `Value` to memory cannot fail; an empty body would show as errors.
        Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
    }
}

/// SplitMix64 finaliser: spreads sequence numbers and seeds over 64 bits.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d4_9bb1_33b1_11eb);
    z ^ (z >> 31)
}

/// `len` bytes of word-like ASCII text derived from `salt` (different salts, different
/// text, so prompts share prefixes only where the workload means them to).
pub fn filler(len: usize, salt: u64) -> String {
    let mut out = String::with_capacity(len + 16);
    let mut state = salt;
    while out.len() < len {
        state = mix(state);
        out.push_str(&format!("w{} ", state % 100_000));
    }
    out.truncate(len);
    out
}

/// Whether `data` holds `key` (ending in the opening quote) followed by a non-empty string.
fn has_nonempty_string(data: &[u8], key: &[u8]) -> bool {
    memchr::memmem::find(data, key)
        .and_then(|at| data.get(at + key.len()))
        .is_some_and(|&next| next != b'"')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(bytes: &Bytes) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn fixed_prompt_has_the_asked_size() {
        let w = Workload::new(
            Template::Chat,
            WorkloadKind::Fixed,
            "m",
            1 << 20,
            4,
            false,
            1,
        );
        let v = json_of(&w.body(0));
        assert_eq!(v["messages"][0]["content"].as_str().unwrap().len(), 1 << 20);
        assert_eq!(w.body(0), w.body(5));
    }

    #[test]
    fn prefix_groups_share_prefixes_and_differ_in_suffix() {
        let kind = WorkloadKind::Prefix {
            groups: 2,
            prefix_bytes: 100,
        };
        let w = Workload::new(Template::Chat, kind, "m", 0, 4, false, 1);
        let bodies: Vec<Value> = (0..20).map(|s| json_of(&w.body(s))).collect();
        let systems: std::collections::HashSet<_> = bodies
            .iter()
            .map(|v| v["messages"][0]["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(systems.len(), 2);
        assert!(systems.iter().all(|s| s.len() == 100));
        assert_ne!(bodies[0]["messages"][1], bodies[1]["messages"][1]);
    }

    #[test]
    fn conversations_grow_turn_by_turn() {
        let kind = WorkloadKind::Conversation {
            conversations: 2,
            turns: 3,
            turn_bytes: 50,
        };
        let w = Workload::new(Template::Completions, kind, "m", 0, 4, true, 1);
        let prompt = |s| json_of(&w.body(s))["prompt"].as_str().unwrap().to_string();
        // Requests 0, 2, 4 are turns 0, 1, 2 of dialogue 0; each extends the last.
        assert!(prompt(2).starts_with(&prompt(0)));
        assert!(prompt(4).starts_with(&prompt(2)));
        assert!(prompt(4).len() > prompt(2).len());
        // Request 6 starts dialogue 0 over with new text.
        assert!(!prompt(6).starts_with(&prompt(0)));
    }

    #[test]
    fn templates_shape_bodies() {
        let turns = [("system", "s".to_string()), ("user", "u".to_string())];
        let m = Template::Messages.body("m", &turns, 8, true);
        assert_eq!(m["system"], "s");
        assert_eq!(m["messages"].as_array().unwrap().len(), 1);
        let g = Template::Generate.body("m", &turns, 8, false);
        assert_eq!(g["sampling_params"]["max_new_tokens"], 8);
        assert_eq!(
            Template::Responses.body("m", &turns, 8, false)["input"],
            "system: s\nuser: u"
        );
    }

    #[test]
    fn token_events() {
        let frame = |event: &'static [u8], data: &'static [u8]| Frame { event, data };
        let chat = Template::Chat;
        assert!(chat.is_token(&frame(b"", br#"{"delta":{"content":"hi"}}"#)));
        assert!(!chat.is_token(&frame(
            b"",
            br#"{"delta":{"role":"assistant","content":""}}"#
        )));
        assert!(!chat.is_token(&frame(b"", b"[DONE]")));
        assert!(Template::Messages.is_token(&frame(b"content_block_delta", b"{}")));
        assert!(!Template::Messages.is_token(&frame(b"ping", b"{}")));
        assert!(!Template::Generate.is_token(&frame(b"", b"[DONE]")));
    }
}
