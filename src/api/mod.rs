//! The front-ends: the APIs the gateway answers itself rather than relays.
//!
//! On token engines a front-end turns its request body into a generation's ask once
//! ([`crate::generation`]), drives the generation, and writes the answer in its API's
//! shapes: OpenAI chat, completions and `/generate` ([`openai`], served by [`engines`]),
//! Messages ([`messages`]), Responses ([`responses`], which also runs on external
//! providers). Messages' MCP tool loop on a provider backend is [`messages::tools`]. The
//! pipeline calls in from above; each front-end answers with the transports' [`Answer`]
//! and [`SendError`], so retries and breakers treat it like any worker.
//!
//! Layers: `api → generation → engine`; nothing here imports the pipeline.
//!
//! [`Answer`]: crate::transport::Answer
//! [`SendError`]: crate::transport::SendError

pub mod engines;
pub mod messages;
pub mod openai;
pub mod responses;
mod tool_call;

use crate::generation::prompt::Refused;
use crate::generation::run::StartError;
use crate::transport::SendError;

/// A prompt the generation refused is the client's answer.
impl From<Refused> for SendError {
    fn from(refused: Refused) -> SendError {
        SendError::Refused(refused.0)
    }
}

/// A generation that did not start: refused for the client, or failed by the worker
/// (which the attempt loop may try elsewhere).
impl From<StartError> for SendError {
    fn from(err: StartError) -> SendError {
        match err {
            StartError::Refused(err) => SendError::Refused(err),
            StartError::Worker(err) => SendError::Exchange(err),
        }
    }
}
