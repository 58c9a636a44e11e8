//! Prefill/decode pairs over HTTP: one attempt carried to a prefill and a decode worker,
//! the client's answer coming from decode. The attempt loop of prefill/decode dispatch
//! (`pipeline::pd`) picks the pair and classifies the outcome per worker; this module
//! only runs the exchange, in one of the two protocols engines speak ([`Protocol`]).
//!
//! A failed prefill fails the exchange at once: the decode leg is a future of this task,
//! so returning drops it, which closes its connection and the decode worker sees the
//! cancellation; a client never waits on a decode that has nothing to decode. Every wait
//! is bounded by the attempt's deadline.

pub mod body;

use std::borrow::Cow;
use std::time::Instant;

use ::http::HeaderMap;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};

use super::http::UpstreamClient;
use super::{Answer, Attempt, SendError};
use crate::engine::Protocol;
use crate::fleet::{RuntimeType, Worker};
use crate::http::error::GatewayError;
use crate::http::upload::LimitedBody;
use body::{BodyError, Bootstrap, Rooms};

/// The most of a prefill answer the gateway reads (vLLM's carries `kv_transfer_params`;
/// SGLang's is drained so its connection can be reused).
const PREFILL_ANSWER_LIMIT: usize = 4 * 1024 * 1024;

/// How an HTTP pair shares the KV cache, decided by the prefill worker's runtime: vLLM's
/// connectors, or SGLang's bootstrap fields for every other runtime.
pub fn protocol_of(prefill: &Worker) -> Protocol {
    if prefill.runtime == RuntimeType::Vllm {
        Protocol::KvTransfer
    } else {
        Protocol::Bootstrap
    }
}

/// `gw_pd_kv_connector_mode_total{mode}`: the KV connector the pair uses, from the
/// prefill worker's `kv_connector` (NIXL is `conn_a`, Mooncake `conn_b`); anything else
/// is passed through to the engines as they are configured.
pub fn connector_mode(prefill: &Worker) -> &'static str {
    let name = prefill.spec.kv_connector.as_deref().unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    if lower.contains("nixl") {
        "conn_a"
    } else if lower.contains("mooncake") {
        "conn_b"
    } else {
        "passthrough"
    }
}

/// The two workers of one attempt.
#[derive(Clone, Copy)]
pub struct Pair<'w> {
    pub prefill: &'w Worker,
    pub decode: &'w Worker,
}

/// One attempt of a pair, as the loop hands it over: the client's head and headers (both
/// legs get the same allowlisted headers and no worker key, spec 1's HTTP PD router) and
/// the client's whole JSON body.
pub struct PairAttempt<'a> {
    pub route: crate::http::route::Route,
    pub head: &'a ::http::request::Parts,
    pub headers: HeaderMap,
    pub body: &'a Bytes,
    pub deadline: Instant,
    pub arrived: Instant,
}

/// A finished pair exchange: decode's answer (any status: the loop classifies it) and how
/// the prefill leg went.
pub struct PairAnswer {
    pub answer: Answer,
    /// From the start of the exchange to the prefill's success; `None` for a gRPC
    /// Responses exchange, whose model turns count their own legs.
    pub prefill_secs: Option<f64>,
    /// A KV-transfer prefill answered without `kv_transfer_params`: decode recomputed.
    pub kv_missing: bool,
    /// gRPC pairs: from the prefill leg's end to decode's first message.
    pub kv_transfer_secs: Option<f64>,
}

/// Why a pair produced no answer from decode.
pub enum PairFailure {
    /// The body cannot take the pair's fields (answered 400, not retried).
    Body(BodyError),
    /// The prefill leg failed: no answer, or an error status (its answer kept as the
    /// client's word if nothing better comes).
    Prefill(PrefillFailure),
    /// The decode leg produced no answer.
    Decode(SendError),
}

pub enum PrefillFailure {
    Send(SendError),
    /// Boxed: a relayed answer is large, and this is the rare path.
    Status(Box<Answer>),
}

/// Carries one attempt over a pair.
pub async fn send(
    client: &UpstreamClient,
    rooms: &Rooms,
    pair: Pair<'_>,
    attempt: PairAttempt<'_>,
) -> Result<PairAnswer, PairFailure> {
    match protocol_of(pair.prefill) {
        Protocol::Bootstrap => bootstrap(client, rooms, pair, attempt).await,
        Protocol::KvTransfer => kv_transfer(client, pair, attempt).await,
    }
}

/// SGLang: both legs at once. Decode's answer is the client's once the prefill leg has
/// answered 2xx and its body has ended (the prefill is done); a prefill that fails first
/// drops the decode leg.
async fn bootstrap(
    client: &UpstreamClient,
    rooms: &Rooms,
    pair: Pair<'_>,
    attempt: PairAttempt<'_>,
) -> Result<PairAnswer, PairFailure> {
    let started = Instant::now();
    let host = pair
        .prefill
        .http_origin()
        .map_or("", |(_, authority)| authority.host());
    let at = Bootstrap {
        host,
        port: pair.prefill.spec.bootstrap_port,
    };
    let (body, _room) = body::with_bootstrap(attempt.body, at, rooms).map_err(PairFailure::Body)?;
    let prefill = leg(
        client,
        pair.prefill,
        &attempt,
        attempt.headers.clone(),
        body.clone(),
    );
    let decode = leg(client, pair.decode, &attempt, attempt.headers.clone(), body);
    tokio::pin!(prefill);
    tokio::pin!(decode);
    let deadline = tokio::time::Instant::from_std(attempt.deadline);
    // Until the prefill has answered, whichever leg fails first ends the exchange.
    let mut early_decode: Option<Answer> = None;
    let prefill_answer = loop {
        tokio::select! {
            biased;
            done = &mut prefill => break done,
            done = &mut decode, if early_decode.is_none() => match done {
                Ok(answer) if answer.status().is_success() => early_decode = Some(answer),
                Ok(answer) => return Ok(PairAnswer { answer, prefill_secs: Some(0.0), kv_missing: false, kv_transfer_secs: None }),
                Err(err) => return Err(PairFailure::Decode(err)),
            },
            () = tokio::time::sleep_until(deadline) => {
                return Err(PairFailure::Prefill(PrefillFailure::Send(SendError::Timeout)))
            }
        }
    };
    let prefill_answer =
        prefill_answer.map_err(|e| PairFailure::Prefill(PrefillFailure::Send(e)))?;
    if !prefill_answer.status().is_success() {
        return Err(PairFailure::Prefill(PrefillFailure::Status(Box::new(
            prefill_answer,
        ))));
    }
    // The prefill's own body is drained alongside decode (its end means the KV cache is
    // handed over); a prefill that breaks off fails the exchange.
    let drain = read_answer(prefill_answer, attempt.deadline);
    let answer = match early_decode {
        Some(answer) => {
            drain
                .await
                .map_err(|e| PairFailure::Prefill(PrefillFailure::Send(e)))?;
            answer
        }
        None => {
            let (drained, decoded) = tokio::join!(drain, decode);
            drained.map_err(|e| PairFailure::Prefill(PrefillFailure::Send(e)))?;
            decoded.map_err(PairFailure::Decode)?
        }
    };
    Ok(PairAnswer {
        answer,
        prefill_secs: Some(started.elapsed().as_secs_f64()),
        kv_missing: false,
        kv_transfer_secs: None,
    })
}

/// vLLM: the prefill leg for one token, then decode with the `kv_transfer_params` the
/// prefill returned (none: counted, and decode computes the prompt itself).
async fn kv_transfer(
    client: &UpstreamClient,
    pair: Pair<'_>,
    attempt: PairAttempt<'_>,
) -> Result<PairAnswer, PairFailure> {
    let started = Instant::now();
    let prefill_body = body::vllm_prefill(attempt.body).map_err(PairFailure::Body)?;
    let prefill = leg(
        client,
        pair.prefill,
        &attempt,
        attempt.headers.clone(),
        prefill_body,
    )
    .await
    .map_err(|e| PairFailure::Prefill(PrefillFailure::Send(e)))?;
    if !prefill.status().is_success() {
        return Err(PairFailure::Prefill(PrefillFailure::Status(Box::new(
            prefill,
        ))));
    }
    let answer = read_answer(prefill, attempt.deadline)
        .await
        .map_err(|e| PairFailure::Prefill(PrefillFailure::Send(e)))?;
    let prefill_secs = started.elapsed().as_secs_f64();
    let params = body::kv_transfer_params(&answer);
    let kv_missing = params.is_none();
    let decode_body =
        body::vllm_decode(attempt.body, params.as_deref()).map_err(PairFailure::Body)?;
    let headers = attempt.headers.clone();
    let answer = leg(client, pair.decode, &attempt, headers, decode_body)
        .await
        .map_err(PairFailure::Decode)?;
    Ok(PairAnswer {
        answer,
        prefill_secs: Some(prefill_secs),
        kv_missing,
        kv_transfer_secs: None,
    })
}

/// One leg: the client's head, `headers` as they are (no worker key), `body`; capped by
/// the worker's own request timeout.
async fn leg(
    client: &UpstreamClient,
    worker: &Worker,
    attempt: &PairAttempt<'_>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Answer, SendError> {
    let deadline = worker.request_timeout.map_or(attempt.deadline, |cap| {
        attempt.deadline.min(Instant::now() + cap)
    });
    client
        .relay(
            worker,
            Attempt {
                route: attempt.route,
                head: attempt.head,
                headers: Cow::Owned(headers),
                body: LimitedBody::whole(body),
                deadline,
                arrived: attempt.arrived,
            },
        )
        .await
}

/// A prefill answer's body, read to its end by `deadline`; one longer than
/// [`PREFILL_ANSWER_LIMIT`] (no real prefill answer is) is a broken exchange.
async fn read_answer(answer: Answer, deadline: Instant) -> Result<Bytes, SendError> {
    let limited = Limited::new(answer.into_body(), PREFILL_ANSWER_LIMIT);
    match tokio::time::timeout_at(deadline.into(), limited.collect()).await {
        Err(_) => Err(SendError::Timeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(_)) => Err(SendError::Exchange(GatewayError::UpstreamBroken)),
    }
}
