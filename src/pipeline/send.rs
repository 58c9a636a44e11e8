//! Phase 3, send: the attempt loop. Each attempt [`select`](super::select)s a worker, hands
//! the request to that worker's [`transport`](super::transport), and classifies what came
//! back for the worker's circuit breaker; a failed attempt is retried on another worker
//! (with backoff) while the body can be replayed and no response byte has reached the
//! client. The loop knows nothing of how a transport talks to its worker. The answer that
//! wins goes to phase 4 ([`Pipeline::respond`]).

use std::time::Instant;

use http::Response;
use uuid::Uuid;

use super::prepare::Prepared;
use super::select::{self, Among, NoPick};
use super::transport::{self, Answer, Attempt, SendError};
use super::{Pipeline, Seen, ThreadClients};
use crate::admission::Ticket;
use crate::fleet::{LoadGuard, Worker};
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::resilience::{Outcome, RetryConfig};
use crate::routing::Policy;

/// How one attempt ended, when it did not produce the response to relay.
pub(super) enum Failed {
    /// A retryable status; the answer is kept in case it is the last word (boxed: a
    /// relay body is large, and this is the rare path).
    Status(Box<(Answer, LoadGuard)>),
    /// No answer: connect failure or broken exchange.
    Exchange(GatewayError),
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
        if req.routing.pairs {
            return self.send_pairs(clients, endpoint, req, ticket, seen).await;
        }
        let peeked = req.routing.peek();
        let facts = req.routing.facts(&peeked);
        if let Some(source) = req.routing.key_source(&peeked) {
            self.metrics.routing_key_source(source);
        }
        seen.model = peeked.model.as_deref().map(str::to_owned);
        // Candidates are narrowed to the model's workers only with several models behind
        // the gateway; otherwise the model only informs the policy.
        let model = if req.routing.by_model {
            peeked.model.as_deref()
        } else {
            None
        };
        let among = if req.routing.prefill_only {
            Among::Prefill
        } else {
            Among::Regular(model)
        };
        let policy = self.selecting(req.routing.prefill_only);
        let transports = transport::Transports {
            http: &clients.http,
            grpc: &clients.grpc,
            backend: self.modes.backend,
            tools: &clients.tools,
            responses: &clients.responses,
        };

        let mut tried: Vec<Uuid> = Vec::new();
        let mut attempt: u32 = 0;
        let mut resent = false;
        let mut last: Option<Failed> = None;
        loop {
            let picked = {
                let snapshot = self.registry.snapshot();
                select::pick(&snapshot, among, policy, &facts, &tried)
            };
            let worker = match (picked, last.take()) {
                (Ok((worker, how)), _) => {
                    self.metrics
                        .selected(&worker, facts.model, policy.name(), &how);
                    worker
                }
                // Overload sheds the request, never retried: the first attempt sheds at
                // selection, a retry at dispatch.
                (Err(NoPick::Overloaded), _) => return Err(self.shed(attempt)),
                // Every breaker opened while retrying: the last answer is the better word.
                (Err(_), Some(failed)) => return last_word(failed, ticket),
                (Err(NoPick::None), None) => return Err(self.no_worker_for(among)),
            };
            // A worker no transport of this build reaches fails before anything is sent,
            // so even a streamed body is still unread: another worker takes the request at
            // once, and the failure goes through the breaker so the worker leaves rotation.
            if let Err(unreachable) = transports.reaches(&worker) {
                self.failed_exchange(&worker, &unreachable);
                tried.push(worker.id);
                last = Some(Failed::Exchange(unreachable));
                continue;
            }
            let Some(body) = req.payload.next() else {
                return Err(GatewayError::UpstreamBroken);
            };
            let body = req.payload.for_worker(&worker, body, req.json)?;
            // An attempt that cannot be followed by another (a streamed body) takes the
            // header map; others copy it.
            let headers = if req.payload.replayable() {
                req.headers.clone()
            } else {
                std::mem::take(&mut req.headers)
            };
            seen.worker = Some(worker.clone());
            let load = worker.track();
            // A worker's `http_pool.timeout_secs` caps this attempt, relay included.
            let deadline = worker
                .request_timeout
                .map_or(req.deadline, |cap| req.deadline.min(Instant::now() + cap));
            let sent = transports
                .send(
                    &worker,
                    Attempt {
                        route: req.route,
                        head: &req.head,
                        headers,
                        body,
                        deadline,
                        arrived: req.arrived,
                    },
                )
                .await;
            let failed = match sent {
                Err(SendError::Timeout) => {
                    self.failed_exchange(&worker, &GatewayError::UpstreamTimeout);
                    return Err(GatewayError::UpstreamTimeout);
                }
                Err(SendError::Refused(answer)) => return Err(answer),
                // The client's body failed, not the worker: no breaker, no retry.
                Err(SendError::ClientBody(fault)) => {
                    return Err(GatewayError::from_read(
                        fault,
                        self.settings.max_payload_size,
                    ))
                }
                Err(SendError::Exchange(failure)) => {
                    self.failed_exchange(&worker, &failure);
                    // A pooled connection the worker closed as the request went out: one
                    // immediate resend, before any retry.
                    if failure == GatewayError::UpstreamBroken
                        && req.payload.replayable()
                        && !resent
                    {
                        resent = true;
                        self.metrics.send_retry();
                        continue;
                    }
                    Failed::Exchange(failure)
                }
                Ok(answer) => {
                    let status = answer.status();
                    self.metrics.upstream_response(status.as_u16(), "");
                    if status.is_server_error() {
                        let kind = if status == http::StatusCode::GATEWAY_TIMEOUT {
                            "timeout"
                        } else {
                            "backend_error"
                        };
                        self.metrics.worker_error(&worker, kind);
                    }
                    let outcome = worker.breaker.config().classify(status);
                    self.record_outcome(&worker, outcome);
                    if RetryConfig::retries_status(status) && req.payload.replayable() {
                        Failed::Status(Box::new((answer, load)))
                    } else {
                        return Ok(Pipeline::respond(answer, load, ticket));
                    }
                }
            };
            attempt += 1;
            let backoff = self.retry.backoff(attempt);
            let can_retry = req.payload.replayable()
                && attempt <= self.retry.max_retries
                && Instant::now() + backoff < req.deadline;
            if !can_retry {
                if req.payload.replayable() && attempt > self.retry.max_retries {
                    tracing::debug!(worker = %worker.url, attempts = attempt, "retries exhausted");
                    self.metrics.retries_exhausted(&worker, endpoint);
                }
                return last_word(failed, ticket);
            }
            self.metrics
                .retry(&worker, endpoint, attempt, backoff.as_secs_f64());
            last = Some(failed);
            tracing::debug!(worker = %worker.url, attempt, backoff_ms = backoff.as_millis() as u64, "retrying on another worker");
            tried.push(worker.id);
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
pub(super) fn last_word(
    failed: Failed,
    ticket: Ticket,
) -> Result<Response<RespBody>, GatewayError> {
    match failed {
        Failed::Status(kept) => {
            let (answer, load) = *kept;
            Ok(Pipeline::respond(answer, load, ticket))
        }
        Failed::Exchange(err) => Err(err),
    }
}
