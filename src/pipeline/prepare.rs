//! Phase 1, prepare: what must be known of a request before a worker is chosen.
//!
//! The body is streamed through unread, or read first within the limits [`body_path`]
//! explains; the fields the policy asks for are peeked from a read body; the head is set
//! aside with the headers a worker may see. Nothing here waits for admission: a client
//! trickling its body in holds no token (and is cut off at `--request-body-timeout-secs`).

use std::time::Instant;

use crate::http::request_body::RequestBody;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};

use super::body_path::{self, BodyPath, StreamReason};
use super::dispatch::Dispatch;
use super::peek::{self, Peeked, Wants};
use super::Pipeline;
use crate::admission::body_budget::Charge;
use crate::api::messages::check::{self as messages, MessagesRoute};
use crate::api::responses::check as responses;
use crate::fleet::Worker;
use crate::http::error::{BodyFault, GatewayError};
use crate::http::route::Route;
use crate::http::upload::{read_prefix, BodyTiming, LimitedBody, Prefix};
use crate::routing::{Needs, RequestFacts};
use crate::transport::headers::{self, ContentType};

/// Header naming the worker to use, as an index into the candidates (consistent_hashing).
const TARGET_WORKER: &str = "x-gw-target-worker";

/// A request ready for the attempt loop.
pub(super) struct Prepared {
    /// The route the request was matched as.
    pub route: Route,
    /// How it is dispatched.
    pub dispatch: Dispatch,
    /// Method and URI; the headers moved to `headers`.
    pub head: http::request::Parts,
    /// The headers a worker receives.
    pub headers: HeaderMap,
    pub payload: Payload,
    /// The budget share of a held body: released when the request is dropped, once the
    /// exchange is over (not at the response's last byte).
    _charge: Option<Charge>,
    /// The body is JSON (the fields below can be peeked, the rank pinned).
    pub json: bool,
    /// The whole request must be over by then (`--request-timeout-secs` from its start).
    pub deadline: Instant,
    /// When the request arrived (the start of its time to first token).
    pub arrived: Instant,
    /// What routing may look at.
    pub routing: Routing,
}

/// What the policy may look at: the routing-key headers, and the fields peeked from a held
/// body (the bytes are shared with the payload, not copied).
pub(super) struct Routing {
    /// The routing key from a `--routing-key-headers` header.
    routing_key: Option<HeaderValue>,
    /// `X-GW-Target-Worker`.
    target_worker: Option<HeaderValue>,
    /// What to peek from `held`.
    wants: Wants,
    held: Bytes,
    /// Candidates are the model's workers (`--enable-igw`, count_tokens).
    pub by_model: bool,
    declared: Option<u64>,
}

/// The request body as the attempts see it: streamed once, or held for replay.
pub(super) enum Payload {
    Stream(Option<LimitedBody>),
    Held(Bytes),
}

impl Payload {
    pub fn replayable(&self) -> bool {
        matches!(self, Payload::Held(_))
    }

    /// The attempt's body as `worker` must receive it: a JSON body sent to a
    /// data-parallel rank (`--dp-aware`, which holds JSON bodies) carries the rank;
    /// anything else goes unchanged (other media types have no field to set).
    pub fn for_worker(
        &self,
        worker: &Worker,
        body: LimitedBody,
        json: bool,
    ) -> Result<LimitedBody, GatewayError> {
        match (self, worker.dp) {
            (Payload::Held(bytes), Some(rank)) if json => {
                crate::fleet::dp::pin_rank(bytes, rank.rank())
                    .map(LimitedBody::whole)
                    .map_err(|_| GatewayError::BodyNotJsonObject)
            }
            _ => Ok(body),
        }
    }

    /// The body of the next attempt; `None` once a streamed body has been used.
    pub fn next(&mut self) -> Option<LimitedBody> {
        match self {
            Payload::Stream(body) => body.take(),
            Payload::Held(bytes) => Some(LimitedBody::whole(bytes.clone())),
        }
    }

    /// The held bytes, when the body was read and something is to be peeked from it.
    fn held_for(&self, wants: Wants) -> Bytes {
        match self {
            Payload::Held(bytes) if wants != Wants::default() => bytes.clone(),
            _ => Bytes::new(),
        }
    }
}

impl Prepared {
    /// The body admission looks at for media: a JSON body read whole. Lent, not cloned:
    /// a clone of shared bytes is a locked add and a locked subtract on every request.
    pub fn media(&self) -> Option<&[u8]> {
        match (&self.payload, self.json) {
            (Payload::Held(bytes), true) => Some(bytes),
            _ => None,
        }
    }
}

impl Routing {
    /// The fields the policy asked for, read from the held body.
    pub fn peek(&self) -> Peeked<'_> {
        peek::peek(&self.held, self.wants)
    }

    /// What the policy sees of the request.
    pub fn facts<'a>(&'a self, peeked: &'a Peeked<'a>) -> RequestFacts<'a> {
        RequestFacts {
            routing_key: self
                .routing_key
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .or(peeked.rid.as_deref()),
            target_worker: self.target_worker.as_ref().and_then(|v| v.to_str().ok()),
            model: peeked.model.as_deref(),
            text: peeked.text.as_deref(),
            body_len: self.declared.map_or(self.held.len(), |len| {
                usize::try_from(len).unwrap_or(usize::MAX)
            }),
        }
    }

    /// Where the routing key came from, for `gw_routing_key_source_total`.
    pub fn key_source(&self, peeked: &Peeked<'_>) -> Option<&'static str> {
        if self.routing_key.is_some() {
            Some("header")
        } else if peeked.rid.is_some() {
            Some("rid")
        } else {
            None
        }
    }
}

impl Pipeline {
    /// Phase 1: decides the body path, reads what it says by the body's deadline and
    /// within the gateway-wide budget, and sets the head aside for the worker. The
    /// request's deadlines count from `arrived`. Not an `async fn` (see
    /// [`Pipeline::serve`]): the request is used where the block captured it.
    #[allow(clippy::manual_async_fn)] // see above: the arguments are used in place
    pub(super) fn prepare<'a>(
        &'a self,
        req: Request<RequestBody>,
        route: Route,
        dispatch: Dispatch,
        content_type: ContentType,
        arrived: Instant,
    ) -> impl std::future::Future<Output = Result<Prepared, GatewayError>> + Send + 'a {
        async move {
            let messages_route = MessagesRoute::of(route);
            let counting = messages_route == Some(MessagesRoute::CountTokens);
            let limit = self.settings.max_payload_size;
            let declared = declared_length(&req);
            if declared.is_some_and(|len| len > limit) {
                return Err(GatewayError::PayloadTooLarge { limit });
            }
            let deadline = arrived + self.settings.request_timeout;

            let json = content_type == ContentType::Json;
            let messages_route = messages_route.filter(|_| json);
            // Spec 2: a Responses body is checked before routing on every backend, so it is
            // always held.
            let checks_responses = json && route == Route::ResponsesCreate;
            if counting {
                count_tokens_served(dispatch, req.headers())?;
            }
            let renames_model = messages_route.is_some() && !self.registry.aliases().is_empty();
            let needs = match &self.pd {
                Some(pd) if dispatch.pairs => pd.needs(),
                _ => self.selecting(dispatch.prefill_only).needs(),
            };
            // Header values are shared buffers: taken before the header map is handed on.
            let (routing_key, target_worker) = if needs == Needs::Header {
                (
                    self.routing_key_header(req.headers()),
                    req.headers().get(TARGET_WORKER).cloned(),
                )
            } else {
                (None, None)
            };
            let inputs = body_path::Inputs {
                // count_tokens goes to a worker of the body's model (404 when none serves it);
                // under prefill/decode to any prefill worker.
                needs_model: (self.modes.enable_igw && json)
                    || (counting && !dispatch.prefill_only),
                needs_text: needs == Needs::PromptText && json,
                needs_rid: needs == Needs::Header
                    && json
                    && routing_key.is_none()
                    && target_worker.is_none(),
                mutates_body: (self.modes.dp_aware || renames_model) && json,
                needs_media: json && self.admission.media.is_some(),
                grpc: json && dispatch.token_engines,
                pd: dispatch.pairs,
                validates: checks_responses,
                retries: self.retry.enabled(),
                declared_len: declared,
                max_buffered: self.settings.max_buffered_request_bytes,
            };
            let path = body_path::decide(inputs);
            let (mut head, body) = req.into_parts();
            let timing = BodyTiming {
                idle: self.settings.request_body_idle_timeout,
                whole_by: tokio::time::Instant::from_std(
                    deadline.min(arrived + self.settings.request_body_timeout),
                ),
            };
            let body = LimitedBody::new(body, limit, Some(timing));
            let (mut payload, path, charge) = self.read_body(body, path, &inputs, timing).await?;
            // Spec 2: a Messages body the gateway holds is checked before routing (a streamed
            // one is the worker's to judge) and goes on with an aliased model renamed.
            if let (Some(route), Payload::Held(bytes)) = (messages_route, &mut payload) {
                let checked =
                    messages::check(route, std::mem::take(bytes), self.registry.aliases())?;
                *bytes = checked.body;
            }
            if let (true, Payload::Held(bytes)) = (checks_responses, &mut payload) {
                let renamed = responses::check(bytes)?.renamed(bytes, self.registry.aliases());
                if let Some(renamed) = renamed {
                    *bytes = renamed;
                }
            }
            self.metrics
                .body_path(path.index(), path.path(), path.reason());
            let headers = headers::to_worker(&mut head.headers, content_type, None);
            let wants = Wants {
                model: inputs.needs_model || inputs.needs_text,
                stream: false,
                rid: inputs.needs_rid,
                text: inputs.needs_text,
            };
            let routing = Routing {
                routing_key,
                target_worker,
                wants,
                held: payload.held_for(wants),
                by_model: inputs.needs_model,
                declared,
            };
            Ok(Prepared {
                route,
                dispatch,
                head,
                headers,
                payload,
                _charge: charge,
                json,
                deadline,
                arrived,
                routing,
            })
        }
    }

    /// Reads what `path` says of the body before dispatch, by the body's whole-body
    /// deadline and within the gateway-wide budget, and settles the path:
    /// a buffered body that passes its hold limit or the budget streams on instead.
    async fn read_body(
        &self,
        body: LimitedBody,
        path: BodyPath,
        inputs: &body_path::Inputs,
        timing: BodyTiming,
    ) -> Result<(Payload, BodyPath, Option<Charge>), GatewayError> {
        if !path.is_buffered() {
            return Ok((Payload::Stream(Some(body)), path, None));
        }
        let limit = self.settings.max_payload_size;
        let cap = inputs.hold_limit().unwrap_or(u64::MAX);
        let charge = self.admission.bodies.charge();
        match read_prefix(body, cap, charge, timing.whole_by).await {
            Err(err) => Err(GatewayError::from_read(err, limit)),
            Ok(Prefix::Whole(bytes, charge)) => Ok((Payload::Held(bytes), path, Some(charge))),
            // Only the budget ends the read of a body held whole early (the payload limit
            // is an error of its own).
            Ok(Prefix::Partial { .. }) if inputs.hold_limit().is_none() => {
                Err(GatewayError::BufferBudgetFull)
            }
            Ok(Prefix::Partial { body, budget_full }) => {
                let reason = if budget_full {
                    StreamReason::BudgetFull
                } else {
                    StreamReason::RetryForfeited
                };
                Ok((
                    Payload::Stream(Some(body)),
                    BodyPath::Streamed(reason),
                    None,
                ))
            }
        }
    }

    /// The routing key from the first `--routing-key-headers` header the request carries.
    fn routing_key_header(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        self.modes
            .routing_key_headers
            .iter()
            .find_map(|name| headers.get(name.as_str()))
            .cloned()
    }
}

/// The body length the client declared, if any.
fn declared_length(req: &Request<RequestBody>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Whether count_tokens can be served here at all (spec 2: 501 on gRPC engines, 415 for a
/// body not sent as JSON), before its body is read.
fn count_tokens_served(dispatch: Dispatch, headers: &HeaderMap) -> Result<(), GatewayError> {
    if dispatch.token_engines {
        return Err(GatewayError::NotServedByBackend {
            route: "/v1/messages/count_tokens",
            backend: "gRPC",
        });
    }
    if !messages::declares_json(headers) {
        return Err(GatewayError::CountTokensBody {
            fault: BodyFault::MediaType,
            message: "Content-Type must be application/json".to_owned(),
        });
    }
    Ok(())
}
