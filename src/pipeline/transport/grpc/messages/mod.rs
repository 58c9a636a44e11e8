//! `/v1/messages` on gRPC engines: the gateway's chat pipeline with Messages at both ends.
//!
//! A Messages body is converted into the chat the pipeline already serves ([`convert`]):
//! the same [`Ask`], rendered by the same template, decoded through the same stop strings
//! and split by the same tool-call and reasoning parsers. Only the two ends differ: the
//! body read here, and the answer written in Messages' shapes ([`answer`]), a whole
//! message or the `message_start` … `message_stop` event stream.
//!
//! [`Ask`]: super::request::Ask

mod answer;
mod convert;

pub use answer::Speaker;
pub use convert::ask;
