//! ZMQ engines: vLLM's engine core reached directly over ZMQ, with no API server or gRPC
//! servicer between (spec 1's `ipc://` workers). The gateway plays vLLM's own front-end
//! (`vllm/v1/engine/core_client.py :: AsyncMPClient`): it validates what the engine
//! trusts its front-end to have validated, sends token ids and a `SamplingParams`, and
//! reads back per-step token deltas; detokenizing, stop strings and `n` are the gateway's,
//! as they are the front-end's in vLLM.
//!
//! - [`msgpack`]: the encoding, read and written by hand;
//! - [`wire`]: the messages, as vLLM's msgspec structs lay them out;
//! - [`tokenspeed`]: TokenSpeed's payloads over the same sockets and handshake;
//! - [`link`]: one worker's sockets, on a thread of their own;
//! - [`Engine`]: a worker's [`TokenEngine`](crate::engine::TokenEngine), a handle on its
//!   link.

pub mod link;
pub mod msgpack;
pub mod tokenspeed;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokenizers::Tokenizer;
use tokio::sync::mpsc as tmpsc;

use self::link::{Add, Delivery, Link};
use crate::engine::{Caps, Event, EventStream, Failure, Generate, TokenEngine};

/// Whose engine-core payloads a worker's ranks speak (the sockets and handshake are the
/// same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// vLLM's engine core (`EngineCoreRequest`, `EngineCoreOutputs`).
    Vllm,
    /// TokenSpeed's scheduler in `--zmq-msgpack` mode ([`tokenspeed`]).
    Tokenspeed,
}

impl Protocol {
    pub fn runtime(self) -> &'static str {
        match self {
            Protocol::Vllm => "vllm",
            Protocol::Tokenspeed => "tokenspeed",
        }
    }
}

/// The most alternatives per token vLLM serves by default (`--max-logprobs`, 20).
const MAX_LOGPROBS: u32 = 20;

/// What the gateway knows of a worker's vocabulary: the checks vLLM's front-end makes
/// before a request reaches the engine, which trusts them.
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    /// The tokenizer's size, added tokens included; ids at or past it are refused.
    pub size: u32,
    /// The end-of-sequence ids, the first being the one the engine stops on
    /// (`_eos_token_id`); the others go as stop ids, as `update_from_generation_config`
    /// sends them.
    pub eos_ids: Arc<[u32]>,
    /// The worker's tokenizer: a stop string that is one token goes to the engine as a stop
    /// id too (spec 2), so the engine stops at once instead of waiting for the gateway's
    /// abort.
    pub tokenizer: Option<Arc<Tokenizer>>,
}

impl Vocabulary {
    /// The ids of the stop strings that are one token each.
    fn single_token_stops(&self, stops: &[String]) -> Vec<u32> {
        let Some(tokenizer) = &self.tokenizer else {
            return Vec::new();
        };
        stops
            .iter()
            .filter_map(|stop| {
                let encoding = tokenizer.encode(stop.as_str(), false).ok()?;
                match encoding.get_ids() {
                    [id] => Some(*id),
                    _ => None,
                }
            })
            .collect()
    }
}

/// A ZMQ worker's engines, as the generation pipeline uses them.
#[derive(Clone)]
pub struct Engine {
    link: Link,
    vocabulary: Vocabulary,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("zmq::Engine")
            .field("runtime", &self.link.runtime())
            .field("max_model_len", &self.link.max_model_len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub fn new(link: Link, vocabulary: Vocabulary) -> Engine {
        Engine { link, vocabulary }
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Whether both reach their ranks through one link.
    pub fn same_link(&self, other: &Engine) -> bool {
        self.link.same(&other.link)
    }

    /// What vLLM's front-end refuses before the engine sees it (`InputProcessor`,
    /// `SamplingParams._verify_args`): the engine decodes a request on its input thread,
    /// and a value it rejects there is not answered but kills that thread.
    fn check(&self, job: &Generate, window: Option<u32>) -> Result<(), Failure> {
        let refuse = |why: String| Err(Failure::Refused(why));
        if job.input_ids.is_empty() {
            return refuse("the prompt is empty".into());
        }
        let tokenspeed = self.link.protocol() == Protocol::Tokenspeed;
        // TokenSpeed keeps two tokens of the window back; a longer prompt kills it.
        let reserve = if tokenspeed {
            tokenspeed::WINDOW_RESERVE as usize
        } else {
            1
        };
        if let Some(window) = window {
            if job.input_ids.len() + reserve > window as usize {
                return refuse(format!(
                    "the prompt ({} tokens) must be shorter than the engine's context window \
                     ({window} tokens)",
                    job.input_ids.len()
                ));
            }
        }
        let size = self.vocabulary.size;
        if size > 0 {
            if let Some(id) = job.input_ids.iter().find(|id| **id >= size) {
                return refuse(format!(
                    "token id {id} is outside the vocabulary (size {size})"
                ));
            }
        }
        let p = &job.params;
        let s = p.sampling;
        let within = |v: f32, lo: f32, hi: f32| v >= lo && v <= hi;
        let checks = [
            (
                within(s.temperature, 0.0, 2.0),
                "temperature must be in [0, 2]",
            ),
            (s.top_p > 0.0 && s.top_p <= 1.0, "top_p must be in (0, 1]"),
            (s.top_k >= -1, "top_k must be -1 (off) or at least 0"),
            (within(s.min_p, 0.0, 1.0), "min_p must be in [0, 1]"),
            (
                within(s.presence_penalty, -2.0, 2.0),
                "presence_penalty must be in [-2, 2]",
            ),
            (
                within(s.frequency_penalty, -2.0, 2.0),
                "frequency_penalty must be in [-2, 2]",
            ),
            (
                s.repetition_penalty > 0.0 && s.repetition_penalty.is_finite(),
                "repetition_penalty must be above 0",
            ),
            (p.max_tokens != Some(0), "max_tokens must be at least 1"),
        ];
        if let Some((_, why)) = checks.iter().find(|(ok, _)| !ok) {
            return refuse((*why).into());
        }
        if tokenspeed {
            let refused = if s.top_k_limit().is_some_and(|k| k >= tokenspeed::TOP_K_MAX) {
                Some(format!(
                    "top_k must be below {} on TokenSpeed",
                    tokenspeed::TOP_K_MAX
                ))
            } else if s.repetition_penalty > tokenspeed::REPETITION_PENALTY_MAX {
                Some("repetition_penalty must be at most 2 on TokenSpeed".to_owned())
            } else if p.logprobs.is_some_and(|k| k > 0) {
                Some(
                    "TokenSpeed gives the sampled token's log probability only (top_logprobs 0)"
                        .to_owned(),
                )
            } else {
                None
            };
            if let Some(why) = refused {
                return refuse(why);
            }
        }
        if let Some(k) = p.logprobs.filter(|k| *k > MAX_LOGPROBS) {
            return refuse(format!(
                "{k} log probabilities per token asked; the engine gives at most {MAX_LOGPROBS}"
            ));
        }
        if size > 0 {
            if let Some(id) = p.stop_token_ids.iter().find(|id| **id >= size) {
                return refuse(format!(
                    "stop token id {id} is outside the vocabulary (size {size})"
                ));
            }
        }
        Ok(())
    }
}

impl TokenEngine for Engine {
    type Events = Events;

    /// Stop strings and `n` are the gateway's, as they are vLLM's front-end's: the engine
    /// never reads `stop` or `n` (spec 2 has the gateway match Messages `stop_sequences`
    /// on ZMQ workers). Constrained decoding needs the front-end's grammar compilation and
    /// is not offered.
    fn caps(&self) -> Caps {
        Caps {
            constrains: false,
            stop_sequences: true,
            samples_many: true,
            disaggregation: None,
        }
    }

    fn runtime(&self) -> &'static str {
        self.link.runtime()
    }

    async fn generate(&self, job: Generate, _timeout: Duration) -> Result<Events, Failure> {
        let window = self.link.max_model_len();
        self.check(&job, window)?;
        let prompt_tokens = u32::try_from(job.input_ids.len()).unwrap_or(u32::MAX);
        let room = window.map(|w| w.saturating_sub(prompt_tokens));
        // vLLM's front-end fills in the room the window leaves (`process_inputs`).
        let max_tokens = job
            .params
            .max_tokens
            .or(job.room)
            .or(room)
            .unwrap_or(u32::MAX)
            .max(1);
        let p = &job.params;
        let eos = &self.vocabulary.eos_ids;
        let mut stops = p.stop_token_ids.clone();
        for id in self.vocabulary.single_token_stops(&p.stop) {
            if !stops.contains(&id) {
                stops.push(id);
            }
        }
        let asked_stops = stops.clone();
        let (eos_token_id, stop_token_ids, all_stop) = if p.ignore_eos {
            (None, stops.clone(), stops)
        } else {
            for id in eos.iter().skip(1) {
                if !stops.contains(id) {
                    stops.push(*id);
                }
            }
            let mut all = stops.clone();
            if let Some(first) = eos.first().filter(|id| !all.contains(id)) {
                all.insert(0, *first);
            }
            (eos.first().copied(), stops, all)
        };
        let s = p.sampling;
        let sampling = wire::Sampling {
            temperature: f64::from(s.temperature),
            top_p: f64::from(s.top_p),
            top_k: s.top_k_limit().unwrap_or(0),
            min_p: f64::from(s.min_p),
            presence_penalty: f64::from(s.presence_penalty),
            frequency_penalty: f64::from(s.frequency_penalty),
            repetition_penalty: f64::from(s.repetition_penalty),
            seed: None,
            stop_token_ids: &stop_token_ids,
            ignore_eos: p.ignore_eos,
            max_tokens,
            logprobs: p.logprobs,
            eos_token_id,
            all_stop_token_ids: &all_stop,
        };
        let n = p.n.max(1);
        let rank = self.link.pick(n).ok_or_else(|| {
            Failure::Unreachable(format!(
                "no {} engine rank of this worker is connected",
                self.link.runtime()
            ))
        })?;
        let arrival_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let (tx, rx) = tmpsc::unbounded_channel();
        for index in 0..n {
            // vLLM's own names for a parent's sequences (`ParentRequest`).
            let request_id = if n == 1 {
                job.request_id.clone()
            } else {
                format!("{index}_{}", job.request_id)
            };
            let payload = match self.link.protocol() {
                Protocol::Vllm => wire::add(&wire::Request {
                    request_id: &request_id,
                    prompt: &job.input_ids,
                    sampling: sampling.clone(),
                    arrival_time,
                }),
                // The engine adds the model's own EOS ids; `ignore_eos` there also turns
                // off the stop ids, which the gateway then matches itself.
                Protocol::Tokenspeed => tokenspeed::add(
                    &request_id,
                    &job.input_ids,
                    &tokenspeed::Sampling {
                        max_new_tokens: max_tokens,
                        stop_token_ids: &asked_stops,
                        temperature: sampling.temperature,
                        top_p: sampling.top_p,
                        top_k: s.top_k_limit(),
                        min_p: sampling.min_p,
                        frequency_penalty: sampling.frequency_penalty,
                        presence_penalty: sampling.presence_penalty,
                        repetition_penalty: sampling.repetition_penalty,
                        ignore_eos: p.ignore_eos,
                    },
                    p.logprobs.is_some(),
                ),
            };
            let queued = self.link.add(Add {
                rank,
                request_id,
                parent: (n > 1).then(|| job.request_id.clone()),
                index,
                prompt_tokens,
                payload,
                events: tx.clone(),
            });
            if let Err(failure) = queued {
                self.link.unpick(rank, n - index);
                return Err(failure);
            }
        }
        Ok(Events { rx, open: n })
    }

    async fn abort(
        &self,
        request_id: String,
        _reason: &'static str,
        _timeout: Duration,
    ) -> Result<(), Failure> {
        self.link.abort(request_id)
    }
}

/// The events of one generation: its sequences' steps, as the link thread hands them on.
pub struct Events {
    rx: tmpsc::UnboundedReceiver<Delivery>,
    /// Sequences not yet ended.
    open: u32,
}

impl EventStream for Events {
    async fn next(&mut self) -> Result<Option<Event>, Failure> {
        if self.open == 0 {
            return Ok(None);
        }
        match self.rx.recv().await {
            None => Err(Failure::Unreachable("the engine link has closed".into())),
            Some(Err(failure)) => {
                self.open = 0;
                Err(failure)
            }
            Some(Ok(event)) => {
                if matches!(event, Event::Complete(_) | Event::Error(_)) {
                    self.open -= 1;
                }
                Ok(Some(event))
            }
        }
    }
}
