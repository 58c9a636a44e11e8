//! Calls to one vLLM engine (its `VllmEngine` gRPC service) over the same pooled HTTP/2
//! client as SGLang's scheduler.

use std::time::Duration;

use http::uri::Authority;
use tonic::Streaming;

use super::client::{bounded, origin, timed, CallError, Wire};
use super::common::{FlushCacheRequest, FlushCacheResponse};
use super::vllm::vllm_engine_client::VllmEngineClient;
use super::vllm::{
    AbortRequest, GenerateRequest, GenerateResponse, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, HealthCheckRequest,
};

/// One vLLM engine, reached through `wire`. Cheap to build per call.
#[derive(Clone)]
pub struct Vllm {
    rpc: VllmEngineClient<Wire>,
}

impl Vllm {
    /// The engine at `authority` (host:port of a `grpc://` URL, or of a `grpcs://` one
    /// when `tls`).
    pub fn new(wire: Wire, authority: &Authority, tls: bool) -> Vllm {
        Vllm {
            rpc: VllmEngineClient::with_origin(wire, origin(authority, tls)),
        }
    }

    /// `HealthCheck`: whether the engine core is alive.
    pub async fn health(&self, timeout: Duration) -> Result<bool, CallError> {
        let mut rpc = self.rpc.clone();
        let call = rpc.health_check(timed(HealthCheckRequest {}, timeout));
        Ok(bounded(timeout, call).await?.healthy)
    }

    /// `GetModelInfo`: what the engine serves.
    pub async fn model_info(&self, timeout: Duration) -> Result<GetModelInfoResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(
            timeout,
            rpc.get_model_info(timed(GetModelInfoRequest {}, timeout)),
        )
        .await
    }

    /// `Generate`: starts one generation and returns its stream once the engine answered
    /// the call.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        timeout: Duration,
    ) -> Result<Streaming<GenerateResponse>, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(timeout, rpc.generate(timed(request, timeout))).await
    }

    /// `GetLoads`: the scheduler's load (vLLM reports one rank, core figures only).
    pub async fn loads(&self, timeout: Duration) -> Result<GetLoadsResponse, CallError> {
        let mut rpc = self.rpc.clone();
        let request = GetLoadsRequest {
            dp_rank: None,
            include: Vec::new(),
        };
        bounded(timeout, rpc.get_loads(timed(request, timeout))).await
    }

    /// `FlushCache`: drops the prefix cache (older servicers answer UNIMPLEMENTED).
    pub async fn flush_cache(
        &self,
        request: FlushCacheRequest,
        timeout: Duration,
    ) -> Result<FlushCacheResponse, CallError> {
        let mut rpc = self.rpc.clone();
        bounded(timeout, rpc.flush_cache(timed(request, timeout))).await
    }

    /// `Abort`: asks the engine to stop generating for `request_id` (vLLM takes no
    /// reason).
    pub async fn abort(&self, request_id: String, timeout: Duration) -> Result<(), CallError> {
        let mut rpc = self.rpc.clone();
        let request = AbortRequest {
            request_ids: vec![request_id],
        };
        bounded(timeout, rpc.abort(timed(request, timeout)))
            .await
            .map(drop)
    }
}
