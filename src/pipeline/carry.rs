//! Phase 3's carrier: which transport or front-end takes an attempt to a worker, by the
//! worker's connection mode and the request's dispatch. The one place the data path
//! chooses between relaying and answering itself.

use std::future::Future;
use std::pin::Pin;

use crate::api::engines::Engines;
use crate::api::messages::tools::{self, LoopClient};
use crate::api::responses::Runner;
use crate::boxed::pinned;
use crate::fleet::{ConnectionMode, Worker};
use crate::http::error::GatewayError;
use crate::http::route::Route;
use crate::transport::either::Either;
use crate::transport::http::UpstreamClient;
use crate::transport::{Answer, Attempt, SendError, Transport};

/// Where an attempt goes, chosen by the worker's connection mode: a transport that relays
/// it, or the front-end that answers it (token engines, Responses, the MCP tool loop).
pub(super) struct Carriers<'a> {
    pub http: &'a UpstreamClient,
    pub engines: &'a Engines,
    /// `--backend` names an external provider: what an HTTP worker is.
    pub provider: bool,
    /// The provider backend's MCP tool loop.
    pub tools: &'a LoopClient,
    /// Responses run by the gateway on external providers.
    pub responses: &'a Runner,
}

impl Carriers<'_> {
    /// Whether a transport of this build reaches `worker`.
    pub fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        match worker.connection_mode() {
            ConnectionMode::Http => self.http.reaches(worker),
            ConnectionMode::Grpc | ConnectionMode::Zmq => self.engines.reaches(worker),
        }
    }

    /// Sends `attempt` over `worker`'s transport.
    ///
    /// Only the HTTP relay runs inline. A front-end's future (a generation, a Responses
    /// run, a tool loop) is kilobytes of state, and the request's whole future is as large
    /// as its largest branch: inline, every relayed request built, moved and boxed it (the
    /// largest `memcpy` of a small request's profile; the request's future was 30 KiB,
    /// 7 KiB with the front-ends, the pair loop and the administration routes boxed).
    /// Boxed (built in its box, [`crate::boxed`]), a front-end costs its own request one
    /// allocation instead. Not an `async fn`: the relay's own future is returned, so
    /// choosing the carrier adds no future to the request's.
    pub fn send<'s>(
        &'s self,
        worker: &'s Worker,
        attempt: Attempt<'s>,
    ) -> Either<
        impl Future<Output = Carried> + Send + 's,
        Pin<Box<dyn Future<Output = Carried> + Send + 's>>,
    > {
        match worker.connection_mode() {
            ConnectionMode::Http if self.provider => Either::right(pinned(|| {
                tools::serve(self.http, self.tools, worker, attempt)
            })),
            ConnectionMode::Http if Runner::takes(worker, &attempt) => {
                Either::right(pinned(|| self.responses.on_provider(worker, attempt)))
            }
            ConnectionMode::Http => Either::left(self.http.send(worker, attempt)),
            ConnectionMode::Grpc | ConnectionMode::Zmq => {
                if attempt.route == Route::ResponsesCreate {
                    Either::right(pinned(|| {
                        self.responses.on_engine(self.engines, worker, attempt)
                    }))
                } else {
                    Either::right(pinned(|| self.engines.send(worker, attempt)))
                }
            }
        }
    }
}

/// What an attempt's carrier answers.
type Carried = Result<Answer, SendError>;
