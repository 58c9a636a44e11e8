//! Command-line flags.
//!
//! Parsed with `lexopt`, as a pure function over an argument list so it can be unit tested;
//! `main` reports errors (one line on stderr, exit code 2).

use std::ffi::OsString;

use crate::shared::{parsed_value, string_value};

/// What answers `Generate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A fake engine that echoes the prompt's ids (see `mock.rs`).
    Mock,
    /// An adapter in front of llama.cpp's `llama-server` at this base URL (`llama.rs`).
    Llama { url: String },
}

/// The engine's part in prefill/decode disaggregation (`--disaggregation-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// A regular engine.
    #[default]
    Null,
    /// Generates one token and keeps the prompt's KV cache for a decode engine, served on
    /// its bootstrap port.
    Prefill,
    /// Takes a prefill's KV cache from the engine the request names, then generates.
    Decode,
}

/// Which engine's gRPC service is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// `sglang.grpc.scheduler.SglangScheduler`.
    Sglang,
    /// `vllm.grpc.engine.VllmEngine` (see `vllm.rs`).
    Vllm,
    /// `trtllm.TrtllmService` (see `trtllm.rs`).
    Trtllm,
    /// `tokenspeed.grpc.scheduler.TokenSpeedScheduler` (see `tokenspeed.rs`).
    Tokenspeed,
    /// `mlx.grpc.engine.MlxEngine` (see `mlx.rs`).
    Mlx,
}

/// Everything the command line can set.
#[derive(Clone, Debug, PartialEq)]
pub struct Flags {
    pub host: String,
    pub port: u16,
    pub threads: usize,
    pub service: Service,
    /// `--tls-cert-path` / `--tls-key-path`: serve gRPC over TLS (`grpcs://`, ALPN h2).
    pub tls: Option<(String, String)>,
    pub mode: Mode,
    /// `served_model_name` in GetModelInfo.
    pub model: String,
    /// `tokenizer_path` in GetModelInfo (unless `advertise_model_path`), the files
    /// `GetTokenizer` sends; in llama mode also the vocabulary that recovers the token ids
    /// llama-server leaves out of its stream (see `recover.rs`).
    pub tokenizer_path: Option<String>,
    /// Reported as both model and tokenizer path in GetModelInfo instead: an engine on
    /// another host, whose paths the gateway cannot read.
    pub advertise_model_path: Option<String>,
    /// Bytes per `GetTokenizer` chunk.
    pub tokenizer_chunk_bytes: usize,
    /// `max_context_length`; in llama mode it overrides what llama-server reports.
    pub max_context: Option<u32>,
    /// `eos_token_ids`; the mock also stops on them.
    pub eos_token_ids: Vec<u32>,
    pub faults: Faults,
    pub timing: Timing,
    pub role: Role,
    /// `--bootstrap-port`: where a prefill engine serves its KV caches (0 picks one).
    pub bootstrap_port: u16,
    /// `--max-running-requests`: what GetLoads reports (the gateway's decode room window).
    pub max_running_requests: Option<u32>,
    /// `--kv-connector` / `--kv-engine-id`: what vLLM's GetServerInfo reports.
    pub kv_connector: Option<String>,
    pub kv_engine_id: Option<String>,
}

/// Delays of the mock engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Before the first token.
    pub ttft_ms: u64,
    /// Between tokens.
    pub itl_ms: u64,
}

/// Injected failures, in either mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// HealthCheck answers `healthy: false`.
    pub fail_health: bool,
    /// FlushCache answers `success: false`, as an engine with requests in flight does.
    pub refuse_flush: bool,
    /// Every Generate answers one GenerateError with this message.
    pub generate_error: Option<String>,
    /// A generation's stream breaks with a gRPC error after this many tokens.
    pub drop_after: Option<u32>,
    /// `GetTokenizer` sends a SHA-256 that does not match the archive.
    pub corrupt_tokenizer_sha: bool,
    /// A vLLM-service prefill answers no `kv_transfer_params`.
    pub omit_kv_params: bool,
}

/// Result of parsing: either run with these flags or print help.
#[derive(Debug)]
pub enum Command {
    Run(Box<Flags>),
    Help,
}

/// The mock's context window when `--max-context` is not given.
pub const DEFAULT_MOCK_CONTEXT: u32 = 4096;

pub const HELP: &str = "\
grpc-engine: an inference engine's gRPC service over HTTP/2 (SGLang's, vLLM's,
TensorRT-LLM's, TokenSpeed's or MLX's), as a deterministic fake engine or as an adapter in
front of llama.cpp's llama-server

USAGE: grpc-engine [FLAGS]

Server:
  --host ADDR               bind address (default 127.0.0.1)
  --port N                  bind port, 0 picks a free one (default 0); prints
                            `LISTENING <ip>:<port>` once bound
  --threads N               tokio worker threads (default 1)
  --tls-cert-path PATH      serve over TLS (grpcs://, ALPN h2) with this PEM certificate chain
  --tls-key-path PATH       ... and this PEM private key (both or neither)

Service:
  --service NAME            the gRPC service served (default sglang): sglang
                            (sglang.grpc.scheduler.SglangScheduler), vllm
                            (vllm.grpc.engine.VllmEngine), trtllm (trtllm.TrtllmService),
                            tokenspeed (tokenspeed.grpc.scheduler.TokenSpeedScheduler) or mlx
                            (mlx.grpc.engine.MlxEngine); the others answer UNIMPLEMENTED, as
                            a real engine's would. Each sends its stream as its published
                            servicer does (reshape.rs): a streamed complete repeats the last
                            chunk (sglang, vllm, tokenspeed), every id (trtllm) or none (mlx);
                            counts, trimmed stop tokens and what follows an Abort differ too;
                            mlx generates one sequence (n is ignored)

Mode:
  (default)                 mock: echo the prompt's ids back, cycling; with n > 1 sequence i
                            echoes the prompt rotated by i (starting at its i-th id), the
                            sequences interleaved one chunk each per step, each with its own
                            complete; asked for logprobs, the k-th token of a sequence (from 1)
                            scores -0.1*k and its top alternatives are the token itself, then
                            token+1, token+2, ..., the j-th below it scoring -0.1*k - j
  --llama-server URL        adapter: generate with the llama-server at URL (http://host:port);
                            n > 1 and logprobs are refused

Model info (GetModelInfo):
  --model NAME              served_model_name (default mock-model)
  --tokenizer-path PATH     tokenizer_path, and the files GetTokenizer sends (a directory's
                            plain files, or one tokenizer.json); in llama mode, its
                            tokenizer.json also restores the token ids llama-server leaves out
                            of a stream mid-character
  --advertise-model-path P  report P as model and tokenizer path instead (an engine on another
                            host: the gateway cannot read P and asks GetTokenizer)
  --tokenizer-chunk-bytes N bytes per GetTokenizer chunk (default 1048576)
  --max-context N           max_context_length (mock default 4096; llama: from llama-server)
  --eos-token-id N          an EOS id, repeatable (mock: stops on it; llama: from llama-server)

Prefill/decode disaggregation (sglang and vllm services, either mode):
  --disaggregation-mode M   null (default), prefill or decode. A prefill engine generates one
                            token, then keeps the prompt's ids (its KV cache) for one decode
                            engine to fetch from its bootstrap port; a decode engine fetches
                            them from the prefill the request names, checks they are its own
                            prompt's, then generates. sglang: both legs carry
                            disaggregated_params (host, port, room), the decode's fetch waits
                            until the prefill has finished; vllm: the prefill is asked
                            for kv_transfer_params {do_remote_decode: true} and answers where
                            its cache is; a decode sent none recomputes the prompt
  --bootstrap-port N        prefill: port of the KV side channel (default 0 picks one; printed
                            as `BOOTSTRAP <ip>:<port>`)
  --max-running-requests N  reported by GetLoads (default 4096)
  --omit-kv-params          vllm prefill: answer no kv_transfer_params (a broken connector)
  --kv-connector NAME       vllm: the kv_connector GetServerInfo reports (default none)
  --kv-engine-id ID         vllm: the kv_engine_id GetServerInfo reports (default none); its
                            kv_role is kv_producer for a prefill, kv_consumer for a decode

Mock timing:
  --ttft-ms N               delay before the first token (default 0)
  --itl-ms N                delay between tokens (default 0)

Faults (either mode):
  --fail-health             HealthCheck answers healthy: false
  --refuse-flush            FlushCache answers success: false (requests in flight)
  --generate-error MESSAGE  every Generate answers a GenerateError with MESSAGE
  --drop-after N            break each stream with a gRPC error after N tokens
  --corrupt-tokenizer-sha   GetTokenizer sends a SHA-256 that does not match its archive

Stdout, one line per event (request ids with spaces or control characters are escaped):
  LISTENING <ip>:<port>
  generate request_id=ID input_ids=N max_new_tokens=M|none stream=B temperature=T top_p=P
           top_k=K min_p=P stop_token_ids=[..] stop=[..] ignore_eos=B
  finish request_id=ID reason=stop|length|abort completion_tokens=N [index=I, when n > 1]
  error request_id=ID message=JSON
  abort request_id=ID found=B
  flush_cache success=B
  start_profile output_dir=DIR|none num_steps=N|none   (sglang and tokenspeed services)
  stop_profile                                          (sglang and tokenspeed services)
  get_tokenizer bytes=N chunks=M
  cancelled request_id=ID
  BOOTSTRAP <ip>:<port>                            (prefill: the KV side channel is up)
  handoff request_id=ID role=prefill|decode kv=bootstrap:HOST:PORT/ROOM|json:JSON|none
  kv_stored key=KEY ids=N                          (prefill: the cache is kept)
  kv_fetched key=KEY from=HOST:PORT ids=N          (decode: a matching cache arrived)
  kv_recompute request_id=ID                       (decode: no handoff, the prompt recomputed)
  restored request_id=ID tokens=N   (llama: ids llama-server left out, put back)
  withheld request_id=ID tokens=N   (llama: ids lost at the end, counted only)

  -h, --help                print this help
";

impl Default for Flags {
    fn default() -> Self {
        Flags {
            host: "127.0.0.1".to_string(),
            port: 0,
            threads: 1,
            service: Service::Sglang,
            tls: None,
            mode: Mode::Mock,
            model: "mock-model".to_string(),
            tokenizer_path: None,
            advertise_model_path: None,
            tokenizer_chunk_bytes: crate::tokenizer::DEFAULT_CHUNK_BYTES,
            max_context: None,
            eos_token_ids: Vec::new(),
            faults: Faults::default(),
            timing: Timing::default(),
            role: Role::Null,
            bootstrap_port: 0,
            max_running_requests: None,
            kv_connector: None,
            kv_engine_id: None,
        }
    }
}

/// Parses the arguments that follow the program name.
pub fn parse<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;

    let mut flags = Flags::default();
    let (mut tls_cert, mut tls_key) = (None, None);
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("host") => flags.host = string_value(&mut parser)?,
            Long("port") => flags.port = parsed_value(&mut parser, "--port")?,
            Long("threads") => flags.threads = parsed_value(&mut parser, "--threads")?,
            Long("tls-cert-path") => tls_cert = Some(string_value(&mut parser)?),
            Long("tls-key-path") => tls_key = Some(string_value(&mut parser)?),
            Long("service") => {
                flags.service = match string_value(&mut parser)?.as_str() {
                    "sglang" => Service::Sglang,
                    "vllm" => Service::Vllm,
                    "trtllm" => Service::Trtllm,
                    "tokenspeed" => Service::Tokenspeed,
                    "mlx" => Service::Mlx,
                    other => {
                        return Err(format!(
                            "--service takes sglang, vllm, trtllm, tokenspeed or mlx, got '{other}'"
                        ))
                    }
                }
            }
            Long("llama-server") => {
                flags.mode = Mode::Llama {
                    url: string_value(&mut parser)?,
                }
            }
            Long("model") => flags.model = string_value(&mut parser)?,
            Long("tokenizer-path") => flags.tokenizer_path = Some(string_value(&mut parser)?),
            Long("advertise-model-path") => {
                flags.advertise_model_path = Some(string_value(&mut parser)?)
            }
            Long("tokenizer-chunk-bytes") => {
                flags.tokenizer_chunk_bytes = parsed_value(&mut parser, "--tokenizer-chunk-bytes")?
            }
            Long("corrupt-tokenizer-sha") => flags.faults.corrupt_tokenizer_sha = true,
            Long("max-context") => {
                flags.max_context = Some(parsed_value(&mut parser, "--max-context")?)
            }
            Long("eos-token-id") => flags
                .eos_token_ids
                .push(parsed_value(&mut parser, "--eos-token-id")?),
            Long("ttft-ms") => flags.timing.ttft_ms = parsed_value(&mut parser, "--ttft-ms")?,
            Long("itl-ms") => flags.timing.itl_ms = parsed_value(&mut parser, "--itl-ms")?,
            Long("fail-health") => flags.faults.fail_health = true,
            Long("refuse-flush") => flags.faults.refuse_flush = true,
            Long("generate-error") => {
                flags.faults.generate_error = Some(string_value(&mut parser)?)
            }
            Long("disaggregation-mode") => {
                flags.role = match string_value(&mut parser)?.as_str() {
                    "null" => Role::Null,
                    "prefill" => Role::Prefill,
                    "decode" => Role::Decode,
                    other => {
                        return Err(format!(
                            "--disaggregation-mode takes null, prefill or decode, got '{other}'"
                        ))
                    }
                }
            }
            Long("bootstrap-port") => {
                flags.bootstrap_port = parsed_value(&mut parser, "--bootstrap-port")?
            }
            Long("max-running-requests") => {
                flags.max_running_requests =
                    Some(parsed_value(&mut parser, "--max-running-requests")?)
            }
            Long("omit-kv-params") => flags.faults.omit_kv_params = true,
            Long("kv-connector") => flags.kv_connector = Some(string_value(&mut parser)?),
            Long("kv-engine-id") => flags.kv_engine_id = Some(string_value(&mut parser)?),
            Long("drop-after") => {
                flags.faults.drop_after = Some(parsed_value(&mut parser, "--drop-after")?)
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    flags.tls = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err("--tls-cert-path and --tls-key-path go together".into()),
    };
    validate(&flags)?;
    Ok(Command::Run(Box::new(flags)))
}

fn validate(flags: &Flags) -> Result<(), String> {
    if flags.threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    if flags.tokenizer_chunk_bytes == 0 {
        return Err("--tokenizer-chunk-bytes must be at least 1".to_string());
    }
    if flags.max_context == Some(0) {
        return Err("--max-context must be at least 1".to_string());
    }
    if flags.max_context.is_some_and(|n| n > i32::MAX as u32) {
        return Err("--max-context does not fit the protocol's int32".to_string());
    }
    if flags.role != Role::Null && !matches!(flags.service, Service::Sglang | Service::Vllm) {
        return Err("--disaggregation-mode needs --service sglang or vllm".to_string());
    }
    if flags.max_running_requests == Some(0) {
        return Err("--max-running-requests must be at least 1".to_string());
    }
    if let Mode::Llama { url } = &flags.mode {
        if !url.starts_with("http://") {
            return Err(format!(
                "--llama-server must be an http:// URL, got '{url}'"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Flags, String> {
        match parse(args.iter().copied())? {
            Command::Run(flags) => Ok(*flags),
            Command::Help => Err("help".to_string()),
        }
    }

    #[test]
    fn defaults_are_a_mock_on_a_free_port() {
        let flags = run(&[]).unwrap();
        assert_eq!(flags, Flags::default());
        assert_eq!(flags.mode, Mode::Mock);
        assert_eq!(flags.port, 0);
    }

    #[test]
    fn disaggregation_flags() {
        let flags = run(&[
            "--disaggregation-mode",
            "prefill",
            "--bootstrap-port",
            "9000",
            "--max-running-requests",
            "2",
            "--omit-kv-params",
            "--service",
            "vllm",
        ])
        .unwrap();
        assert_eq!(flags.role, Role::Prefill);
        assert_eq!(flags.bootstrap_port, 9000);
        assert_eq!(flags.max_running_requests, Some(2));
        assert!(flags.faults.omit_kv_params);
        let err = run(&["--disaggregation-mode", "decode", "--service", "mlx"]).unwrap_err();
        assert!(err.contains("sglang or vllm"), "{err}");
        let err = run(&["--disaggregation-mode", "both"]).unwrap_err();
        assert!(err.contains("null, prefill or decode"), "{err}");
    }

    #[test]
    fn service_is_one_of_five() {
        assert_eq!(run(&[]).unwrap().service, Service::Sglang);
        for (name, service) in [
            ("vllm", Service::Vllm),
            ("trtllm", Service::Trtllm),
            ("tokenspeed", Service::Tokenspeed),
            ("mlx", Service::Mlx),
        ] {
            assert_eq!(run(&["--service", name]).unwrap().service, service);
        }
        let err = run(&["--service", "tgi"]).unwrap_err();
        assert!(err.contains("tokenspeed or mlx"), "{err}");
    }

    #[test]
    fn tokenizer_stream_flags() {
        let flags = run(&[
            "--advertise-model-path",
            "/elsewhere",
            "--tokenizer-chunk-bytes",
            "1024",
            "--corrupt-tokenizer-sha",
        ])
        .unwrap();
        assert_eq!(flags.advertise_model_path.as_deref(), Some("/elsewhere"));
        assert_eq!(flags.tokenizer_chunk_bytes, 1024);
        assert!(flags.faults.corrupt_tokenizer_sha);
        assert!(run(&["--tokenizer-chunk-bytes", "0"]).is_err());
    }

    #[test]
    fn llama_mode_and_identity() {
        let flags = run(&[
            "--llama-server",
            "http://127.0.0.1:8080",
            "--model",
            "smollm2",
            "--tokenizer-path",
            "/tmp/tok",
            "--max-context",
            "2048",
            "--eos-token-id",
            "2",
            "--eos-token-id=0",
        ])
        .unwrap();
        assert_eq!(
            flags.mode,
            Mode::Llama {
                url: "http://127.0.0.1:8080".into()
            }
        );
        assert_eq!(flags.model, "smollm2");
        assert_eq!(flags.tokenizer_path.as_deref(), Some("/tmp/tok"));
        assert_eq!(flags.max_context, Some(2048));
        assert_eq!(flags.eos_token_ids, [2, 0]);
    }

    #[test]
    fn faults_and_timing() {
        let flags = run(&[
            "--fail-health",
            "--generate-error",
            "out of memory",
            "--drop-after",
            "3",
            "--ttft-ms",
            "40",
            "--itl-ms",
            "5",
        ])
        .unwrap();
        assert!(flags.faults.fail_health);
        assert_eq!(
            flags.faults.generate_error.as_deref(),
            Some("out of memory")
        );
        assert_eq!(flags.faults.drop_after, Some(3));
        assert_eq!(
            flags.timing,
            Timing {
                ttft_ms: 40,
                itl_ms: 5
            }
        );
    }

    #[test]
    fn errors_are_reported_not_panicked() {
        assert!(run(&["--port", "banana"]).is_err());
        assert!(run(&["--port"]).is_err());
        assert!(run(&["--bogus"]).is_err());
        assert!(run(&["--threads", "0"]).is_err());
        assert!(run(&["--max-context", "0"]).is_err());
        assert!(run(&["--max-context", "4294967295"]).is_err());
        assert!(run(&["--eos-token-id", "-1"]).is_err());
        assert!(run(&["--llama-server", "https://x"]).is_err());
        assert!(run(&["--drop-after", "x"]).is_err());
    }

    #[test]
    fn help() {
        assert!(matches!(parse(["--help"]), Ok(Command::Help)));
        assert!(matches!(parse(["-h"]), Ok(Command::Help)));
    }
}
