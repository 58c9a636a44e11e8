//! Wire formats of the generation APIs.
//!
//! A [`Completion`] describes one simulated generation once its numbers
//! are known; the per-API modules turn it into a complete JSON response or
//! into the SSE events of a stream. Keeping these pure (no I/O, no clock)
//! lets the streaming driver stay format-agnostic and the shapes be unit
//! tested.

mod anthropic;
mod openai;
mod responses;
mod sglang;

use bytes::Bytes;
use serde_json::Value;

use crate::prompt::Api;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The simulated model produced its natural number of tokens.
    Stop,
    /// The client's max-tokens cap cut it short.
    Length,
}

impl Finish {
    pub fn openai(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Everything a response needs, fixed before the first byte is sent.
#[derive(Clone, Debug)]
pub struct Completion {
    pub api: Api,
    /// Unique suffix; each API adds its own id prefix.
    pub id: String,
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    pub finish: Finish,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Text of generated token `i`.
pub fn token_text(i: u64) -> String {
    format!("tok{i} ")
}

/// Text of the first `n` generated tokens.
pub fn text_of(n: u64) -> String {
    let mut text = String::with_capacity(n as usize * 7);
    for i in 0..n {
        text.push_str(&token_text(i));
    }
    text
}

impl Completion {
    /// The non-streaming response body.
    pub fn response(&self) -> Value {
        match self.api {
            Api::Chat => openai::chat_response(self),
            Api::Completions => openai::text_response(self),
            Api::Generate => sglang::response(self),
            Api::Messages => anthropic::response(self),
            Api::Responses => responses::response(self),
        }
    }

    /// Events sent right after the response head, before the first token.
    pub fn stream_start(&self) -> Vec<Bytes> {
        match self.api {
            Api::Chat => vec![openai::chat_role_chunk(self)],
            Api::Completions | Api::Generate => Vec::new(),
            Api::Messages => anthropic::start_events(self),
            Api::Responses => vec![responses::created_event(self)],
        }
    }

    /// The event carrying token `i` (0-based).
    pub fn stream_token(&self, i: u64) -> Bytes {
        match self.api {
            Api::Chat => openai::chat_token_chunk(self, i),
            Api::Completions => openai::text_token_chunk(self, i),
            Api::Generate => sglang::token_event(self, i),
            Api::Messages => anthropic::token_event(i),
            Api::Responses => responses::delta_event(self, i),
        }
    }

    /// Events after the last token, including any end sentinel.
    pub fn stream_end(&self) -> Vec<Bytes> {
        match self.api {
            Api::Chat => openai::chat_end_events(self),
            Api::Completions => openai::text_end_events(self),
            Api::Generate => sglang::end_events(self),
            Api::Messages => anthropic::end_events(self),
            Api::Responses => vec![responses::completed_event(self)],
        }
    }

    /// The whole stream as it would be sent without faults; for tests.
    #[cfg(test)]
    pub fn stream_all(&self) -> Vec<String> {
        let mut events = self.stream_start();
        events.extend((0..self.completion_tokens).map(|i| self.stream_token(i)));
        events.extend(self.stream_end());
        events
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn completion(api: Api, tokens: u64) -> Completion {
        Completion {
            api,
            id: "abc".to_string(),
            model: "m".to_string(),
            created: 7,
            prompt_tokens: 10,
            cached_tokens: 4,
            completion_tokens: tokens,
            finish: Finish::Length,
            include_usage: true,
        }
    }

    /// Parses the JSON after `data: ` of an SSE event.
    pub fn data_of(event: &str) -> Value {
        let line = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or("null");
        serde_json::from_str(line).unwrap()
    }

    /// The `event:` name of an SSE event.
    pub fn name_of(event: &str) -> &str {
        event
            .lines()
            .find_map(|l| l.strip_prefix("event: "))
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_texts() {
        assert_eq!(token_text(3), "tok3 ");
        assert_eq!(text_of(3), "tok0 tok1 tok2 ");
        assert_eq!(text_of(0), "");
    }
}
