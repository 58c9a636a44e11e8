//! The adapter: SGLang's scheduler calls answered by llama.cpp's `llama-server`.
//!
//! - Generate → `POST /completion` with the prompt as token ids and `return_tokens`, so
//!   llama-server answers with ids, not only text. A streamed generation reads its SSE
//!   chunks (ids it leaves out mid-character are restored, see `recover.rs`); a
//!   non-streamed one asks for the whole answer, which carries every id. The final chunk's
//!   `stop_type` gives the finish: "eos" → "stop" with the EOS id it generated, "word" →
//!   "stop" with the stop string, "limit" → "length". Counts come from `tokens_evaluated`
//!   (prompt), `tokens_predicted` (completion, EOS included as in SGLang) and
//!   `timings.cache_n` (cached prompt tokens).
//! - `stop_token_ids`, which llama-server lacks, are checked here (unless `ignore_eos`,
//!   which in SGLang turns them off too): the first match ends the generation ("stop",
//!   `matched_token_id`, the id kept in the output) and the upstream request is dropped.
//! - Abort, or a gateway that drops its stream, drops the upstream request; llama-server
//!   notices the closed connection and stops the slot.
//! - HealthCheck → `GET /health`; GetModelInfo → `GET /props` (context window, model
//!   path, BOS/EOS spelled out and turned into ids with `POST /tokenize`) and
//!   `GET /v1/models` (vocabulary size).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tollgate::engine::grpc::sglang::generate_complete::MatchedStop;
use tollgate::engine::grpc::sglang::GenerateRequest;
use tollgate::sse::SseParser;

use crate::llama_api::{self, Completion, ErrorBody, Models, Props, Tokenized};
use crate::recover::Recovery;
use crate::say::{self, Id};
use crate::sink::{Counts, Finish, Sink, Stop};
use crate::vocab::Vocab;

/// A whole answer, or one SSE frame, larger than this is refused. The final answer repeats
/// the prompt as text, so it grows with the context window; this is far above that.
const MAX_BODY: usize = 16 << 20;
/// Error bodies, health and small JSON answers.
const MAX_SMALL_BODY: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
const INFO_TIMEOUT: Duration = Duration::from_secs(10);

/// What GetModelInfo learns from llama-server.
#[derive(Debug, Default)]
pub struct Facts {
    pub model_path: String,
    pub max_context: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub bos_token_id: Option<u32>,
    pub vocab_size: Option<u32>,
}

pub struct Llama {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    vocab: Option<Arc<Vocab>>,
}

impl Llama {
    /// `base` is `http://host:port` (a trailing slash is dropped); `vocab` restores ids
    /// llama-server leaves out of streams.
    pub fn new(base: &str, vocab: Option<Arc<Vocab>>) -> Llama {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Llama {
            base: base.trim_end_matches('/').to_string(),
            client,
            vocab,
        }
    }

    pub async fn generate(&self, request: &GenerateRequest, sink: &mut Sink) -> Result<(), Stop> {
        let body = match llama_api::completion_body(request, request.stream) {
            Ok(body) => body,
            Err(message) => return sink.fail(&message, 400).await,
        };
        let stop_ids = match &request.sampling_params {
            Some(p) if !p.ignore_eos => p.stop_token_ids.as_slice(),
            _ => &[],
        };
        let response = match self
            .send(hyper::Method::POST, "/completion", Some(&body))
            .await
        {
            Ok(response) => response,
            Err(message) => return sink.fail(&message, 503).await,
        };
        let status = response.status();
        if !status.is_success() {
            let message = error_message(response.into_body(), status).await;
            return sink.fail(&message, status.as_u16()).await;
        }
        let mut run = Run {
            stop_ids,
            recovery: Recovery::new(self.vocab.as_deref()),
            vocab: self.vocab.as_deref(),
            counts: Counts::default(),
            last: None,
            request_id: &request.request_id,
        };
        if request.stream {
            run.stream(response.into_body(), sink).await
        } else {
            match read_bounded(response.into_body(), MAX_BODY).await {
                Ok(bytes) => match serde_json::from_slice::<Completion>(&bytes) {
                    Ok(answer) => run.chunk(answer, sink).await.map(|_| ()),
                    Err(e) => {
                        let message = format!("llama-server answer is not readable: {e}");
                        sink.fail(&message, 502).await
                    }
                },
                Err(message) => sink.fail(&message, 502).await,
            }
        }
    }

    /// `Ok` when llama-server can generate, else what it said.
    pub async fn health(&self) -> Result<(), String> {
        let exchange = async {
            let response = self.send(hyper::Method::GET, "/health", None).await?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(error_message(response.into_body(), status).await)
            }
        };
        tokio::time::timeout(HEALTH_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err("llama-server /health timed out".to_string()))
    }

    pub async fn facts(&self) -> Result<Facts, String> {
        tokio::time::timeout(INFO_TIMEOUT, self.read_facts())
            .await
            .unwrap_or_else(|_| Err("llama-server did not describe itself in time".to_string()))
    }

    async fn read_facts(&self) -> Result<Facts, String> {
        let props: Props = self.json(hyper::Method::GET, "/props", None).await?;
        let models: Models = self.json(hyper::Method::GET, "/v1/models", None).await?;
        let eos_token_ids = match &props.eos_token {
            Some(text) => self.single_id(text).await?.into_iter().collect(),
            None => Vec::new(),
        };
        let bos_token_id = match &props.bos_token {
            Some(text) => self.single_id(text).await?,
            None => None,
        };
        Ok(Facts {
            model_path: props.model_path.unwrap_or_default(),
            max_context: props.default_generation_settings.and_then(|s| s.n_ctx),
            eos_token_ids,
            bos_token_id,
            vocab_size: models
                .data
                .first()
                .and_then(|card| card.meta.as_ref())
                .and_then(|meta| meta.n_vocab),
        })
    }

    /// The id of a special token spelled out, if it is exactly one token.
    async fn single_id(&self, text: &str) -> Result<Option<u32>, String> {
        let body = json!({"content": text, "add_special": false, "parse_special": true});
        let tokenized: Tokenized = self
            .json(hyper::Method::POST, "/tokenize", Some(&body))
            .await?;
        Ok(match tokenized.tokens[..] {
            [id] => Some(id),
            _ => None,
        })
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, String> {
        let response = self.send(method, path, body).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(error_message(response.into_body(), status).await);
        }
        let bytes = read_bounded(response.into_body(), MAX_SMALL_BODY).await?;
        serde_json::from_slice(&bytes).map_err(|e| format!("llama-server {path}: {e}"))
    }

    async fn send(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<hyper::Response<Incoming>, String> {
        let bytes = match body {
            Some(value) => Bytes::from(serde_json::to_vec(value).map_err(|e| e.to_string())?),
            None => Bytes::new(),
        };
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if body.is_some() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = builder
            .body(Full::new(bytes))
            .map_err(|e| format!("llama-server {path}: {e}"))?;
        self.client
            .request(request)
            .await
            .map_err(|e| format!("llama-server unreachable at {}: {e}", self.base))
    }
}

/// One generation's reading of llama-server's answer.
struct Run<'a> {
    stop_ids: &'a [u32],
    recovery: Recovery,
    vocab: Option<&'a Vocab>,
    counts: Counts,
    /// The last id handed on: the EOS id when llama-server stopped on EOS.
    last: Option<u32>,
    request_id: &'a str,
}

/// Whether a generation goes on after a chunk.
enum Next {
    More,
    Done,
}

impl Run<'_> {
    async fn stream(&mut self, mut body: Incoming, sink: &mut Sink) -> Result<(), Stop> {
        let mut parser = SseParser::new(MAX_BODY);
        let mut chunks = Vec::new();
        loop {
            let frame = match body.frame().await {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => {
                    let message = format!("llama-server stream broke: {e}");
                    return sink.fail(&message, 502).await;
                }
                None => {
                    let message = "llama-server ended its stream without a final chunk";
                    return sink.fail(message, 502).await;
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let fed = parser.feed(&data, |frame| {
                chunks.push(serde_json::from_slice::<Completion>(frame.data));
            });
            if let Err(e) = fed {
                return sink.fail(&format!("llama-server stream: {e}"), 502).await;
            }
            for chunk in chunks.drain(..) {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        let message = format!("llama-server chunk is not readable: {e}");
                        return sink.fail(&message, 502).await;
                    }
                };
                if let Next::Done = self.chunk(chunk, sink).await? {
                    return Ok(());
                }
            }
        }
    }

    /// One streamed chunk, or the whole non-streamed answer.
    async fn chunk(&mut self, chunk: Completion, sink: &mut Sink) -> Result<Next, Stop> {
        if let Some(error) = chunk.error {
            sink.fail(&error.message, error.code.unwrap_or(500)).await?;
            return Ok(Next::Done);
        }
        let ids = match self.recovery.accept(
            self.vocab,
            &chunk.tokens,
            &chunk.content,
            chunk.tokens_predicted,
        ) {
            Ok(ids) => ids,
            Err(e) => {
                sink.fail(&e.to_string(), 502).await?;
                return Ok(Next::Done);
            }
        };
        if ids.len() > chunk.tokens.len() {
            say::line(format_args!(
                "restored request_id={} tokens={}",
                Id(self.request_id),
                ids.len() - chunk.tokens.len()
            ));
        }
        if let Some(n) = chunk.tokens_evaluated {
            self.counts.prompt_tokens = saturate(n);
        }
        if let Some(n) = chunk.timings.as_ref().and_then(|t| t.cache_n) {
            self.counts.cached_tokens = saturate(n);
        }
        self.counts.completion_tokens = saturate(self.recovery.emitted());
        if let Some(at) = ids.iter().position(|id| self.stop_ids.contains(id)) {
            let kept = &ids[..=at];
            self.counts.completion_tokens = self
                .counts
                .completion_tokens
                .saturating_sub(saturate((ids.len() - kept.len()) as u64));
            sink.tokens(kept, self.counts).await?;
            let matched = Some(MatchedStop::MatchedTokenId(ids[at]));
            sink.finish(Finish::Stop(matched), self.counts).await?;
            return Ok(Next::Done);
        }
        if !ids.is_empty() {
            self.last = ids.last().copied();
            sink.tokens(&ids, self.counts).await?;
        }
        if !chunk.stop {
            return Ok(Next::More);
        }
        if let Some(predicted) = chunk.tokens_predicted {
            let lost = predicted.saturating_sub(self.recovery.emitted());
            if lost > 0 {
                // Stopped mid-character: these ids came with no text to restore them from.
                say::line(format_args!(
                    "withheld request_id={} tokens={lost}",
                    Id(self.request_id)
                ));
            }
            self.counts.completion_tokens = saturate(predicted);
        }
        let finish = match chunk.stop_type.as_deref() {
            Some("eos") => Finish::Stop(self.last.map(MatchedStop::MatchedTokenId)),
            Some("word") => Finish::Stop(Some(MatchedStop::MatchedStopStr(chunk.stopping_word))),
            _ => Finish::Length,
        };
        sink.finish(finish, self.counts).await?;
        Ok(Next::Done)
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Reads a whole body, failing once it passes `max` bytes.
async fn read_bounded(mut body: Incoming, max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("llama-server answer broke: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                return Err(format!("llama-server answer larger than {max} bytes"));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// llama-server's error message from an error response, or the status if there is none.
async fn error_message(body: Incoming, status: hyper::StatusCode) -> String {
    let bytes = read_bounded(body, MAX_SMALL_BODY).await.unwrap_or_default();
    serde_json::from_slice::<ErrorBody>(&bytes)
        .ok()
        .and_then(|body| body.error)
        .map(|error| error.message)
        .filter(|message| !message.is_empty())
        .unwrap_or_else(|| format!("llama-server answered {status}"))
}
