//! tollgate: a lean, high-throughput inference gateway.
//!
//! The request's path through the crate:
//! `runtime` (thread-per-core accept loops) → `server` (one hyper connection, edge limits)
//! → `http::route` (which route) → `app` (the route's owner) → `pipeline` (decide the
//! dispatch, prepare, admit, pick a worker with `routing`, send, relay the answer back frame
//! by frame). An attempt is carried by a `transport` that relays it as it is (HTTP, HTTP
//! prefill/decode pairs, a provider's Messages API) or by a front-end of `api` that answers
//! it (OpenAI and Messages on token engines, Responses, the MCP tool loops); the
//! front-ends drive `generation` (the ask, the prompt's ids, decoding and parsing), which
//! speaks to engines through `engine` (the token-engine seam; gRPC below it). `fleet` holds
//! the workers as a lock-free snapshot; `config` turns flags into a `Config`; `startup`
//! builds everything from it.

pub mod admin;
pub mod admission;
pub mod api;
pub mod app;
pub mod auth;
pub mod bounded;
pub mod boxed;
pub mod chat;
pub mod config;
pub mod control;
pub mod conversations;
pub mod engine;
pub mod fleet;
pub mod fxhash;
pub mod generation;
pub mod history;
pub mod http;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod parsers;
pub mod pipeline;
pub mod resilience;
pub mod rng;
pub mod routing;
pub mod runtime;
pub mod secret;
pub mod server;
pub mod sse;
pub mod startup;
pub mod transport;
