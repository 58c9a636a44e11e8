//! The gateway's shared state and the request dispatcher: which owner serves a route.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::auth::gate::Authenticator;
use crate::config::Config;
use crate::http::body::RespBody;
use crate::http::error::{self, error_response, GatewayError};
use crate::http::route::{match_route, Route, RouteGroup, RouteMatch};
use crate::proxy::{self, ContentType, Forward, UpstreamClient};
use crate::routing::Policy;
use crate::workers::Registry;

/// Everything the data plane shares across threads. Built once at startup.
pub struct Gateway {
    pub config: Config,
    pub registry: Registry,
    pub policy: Box<dyn Policy>,
    pub auth: Authenticator,
}

/// One data-plane thread's view: the shared gateway plus what the thread owns alone.
pub struct ThreadCtx {
    pub gateway: Arc<Gateway>,
    pub client: UpstreamClient,
}

impl ThreadCtx {
    pub fn new(gateway: Arc<Gateway>) -> ThreadCtx {
        let client = proxy::client(&gateway.config);
        ThreadCtx { gateway, client }
    }

    fn forward(&self) -> Forward<'_> {
        Forward {
            config: &self.gateway.config,
            registry: &self.gateway.registry,
            policy: self.gateway.policy.as_ref(),
            client: &self.client,
        }
    }
}

/// Serves one request. Never fails: every error becomes a response here.
pub async fn handle(ctx: &ThreadCtx, mut req: Request<Incoming>) -> Response<RespBody> {
    let route = match match_route(req.method(), req.uri().path()) {
        // The RL control plane is mounted only with `--enable-rl`, which this build does
        // not offer yet: its paths do not exist (404), whatever the method.
        RouteMatch::Found(route) if is_rl(route) => return error::empty(StatusCode::NOT_FOUND),
        RouteMatch::Found(route) => route,
        RouteMatch::NotFound => return error::empty(StatusCode::NOT_FOUND),
        RouteMatch::MethodNotAllowed if req.uri().path().starts_with("/v1/rl/") => {
            return error::empty(StatusCode::NOT_FOUND)
        }
        RouteMatch::MethodNotAllowed => return error::empty(StatusCode::METHOD_NOT_ALLOWED),
    };
    let auth = &ctx.gateway.auth;
    match route.group() {
        RouteGroup::Public => {}
        RouteGroup::DataPlane => match auth.data_plane(req.headers()) {
            Ok(Some(tenant)) => {
                req.extensions_mut().insert(tenant);
            }
            Ok(None) => {}
            Err(denied) => return denied.into_response(),
        },
        RouteGroup::ControlPlane => {
            if let Err(denied) = auth
                .control_plane(req.method(), req.uri().path(), req.headers())
                .await
            {
                return denied.into_response();
            }
        }
    }
    let result = match route {
        Route::Health | Route::Liveness => Ok(error::empty(StatusCode::OK)),
        Route::Readiness => Ok(readiness(&ctx.gateway)),
        // WASM routes need `--enable-wasm` (not in this build yet): 500 with an empty body.
        Route::WasmList | Route::WasmAdd | Route::WasmDelete => {
            Ok(error::empty(StatusCode::INTERNAL_SERVER_ERROR))
        }
        Route::AudioTranscriptions => ctx.forward().send(req, ContentType::FromClient).await,
        r if is_forwarded(r) => ctx.forward().send(req, ContentType::Json).await,
        r => Err(GatewayError::NotImplemented {
            route: r.template(),
        }),
    };
    result.unwrap_or_else(|err| error_response(&err))
}

/// Routes of the RL control plane (`/v1/rl/*`).
fn is_rl(route: Route) -> bool {
    matches!(
        route,
        Route::RlWorkersList
            | Route::RlWorkerGet
            | Route::RlWorkerEngineGet
            | Route::RlWorkerEnginePost
            | Route::RlEngineFanoutGet
            | Route::RlEngineFanoutPost
    )
}

/// Inference routes that go to a worker unchanged.
fn is_forwarded(route: Route) -> bool {
    matches!(
        route,
        Route::ChatCompletions
            | Route::Completions
            | Route::Generate
            | Route::Embeddings
            | Route::Rerank
            | Route::RerankV1
            | Route::Classify
            | Route::Tokenize
            | Route::Detokenize
            | Route::Messages
            | Route::MessagesCountTokens
            | Route::ResponsesCreate
    )
}

/// `/readiness`: 200 while at least one worker can take traffic, else 503.
fn readiness(gateway: &Gateway) -> Response<RespBody> {
    let snap = gateway.registry.snapshot();
    let ready = snap.ready_count();
    let total = snap.all().len();
    let (status, word) = if ready > 0 {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
    };
    let body = format!(r#"{{"status":"{word}","ready_workers":{ready},"total_workers":{total}}}"#);
    error::json(status, Bytes::from(body))
}
