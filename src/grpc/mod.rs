//! gRPC engines: the generated messages and clients of `proto/`, and the gateway's calls
//! to engines over its own HTTP/2 client.

/// SGLang's scheduler service (`proto/sglang_scheduler.proto`).
pub mod sglang {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("sglang.grpc.scheduler");
}

pub mod client;

pub use client::{CallError, Scheduler, Wire};
