//! `/v1/messages`, the Messages API, wherever the gateway reads it:
//!
//! - [`check`]: the body checked before routing on every backend (spec 2), and an aliased
//!   model renamed in the client's own bytes;
//! - on token engines, the gateway's chat generation with Messages at both ends: the body
//!   converted into the [`Ask`] a chat makes ([`convert`]), rendered by the same template,
//!   decoded through the same stop strings and split by the same tool-call and reasoning
//!   parsers, and the answer written in Messages' shapes ([`answer`]), a whole message or
//!   the `message_start` … `message_stop` event stream;
//! - on a provider backend, the MCP tool loop ([`tools`]) when the client asks for it.
//!
//! [`Ask`]: crate::generation::ask::Ask

mod answer;
pub mod check;
mod convert;
pub mod tools;

pub use answer::Speaker;
pub use convert::ask;
