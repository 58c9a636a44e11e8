//! Engine-agnostic language work, between the API front-ends above and the token engines
//! below ([`crate::engine`]): the parsed ask ([`ask`]), the prompt's token ids ([`prompt`]),
//! and what the engine's ids become as they stream back — text through the detokenizer and
//! stop strings ([`decode`]), reasoning and tool calls through the worker's parsers
//! ([`parse`]), log probabilities ([`scores`]), one state per choice ([`choices`]), handed
//! on as [`delta`]s. Nothing here knows a front-end's wire shape or a worker's transport.

pub mod ask;
pub mod choices;
pub mod decode;
pub mod delta;
pub mod parse;
pub mod prompt;
pub mod run;
pub mod scores;
