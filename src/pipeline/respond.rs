//! Phase 4, respond: the chosen answer becomes the client's response. Whatever must be
//! released at its last byte (the worker's load, the admission ticket) rides on the body as
//! one guard, so a long stream holds them exactly as long as it runs, and a client that
//! goes away releases them at once. Taps that observe the frames (stored responses, usage
//! counts) are attached here too.

use http::Response;

use super::transport::Answer;
use crate::admission::Ticket;
use crate::fleet::LoadGuard;
use crate::http::body::RespBody;
use crate::http::guard::Guard;

/// What the request holds until its response is done, besides the worker's load.
pub(super) struct Release {
    pub ticket: Ticket,
}

/// The answer of the attempt that won, on its way to the client.
pub(super) fn relay(answer: Answer, load: LoadGuard, done: Release) -> Response<RespBody> {
    answer.map(|body| body.holding(Guard::new((load, done.ticket))))
}
