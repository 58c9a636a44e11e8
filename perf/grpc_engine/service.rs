//! The `SglangScheduler` service: what both modes share around the backend that generates.
//!
//! Each Generate runs in its own task feeding a small channel that is the response
//! stream. The task races the backend against two ends: Abort (the sink closes the
//! generation with finish_reason "abort", which each service's reshaper turns into what
//! its servicer sends then) and the gateway dropping the stream (noticed as the channel's
//! receiver going away, even while the backend waits). Dropping the backend's future is
//! what stops it; for llama-server that drops the upstream request.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tollgate::engine::grpc::common::{
    FlushCacheRequest, FlushCacheResponse, GetTokenizerRequest, ProfileResponse,
    StartProfileRequest, StopProfileRequest,
};
use tollgate::engine::grpc::sglang::generate_response::Response as SglangEvent;
use tollgate::engine::grpc::sglang::sglang_scheduler_server::SglangScheduler;
use tollgate::engine::grpc::sglang::{self};
use tollgate::engine::grpc::sglang::{
    AbortRequest, AbortResponse, GenerateRequest, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, HealthCheckRequest, HealthCheckResponse,
    SchedulerLoad,
};
use tonic::{Request, Response, Status};

use crate::cli::{Faults, Flags, Mode, DEFAULT_MOCK_CONTEXT};
use crate::disagg::{Disagg, Handoff, Refusal};
use crate::llama::{Facts, Llama};
use crate::mock::Mock;
use crate::reshape::{Reshaped, Reshaper, Servicer, Step};
use crate::say::{self, Id};
use crate::sink::{to_i32, Finish, Item, Sink, Stop, CHANNEL_CAPACITY};
use crate::vocab::Vocab;

/// Generations at once; past it Generate answers RESOURCE_EXHAUSTED.
const MAX_LIVE: usize = 4096;

/// Who generates.
pub enum Backend {
    Mock(Mock),
    Llama(Box<Llama>),
}

impl Backend {
    /// The backend the flags ask for. In llama mode an existing `--tokenizer-path` must
    /// load as a byte-level vocabulary; one that does not exist on this machine (a hub
    /// name the gateway resolves) is only reported to the gateway.
    pub fn from_flags(flags: &Flags) -> Result<Backend, String> {
        match &flags.mode {
            Mode::Mock => Ok(Backend::Mock(Mock {
                timing: flags.timing,
                eos_token_ids: flags.eos_token_ids.clone(),
                max_context: flags.max_context.unwrap_or(DEFAULT_MOCK_CONTEXT),
            })),
            Mode::Llama { url } => {
                let vocab = match &flags.tokenizer_path {
                    Some(path) if Path::new(path).exists() => Some(Arc::new(
                        Vocab::load(Path::new(path))
                            .map_err(|e| format!("--tokenizer-path: {e}"))?,
                    )),
                    _ => None,
                };
                Ok(Backend::Llama(Box::new(Llama::new(url, vocab))))
            }
        }
    }

    async fn generate(&self, request: &GenerateRequest, sink: &mut Sink) -> Result<(), Stop> {
        match self {
            Backend::Mock(mock) => mock.generate(request, sink).await,
            Backend::Llama(llama) => llama.generate(request, sink).await,
        }
    }

    async fn health(&self) -> Result<(), String> {
        match self {
            Backend::Mock(_) => Ok(()),
            Backend::Llama(llama) => llama.health().await,
        }
    }

    async fn facts(&self, flags: &Flags) -> Result<Facts, String> {
        match self {
            Backend::Mock(mock) => Ok(Facts {
                // SGLang's tokenizer path defaults to its model path; the mock has only the
                // former to offer.
                model_path: flags
                    .tokenizer_path
                    .clone()
                    .unwrap_or_else(|| flags.model.clone()),
                max_context: Some(mock.max_context),
                eos_token_ids: mock.eos_token_ids.clone(),
                bos_token_id: None,
                vocab_size: None,
            }),
            Backend::Llama(llama) => llama.facts().await,
        }
    }
}

/// The generations running now, by request id, each with the way to abort it.
#[derive(Default)]
struct Live {
    aborts: Mutex<HashMap<String, oneshot::Sender<()>>>,
}

/// Removes a generation from [`Live`] when its task ends, however it ends.
struct Registration {
    live: Arc<Live>,
    request_id: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut aborts) = self.live.aborts.lock() {
            aborts.remove(&self.request_id);
        }
    }
}

impl Live {
    fn register(
        self: &Arc<Self>,
        request_id: &str,
    ) -> Result<(Registration, oneshot::Receiver<()>), Status> {
        let mut aborts = self
            .aborts
            .lock()
            .map_err(|_| Status::internal("generation registry poisoned"))?;
        if aborts.contains_key(request_id) {
            return Err(Status::already_exists(format!(
                "request_id {request_id} is already generating"
            )));
        }
        if aborts.len() >= MAX_LIVE {
            return Err(Status::resource_exhausted(format!(
                "{MAX_LIVE} generations are running"
            )));
        }
        let (tx, rx) = oneshot::channel();
        aborts.insert(request_id.to_string(), tx);
        let registration = Registration {
            live: self.clone(),
            request_id: request_id.to_string(),
        };
        Ok((registration, rx))
    }

    /// Signals the generation; `false` if none runs under that id.
    fn abort(&self, request_id: &str) -> bool {
        let sender = self
            .aborts
            .lock()
            .ok()
            .and_then(|mut aborts| aborts.remove(request_id));
        sender.is_some_and(|tx| tx.send(()).is_ok())
    }
}

/// Everything a request handler needs.
pub struct Engine {
    backend: Backend,
    flags: Flags,
    live: Arc<Live>,
    disagg: Disagg,
}

impl Engine {
    pub fn new(backend: Backend, flags: Flags, disagg: Disagg) -> Engine {
        Engine {
            backend,
            flags,
            live: Arc::new(Live::default()),
            disagg,
        }
    }

    /// The command line it was started with.
    pub fn flags(&self) -> &Flags {
        &self.flags
    }

    fn faults(&self) -> &Faults {
        &self.flags.faults
    }

    async fn run(
        &self,
        request: GenerateRequest,
        leg: Leg,
        tx: mpsc::Sender<Item>,
        aborted: oneshot::Receiver<()>,
        registration: Registration,
    ) {
        let gone = tx.clone();
        let mut sink = Sink::new(
            tx,
            request.request_id.clone(),
            request.stream,
            self.faults().drop_after,
        );
        let prompt = request
            .tokenized
            .as_ref()
            .map_or(&[][..], |t| &t.input_ids[..]);
        let generation = async {
            if let Err(Refusal(message)) = self
                .disagg
                .receive(&request.request_id, &leg.handoff, prompt)
                .await
            {
                return sink.fail(&message, 500).await;
            }
            let result = self.backend.generate(&request, &mut sink).await;
            // A prefill's cache is kept under the key its handoff names, once computed.
            if let (Ok(()), Some(key)) = (&result, leg.keep_as) {
                self.disagg.keep(key, prompt);
            }
            result
        };
        let outcome = tokio::select! {
            result = generation => Outcome::Ended(result),
            () = gone.closed() => Outcome::Ended(Err(Stop::Cancelled)),
            signal = aborted => match signal {
                Ok(()) => Outcome::Aborted,
                // The sender lives in the registry until this task ends: not reached.
                Err(_) => Outcome::Ended(Ok(())),
            },
        };
        match outcome {
            Outcome::Aborted => {
                let counts = sink.counts();
                if sink.finish(Finish::Abort, counts).await == Err(Stop::Cancelled) {
                    cancelled(&request.request_id);
                }
            }
            Outcome::Ended(Err(Stop::Cancelled)) => cancelled(&request.request_id),
            Outcome::Ended(Ok(()) | Err(Stop::Dropped | Stop::Ended)) => {}
        }
        drop(registration);
    }
}

/// A generation's part in a prefill/decode pair.
struct Leg {
    handoff: Handoff,
    /// A prefill's: the key its cache is kept under.
    keep_as: Option<String>,
}

enum Outcome {
    Ended(Result<(), Stop>),
    Aborted,
}

fn cancelled(request_id: &str) {
    say::line(format_args!("cancelled request_id={}", Id(request_id)));
}

/// A step as SGLang's message (`_create_chunk_response`, `_create_completion_response`).
fn sglang_message(step: Step) -> sglang::GenerateResponse {
    let response = match step {
        Step::Chunk {
            index,
            ids,
            scores,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => SglangEvent::Chunk(sglang::GenerateStreamChunk {
            token_ids: ids,
            prompt_tokens: to_i32(prompt_tokens),
            completion_tokens: to_i32(completion_tokens),
            cached_tokens: to_i32(cached_tokens),
            output_logprobs: scores,
            index,
        }),
        Step::Complete {
            index,
            ids,
            scores,
            finish_reason,
            matched_stop,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => SglangEvent::Complete(sglang::GenerateComplete {
            output_ids: ids,
            finish_reason,
            prompt_tokens: to_i32(prompt_tokens),
            completion_tokens: to_i32(completion_tokens),
            cached_tokens: to_i32(cached_tokens),
            output_logprobs: scores,
            index,
            matched_stop,
        }),
    };
    sglang::GenerateResponse {
        request_id: String::new(),
        response: Some(response),
    }
}

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct Scheduler(pub Arc<Engine>);

impl Engine {
    /// Starts one generation; its messages, shaped as SGLang sends them, arrive on the
    /// returned channel.
    /// `handoff` is what the request says about its prefill/decode pair.
    pub async fn start(
        self: &Arc<Self>,
        mut request: GenerateRequest,
        handoff: Handoff,
    ) -> Result<mpsc::Receiver<Item>, Status> {
        say::generate(&request);
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let admitted = self.disagg.admit(&mut request, &handoff);
        let refused = match (&self.faults().generate_error, &admitted) {
            (Some(message), _) => Some((message.clone(), 500)),
            (None, Err(Refusal(message))) => Some((message.clone(), 400)),
            (None, Ok(_)) => None,
        };
        if let Some((message, status)) = refused {
            let mut sink = Sink::new(tx, request.request_id.clone(), request.stream, None);
            // The channel is empty: the send cannot wait.
            let _ = sink.fail(&message, status).await;
            return Ok(rx);
        }
        let (registration, aborted) = self.live.register(&request.request_id)?;
        let engine = self.clone();
        let leg = Leg {
            handoff,
            keep_as: admitted.ok().flatten(),
        };
        tokio::spawn(async move { engine.run(request, leg, tx, aborted, registration).await });
        Ok(rx)
    }

    /// What a vLLM prefill's complete tells its decode leg (see [`Disagg::answer_params`]).
    pub fn answer_params(&self, request_id: &str, handoff: &Handoff) -> Option<String> {
        self.disagg.answer_params(request_id, handoff)
    }

    /// HealthCheck's verdict: healthy or not, and a word on it.
    pub async fn health(&self) -> (bool, String) {
        let verdict = if self.faults().fail_health {
            Err("unhealthy (--fail-health)".to_string())
        } else {
            self.backend.health().await
        };
        match verdict {
            Ok(()) => (true, "ok".to_string()),
            Err(message) => (false, message),
        }
    }

    /// Signals the generation `request_id`; whether one ran.
    pub fn abort(&self, request_id: &str) -> bool {
        let found = self.live.abort(request_id);
        say::line(format_args!(
            "abort request_id={} found={found}",
            Id(request_id)
        ));
        found
    }

    /// FlushCache: refused under `--refuse-flush`.
    pub fn flush_cache(&self) -> FlushCacheResponse {
        let success = !self.faults().refuse_flush;
        say::line(format_args!("flush_cache success={success}"));
        let message = if success {
            "cache flushed"
        } else {
            "requests are in flight (--refuse-flush)"
        };
        FlushCacheResponse {
            success,
            message: message.to_string(),
        }
    }

    /// The load report: one rank, the generations running now, no queue.
    pub fn load(&self) -> SchedulerLoad {
        let running = self
            .live
            .aborts
            .lock()
            .map_or(0, |live| i32::try_from(live.len()).unwrap_or(i32::MAX));
        SchedulerLoad {
            dp_rank: 0,
            num_running_reqs: running,
            num_total_reqs: running,
            max_running_requests: i32::try_from(
                self.flags
                    .max_running_requests
                    .map_or(MAX_LIVE, |n| n as usize),
            )
            .unwrap_or(i32::MAX),
            ..SchedulerLoad::default()
        }
    }

    /// GetModelInfo, as SGLang answers it.
    pub async fn model_info(&self) -> Result<GetModelInfoResponse, Status> {
        let flags = &self.flags;
        let facts = self
            .backend
            .facts(flags)
            .await
            .map_err(Status::unavailable)?;
        let max_context = flags.max_context.or(facts.max_context).unwrap_or(0);
        let eos_token_ids = if flags.eos_token_ids.is_empty() {
            facts.eos_token_ids
        } else {
            flags.eos_token_ids.clone()
        };
        let max_context = i32::try_from(max_context).unwrap_or(i32::MAX);
        let (model_path, tokenizer_path) = match &flags.advertise_model_path {
            Some(elsewhere) => (elsewhere.clone(), elsewhere.clone()),
            None => (
                facts.model_path,
                flags.tokenizer_path.clone().unwrap_or_default(),
            ),
        };
        Ok(GetModelInfoResponse {
            model_path,
            tokenizer_path,
            is_generation: true,
            served_model_name: flags.model.clone(),
            max_context_length: max_context,
            vocab_size: facts
                .vocab_size
                .and_then(|n| i32::try_from(n).ok())
                .unwrap_or(0),
            eos_token_ids: eos_token_ids
                .iter()
                .filter_map(|&id| i32::try_from(id).ok())
                .collect(),
            bos_token_id: facts
                .bos_token_id
                .and_then(|id| i32::try_from(id).ok())
                .unwrap_or(0),
            // One token of the window is the first generated one.
            max_req_input_len: max_context.saturating_sub(1).max(0),
            ..Default::default()
        })
    }
}

impl Engine {
    /// GetTokenizer: the `--tokenizer-path` files as a chunked zip archive.
    pub fn tokenizer(&self) -> Result<crate::tokenizer::Chunks, Status> {
        crate::tokenizer::chunks(
            self.flags.tokenizer_path.as_deref(),
            self.flags.tokenizer_chunk_bytes,
            self.faults().corrupt_tokenizer_sha,
        )
    }

    /// StartProfile: logged and accepted.
    pub fn start_profile(&self, request: &StartProfileRequest) -> ProfileResponse {
        say::line(format_args!(
            "start_profile output_dir={} num_steps={}",
            Id(request.output_dir.as_deref().unwrap_or("none")),
            request
                .num_steps
                .map_or_else(|| "none".to_string(), |n| n.to_string())
        ));
        ProfileResponse {
            success: true,
            message: "profiling started".to_string(),
        }
    }

    /// StopProfile: logged and accepted.
    pub fn stop_profile(&self) -> ProfileResponse {
        say::line(format_args!("stop_profile"));
        ProfileResponse {
            success: true,
            message: "profiling stopped".to_string(),
        }
    }
}

#[tonic::async_trait]
impl SglangScheduler for Scheduler {
    type GenerateStream = Reshaped<sglang::GenerateResponse>;

    async fn generate(
        &self,
        request: Request<GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = request.into_inner();
        let handoff = Handoff::of_sglang(&request);
        let reshaper = Reshaper::for_request(Servicer::Sglang, &request);
        let rx = self.0.start(request, handoff).await?;
        Ok(Response::new(Reshaped::new(rx, reshaper, sglang_message)))
    }

    async fn health_check(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let (healthy, message) = self.0.health().await;
        Ok(Response::new(HealthCheckResponse { healthy, message }))
    }

    async fn abort(
        &self,
        request: Request<AbortRequest>,
    ) -> Result<Response<AbortResponse>, Status> {
        let request_id = request.into_inner().request_id;
        let found = self.0.abort(&request_id);
        let message = if found { "aborted" } else { "not found" };
        Ok(Response::new(AbortResponse {
            success: found,
            message: format!("request {request_id} {message}"),
        }))
    }

    async fn get_model_info(
        &self,
        _request: Request<GetModelInfoRequest>,
    ) -> Result<Response<GetModelInfoResponse>, Status> {
        self.0.model_info().await.map(Response::new)
    }

    async fn get_loads(
        &self,
        _request: Request<GetLoadsRequest>,
    ) -> Result<Response<GetLoadsResponse>, Status> {
        Ok(Response::new(GetLoadsResponse {
            timestamp: String::new(),
            version: "grpc-engine".to_string(),
            dp_rank_count: 1,
            loads: vec![self.0.load()],
        }))
    }

    async fn flush_cache(
        &self,
        _request: Request<FlushCacheRequest>,
    ) -> Result<Response<FlushCacheResponse>, Status> {
        Ok(Response::new(self.0.flush_cache()))
    }

    async fn start_profile(
        &self,
        request: Request<StartProfileRequest>,
    ) -> Result<Response<ProfileResponse>, Status> {
        Ok(Response::new(self.0.start_profile(&request.into_inner())))
    }

    async fn stop_profile(
        &self,
        _request: Request<StopProfileRequest>,
    ) -> Result<Response<ProfileResponse>, Status> {
        Ok(Response::new(self.0.stop_profile()))
    }

    type GetTokenizerStream = crate::tokenizer::Chunks;

    async fn get_tokenizer(
        &self,
        _request: Request<GetTokenizerRequest>,
    ) -> Result<Response<Self::GetTokenizerStream>, Status> {
        self.0.tokenizer().map(Response::new)
    }
}
