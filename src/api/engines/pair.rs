//! Prefill/decode pairs of gRPC engines ("sequential PD"). The gateway renders and
//! tokenizes the request once and sends the same prompt ids to both workers; the legs run
//! as the engines' service shares a KV cache ([`Protocol`]):
//!
//! - vLLM's connectors: the prefill leg generates one token and answers
//!   `kv_transfer_params` (where its KV cache is), then the decode leg is sent those and
//!   generates the client's answer. A prefill that answers none is counted and decode
//!   computes the prompt itself.
//! - SGLang's bootstrap: both legs go out at once naming the prefill's bootstrap server
//!   and one room; decode's first token comes once it holds the prefill's KV cache. The
//!   prefill leg must end well too: decode's answer is the client's only then.
//!
//! The KV-transfer window is the time from the prefill leg's end to decode's first
//! message. A prefill that fails, refuses or stalls fails the exchange at once: the decode
//! leg is a future of this task (or not started yet), so returning drops it, and its
//! engine is told with `Abort`. Every wait is bounded by the attempt's deadline and the
//! stall limit.

use std::sync::Arc;
use std::time::Instant;

use super::{understand, Engines};
use crate::engine::{Event, Generate, Handoff, Protocol, TokenEngine};
use crate::fleet::{Transport, Worker};
use crate::generation::run::{self, refusal, EngineStream, Started, Target};
use crate::http::error::GatewayError;
use crate::transport::pd::body::{Rooms, REMOTE_DECODE};
use crate::transport::pd::{PairAnswer, PairFailure, PrefillFailure};
use crate::transport::{Attempt, SendError};

use crate::generation::ask::{Api, Ask};

/// SGLang's bootstrap port when the prefill worker's spec names none (spec 1).
pub const DEFAULT_BOOTSTRAP_PORT: u16 = 8998;

/// The two workers of one attempt, both gRPC engines, and where SGLang's bootstrap rooms
/// come from.
#[derive(Clone, Copy)]
pub struct GrpcPair<'w> {
    pub prefill: &'w Worker,
    pub decode: &'w Worker,
    pub rooms: &'w Arc<Rooms>,
}

/// The prefill side of a pair, as its legs need it: kept by a gateway-run Responses
/// request for each of its model turns.
#[derive(Clone)]
pub(in crate::api) struct PrefillSide<'a> {
    target: Target<'a>,
    how: Protocol,
    /// The prefill's bootstrap server (SGLang).
    host: String,
    port: u16,
    rooms: Arc<Rooms>,
}

impl PrefillSide<'_> {
    pub(in crate::api) fn into_owned(self) -> PrefillSide<'static> {
        PrefillSide {
            target: self.target.into_owned(),
            how: self.how,
            host: self.host,
            port: self.port,
            rooms: self.rooms,
        }
    }
}

/// Decode's generation begun, and the legs' timings.
struct PairStarted {
    started: Started,
    prefill_secs: f64,
    kv_transfer_secs: f64,
    kv_missing: bool,
}

impl Engines {
    /// How `prefill` and `decode` share a KV cache, or why the gateway cannot pair them:
    /// both must be gRPC engines it serves, of one service that has disaggregation fields.
    pub fn pairs(&self, prefill: &Worker, decode: &Worker) -> Result<Protocol, GatewayError> {
        self.reaches(prefill)?;
        self.reaches(decode)?;
        let of = |w: &Worker| {
            w.runtime
                .grpc_service()
                .and_then(|s| s.caps().disaggregation)
        };
        match (of(prefill), of(decode)) {
            (Some(p), Some(d)) if p == d => Ok(p),
            _ => Err(GatewayError::NotImplemented {
                route: "prefill/decode dispatch on these gRPC engines (SGLang and vLLM pairs are served)",
            }),
        }
    }

    /// The prefill side of `pair`: its engine, how the pair shares the KV cache, and where
    /// SGLang's bootstrap server listens.
    pub(in crate::api) fn prefill_side<'w>(
        &self,
        pair: &GrpcPair<'w>,
        how: Protocol,
    ) -> Result<PrefillSide<'w>, GatewayError> {
        Ok(PrefillSide {
            target: self.target(pair.prefill)?,
            how,
            host: pair_host(pair.prefill).to_owned(),
            port: pair
                .prefill
                .spec
                .bootstrap_port
                .unwrap_or(DEFAULT_BOOTSTRAP_PORT),
            rooms: pair.rooms.clone(),
        })
    }

    /// Serves `attempt` on a pair: every generation route (`/v1/responses` is run by the
    /// gateway's Responses runner, each model turn on the pair).
    pub async fn send_pair(
        &self,
        pair: GrpcPair<'_>,
        how: Protocol,
        attempt: Attempt<'_>,
    ) -> Result<PairAnswer, PairFailure> {
        let refused = |err: GatewayError| PairFailure::Decode(SendError::Refused(err));
        let side = self.prefill_side(&pair, how).map_err(refused)?;
        let decode = self.target(pair.decode).map_err(refused)?;
        let Some(route) = Api::of(attempt.route) else {
            return Err(refused(GatewayError::NotImplemented {
                route: "this route on prefill/decode pairs of gRPC engines",
            }));
        };
        let body = crate::transport::whole_body(attempt.body)
            .await
            .map_err(PairFailure::Decode)?;
        let (ask, prompt) = understand(&decode, route, body, attempt.deadline)
            .await
            .map_err(PairFailure::Decode)?;
        let begun = self
            .start_pair(&side, &decode, route, &ask, prompt, attempt.deadline)
            .await?;
        let answer = self
            .answer(
                begun.started,
                route,
                &ask,
                &decode,
                attempt.deadline,
                attempt.arrived,
            )
            .await
            .map_err(PairFailure::Decode)?;
        Ok(PairAnswer {
            answer,
            prefill_secs: Some(begun.prefill_secs),
            kv_missing: begun.kv_missing,
            kv_transfer_secs: Some(begun.kv_transfer_secs),
        })
    }

    /// One model turn of a gateway-run Responses request on a pair (the turn's legs
    /// counted here: the request's exchange has many).
    pub(in crate::api) async fn pair_turn(
        &self,
        side: &PrefillSide<'_>,
        decode: &Target<'_>,
        ask: &Ask,
        prompt: Vec<u32>,
        deadline: Instant,
    ) -> Result<Started, SendError> {
        let begun = self
            .start_pair(side, decode, Api::Chat, ask, prompt, deadline)
            .await
            .map_err(|failure| match failure {
                PairFailure::Prefill(PrefillFailure::Send(err)) | PairFailure::Decode(err) => err,
                PairFailure::Prefill(PrefillFailure::Status(_)) | PairFailure::Body(_) => {
                    SendError::Exchange(GatewayError::UpstreamBroken)
                }
            })?;
        let model = ask.model.as_deref();
        let runtime = side.target.engine.runtime();
        self.metrics
            .pd_legs(model, runtime, begun.prefill_secs, begun.kv_transfer_secs);
        if begun.kv_missing {
            self.metrics.pd_kv_transfer_failure();
        }
        Ok(begun.started)
    }

    /// Runs the prefill leg and begins the decode leg, in the pair's protocol.
    async fn start_pair(
        &self,
        side: &PrefillSide<'_>,
        decode: &Target<'_>,
        route: Api,
        ask: &Ask,
        prompt: Vec<u32>,
        deadline: Instant,
    ) -> Result<PairStarted, PairFailure> {
        let began = Instant::now();
        let prefill_failed = |err| PairFailure::Prefill(PrefillFailure::Send(err));
        let prefill = &side.target;
        let mut job = run::checked_job(prefill, route, ask, prompt.clone())
            .map_err(|err| prefill_failed(err.into()))?;
        match side.how {
            Protocol::KvTransfer => {
                job.params.max_tokens = Some(1);
                job.params.n = 1;
                job.params.logprobs = None;
                job.handoff = Some(Handoff::KvTransfer(REMOTE_DECODE.to_owned()));
                let params = self
                    .prefill_leg(prefill, job, deadline)
                    .await
                    .map_err(prefill_failed)?;
                let prefill_end = Instant::now();
                let kv_missing = params.is_none();
                let handoff = params.map(Handoff::KvTransfer);
                let started = run::start(decode, route, ask, prompt, deadline, handoff, self.stall)
                    .await
                    .map_err(|err| PairFailure::Decode(err.into()))?;
                Ok(PairStarted {
                    started,
                    prefill_secs: (prefill_end - began).as_secs_f64(),
                    kv_transfer_secs: prefill_end.elapsed().as_secs_f64(),
                    kv_missing,
                })
            }
            // One room per generation: SGLang's bootstrap fields name a single one.
            Protocol::Bootstrap if ask.n > 1 => Err(PairFailure::Decode(SendError::Refused(
                GatewayError::InvalidRequest {
                    message: "n must be 1 on prefill/decode pairs of sglang gRPC engines: \
                              the bootstrap handoff carries one room"
                        .into(),
                },
            ))),
            Protocol::Bootstrap => {
                let handoff = Handoff::Bootstrap {
                    host: side.host.clone(),
                    port: side.port,
                    room: side.rooms.take_one(),
                };
                job.handoff = Some(handoff.clone());
                let prefill_leg = self.prefill_leg(prefill, job, deadline);
                let decode_leg = run::start(
                    decode,
                    route,
                    ask,
                    prompt,
                    deadline,
                    Some(handoff),
                    self.stall,
                );
                tokio::pin!(prefill_leg);
                tokio::pin!(decode_leg);
                tokio::select! {
                    done = &mut prefill_leg => {
                        done.map_err(prefill_failed)?;
                        let prefill_end = Instant::now();
                        let started = decode_leg.await.map_err(|err| PairFailure::Decode(err.into()))?;
                        Ok(PairStarted {
                            started,
                            prefill_secs: (prefill_end - began).as_secs_f64(),
                            kv_transfer_secs: prefill_end.elapsed().as_secs_f64(),
                            kv_missing: false,
                        })
                    }
                    started = &mut decode_leg => {
                        // Decode began first (its first message can come as soon as it
                        // holds the KV cache); the prefill leg must still end well.
                        let started = started.map_err(|err| PairFailure::Decode(err.into()))?;
                        prefill_leg.await.map_err(prefill_failed)?;
                        Ok(PairStarted {
                            started,
                            prefill_secs: began.elapsed().as_secs_f64(),
                            kv_transfer_secs: 0.0,
                            kv_missing: false,
                        })
                    }
                }
            }
        }
    }

    /// The prefill leg, run to the end of its every sequence; a KV-transfer prefill's
    /// `kv_transfer_params` when it answered them.
    async fn prefill_leg(
        &self,
        target: &Target<'_>,
        job: Generate,
        deadline: Instant,
    ) -> Result<Option<String>, SendError> {
        let sequences = job.params.n.max(1);
        let (mut events, mut abort) = run::launch(target, job, deadline).await?;
        let mut stream = EngineStream {
            events: &mut events,
            deadline,
            stall: self.stall,
        };
        let mut ended = 0;
        let mut params = None;
        while ended < sequences {
            match stream.next().await {
                Ok(Some(Event::Error(err))) => return Err(refusal(&err).into()),
                Ok(Some(Event::Chunk { .. })) => {}
                Ok(Some(Event::Complete(complete))) => {
                    ended += 1;
                    params = params.or(complete.kv_transfer_params);
                }
                // An engine that ends its stream after a complete is done with it.
                Ok(None) if ended > 0 => break,
                Ok(None) => return Err(SendError::Exchange(GatewayError::UpstreamBroken)),
                Err(GatewayError::UpstreamTimeout) => return Err(SendError::Timeout),
                Err(err) => return Err(SendError::Exchange(err)),
            }
        }
        abort.disarm();
        Ok(params)
    }
}

/// The host a decode engine reaches the prefill's bootstrap server at: the prefill
/// worker's own host.
fn pair_host(prefill: &Worker) -> &str {
    match &prefill.transport {
        Transport::Grpc { authority, .. } => authority.host(),
        _ => "",
    }
}
