//! What a generation hands on as it goes: each choice's text, reasoning, tool-call pieces
//! and scores made final ([`Delta`]), why it ended ([`Finish`]) and its token counts
//! ([`Usage`]). The front-ends write these in their own shapes; nothing here knows a wire
//! format beyond the names OpenAI gives finish reasons (serialised as they are).

use bytes::Bytes;
use serde::Serialize;

use super::scores::Scored;
use crate::http::error::GatewayError;

/// What became final: text, and the scores of the tokens whose text it completes; on a
/// chat choice whose output is parsed ([`Parsing`]), the text is the content and the
/// reasoning and tool calls are beside it.
///
/// [`Parsing`]: super::parse::Parsing
#[derive(Debug, Default)]
pub struct Delta {
    pub text: String,
    pub logprobs: Vec<Scored>,
    pub reasoning: String,
    pub calls: Vec<CallDelta>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.logprobs.is_empty()
            && self.reasoning.is_empty()
            && self.calls.is_empty()
    }

    pub fn clear(&mut self) {
        self.text.clear();
        self.logprobs.clear();
        self.reasoning.clear();
        self.calls.clear();
    }
}

/// One piece of a choice's tool calls, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallDelta {
    /// Call `index` begins.
    Start {
        index: usize,
        id: String,
        name: String,
    },
    /// The next piece of call `index`'s arguments (JSON text).
    Arguments { index: usize, fragment: String },
}

/// One call of a whole answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Call<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: String,
}

/// The calls a whole answer's pieces make, in order.
pub fn calls(pieces: &[CallDelta]) -> Vec<Call<'_>> {
    let mut calls: Vec<Call<'_>> = Vec::new();
    for piece in pieces {
        match piece {
            CallDelta::Start { id, name, .. } => calls.push(Call {
                id,
                name,
                arguments: String::new(),
            }),
            CallDelta::Arguments { index, fragment } => {
                if let Some(call) = calls.get_mut(*index) {
                    call.arguments.push_str(fragment);
                }
            }
        }
    }
    calls
}

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
    /// The model called a function (a chat choice whose output the tool-call parser read).
    ToolCalls,
}

/// How one model turn ended (a Responses answer is built from its turns' deltas; a
/// response may run several turns).
pub struct TurnEnd {
    /// `None` when the generation failed partway; `error` says why.
    pub finish: Option<Finish>,
    pub error: Option<GatewayError>,
    pub usage: Usage,
}

/// The client of a streamed turn went away.
pub struct ClientGone;

/// Where a turn's deltas go as they are made final: the response's writer, which returns
/// the event frames they made (streamed) for the turn to send.
pub type Sink<'a> = dyn FnMut(&Delta) -> Option<Bytes> + Send + 'a;
