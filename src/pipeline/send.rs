//! Phase 3, send: the attempt loop, one for every way a request is dispatched. Each
//! attempt picks where it goes — one worker ([`Single`]), or a prefill/decode pair
//! ([`super::pd`]) — hands it to its carrier ([`super::carry`]), and classifies what
//! came back for the workers' circuit breakers; a failed attempt is retried elsewhere
//! (with backoff) while the body can be replayed and no response byte has reached the
//! client. The loop knows nothing of how a transport talks to its worker, nor of how many
//! workers an attempt takes. The answer that wins goes to phase 4 ([`Pipeline::respond`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderMap, Response};
use uuid::Uuid;

use super::carry::Carriers;
use super::prepare::{Payload, Prepared};
use super::select::{self, Among, NoPick};
use super::{Pipeline, Seen, ThreadClients};
use crate::admission::Ticket;
use crate::fleet::{LoadGuard, Worker};
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::guard::Guard;
use crate::http::route::Route;
use crate::resilience::{Outcome, RetryConfig};
use crate::routing::{Policy, RequestFacts};
use crate::transport::{Answer, Attempt, SendError};

/// How one attempt ended, when it did not produce the response to relay.
pub(super) enum Failed {
    /// A retryable status; the answer is kept in case it is the last word (boxed: a
    /// relay body is large, and this is the rare path).
    Status(Box<(Answer, LoadGuard)>),
    /// No answer: connect failure or broken exchange.
    Exchange(GatewayError),
}

/// What an attempt sends of the prepared request (its routing facts are read beside it).
pub(super) struct Outgoing<'r> {
    pub route: Route,
    /// Method and URI.
    pub head: &'r http::request::Parts,
    /// The headers a worker receives.
    pub headers: &'r mut HeaderMap,
    pub payload: &'r mut Payload,
    /// The body is JSON.
    pub json: bool,
    pub deadline: Instant,
    pub arrived: Instant,
}

/// What becomes of a worker's answer ([`Pipeline::answered`]).
pub(super) enum Verdict {
    /// It goes to the client.
    Relay,
    /// Its status is one to retry and the body can be sent again: kept as the failure's
    /// last word while another worker is tried.
    Retry,
}

/// How one attempt came out. The answer is the common case and stays unboxed: boxing it
/// would cost an allocation per request to spare a move on the rare failure path.
#[allow(clippy::large_enum_variant)]
pub(super) enum Sent {
    /// The client's answer, with what must live as long as its body.
    Answer {
        answer: Answer,
        load: LoadGuard,
        holding: Option<Guard>,
    },
    /// It failed on `by`, which may be retried against.
    Failed { failed: Failed, by: Arc<Worker> },
    /// Nothing was sent (no transport of this build reaches the worker): another worker
    /// takes the request at once, without counting as a retry.
    Skipped(Failed),
}

/// One way of dispatching a request: where an attempt goes, and how it is sent.
pub(super) trait Way {
    /// What one attempt goes to.
    type Picked;

    /// The next attempt's target, avoiding those set aside by [`Way::retrying`].
    fn pick(
        &mut self,
        pipeline: &Pipeline,
        facts: &RequestFacts<'_>,
    ) -> Result<Self::Picked, NoPick>;

    /// Why nothing could be picked when no attempt has failed yet.
    fn none_picked(&self, pipeline: &Pipeline) -> GatewayError;

    /// Sends one attempt to `picked`. An error ends the request.
    async fn attempt(
        &mut self,
        pipeline: &Pipeline,
        picked: &Self::Picked,
        out: &mut Outgoing<'_>,
        seen: &mut Seen,
    ) -> Result<Sent, GatewayError>;

    /// A failed attempt of `endpoint` will be retried after `backoff`: counts it and sets
    /// aside `by`.
    fn retrying(
        &mut self,
        pipeline: &Pipeline,
        picked: &Self::Picked,
        by: &Worker,
        endpoint: &'static str,
        attempt: u32,
        backoff: std::time::Duration,
    );
}

impl Pipeline {
    /// Sheds a request whose candidates are all overloaded (never retried): at selection
    /// on its first attempt, at dispatch on a retry.
    pub(super) fn shed(&self, attempt: u32) -> GatewayError {
        let stage = if attempt == 0 {
            "selection"
        } else {
            "dispatch"
        };
        self.metrics.overload_shed(stage);
        GatewayError::OverloadShed {
            retry_after_secs: self.modes.overload_retry_after.as_secs(),
        }
    }

    /// The policy that picks a request's single worker: `--prefill-policy` when it goes to
    /// one prefill worker (count_tokens under prefill/decode), else `--policy`.
    pub(super) fn selecting(&self, prefill_only: bool) -> &dyn Policy {
        match &self.pd {
            Some(pd) if prefill_only => pd.prefill.as_ref(),
            _ => self.policy.as_ref(),
        }
    }

    /// Phase 3: attempts until one answer is the client's, or none can be.
    pub(super) async fn send(
        &self,
        clients: &ThreadClients,
        endpoint: &'static str,
        req: &mut Prepared,
        ticket: Ticket,
        seen: &mut Seen,
    ) -> Result<Response<RespBody>, GatewayError> {
        let Prepared {
            route,
            dispatch,
            head,
            headers,
            payload,
            json,
            deadline,
            arrived,
            routing,
            ..
        } = req;
        let peeked = routing.peek();
        let facts = routing.facts(&peeked);
        if let Some(source) = routing.key_source(&peeked) {
            self.metrics.routing_key_source(source);
        }
        seen.model = peeked.model.as_deref().map(str::to_owned);
        let mut out = Outgoing {
            route: *route,
            head,
            headers,
            payload,
            json: *json,
            deadline: *deadline,
            arrived: *arrived,
        };
        if dispatch.pairs {
            // Boxed for the reason `Carriers::send` boxes its front-ends: a pair's loop is
            // large, and a single worker's request should not carry its size.
            let mut pairs = self.pairs(clients, *dispatch, &out)?;
            return crate::boxed::pinned(|| {
                self.attempts(&mut pairs, &facts, endpoint, &mut out, ticket, seen)
            })
            .await;
        }
        // Candidates are narrowed to the model's workers only with several models behind
        // the gateway; otherwise the model only informs the policy.
        let model = if routing.by_model {
            peeked.model.as_deref()
        } else {
            None
        };
        let among = if dispatch.prefill_only {
            Among::Prefill
        } else {
            Among::Regular(model)
        };
        let mut single = Single {
            transports: Carriers {
                http: &clients.http,
                engines: &clients.engines,
                provider: dispatch.provider,
                tools: &clients.tools,
                responses: &clients.responses,
            },
            among,
            policy: self.selecting(dispatch.prefill_only),
            tried: Vec::new(),
        };
        self.attempts(&mut single, &facts, endpoint, &mut out, ticket, seen)
            .await
    }

    /// The attempt loop itself, whatever an attempt goes to.
    async fn attempts<W: Way>(
        &self,
        way: &mut W,
        facts: &RequestFacts<'_>,
        endpoint: &'static str,
        out: &mut Outgoing<'_>,
        ticket: Ticket,
        seen: &mut Seen,
    ) -> Result<Response<RespBody>, GatewayError> {
        let mut attempt: u32 = 0;
        let mut resent = false;
        let mut last: Option<Failed> = None;
        loop {
            let picked = match (way.pick(self, facts), last.take()) {
                (Ok(picked), _) => picked,
                // Overload sheds the request, never retried: the first attempt sheds at
                // selection, a retry at dispatch.
                (Err(NoPick::Overloaded), _) => return Err(self.shed(attempt)),
                // Every breaker opened while retrying: the last answer is the better word.
                (Err(NoPick::None), Some(failed)) => return last_word(failed, ticket),
                (Err(NoPick::None), None) => return Err(way.none_picked(self)),
            };
            let (failed, by) = match way.attempt(self, &picked, out, seen).await? {
                Sent::Answer {
                    mut answer,
                    load,
                    holding,
                } => {
                    Pipeline::respond(&mut answer, load, ticket);
                    if let Some(guard) = holding {
                        answer.body_mut().hold(guard);
                    }
                    return Ok(answer);
                }
                Sent::Skipped(failed) => {
                    last = Some(failed);
                    continue;
                }
                Sent::Failed { failed, by } => (failed, by),
            };
            let replayable = out.payload.replayable();
            // A pooled connection the worker closed as the request went out: one immediate
            // resend, before any retry.
            if matches!(&failed, Failed::Exchange(GatewayError::UpstreamBroken))
                && replayable
                && !resent
            {
                resent = true;
                self.metrics.send_retry();
                last = Some(failed);
                continue;
            }
            attempt += 1;
            let backoff = self.retry.backoff(attempt);
            let can_retry = replayable
                && attempt <= self.retry.max_retries
                && Instant::now() + backoff < out.deadline;
            if !can_retry {
                if replayable && attempt > self.retry.max_retries {
                    tracing::debug!(worker = %by.url, attempts = attempt, "retries exhausted");
                    self.metrics.retries_exhausted(&by, endpoint);
                }
                return last_word(failed, ticket);
            }
            way.retrying(self, &picked, &by, endpoint, attempt, backoff);
            tracing::debug!(worker = %by.url, attempt, backoff_ms = backoff.as_millis() as u64, "retrying elsewhere");
            last = Some(failed);
            tokio::time::sleep(backoff).await;
        }
    }

    /// Why no worker took the request: a model no registered worker serves is unknown
    /// (404, spec 2); a request for prefill workers finds none (503 `no_prefill_servers`);
    /// otherwise the workers are out of rotation (503).
    fn no_worker_for(&self, among: Among<'_>) -> GatewayError {
        match among {
            Among::Regular(Some(model)) if !self.registry.snapshot().knows_model(model) => {
                GatewayError::ModelNotFound
            }
            Among::Prefill => GatewayError::NoPrefillServers,
            Among::Regular(_) => GatewayError::NoAvailableWorkers,
        }
    }

    /// A worker's answer: counted and fed to its breaker, and judged: the client's, unless
    /// its status is one to retry and the body can be sent again. It is looked at where it
    /// lies: the answer is hundreds of bytes, and taking it by value and handing it back
    /// moved it twice.
    pub(super) fn answered(&self, worker: &Worker, answer: &Answer, replayable: bool) -> Verdict {
        let status = answer.status();
        self.metrics.upstream_response(status.as_u16(), "");
        if status.is_server_error() {
            let kind = if status == http::StatusCode::GATEWAY_TIMEOUT {
                "timeout"
            } else {
                "backend_error"
            };
            self.metrics.worker_error(worker, kind);
        }
        let outcome = worker.breaker.config().classify(status);
        self.record_outcome(worker, outcome);
        if RetryConfig::retries_status(status) && replayable {
            Verdict::Retry
        } else {
            Verdict::Relay
        }
    }

    /// An attempt on `worker` without an answer: a timeout ends the request, as does a
    /// refusal or the client's own body failing (no breaker); a broken exchange may be
    /// retried elsewhere.
    pub(super) fn no_answer(
        &self,
        worker: &Worker,
        err: SendError,
    ) -> Result<Failed, GatewayError> {
        match err {
            SendError::Timeout => {
                self.failed_exchange(worker, &GatewayError::UpstreamTimeout);
                Err(GatewayError::UpstreamTimeout)
            }
            SendError::Refused(answer) => Err(answer),
            SendError::ClientBody(fault) => Err(GatewayError::from_read(
                fault,
                self.settings.max_payload_size,
            )),
            SendError::Exchange(failure) => {
                self.failed_exchange(worker, &failure);
                Ok(Failed::Exchange(failure))
            }
        }
    }

    /// Accounts for an exchange that produced no answer.
    pub(super) fn failed_exchange(&self, worker: &Worker, err: &GatewayError) {
        self.metrics
            .upstream_response(err.status().as_u16(), err.code());
        let kind = if *err == GatewayError::UpstreamTimeout {
            "timeout"
        } else {
            "backend_error"
        };
        self.metrics.worker_error(worker, kind);
        self.record_outcome(worker, Outcome::Failure);
    }

    /// Feeds the worker's breaker and counts the outcome and any state change.
    pub(super) fn record_outcome(&self, worker: &Worker, outcome: Outcome) {
        if outcome != Outcome::Neutral && worker.breaker.config().enabled {
            self.metrics
                .breaker_outcome(worker, outcome == Outcome::Failure);
        }
        if let Some(change) = worker.breaker.record(outcome) {
            self.metrics
                .breaker_transition(worker, change.from.as_str(), change.to.as_str());
            tracing::info!(
                worker = %worker.url,
                from = change.from.as_str(),
                to = change.to.as_str(),
                "circuit breaker changed"
            );
        }
    }
}

/// The client's answer when no further attempt follows.
fn last_word(failed: Failed, ticket: Ticket) -> Result<Response<RespBody>, GatewayError> {
    match failed {
        Failed::Status(kept) => {
            let (mut answer, load) = *kept;
            Pipeline::respond(&mut answer, load, ticket);
            Ok(answer)
        }
        Failed::Exchange(err) => Err(err),
    }
}

/// Dispatch to one worker: `--policy` over the regular workers (or the model's), or
/// `--prefill-policy` over the prefill workers for count_tokens under prefill/decode.
struct Single<'a> {
    transports: Carriers<'a>,
    among: Among<'a>,
    policy: &'a dyn Policy,
    tried: Vec<Uuid>,
}

impl Way for Single<'_> {
    type Picked = Arc<Worker>;

    fn pick(
        &mut self,
        pipeline: &Pipeline,
        facts: &RequestFacts<'_>,
    ) -> Result<Arc<Worker>, NoPick> {
        let snapshot = pipeline.registry.snapshot();
        let (worker, how) = select::pick(&snapshot, self.among, self.policy, facts, &self.tried)?;
        pipeline
            .metrics
            .selected(&worker, facts.model, self.policy.name(), &how);
        Ok(worker)
    }

    fn none_picked(&self, pipeline: &Pipeline) -> GatewayError {
        pipeline.no_worker_for(self.among)
    }

    async fn attempt(
        &mut self,
        pipeline: &Pipeline,
        worker: &Arc<Worker>,
        out: &mut Outgoing<'_>,
        seen: &mut Seen,
    ) -> Result<Sent, GatewayError> {
        // A worker no transport of this build reaches fails before anything is sent, so
        // even a streamed body is still unread: another worker takes the request at once,
        // and the failure goes through the breaker so the worker leaves rotation.
        if let Err(unreachable) = self.transports.reaches(worker) {
            pipeline.failed_exchange(worker, &unreachable);
            self.tried.push(worker.id);
            return Ok(Sent::Skipped(Failed::Exchange(unreachable)));
        }
        let Some(body) = out.payload.next() else {
            return Err(GatewayError::UpstreamBroken);
        };
        let body = out.payload.for_worker(worker, body, out.json)?;
        let replayable = out.payload.replayable();
        // An attempt that cannot be followed by another (a streamed body) takes the header
        // map; others borrow it (a transport that adds to it copies it then).
        let headers = if replayable {
            Cow::Borrowed(&*out.headers)
        } else {
            Cow::Owned(std::mem::take(out.headers))
        };
        seen.worker = Some(worker.clone());
        let load = worker.track();
        // A worker's `http_pool.timeout_secs` caps this attempt, relay included.
        let deadline = worker
            .request_timeout
            .map_or(out.deadline, |cap| out.deadline.min(Instant::now() + cap));
        let sent = self
            .transports
            .send(
                worker,
                Attempt {
                    route: out.route,
                    head: out.head,
                    headers,
                    body,
                    deadline,
                    arrived: out.arrived,
                },
            )
            .await;
        let failed = match sent {
            Err(err) => pipeline.no_answer(worker, err)?,
            Ok(answer) => match pipeline.answered(worker, &answer, replayable) {
                Verdict::Relay => {
                    return Ok(Sent::Answer {
                        answer,
                        load,
                        holding: None,
                    })
                }
                Verdict::Retry => Failed::Status(Box::new((answer, load))),
            },
        };
        Ok(Sent::Failed {
            failed,
            by: worker.clone(),
        })
    }

    fn retrying(
        &mut self,
        pipeline: &Pipeline,
        _: &Arc<Worker>,
        by: &Worker,
        endpoint: &'static str,
        attempt: u32,
        backoff: std::time::Duration,
    ) {
        pipeline
            .metrics
            .retry(by, endpoint, attempt, backoff.as_secs_f64());
        self.tried.push(by.id);
    }
}
