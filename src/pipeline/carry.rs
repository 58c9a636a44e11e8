//! Phase 3's carrier: which transport or front-end takes an attempt to a worker, by the
//! worker's connection mode and the request's dispatch. The one place the data path
//! chooses between relaying and answering itself.

use crate::api::engines::Engines;
use crate::api::messages::tools::{self, LoopClient};
use crate::api::responses::Runner;
use crate::fleet::{ConnectionMode, Transport as FleetTransport, Worker};
use crate::http::error::GatewayError;
use crate::http::route::Route;
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
            ConnectionMode::Grpc if matches!(worker.transport, FleetTransport::Grpc { .. }) => {
                self.engines.reaches(worker)
            }
            other => Err(GatewayError::UnsupportedTransport {
                transport: other.as_str(),
            }),
        }
    }

    /// Sends `attempt` over `worker`'s transport.
    pub async fn send(&self, worker: &Worker, attempt: Attempt<'_>) -> Result<Answer, SendError> {
        match worker.connection_mode() {
            ConnectionMode::Http if self.provider => {
                tools::serve(self.http, self.tools, worker, attempt).await
            }
            ConnectionMode::Http if Runner::takes(worker, &attempt) => {
                self.responses.on_provider(worker, attempt).await
            }
            ConnectionMode::Http => self.http.send(worker, attempt).await,
            ConnectionMode::Grpc if matches!(worker.transport, FleetTransport::Grpc { .. }) => {
                if attempt.route == Route::ResponsesCreate {
                    self.responses
                        .on_engine(self.engines, worker, attempt)
                        .await
                } else {
                    self.engines.send(worker, attempt).await
                }
            }
            other => Err(SendError::Exchange(GatewayError::UnsupportedTransport {
                transport: other.as_str(),
            })),
        }
    }
}
