//! Model output parsers for the gateway's own chat pipeline: reasoning split from the
//! answer ([`reasoning`]) and each model family's tool-call syntax turned into calls
//! ([`tool`]). Both are streaming state machines fed the text the detokenizer produces,
//! in whatever pieces it comes; their one-shot result is the same machine fed the whole
//! text, so a streamed and a non-streamed answer always agree.

#[cfg(test)]
pub mod cuttings;
pub mod reasoning;
pub mod tool;
