//! The wiring layer's request side: the state every data-plane thread shares, each thread's
//! handler, and the dispatcher that gives each route to its owner (health, administration,
//! the data-path pipeline).

use std::sync::Arc;

use std::time::Duration;

use crate::http::request_body::RequestBody;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tokio::time::Instant;

use crate::admin::{self, Admin, CallerKey};
use crate::auth::gate::{Authenticator, Denied};
use crate::control::calls::CallClient;
use crate::conversations;
use crate::fleet::Registry;
use crate::http::body::RespBody;
use crate::http::error::{
    self, respond::admin_error, respond::error_response, respond::AdminErrorBody, ErrorCode,
    GatewayError,
};
use crate::http::head_rules;
use crate::http::reply;
use crate::http::route::{allowed_methods, match_route, path_param, Route, RouteGroup, RouteMatch};
use crate::http::upload::{read_whole, ReadError};
use crate::metrics::Metrics;
use crate::pipeline::{ContentType, Pipeline, ThreadClients};
use crate::runtime::ThreadSetup;
use crate::server::Handler;

/// What every data-plane thread shares. Built once at startup by [`crate::startup`]; each
/// owner below gets only its own handle.
pub struct Gateway {
    /// The data path: forwarding of inference requests.
    pub pipeline: Arc<Pipeline>,
    /// Administration and information routes.
    pub admin: Arc<Admin>,
    pub auth: Authenticator,
    /// The fleet, for `/readiness`.
    pub registry: Arc<Registry>,
    /// Every metric family (the HTTP layer's are recorded here).
    pub metrics: Arc<Metrics>,
}

/// One data-plane thread's handler: the shared gateway plus what the thread owns alone.
pub struct ThreadCtx {
    gateway: Arc<Gateway>,
    clients: ThreadClients,
    /// The gateway's own calls to workers (fan-out, forwarded information routes).
    calls: CallClient,
}

impl ThreadCtx {
    pub fn new(gateway: Arc<Gateway>) -> ThreadCtx {
        let pipeline = &gateway.pipeline;
        let clients = ThreadClients::new(
            &pipeline.settings,
            &pipeline.tls,
            &pipeline.metrics,
            &pipeline.history,
            &pipeline.builtins,
        );
        let calls = CallClient::new(&gateway.pipeline.tls);
        ThreadCtx {
            gateway,
            clients,
            calls,
        }
    }
}

impl Handler for ThreadCtx {
    fn handle(
        &self,
        req: Request<RequestBody>,
    ) -> impl std::future::Future<Output = Response<RespBody>> + Send {
        handle(self, req)
    }
}

/// Each data-plane thread gets its own [`ThreadCtx`] and runs the event-loop canary.
impl ThreadSetup for Gateway {
    type Handler = ThreadCtx;

    fn handler(self: Arc<Self>) -> ThreadCtx {
        // Called once on each data-plane thread, before it serves: the thread writes its
        // own shard of the request metrics from now on.
        crate::metrics::shard::claim();
        ThreadCtx::new(self)
    }

    fn companion(&self, index: usize) -> impl std::future::Future<Output = ()> + 'static {
        let canary = self.metrics.runtime.clone().canary(Some(index));
        async move {
            tokio::join!(
                canary,
                crate::http::h1::pool::sweep_forever(),
                crate::http::deadline::run()
            );
        }
    }

    fn parked(&self, index: usize) {
        if let Some(stats) = self.metrics.runtime.thread(index) {
            stats.parked();
        }
    }
}

/// Serves one request: the route is matched once, here; then the head rules, the route
/// (or its 404/405), the route group's authentication and the route's owner: health
/// answers here, inference goes to the pipeline, the rest to [`answer_here`]. Never fails:
/// every error becomes a response. The answer is recorded in the HTTP-layer metrics under
/// the route's template (requests matching no route are not recorded, as spec 3 says).
///
/// One function, not a chain of them: each `async fn` between hyper and the pipeline
/// moved the request once more and added a frame to every poll of it.
///
/// Only inference runs inline. The request's future is as large as its largest branch,
/// and hyper's service boxes it per request: the administration handlers (fan-outs to
/// every worker, the store, the Conversations API) would make every inference request
/// build and move kilobytes it never uses, so they are boxed behind their own call.
///
/// Not an `async fn`: one keeps the request twice in its state (as passed, and as the local
/// it is moved into when first polled, a copy on every request); the block uses it in place.
#[allow(clippy::manual_async_fn)] // see above: the arguments are used in place
pub fn handle<'a>(
    ctx: &'a ThreadCtx,
    mut req: Request<RequestBody>,
) -> impl std::future::Future<Output = Response<RespBody>> + Send + 'a {
    async move {
        let routed = routed(
            match_route(req.method(), req.uri().path()),
            req.uri().path(),
        );
        let head = head_rules::check(req.version(), req.headers());
        let route = match (routed, &head) {
            (Ok(route), _) => route,
            (Err(_), Err(err)) => return error_response(err),
            (Err(NoRoute::NotFound), Ok(())) => return error::respond::not_found(),
            (Err(NoRoute::MethodNotAllowed), Ok(())) => {
                let allow = allowed_methods(req.uri().path()).unwrap_or_default();
                return error::respond::method_not_allowed(&allow);
            }
        };
        let arrived = std::time::Instant::now();
        // The pipeline's end for the router metrics, which serves as this one's too.
        let mut answered = None;
        let in_flight = ctx
            .gateway
            .metrics
            .http_started(req.method(), route, arrived);
        let resp = match head {
            Err(err) => error_response(&err),
            Ok(()) => match authenticate(&ctx.gateway.auth, route, &mut req).await {
                Err(denied) => denied.into_response(),
                Ok(()) => {
                    let answered = match route {
                        Route::Health | Route::Liveness => Ok(reply::empty(StatusCode::OK)),
                        Route::Readiness => Ok(readiness(&ctx.gateway.registry)),
                        Route::AudioTranscriptions => {
                            let ct = ContentType::FromClient;
                            forward(ctx, route, req, ct, arrived, &mut answered).await
                        }
                        r if is_forwarded(r) => {
                            let ct = ContentType::Json;
                            forward(ctx, r, req, ct, arrived, &mut answered).await
                        }
                        r => crate::boxed::pinned(|| answer_here(ctx, r, req)).await,
                    };
                    answered.unwrap_or_else(|err| error_response(&err))
                }
            },
        };
        in_flight.finished(
            resp.status().as_u16(),
            ErrorCode::of(&resp),
            answered
                .map_or_else(
                    || arrived.elapsed(),
                    |at| at.saturating_duration_since(arrived),
                )
                .as_secs_f64(),
        );
        resp
    }
}

/// Why a request has no route to serve it.
enum NoRoute {
    /// 404: no such path (or an RL path, not mounted in this build).
    NotFound,
    /// 405: a known path, another method.
    MethodNotAllowed,
}

/// The matched route, if it is served here. Requests without one are not recorded in the
/// HTTP metrics.
fn routed(matched: RouteMatch, path: &str) -> Result<Route, NoRoute> {
    match matched {
        // The RL control plane is mounted only with `--enable-rl`, which this build does
        // not offer yet: its paths do not exist (404), whatever the method.
        RouteMatch::Found(route) if is_rl(route) => Err(NoRoute::NotFound),
        RouteMatch::Found(route) => Ok(route),
        RouteMatch::NotFound => Err(NoRoute::NotFound),
        RouteMatch::MethodNotAllowed if path.starts_with("/v1/rl/") => Err(NoRoute::NotFound),
        RouteMatch::MethodNotAllowed => Err(NoRoute::MethodNotAllowed),
    }
}

/// The guard of the route's group (`auth::gate` decides); a data-plane tenant identity is
/// attached to the request.
async fn authenticate(
    auth: &Authenticator,
    route: Route,
    req: &mut Request<RequestBody>,
) -> Result<(), Denied> {
    match route.group() {
        RouteGroup::Public => Ok(()),
        RouteGroup::DataPlane => {
            if let Some(tenant) = auth.data_plane(req.headers())? {
                req.extensions_mut().insert(tenant);
            }
            Ok(())
        }
        RouteGroup::ControlPlane => {
            auth.control_plane(req.method(), req.uri().path(), req.headers())
                .await
        }
    }
}

/// The routes the gateway answers itself: administration to `admin`, stored responses
/// and conversations from the history store; routes not built yet answer 501.
async fn answer_here(
    ctx: &ThreadCtx,
    route: Route,
    req: Request<RequestBody>,
) -> Result<Response<RespBody>, GatewayError> {
    let gateway = &ctx.gateway;
    match route {
        // WASM routes need `--enable-wasm` (not in this build yet): 500 with an empty body.
        Route::WasmList | Route::WasmAdd | Route::WasmDelete => Ok(admin_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            AdminErrorBody::Empty,
        )),
        Route::Models => {
            let open = gateway.auth.data_plane_open();
            let caller = CallerKey::from_request(req.headers(), open);
            Ok(admin::models(&gateway.admin, &ctx.calls, caller).await)
        }
        Route::GetModelInfo | Route::GetServerInfo | Route::HealthGenerate => {
            Ok(admin::forward_info(&gateway.admin, &ctx.calls, route.template()).await)
        }
        Route::FlushCache => Ok(admin::flush_cache(&gateway.admin, &ctx.calls).await),
        Route::EngineMetrics => Ok(admin::engine_metrics(&gateway.admin, &ctx.calls).await),
        Route::Loads | Route::GetLoads => Ok(admin::loads(&gateway.admin, req.uri().query())),
        Route::StartProfile | Route::StopProfile => {
            let start = route == Route::StartProfile;
            match read_admin_body(req.into_body()).await {
                Ok(body) => Ok(admin::profile(&gateway.admin, &ctx.calls, start, body).await),
                Err(err) => Ok(body_error(err)),
            }
        }
        Route::ParseFunctionCall | Route::ParseReasoning => {
            Ok(match read_admin_body(req.into_body()).await {
                Ok(body) if route == Route::ParseFunctionCall => admin::parse::function_call(&body),
                Ok(body) => admin::parse::reasoning(&body),
                Err(err) => body_error(err),
            })
        }
        Route::WorkersCreate
        | Route::WorkersList
        | Route::WorkerGet
        | Route::WorkerPatch
        | Route::WorkerReplace
        | Route::WorkerDelete => Ok(workers_route(&gateway.admin, route, req).await),
        Route::TokenizersCreate
        | Route::TokenizersList
        | Route::TokenizerGet
        | Route::TokenizerStatus
        | Route::TokenizerDelete => Ok(tokenizers_route(&gateway.admin, route, req).await),
        Route::ResponseGet
        | Route::ResponseDelete
        | Route::ResponseCancel
        | Route::ResponseInputItems => {
            let (head, _) = req.into_parts();
            let owner = crate::api::responses::stored::owner_of(&head);
            let history = gateway.pipeline.history.as_ref();
            crate::api::responses::stored::serve(history, &owner, route, head.uri.path()).await
        }
        r if conversations::serves(r) => {
            conversations::serve(gateway.pipeline.history.as_ref(), r, req).await
        }
        r => Err(GatewayError::NotImplemented {
            route: r.template(),
        }),
    }
}

/// An inference request: through the pipeline's phases (`pipeline::Pipeline::serve`).
/// The pipeline's own future, not an `async fn` around it, which would add a copy of the
/// request and one more move of the whole future on every request.
fn forward<'a>(
    ctx: &'a ThreadCtx,
    route: Route,
    req: Request<RequestBody>,
    content_type: ContentType,
    arrived: std::time::Instant,
    answered: &'a mut Option<std::time::Instant>,
) -> impl std::future::Future<Output = Result<Response<RespBody>, GatewayError>> + Send + 'a {
    ctx.gateway
        .pipeline
        .serve(&ctx.clients, route, req, content_type, arrived, answered)
}

/// Largest body of an administration request.
const MAX_ADMIN_BODY: u64 = 1024 * 1024;
/// Time a client has to send an administration request's body.
const ADMIN_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The answer to an administration body that could not be read.
fn body_error(err: ReadError) -> Response<RespBody> {
    error_response(&GatewayError::from_read(err, MAX_ADMIN_BODY))
}

/// Reads a whole administration body (bounded in size and time).
async fn read_admin_body(body: RequestBody) -> Result<Bytes, ReadError> {
    read_whole(body, MAX_ADMIN_BODY, Instant::now() + ADMIN_BODY_TIMEOUT).await
}

/// `/workers` and `/workers/{worker_id}`.
async fn workers_route(
    admin: &Admin,
    route: Route,
    req: Request<RequestBody>,
) -> Response<RespBody> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let id = path_param(path, 1);
    match route {
        Route::WorkersList => admin::workers::list(admin, parts.uri.query()),
        Route::WorkerGet => admin::workers::get(admin, id),
        Route::WorkerDelete => admin::workers::delete(admin, id),
        _ => {
            let body = match read_admin_body(body).await {
                Ok(body) => body,
                Err(err) => return body_error(err),
            };
            match route {
                Route::WorkersCreate => admin::workers::create(admin, &parts.headers, &body),
                Route::WorkerPatch => admin::workers::patch(admin, id, &parts.headers, &body),
                _ => admin::workers::replace(admin, id, &parts.headers, &body),
            }
        }
    }
}

/// `/v1/tokenizers` and `/v1/tokenizers/{tokenizer_id}[/status]`.
async fn tokenizers_route(
    admin: &Admin,
    route: Route,
    req: Request<RequestBody>,
) -> Response<RespBody> {
    let (parts, body) = req.into_parts();
    let key = path_param(parts.uri.path(), 2);
    match route {
        Route::TokenizersList => admin::tokenizers::list(admin),
        Route::TokenizerGet => admin::tokenizers::get(admin, key),
        Route::TokenizerStatus => admin::tokenizers::status(admin, key),
        Route::TokenizerDelete => admin::tokenizers::delete(admin, key),
        _ => {
            let limit = admin::tokenizers::MAX_BODY;
            match read_whole(body, limit, Instant::now() + ADMIN_BODY_TIMEOUT).await {
                Ok(body) => admin::tokenizers::create(admin, &parts.headers, &body),
                Err(err) => error_response(&GatewayError::from_read(err, limit)),
            }
        }
    }
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
pub fn readiness(registry: &Registry) -> Response<RespBody> {
    let snap = registry.snapshot();
    let ready = snap.ready_count();
    let total = snap.all().len();
    let (status, word) = if ready > 0 {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
    };
    let body = format!(r#"{{"status":"{word}","ready_workers":{ready},"total_workers":{total}}}"#);
    reply::json(status, Bytes::from(body))
}
