//! gRPC engines: the generated messages and clients of `proto/`, the gateway's calls to
//! engines over its own HTTP/2 client, and [`service`], the one face the rest of the
//! gateway sees whichever service an engine speaks ([`Engine`] is a
//! [`TokenEngine`](crate::engine::TokenEngine)).

/// Administration messages the engines' services share (`proto/common.proto`).
pub mod common {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("smg.grpc.common");
}

/// SGLang's scheduler service (`proto/sglang_scheduler.proto`).
pub mod sglang {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("sglang.grpc.scheduler");
}

/// vLLM's engine service (`proto/vllm_engine.proto`).
pub mod vllm {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("vllm.grpc.engine");
}

/// TensorRT-LLM's service (`proto/trtllm_service.proto`).
pub mod trtllm {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("trtllm");
}

/// TokenSpeed's scheduler service (`proto/tokenspeed_scheduler.proto`).
pub mod tokenspeed {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("tokenspeed.grpc.scheduler");
}

/// MLX's engine service (`proto/mlx_engine.proto`).
pub mod mlx {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("mlx.grpc.engine");
}

pub mod bundle;
pub mod client;
pub mod service;

pub use client::{CallError, Wire};
pub use service::{Engine, Events, Service};
