//! Administration and information routes that talk to the fleet as a whole rather than
//! relaying one client request to one worker.
//!
//! - [`fanout`]: `POST /flush_cache`, `POST /start_profile`, `POST /stop_profile` — one call
//!   per worker, in parallel, and a summary of who succeeded and who failed.
//! - [`info`]: `GET /v1/models` (answered from the registry) and `GET /get_model_info`,
//!   `GET /get_server_info`, `GET /health_generate` (forwarded to one healthy worker).
//! - [`workers`]: `/workers` and `/workers/{worker_id}` (registration jobs).
//! - [`tokenizers`]: `/v1/tokenizers*` (the tokenizer registry and its load jobs).
//! - [`engine_metrics`]: `GET /engine_metrics` (the engines' Prometheus pages, merged).
//! - [`loads`]: `GET /loads`, `GET /get_loads` (the load monitor's cached reports).
//! - [`parse`]: `POST /parse/function_call`, `POST /parse/reasoning` (the gateway's output
//!   parsers run on a client's text; no worker involved).
//!
//! Every handler returns a complete response and never panics; every worker call goes
//! through [`crate::control::calls`], which bounds it as a whole and presents the worker key.
//! Authentication happens before these handlers run.

pub mod engine_metrics;
pub mod fanout;
pub mod info;
pub mod loads;
pub mod parse;
pub mod tokenizers;
pub mod workers;

pub use engine_metrics::engine_metrics;
pub use fanout::{flush_cache, profile};
pub use info::{forward_info, models, CallerKey};
pub use loads::loads;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde::Serialize;

use crate::control::jobs::Jobs;
use crate::control::tokenizers::Tokenizers;
use crate::fleet::Registry;

use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};
use crate::http::reply;

/// What the administration handlers use: the fleet they read, the job board they submit
/// to, and the few settings that shape their answers.
pub struct Admin {
    pub registry: Arc<Registry>,
    pub jobs: Arc<Jobs>,
    /// The tokenizer registry (shared with gRPC registration).
    pub tokenizers: Arc<Tokenizers>,
    /// `--request-timeout-secs`: the cap of every call to workers a handler makes.
    pub call_timeout: Duration,
    /// `--pd-disaggregation`: information routes ask a prefill worker.
    pub pd_disaggregation: bool,
    /// `--dp-aware`: registrations ask the engine for its data-parallel size.
    pub dp_aware: bool,
    /// `--api-key` is set: a worker registered without a key is logged, since it does not
    /// inherit the gateway's.
    pub gateway_key_set: bool,
}

/// One worker's failure in a fan-out summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The worker URL as registered.
    pub worker: String,
    /// One line saying what went wrong.
    pub error: String,
}

/// A JSON response from a serialisable value. Serialising these plain structs cannot fail;
/// should it ever, the answer is a bare 500 rather than a panic.
fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response<RespBody> {
    match serde_json::to_vec(value) {
        Ok(body) => reply::json(status, Bytes::from(body)),
        Err(_) => admin_error(StatusCode::INTERNAL_SERVER_ERROR, AdminErrorBody::Empty),
    }
}
