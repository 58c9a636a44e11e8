//! Command-line flags.
//!
//! Parsed with `lexopt` so the binary stays dependency-light. Parsing is a
//! pure function over an argument list so it can be unit tested; `main`
//! decides how to report errors (one line on stderr, exit code 2).

use std::ffi::OsString;

use crate::shared::{parsed_value, string_value};
use std::str::FromStr;

pub use crate::pd::PdRole;
pub use crate::provider::Provider;

/// Which engine the mock pretends to be, as seen by the gateway's
/// worker-type detection probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Sglang,
    Vllm,
    /// llama.cpp-like: only the OpenAI surface plus `/props`.
    Generic,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Sglang => "sglang",
            Runtime::Vllm => "vllm",
            Runtime::Generic => "generic",
        }
    }

    /// The `owned_by` string the real engine reports in `/v1/models`.
    pub fn default_owned_by(self) -> &'static str {
        match self {
            Runtime::Sglang => "sglang",
            Runtime::Vllm => "vllm",
            Runtime::Generic => "llamacpp",
        }
    }

    pub fn default_metrics_style(self) -> MetricsStyle {
        match self {
            Runtime::Sglang => MetricsStyle::Sglang,
            Runtime::Vllm | Runtime::Generic => MetricsStyle::Vllm,
        }
    }
}

impl FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sglang" => Ok(Runtime::Sglang),
            "vllm" => Ok(Runtime::Vllm),
            "generic" => Ok(Runtime::Generic),
            other => Err(format!(
                "unknown runtime '{other}' (expected sglang, vllm or generic)"
            )),
        }
    }
}

/// Naming scheme of the Prometheus metrics exposed on `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsStyle {
    Sglang,
    Vllm,
}

impl MetricsStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsStyle::Sglang => "sglang",
            MetricsStyle::Vllm => "vllm",
        }
    }
}

impl FromStr for MetricsStyle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sglang" => Ok(MetricsStyle::Sglang),
            "vllm" => Ok(MetricsStyle::Vllm),
            other => Err(format!(
                "unknown metrics style '{other}' (expected sglang or vllm)"
            )),
        }
    }
}

/// Everything the command line can set. Fault and timing fields are only
/// initial values: `/mock/config` can change them while running.
#[derive(Clone, Debug, PartialEq)]
pub struct Flags {
    pub host: String,
    pub port: u16,
    pub runtime: Runtime,
    pub model: String,
    pub owned_by: String,
    pub ttft_ms: u64,
    pub itl_ms: u64,
    pub output_tokens: u64,
    pub api_key: Option<String>,
    pub metrics_style: MetricsStyle,
    /// Data-parallel ranks reported by `/server_info` (`dp_size`).
    pub dp_size: u32,
    pub threads: usize,
    pub request_log: bool,
    pub request_log_capacity: usize,
    pub fail_rate: f64,
    pub fail_status: u16,
    pub drop_after_tokens: Option<u64>,
    pub stall_after_tokens: Option<u64>,
    pub stall: bool,
    pub slow_headers_ms: u64,
    pub unhealthy: bool,
    pub verbose: bool,
    /// `--provider`: stand in for a hosted API instead of an engine.
    pub provider: Option<Provider>,
    /// `--tls-cert-path` / `--tls-key-path`: serve HTTPS (HTTP/2 or HTTP/1.1 by ALPN).
    pub tls: Option<(String, String)>,
    /// `--pd-role`: play a prefill or decode worker of disaggregated serving.
    pub pd_role: Option<PdRole>,
    /// `--pd-omit-kv-params`: a vLLM-style prefill answers without `kv_transfer_params`.
    pub pd_omit_kv: bool,
}

/// Result of parsing: either run with these flags or print help.
#[derive(Debug)]
pub enum Command {
    Run(Box<Flags>),
    Help,
}

pub const HELP: &str = "\
mock-worker: LLM engine simulator for tollgate tests and benchmarks

USAGE: mock-worker [FLAGS]

Server:
  --host ADDR                 bind address (default 127.0.0.1)
  --port N                    bind port, 0 picks a free one (default 0);
                              prints `LISTENING <ip>:<port>` once bound
  --threads N                 tokio worker threads (default 1)
  --api-key KEY               require `Authorization: Bearer KEY` on every
                              route except /mock/* (with --provider: the key
                              where that provider reads it)
  --tls-cert-path PATH        serve HTTPS with this PEM certificate chain
  --tls-key-path PATH         ... and this PEM private key (both or neither);
                              HTTP/2 or HTTP/1.1 by ALPN
  --provider NAME             stand in for a hosted API: openai or anthropic
                              (its key header, /v1/models and error shapes;
                              no /health or engine routes)
  --no-request-log            do not record requests (for benchmarks)
  --request-log-capacity N    ring size of the request log (default 10000)
  --verbose                   print one line per request to stderr

Engine identity:
  --runtime sglang|vllm|generic   flavour to imitate (default sglang)
  --model NAME                served model name (default mock-model)
  --owned-by STR              owned_by in /v1/models (default per runtime)
  --metrics-style sglang|vllm /metrics naming (default per runtime)
  --dp-size N                 dp_size in /server_info (default 1)
  --pd-role prefill|decode    play a worker of prefill/decode disaggregation:
                              inference bodies must carry what that leg needs
                              (bootstrap fields; vLLM: kv_transfer_params),
                              else 400
  --pd-omit-kv-params         vLLM-style prefill: answer without
                              kv_transfer_params

Generation:
  --ttft-ms N                 delay before the first token (default 0)
  --itl-ms N                  delay between tokens (default 0)
  --output-tokens N           tokens per response (default 16)

Faults (also settable with POST /mock/config):
  --fail-rate P               fraction 0.0-1.0 of inference requests failing
  --fail-status CODE          status used for failures (default 500)
  --drop-after-tokens N       drop the connection after N streamed tokens
  --stall-after-tokens N      stream N tokens, then send nothing more (connection kept open)
  --stall                     never answer inference requests
  --slow-headers-ms N         delay the response head of inference requests
  --unhealthy                 /health and /health_generate answer 503

  -h, --help                  print this help
";

impl Default for Flags {
    fn default() -> Self {
        let runtime = Runtime::Sglang;
        Flags {
            host: "127.0.0.1".to_string(),
            port: 0,
            runtime,
            model: "mock-model".to_string(),
            owned_by: runtime.default_owned_by().to_string(),
            ttft_ms: 0,
            itl_ms: 0,
            output_tokens: 16,
            api_key: None,
            metrics_style: runtime.default_metrics_style(),
            dp_size: 1,
            threads: 1,
            request_log: true,
            request_log_capacity: 10_000,
            fail_rate: 0.0,
            fail_status: 500,
            drop_after_tokens: None,
            stall_after_tokens: None,
            stall: false,
            slow_headers_ms: 0,
            unhealthy: false,
            verbose: false,
            provider: None,
            tls: None,
            pd_role: None,
            pd_omit_kv: false,
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
    // Defaults that depend on --runtime are resolved after the loop so that
    // flag order does not matter.
    let mut owned_by: Option<String> = None;
    let (mut tls_cert, mut tls_key) = (None, None);
    let mut metrics_style: Option<MetricsStyle> = None;

    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("host") => flags.host = string_value(&mut parser)?,
            Long("port") => flags.port = parsed_value(&mut parser, "--port")?,
            Long("runtime") => flags.runtime = parsed_value(&mut parser, "--runtime")?,
            Long("model") => flags.model = string_value(&mut parser)?,
            Long("owned-by") => owned_by = Some(string_value(&mut parser)?),
            Long("ttft-ms") => flags.ttft_ms = parsed_value(&mut parser, "--ttft-ms")?,
            Long("itl-ms") => flags.itl_ms = parsed_value(&mut parser, "--itl-ms")?,
            Long("output-tokens") => {
                flags.output_tokens = parsed_value(&mut parser, "--output-tokens")?
            }
            Long("api-key") => flags.api_key = Some(string_value(&mut parser)?),
            Long("metrics-style") => {
                metrics_style = Some(parsed_value(&mut parser, "--metrics-style")?)
            }
            Long("threads") => flags.threads = parsed_value(&mut parser, "--threads")?,
            Long("dp-size") => flags.dp_size = parsed_value(&mut parser, "--dp-size")?,
            Long("no-request-log") => flags.request_log = false,
            Long("request-log-capacity") => {
                flags.request_log_capacity = parsed_value(&mut parser, "--request-log-capacity")?
            }
            Long("fail-rate") => flags.fail_rate = parsed_value(&mut parser, "--fail-rate")?,
            Long("fail-status") => flags.fail_status = parsed_value(&mut parser, "--fail-status")?,
            Long("drop-after-tokens") => {
                flags.drop_after_tokens = Some(parsed_value(&mut parser, "--drop-after-tokens")?)
            }
            Long("stall-after-tokens") => {
                flags.stall_after_tokens = Some(parsed_value(&mut parser, "--stall-after-tokens")?)
            }
            Long("stall") => flags.stall = true,
            Long("slow-headers-ms") => {
                flags.slow_headers_ms = parsed_value(&mut parser, "--slow-headers-ms")?
            }
            Long("unhealthy") => flags.unhealthy = true,
            Long("verbose") => flags.verbose = true,
            Long("pd-role") => flags.pd_role = Some(parsed_value(&mut parser, "--pd-role")?),
            Long("pd-omit-kv-params") => flags.pd_omit_kv = true,
            Long("provider") => flags.provider = Some(parsed_value(&mut parser, "--provider")?),
            Long("tls-cert-path") => tls_cert = Some(string_value(&mut parser)?),
            Long("tls-key-path") => tls_key = Some(string_value(&mut parser)?),
            other => return Err(other.unexpected().to_string()),
        }
    }

    flags.owned_by = owned_by.unwrap_or_else(|| flags.runtime.default_owned_by().to_string());
    flags.tls = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err("--tls-cert-path and --tls-key-path go together".into()),
    };
    flags.metrics_style = metrics_style.unwrap_or_else(|| flags.runtime.default_metrics_style());
    validate(&flags)?;
    Ok(Command::Run(Box::new(flags)))
}

fn validate(flags: &Flags) -> Result<(), String> {
    if !(0.0..=1.0).contains(&flags.fail_rate) {
        return Err(format!(
            "--fail-rate must be between 0.0 and 1.0, got {}",
            flags.fail_rate
        ));
    }
    if http::StatusCode::from_u16(flags.fail_status).is_err() {
        return Err(format!(
            "--fail-status must be an HTTP status code, got {}",
            flags.fail_status
        ));
    }
    if flags.threads == 0 {
        return Err("--threads must be at least 1".to_string());
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
    fn defaults() {
        let flags = run(&[]).unwrap();
        assert_eq!(flags, Flags::default());
        assert_eq!(flags.owned_by, "sglang");
        assert_eq!(flags.metrics_style, MetricsStyle::Sglang);
    }

    #[test]
    fn dp_size_is_reported_as_given() {
        assert_eq!(run(&[]).unwrap().dp_size, 1);
        assert_eq!(run(&["--dp-size", "4"]).unwrap().dp_size, 4);
        assert!(run(&["--dp-size", "-1"]).is_err());
    }

    #[test]
    fn runtime_drives_defaults_regardless_of_order() {
        let flags = run(&["--owned-by", "me", "--runtime", "vllm"]).unwrap();
        assert_eq!(flags.owned_by, "me");
        assert_eq!(flags.metrics_style, MetricsStyle::Vllm);

        let flags = run(&["--runtime", "generic"]).unwrap();
        assert_eq!(flags.owned_by, "llamacpp");
        assert_eq!(flags.metrics_style, MetricsStyle::Vllm);

        let flags = run(&["--runtime=vllm", "--metrics-style", "sglang"]).unwrap();
        assert_eq!(flags.metrics_style, MetricsStyle::Sglang);
    }

    #[test]
    fn fault_flags() {
        let flags = run(&[
            "--fail-rate",
            "0.25",
            "--fail-status",
            "503",
            "--drop-after-tokens",
            "3",
            "--stall",
            "--slow-headers-ms",
            "40",
            "--unhealthy",
        ])
        .unwrap();
        assert_eq!(flags.fail_rate, 0.25);
        assert_eq!(flags.fail_status, 503);
        assert_eq!(flags.drop_after_tokens, Some(3));
        assert!(flags.stall && flags.unhealthy);
        assert_eq!(flags.slow_headers_ms, 40);
    }

    #[test]
    fn errors_are_reported_not_panicked() {
        assert!(run(&["--port", "banana"]).is_err());
        assert!(run(&["--port"]).is_err());
        assert!(run(&["--bogus"]).is_err());
        assert!(run(&["--runtime", "tgi"]).is_err());
        assert!(run(&["--fail-rate", "1.5"]).is_err());
        assert!(run(&["--fail-status", "42"]).is_err());
        assert!(run(&["--threads", "0"]).is_err());
    }

    #[test]
    fn help() {
        assert!(matches!(parse(["--help"]), Ok(Command::Help)));
        assert!(matches!(parse(["-h"]), Ok(Command::Help)));
    }
}
