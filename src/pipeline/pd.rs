//! Phase 3 under `--pd-disaggregation`: the pair [`Way`] of the one attempt loop
//! ([`super::send`]). Each attempt picks a pair — a prefill worker by `--prefill-policy`,
//! then a decode worker it pairs with (`pairing_protocol`, else runtime/transport/connector)
//! by `--decode-policy` — and hands it to the pair transport ([`transport::pd`]), which runs
//! the engines' protocol. The outcome is held against the worker whose leg produced it
//! (breakers, `gw_worker_errors_total`); a retryable failure re-picks a pair, avoiding the
//! worker that failed, within the loop's retry rules (the body is always held), and a retry
//! counts for both roles.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use uuid::Uuid;

use super::dispatch::Dispatch;
use super::prepare::Payload;
use super::select::{self, NoPick};
use super::send::{Failed, Outgoing, Sent, Verdict, Way};
use super::{Pipeline, Seen, ThreadClients};
use crate::api::engines::GrpcPair;
use crate::engine::Protocol;
use crate::fleet::rooms::RoomsHeld;
use crate::fleet::{ConnectionMode, Worker};
use crate::http::error::GatewayError;
use crate::http::guard::Guard;
use crate::http::route::Route;
use crate::http::upload::LimitedBody;
use crate::resilience::Outcome;
use crate::routing::{Needs, Policy, RequestFacts};
use crate::transport::pd::body::{BodyError, Rooms};
use crate::transport::pd::{self, Pair, PairAttempt, PairFailure, PrefillFailure};
use crate::transport::Attempt;

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

/// Dispatch to prefill/decode pairs: the way [`Pipeline::attempts`] goes under
/// `--pd-disaggregation`.
pub(super) struct Pairs<'a> {
    clients: &'a ThreadClients,
    pd: &'a PdDispatch,
    /// The body, held whole by prepare for a paired request.
    body: Bytes,
    /// The workers set aside, by role.
    tried: [Vec<Uuid>; 2],
    /// The role the last pick found no worker for.
    missing: Role,
}

impl Pipeline {
    /// The pair way for a prepared request, or why it cannot go to pairs at all.
    pub(super) fn pairs<'a>(
        &'a self,
        clients: &'a ThreadClients,
        dispatch: Dispatch,
        out: &Outgoing<'_>,
    ) -> Result<Pairs<'a>, GatewayError> {
        let Some(pd) = &self.pd else {
            return Err(GatewayError::NoAvailableWorkers);
        };
        // Prepare holds a paired request's body whole (or refuses it).
        let body = match &*out.payload {
            Payload::Held(bytes) => bytes.clone(),
            Payload::Stream(_) => return Err(GatewayError::BufferBudgetFull),
        };
        // Spec 2: a gRPC encode/prefill/decode fleet serves Messages and the other
        // generation routes through its pairs, but not Responses.
        if out.route == Route::ResponsesCreate && dispatch.encode {
            return Err(GatewayError::NotImplemented {
                route: "/v1/responses on encode/prefill/decode fleets of gRPC engines",
            });
        }
        Ok(Pairs {
            clients,
            pd,
            body,
            tried: [Vec::new(), Vec::new()],
            missing: Role::Prefill,
        })
    }
}

impl Way for Pairs<'_> {
    type Picked = (Arc<Worker>, Arc<Worker>);

    /// A prefill worker by its policy, then a decode worker it pairs with by theirs.
    fn pick(
        &mut self,
        pipeline: &Pipeline,
        facts: &RequestFacts<'_>,
    ) -> Result<Self::Picked, NoPick> {
        let pd = self.pd;
        self.missing = Role::Prefill;
        let snapshot = pipeline.registry.snapshot();
        let (prefill, how) = select::pick(
            &snapshot,
            select::Among::Prefill,
            pd.prefill.as_ref(),
            facts,
            &self.tried[Role::Prefill as usize],
        )?;
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
        let picked = select::pick_from(
            &candidates,
            pd.decode.as_ref(),
            facts,
            &self.tried[Role::Decode as usize],
        );
        let (decode, decode_how) = match picked {
            Ok(picked) => picked,
            Err(NoPick::None) => {
                self.missing = Role::Decode;
                return Err(NoPick::None);
            }
            Err(overloaded) => return Err(overloaded),
        };
        pipeline
            .metrics
            .selected(&prefill, facts.model, pd.prefill.name(), &how);
        pipeline
            .metrics
            .selected(&decode, facts.model, pd.decode.name(), &decode_how);
        Ok((prefill, decode))
    }

    fn none_picked(&self, _: &Pipeline) -> GatewayError {
        match self.missing {
            Role::Prefill => GatewayError::NoPrefillServers,
            Role::Decode => GatewayError::NoAvailableWorkers,
        }
    }

    async fn attempt(
        &mut self,
        pipeline: &Pipeline,
        (prefill, decode): &Self::Picked,
        out: &mut Outgoing<'_>,
        seen: &mut Seen,
    ) -> Result<Sent, GatewayError> {
        let (clients, pd) = (self.clients, self.pd);
        let carrier = match (prefill.connection_mode(), decode.connection_mode()) {
            (ConnectionMode::Http, ConnectionMode::Http) => Carrier::Http,
            (ConnectionMode::Grpc, ConnectionMode::Grpc) => {
                Carrier::Grpc(clients.engines.pairs(prefill, decode)?)
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
            Carrier::Grpc(_) => Some(
                pipeline
                    .decode_rooms(pd, decode, &self.body, out.deadline)
                    .await?,
            ),
            Carrier::Http => None,
        };
        let loads = [prefill.track(), decode.track()];
        let started = Instant::now();
        let sent = match carrier {
            Carrier::Http => {
                pd::send(
                    &clients.http,
                    &pd.rooms,
                    Pair { prefill, decode },
                    PairAttempt {
                        route: out.route,
                        head: out.head,
                        headers: out.headers.clone(),
                        body: &self.body,
                        deadline: out.deadline,
                        arrived: out.arrived,
                    },
                )
                .await
            }
            Carrier::Grpc(how) => {
                let pair = GrpcPair {
                    prefill,
                    decode,
                    rooms: &pd.rooms,
                };
                let attempt = Attempt {
                    route: out.route,
                    head: out.head,
                    headers: Cow::Borrowed(&*out.headers),
                    body: LimitedBody::whole(self.body.clone()),
                    deadline: out.deadline,
                    arrived: out.arrived,
                };
                if attempt.route == Route::ResponsesCreate {
                    clients
                        .responses
                        .on_engine_pair(&clients.engines, pair, how, attempt)
                        .await
                } else {
                    clients.engines.send_pair(pair, how, attempt).await
                }
            }
        };
        let [prefill_load, decode_load] = loads;
        let (failed, by) = match sent {
            Ok(paired) => {
                drop(prefill_load);
                pipeline.record_outcome(prefill, Outcome::Success);
                let model = seen.model.as_deref();
                if let Some(prefill_secs) = paired.prefill_secs {
                    pipeline.metrics.pd_pair(
                        model,
                        prefill,
                        pd::connector_mode(prefill),
                        prefill_secs,
                        started.elapsed().as_secs_f64(),
                    );
                }
                if let Some(secs) = paired.kv_transfer_secs {
                    pipeline
                        .metrics
                        .pd_kv_transfer(model, prefill.runtime.as_str(), secs);
                }
                if paired.kv_missing {
                    pipeline.metrics.pd_kv_transfer_failure();
                }
                match pipeline.answered(decode, &paired.answer, true) {
                    Verdict::Relay => {
                        return Ok(Sent::Answer {
                            answer: paired.answer,
                            load: decode_load,
                            holding: rooms.map(Guard::new),
                        })
                    }
                    Verdict::Retry => (
                        Failed::Status(Box::new((paired.answer, decode_load))),
                        decode,
                    ),
                }
            }
            Err(PairFailure::Body(err)) => {
                if err == BodyError::NotObject {
                    pipeline.metrics.pd_bootstrap_failure();
                }
                return Err(GatewayError::InvalidRequest {
                    message: err.to_string(),
                });
            }
            Err(PairFailure::Prefill(PrefillFailure::Status(answer))) => {
                match pipeline.answered(prefill, &answer, true) {
                    Verdict::Relay => {
                        return Ok(Sent::Answer {
                            answer: *answer,
                            load: prefill_load,
                            holding: None,
                        })
                    }
                    Verdict::Retry => (Failed::Status(Box::new((*answer, prefill_load))), prefill),
                }
            }
            Err(PairFailure::Prefill(PrefillFailure::Send(err))) => {
                (pipeline.no_answer(prefill, err)?, prefill)
            }
            Err(PairFailure::Decode(err)) => (pipeline.no_answer(decode, err)?, decode),
        };
        Ok(Sent::Failed {
            failed,
            by: by.clone(),
        })
    }

    /// A retry counts for both roles; the worker whose leg failed is set aside in its role.
    fn retrying(
        &mut self,
        pipeline: &Pipeline,
        (prefill, decode): &Self::Picked,
        by: &Worker,
        endpoint: &'static str,
        attempt: u32,
        backoff: std::time::Duration,
    ) {
        pipeline
            .metrics
            .pd_retry(prefill, decode, endpoint, attempt, backoff.as_secs_f64());
        let role = if by.id == prefill.id {
            Role::Prefill
        } else {
            Role::Decode
        };
        self.tried[role as usize].push(by.id);
    }
}

impl Pipeline {
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
