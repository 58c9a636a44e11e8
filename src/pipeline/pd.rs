//! Phase 3 under `--pd-disaggregation`: the attempt loop of prefill/decode dispatch. Each
//! attempt picks a pair — a prefill worker by `--prefill-policy`, then a decode worker it
//! pairs with (`pairing_protocol`, else runtime/transport/connector) by `--decode-policy`
//! — and hands it to the pair transport ([`transport::pd`]), which runs the engines'
//! protocol. The outcome is held against the worker whose leg produced it (breakers,
//! `gw_worker_errors_total`); a retryable failure re-picks a pair, avoiding the worker that
//! failed, within the same retry rules as single workers (the body is always held), and a
//! retry counts for both roles.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use http::Response;
use uuid::Uuid;

use super::prepare::{Payload, Prepared};
use super::select::{self, NoPick};
use super::send::{last_word, Failed};
use super::transport::grpc::GrpcPair;
use super::transport::pd::body::{BodyError, Rooms};
use super::transport::pd::{self, Pair, PairAttempt, PairFailure, PrefillFailure};
use super::transport::{Answer, Attempt, SendError};
use super::{Pipeline, Seen, ThreadClients};
use crate::admission::Ticket;
use crate::engine::Protocol;
use crate::fleet::rooms::RoomsHeld;
use crate::fleet::{ConnectionMode, LoadGuard, Worker};
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::guard::Guard;
use crate::http::route::Route;
use crate::http::upload::LimitedBody;
use crate::resilience::RetryConfig;
use crate::routing::{Needs, Policy, RequestFacts};

/// What prefill/decode dispatch keeps across requests: the two roles' policies and the
/// source of bootstrap rooms.
pub struct PdDispatch {
    /// `--prefill-policy` (else `--policy`).
    pub prefill: Arc<dyn Policy>,
    /// `--decode-policy` (else `--policy`).
    pub decode: Arc<dyn Policy>,
    pub rooms: Arc<Rooms>,
    /// `--pd-admission-wait-secs`.
    pub admission_wait: std::time::Duration,
}

impl PdDispatch {
    /// What the two policies need of a request: the prompt text if either reads it, else
    /// the routing key if either reads it.
    pub fn needs(&self) -> Needs {
        let both = [self.prefill.needs(), self.decode.needs()];
        if both.contains(&Needs::PromptText) {
            Needs::PromptText
        } else if both.contains(&Needs::Header) {
            Needs::Header
        } else {
            self.prefill.needs()
        }
    }
}

/// Why no pair was picked.
enum NoPair {
    Prefill,
    Decode,
    Overloaded,
}

/// How a pair's legs are carried.
#[derive(Clone, Copy)]
enum Carrier {
    Http,
    /// gRPC engines sharing a KV cache this way.
    Grpc(Protocol),
}

/// Which leg an outcome belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Prefill,
    Decode,
}

impl Pipeline {
    /// Phase 3 for a pair: attempts until decode's answer is the client's, or none can be.
    pub(super) async fn send_pairs(
        &self,
        clients: &ThreadClients,
        endpoint: &'static str,
        req: &mut Prepared,
        ticket: Ticket,
        seen: &mut Seen,
    ) -> Result<Response<RespBody>, GatewayError> {
        let Some(pd) = &self.pd else {
            return Err(GatewayError::NoAvailableWorkers);
        };
        // Prepare holds a paired request's body whole (or refuses it).
        let body = match &req.payload {
            Payload::Held(bytes) => bytes.clone(),
            Payload::Stream(_) => return Err(GatewayError::BufferBudgetFull),
        };
        // Spec 2: a gRPC encode/prefill/decode fleet serves Messages and the other
        // generation routes through its pairs, but not Responses.
        if req.route == Route::ResponsesCreate && self.registry.snapshot().grpc_encode() {
            return Err(GatewayError::NotImplemented {
                route: "/v1/responses on encode/prefill/decode fleets of gRPC engines",
            });
        }
        let peeked = req.routing.peek();
        let facts = req.routing.facts(&peeked);
        if let Some(source) = req.routing.key_source(&peeked) {
            self.metrics.routing_key_source(source);
        }
        seen.model = peeked.model.as_deref().map(str::to_owned);

        let mut tried: [Vec<Uuid>; 2] = [Vec::new(), Vec::new()];
        let mut attempt: u32 = 0;
        let mut resent = false;
        let mut last: Option<Failed> = None;
        loop {
            let (prefill, decode) = match (self.pick_pair(pd, &facts, &tried), last.take()) {
                (Ok(pair), _) => pair,
                (Err(NoPair::Overloaded), _) => return Err(self.shed(attempt)),
                (Err(_), Some(failed)) => return last_word(failed, ticket),
                (Err(NoPair::Prefill), None) => return Err(GatewayError::NoPrefillServers),
                (Err(NoPair::Decode), None) => return Err(GatewayError::NoAvailableWorkers),
            };
            let carrier = match (prefill.connection_mode(), decode.connection_mode()) {
                (ConnectionMode::Http, ConnectionMode::Http) => Carrier::Http,
                (ConnectionMode::Grpc, ConnectionMode::Grpc) => {
                    Carrier::Grpc(clients.grpc.pairs(&prefill, &decode)?)
                }
                _ => {
                    return Err(GatewayError::NotImplemented {
                        route: "prefill/decode pairs of an HTTP and a gRPC worker",
                    })
                }
            };
            seen.worker = Some(decode.clone());
            // gRPC pairs take their decode rooms first (the `pd_admission` stage).
            let rooms = match carrier {
                Carrier::Grpc(_) => {
                    Some(self.decode_rooms(pd, &decode, &body, req.deadline).await?)
                }
                Carrier::Http => None,
            };
            let loads = [prefill.track(), decode.track()];
            let started = Instant::now();
            let sent = match carrier {
                Carrier::Http => {
                    pd::send(
                        &clients.http,
                        &pd.rooms,
                        Pair {
                            prefill: &prefill,
                            decode: &decode,
                        },
                        PairAttempt {
                            route: req.route,
                            head: &req.head,
                            headers: req.headers.clone(),
                            body: &body,
                            deadline: req.deadline,
                            arrived: req.arrived,
                        },
                    )
                    .await
                }
                Carrier::Grpc(how) => {
                    let pair = GrpcPair {
                        prefill: &prefill,
                        decode: &decode,
                        rooms: &pd.rooms,
                    };
                    let attempt = Attempt {
                        route: req.route,
                        head: &req.head,
                        headers: req.headers.clone(),
                        body: LimitedBody::whole(body.clone()),
                        deadline: req.deadline,
                        arrived: req.arrived,
                    };
                    if attempt.route == Route::ResponsesCreate {
                        clients
                            .responses
                            .on_engine_pair(&clients.grpc, pair, how, attempt)
                            .await
                    } else {
                        clients.grpc.send_pair(pair, how, attempt).await
                    }
                }
            };
            let [prefill_load, decode_load] = loads;
            let (role, failed) = match sent {
                Ok(paired) => {
                    drop(prefill_load);
                    self.record_outcome(&prefill, crate::resilience::Outcome::Success);
                    if let Some(prefill_secs) = paired.prefill_secs {
                        self.metrics.pd_pair(
                            facts.model,
                            &prefill,
                            pd::connector_mode(&prefill),
                            prefill_secs,
                            started.elapsed().as_secs_f64(),
                        );
                    }
                    if let Some(secs) = paired.kv_transfer_secs {
                        self.metrics
                            .pd_kv_transfer(facts.model, prefill.runtime.as_str(), secs);
                    }
                    if paired.kv_missing {
                        self.metrics.pd_kv_transfer_failure();
                    }
                    match self.answered(&decode, paired.answer, decode_load) {
                        Ok(answer) => {
                            let resp = Pipeline::respond(answer.0, answer.1, ticket);
                            return Ok(match rooms {
                                Some(rooms) => resp.map(|body| body.holding(Guard::new(rooms))),
                                None => resp,
                            });
                        }
                        Err(failed) => (Role::Decode, failed),
                    }
                }
                Err(PairFailure::Body(err)) => {
                    if err == BodyError::NotObject {
                        self.metrics.pd_bootstrap_failure();
                    }
                    return Err(GatewayError::InvalidRequest {
                        message: err.to_string(),
                    });
                }
                Err(PairFailure::Prefill(PrefillFailure::Status(answer))) => {
                    match self.answered(&prefill, *answer, prefill_load) {
                        Ok(answer) => return Ok(Pipeline::respond(answer.0, answer.1, ticket)),
                        Err(failed) => (Role::Prefill, failed),
                    }
                }
                Err(PairFailure::Prefill(PrefillFailure::Send(err))) => {
                    (Role::Prefill, self.no_answer(&prefill, err)?)
                }
                Err(PairFailure::Decode(err)) => (Role::Decode, self.no_answer(&decode, err)?),
            };
            // A pooled connection the worker closed as the request went out: one immediate
            // resend, before any retry (as for single workers).
            if matches!(&failed, Failed::Exchange(GatewayError::UpstreamBroken)) && !resent {
                resent = true;
                self.metrics.send_retry();
                last = Some(failed);
                continue;
            }
            let failed_worker = if role == Role::Prefill {
                &prefill
            } else {
                &decode
            };
            attempt += 1;
            let backoff = self.retry.backoff(attempt);
            let can_retry =
                attempt <= self.retry.max_retries && Instant::now() + backoff < req.deadline;
            if !can_retry {
                if attempt > self.retry.max_retries {
                    tracing::debug!(worker = %failed_worker.url, attempts = attempt, "retries exhausted");
                    self.metrics.retries_exhausted(failed_worker, endpoint);
                }
                return last_word(failed, ticket);
            }
            self.metrics
                .pd_retry(&prefill, &decode, endpoint, attempt, backoff.as_secs_f64());
            tracing::debug!(worker = %failed_worker.url, attempt, "retrying on another pair");
            tried[role as usize].push(failed_worker.id);
            last = Some(failed);
            tokio::time::sleep(backoff).await;
        }
    }

    /// The `pd_admission` stage: a room per sequence of `body` on `decode`, waiting for
    /// rooms to free up for at most `--pd-admission-wait-secs` (and the request's
    /// deadline). A request that needs more rooms than the window has, or whose wait runs
    /// out, is shed (503, not retried); this stage does not depend on overload protection.
    async fn decode_rooms(
        &self,
        pd: &PdDispatch,
        decode: &Worker,
        body: &[u8],
        deadline: Instant,
    ) -> Result<RoomsHeld, GatewayError> {
        let needed = u32::try_from(pd::body::sequences(body)).unwrap_or(u32::MAX);
        let window = decode.room_window();
        let rooms = decode.rooms();
        if needed <= window {
            if let Some(held) = rooms.try_take(needed, window) {
                return Ok(held);
            }
            self.metrics.pd_admission_wait();
            let until = deadline.min(Instant::now() + pd.admission_wait);
            if let Ok(held) =
                tokio::time::timeout_at(until.into(), rooms.take(needed, window)).await
            {
                return Ok(held);
            }
        }
        tracing::debug!(worker = %decode.url, needed, window, "shed at pd_admission");
        self.metrics.pd_admission_shed();
        Err(GatewayError::OverloadShed {
            retry_after_secs: self.modes.overload_retry_after.as_secs(),
        })
    }

    /// A prefill worker by its policy, then a decode worker it pairs with by theirs.
    fn pick_pair(
        &self,
        pd: &PdDispatch,
        facts: &RequestFacts<'_>,
        tried: &[Vec<Uuid>; 2],
    ) -> Result<(Arc<Worker>, Arc<Worker>), NoPair> {
        let snapshot = self.registry.snapshot();
        let (prefill, how) = select::pick(
            &snapshot,
            select::Among::Prefill,
            pd.prefill.as_ref(),
            facts,
            &tried[Role::Prefill as usize],
        )
        .map_err(|no| match no {
            NoPick::None => NoPair::Prefill,
            NoPick::Overloaded => NoPair::Overloaded,
        })?;
        let decodes = snapshot.routable_decode();
        // Fleets usually pair every worker with every other: then nothing is copied.
        let candidates: Cow<'_, [Arc<Worker>]> = if decodes.iter().all(|d| prefill.pairs_with(d)) {
            Cow::Borrowed(decodes)
        } else {
            Cow::Owned(
                decodes
                    .iter()
                    .filter(|d| prefill.pairs_with(d))
                    .cloned()
                    .collect(),
            )
        };
        let (decode, decode_how) = select::pick_from(
            &candidates,
            pd.decode.as_ref(),
            facts,
            &tried[Role::Decode as usize],
        )
        .map_err(|no| match no {
            NoPick::None => NoPair::Decode,
            NoPick::Overloaded => NoPair::Overloaded,
        })?;
        self.metrics
            .selected(&prefill, facts.model, pd.prefill.name(), &how);
        self.metrics
            .selected(&decode, facts.model, pd.decode.name(), &decode_how);
        Ok((prefill, decode))
    }

    /// A leg's answer: counted and fed to its worker's breaker; the client's unless its
    /// status is one to retry.
    fn answered(
        &self,
        worker: &Worker,
        answer: Answer,
        load: LoadGuard,
    ) -> Result<(Answer, LoadGuard), Failed> {
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
        if RetryConfig::retries_status(status) {
            Err(Failed::Status(Box::new((answer, load))))
        } else {
            Ok((answer, load))
        }
    }

    /// A leg without an answer: a timeout ends the request (as for single workers), a
    /// broken exchange may be retried on another pair.
    fn no_answer(&self, worker: &Worker, err: SendError) -> Result<Failed, GatewayError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{CacheAware, PolicyParams, RoundRobin};

    #[test]
    fn the_pair_needs_what_either_policy_needs() {
        let rr: Arc<dyn Policy> = Arc::new(RoundRobin::default());
        let cache: Arc<dyn Policy> = Arc::new(CacheAware::new(&PolicyParams::default()));
        let dispatch = |prefill: &Arc<dyn Policy>, decode: &Arc<dyn Policy>| PdDispatch {
            prefill: prefill.clone(),
            decode: decode.clone(),
            rooms: Arc::new(Rooms::starting_at(0)),
            admission_wait: std::time::Duration::from_secs(30),
        };
        assert_eq!(dispatch(&cache, &rr).needs(), Needs::PromptText);
        assert_eq!(dispatch(&rr, &cache).needs(), Needs::PromptText);
        assert_eq!(dispatch(&rr, &rr).needs(), Needs::Nothing);
    }
}
