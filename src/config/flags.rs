//! The flag table: one row per flag, read both by the parser and by `--help`.
//!
//! A row names the flag (without dashes), its help group, the default shown in `--help`, a
//! one-line meaning and a setter. The setter validates the raw text and stores it in
//! [`Config`]; it is a plain non-capturing closure, so the row is the only code a new flag
//! needs besides its `Config` field.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Config, HistoryBackend, IoEngine, LogLevel, PolicyName, PrefillWorker};
use crate::auth::keys::{ControlPlaneKey, TenantKey};
use crate::auth::Role;
use crate::fleet::provider::Backend;
use crate::fleet::{parse_worker_url, Transport};
use crate::secret::{redact_userinfo, Secret};

/// Help sections, printed in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    Listener,
    Workers,
    Routing,
    Resilience,
    Admission,
    Runtime,
    LimitsAndTimeouts,
    Logging,
    Authentication,
    Metrics,
    History,
}

impl Group {
    pub const ALL: &'static [Group] = &[
        Group::Listener,
        Group::Workers,
        Group::Routing,
        Group::Resilience,
        Group::Admission,
        Group::Runtime,
        Group::LimitsAndTimeouts,
        Group::Logging,
        Group::Authentication,
        Group::Metrics,
        Group::History,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Group::Listener => "Listener",
            Group::Workers => "Workers",
            Group::Routing => "Routing",
            Group::Resilience => "Retries and circuit breakers",
            Group::Admission => "Admission control and overload protection",
            Group::Runtime => "Runtime",
            Group::LimitsAndTimeouts => "Limits and timeouts",
            Group::Logging => "Logging",
            Group::Authentication => "Authentication",
            Group::Metrics => "Metrics",
            Group::History => "History store",
        }
    }
}

/// A value the setter refused: the raw text and what was expected instead.
///
/// The parser drops `value` for secret flags before building the error message.
#[derive(Clone, Debug)]
pub struct Invalid {
    pub value: String,
    pub expected: Cow<'static, str>,
}

impl Invalid {
    pub fn new(value: &str, expected: impl Into<Cow<'static, str>>) -> Self {
        Invalid {
            value: value.to_owned(),
            expected: expected.into(),
        }
    }
}

/// Stores a validated value (or rejects it).
pub type SetOne = fn(&mut Config, &str) -> Result<(), Invalid>;
/// Stores the values of one occurrence of a multi-value flag.
pub type SetMany = fn(&mut Config, &[String]) -> Result<(), Invalid>;

/// How a flag takes its value.
#[derive(Clone, Copy)]
pub enum Kind {
    /// No value: `--log-json`.
    Switch(fn(&mut Config)),
    /// Exactly one value: `--port 8080` or `--port=8080`.
    One {
        value_name: &'static str,
        set: SetOne,
    },
    /// One or more values up to the next flag: `--worker-urls A B`. Repeatable; the setter
    /// decides whether a repeat appends or replaces.
    Many {
        value_name: &'static str,
        set: SetMany,
    },
}

/// One row of the flag table.
#[derive(Clone, Copy)]
pub struct Flag {
    /// Long name without the leading `--`.
    pub name: &'static str,
    pub group: Group,
    /// The default as shown in `--help`.
    pub default: &'static str,
    /// One-line meaning for `--help`.
    pub help: &'static str,
    /// The value is a credential: never echoed in errors.
    pub secret: bool,
    pub kind: Kind,
}

impl Flag {
    pub const fn switch(
        name: &'static str,
        group: Group,
        help: &'static str,
        set: fn(&mut Config),
    ) -> Flag {
        Flag {
            name,
            group,
            default: "off",
            help,
            secret: false,
            kind: Kind::Switch(set),
        }
    }

    pub const fn one(
        name: &'static str,
        value_name: &'static str,
        default: &'static str,
        group: Group,
        help: &'static str,
        set: SetOne,
    ) -> Flag {
        Flag {
            name,
            group,
            default,
            help,
            secret: false,
            kind: Kind::One { value_name, set },
        }
    }

    pub const fn many(
        name: &'static str,
        value_name: &'static str,
        default: &'static str,
        group: Group,
        help: &'static str,
        set: SetMany,
    ) -> Flag {
        Flag {
            name,
            group,
            default,
            help,
            secret: false,
            kind: Kind::Many { value_name, set },
        }
    }

    /// Marks the value as a credential.
    pub const fn secret(mut self) -> Flag {
        self.secret = true;
        self
    }

    /// `--name <VALUE>`, `--name <VALUE>...` or `--name`, as shown in `--help`.
    pub fn synopsis(&self) -> String {
        match self.kind {
            Kind::Switch(_) => format!("--{}", self.name),
            Kind::One { value_name, .. } => format!("--{} <{}>", self.name, value_name),
            Kind::Many { value_name, .. } => format!("--{} <{}>...", self.name, value_name),
        }
    }
}

/// Every flag the binary accepts (besides `--help` and `--version`).
pub static FLAGS: &[Flag] = &[
    // Listener
    Flag::one(
        "host",
        "ADDR",
        "0.0.0.0",
        Group::Listener,
        "IP address the main listener binds",
        |c, v| {
            c.server.host = ip_addr(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "port",
        "PORT",
        "30000",
        Group::Listener,
        "Port of the main listener (0 picks a free port)",
        |c, v| {
            c.server.port = port(v, true)?;
            Ok(())
        },
    ),
    Flag::one(
        "tls-cert-path",
        "PATH",
        "none (cleartext)",
        Group::Listener,
        "PEM certificate chain (leaf first) the main listener serves over TLS, HTTP/1.1 and h2 by ALPN; needs --tls-key-path; re-read on SIGHUP",
        |c, v| {
            c.server.tls.cert_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "tls-key-path",
        "PATH",
        "none (cleartext)",
        Group::Listener,
        "PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert-path; needs --tls-cert-path; re-read on SIGHUP",
        |c, v| {
            c.server.tls.key_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    // Workers
    Flag::many(
        "worker-urls",
        "URL",
        "none",
        Group::Workers,
        "Workers registered at startup like POST /workers: http:// or https:// engines, or \
         grpc:// or grpcs:// engines (SGLang's or vLLM's gRPC service, detected; the gateway \
         tokenizes, see --model-path); probed until they answer, routable once healthy; \
         repeatable",
        |c, values| {
            for v in values {
                c.control.worker_urls.push(worker_url(v, true)?);
            }
            Ok(())
        },
    ),
    Flag::one(
        "backend",
        "KIND",
        "http",
        Group::Workers,
        "What the --worker-urls are: http (engines and OpenAI-compatible servers) or \
         anthropic (also spelled vendor: Anthropic's Messages API, e.g. \
         https://api.anthropic.com, or a stand-in). With anthropic only POST /v1/messages \
         is served (other inference routes and count_tokens: 501), forwarded to \
         <URL>/v1/messages with the client's own x-api-key, Authorization, \
         anthropic-version and anthropic-beta; the workers are registered without any \
         call (no probe, no detection) and take every model",
        |c, v| {
            c.fleet.backend = Backend::parse(v)
                .ok_or_else(|| Invalid::new(v, "http or anthropic (or vendor)"))?;
            Ok(())
        },
    ),
    Flag::one(
        "model-path",
        "PATH",
        "none",
        Group::Workers,
        "Model directory whose tokenizer.json, tokenizer_config.json and chat template the \
         gateway uses for gRPC workers that name no tokenizer of their own (read from disk, \
         never fetched)",
        |c, v| {
            c.control.language.model_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "tokenizer-path",
        "PATH",
        "none (--model-path)",
        Group::Workers,
        "Tokenizer for gRPC workers: a directory with tokenizer.json, the tokenizer.json \
         file itself, or the name or ID of a tokenizer registered through /v1/tokenizers; \
         wins over --model-path",
        |c, v| {
            c.control.language.tokenizer_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "chat-template",
        "PATH",
        "none (the tokenizer's)",
        Group::Workers,
        "Jinja chat template file for gRPC workers, instead of the one the tokenizer \
         directory ships (chat_template.jinja or tokenizer_config.json)",
        |c, v| {
            c.control.language.chat_template = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "tool-call-parser",
        "NAME",
        "none (by model name)",
        Group::Workers,
        "Tool-call parser for gRPC workers whose model card names none: json, llama, \
         mistral, qwen, qwen_coder, pythonic, deepseek, deepseek31, glm45_moe, glm47_moe, \
         step3, kimik2, minimax_m2, gpt_oss or passthrough (vLLM's and SGLang's names are \
         accepted too); without it the model's name chooses, else passthrough",
        |c, v| {
            if crate::parsers::tool::registry::by_name(v).is_none() {
                let known = crate::parsers::tool::registry::NAMES.join(", ");
                return Err(Invalid::new(v, format!("a tool-call parser: {known}")));
            }
            c.control.language.tool_call_parser = Some(v.to_owned());
            Ok(())
        },
    ),
    Flag::one(
        "reasoning-parser",
        "NAME",
        "none (by model name)",
        Group::Workers,
        "Reasoning parser for gRPC workers whose model card names none: deepseek_r1, qwen3, \
         qwen3_thinking, kimi, glm45, step3, minimax, gpt_oss or passthrough (vLLM's and \
         SGLang's names are accepted too); without it the model's name chooses, else \
         passthrough",
        |c, v| {
            if crate::parsers::reasoning::registry::by_name(v).is_none() {
                let known = crate::parsers::reasoning::registry::NAMES.join(", ");
                return Err(Invalid::new(v, format!("a reasoning parser: {known}")));
            }
            c.control.language.reasoning_parser = Some(v.to_owned());
            Ok(())
        },
    ),
    Flag::switch(
        "tokenizer-cache-enable-l0",
        Group::Workers,
        "Accepted for SGLang gateway command lines: the L0 tokenizer cache (whole prompts of \
         gRPC workers) is on unless --tokenizer-cache-l0-max-entries is 0",
        |_| {},
    ),
    Flag::one(
        "tokenizer-cache-l0-max-entries",
        "N",
        "10000",
        Group::Workers,
        "Whole prompts the L0 tokenizer cache keeps, all data-plane threads together (0: \
         L0 off)",
        |c, v| {
            c.tokenizer_cache.l0_max_entries = integer(v, 0, 1 << 32)? as usize;
            Ok(())
        },
    ),
    Flag::one(
        "tokenizer-cache-l0-max-memory",
        "BYTES",
        "32MiB",
        Group::Workers,
        "Prompt text and ids the L0 tokenizer cache keeps, all threads together; K/M/G, \
         KiB/MiB/GiB suffixes (0: L0 off)",
        |c, v| {
            c.tokenizer_cache.l0_max_bytes = cache_bytes(v)?;
            Ok(())
        },
    ),
    Flag::switch(
        "tokenizer-cache-enable-l1",
        Group::Workers,
        "Accepted for SGLang gateway command lines: the L1 tokenizer cache (chat prompts cut \
         after special tokens, so a new turn tokenizes only its tail) is on unless \
         --tokenizer-cache-l1-max-memory is 0",
        |_| {},
    ),
    Flag::one(
        "tokenizer-cache-l1-max-memory",
        "BYTES",
        "50MiB",
        Group::Workers,
        "Prompt text, ids and cut places the L1 tokenizer cache keeps, all threads together; \
         K/M/G, KiB/MiB/GiB suffixes (0: L1 off)",
        |c, v| {
            c.tokenizer_cache.l1_max_bytes = cache_bytes(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "mcp-config-path",
        "PATH",
        "none",
        Group::Workers,
        "JSON file of the MCP servers that back Responses' built-in tools (web_search_preview, \
         code_interpreter, file_search, image_generation): {\"builtins\": [{\"type\", \"url\", \
         \"tool\", \"label\"?, \"authorization\"?, \"headers\"?}]}; read at startup",
        |c, v| {
            c.pipeline.mcp_config_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "upstream-ca-cert-path",
        "PATH",
        "none (the platform's roots)",
        Group::Workers,
        "PEM bundle of CA certificates trusted for https:// workers and providers besides the \
         platform's roots (private CAs); read at startup. Certificate and host-name checks are \
         always on",
        |c, v| {
            c.pipeline.upstream_ca_cert_path = Some(file_path(v)?);
            Ok(())
        },
    ),
    Flag::switch(
        "pd-disaggregation",
        Group::Workers,
        "Prefill/decode disaggregated fleet (--prefill, --decode): each inference request \
         goes to a prefill and a decode worker (docs/pd.md)",
        |c| c.fleet.pd_disaggregation = true,
    ),
    Flag::many(
        "prefill",
        "URL [BOOTSTRAP_PORT]",
        "none",
        Group::Workers,
        "Prefill worker registered at startup, with its optional KV bootstrap port; \
         repeatable; needs --pd-disaggregation",
        |c, values| {
            let (url, port) = match values {
                [url] => (url, None),
                [url, port] if port == "none" => (url, None),
                [url, port] => (url, Some(self::port(port, false)?)),
                _ => {
                    return Err(Invalid::new(
                        &values.join(" "),
                        "expected a URL and at most one bootstrap port",
                    ))
                }
            };
            c.control.prefill_workers.push(PrefillWorker {
                url: worker_url(url, false)?,
                bootstrap_port: port,
            });
            Ok(())
        },
    ),
    Flag::many(
        "decode",
        "URL",
        "none",
        Group::Workers,
        "Decode workers registered at startup; repeatable; needs --pd-disaggregation",
        |c, values| {
            for v in values {
                c.control.decode_workers.push(worker_url(v, false)?);
            }
            Ok(())
        },
    ),
    Flag::switch(
        "upstream-http2",
        Group::Workers,
        "Speak HTTP/2 (h2c prior knowledge on http://) to workers that answer it and do not \
         set http_pool.http2; others get HTTP/1.1",
        |c| c.fleet.upstream_http2 = true,
    ),
    Flag::one(
        "health-check-timeout-secs",
        "SECS",
        "5",
        Group::Workers,
        "Timeout of one health probe (also of registration probes)",
        |c, v| {
            c.fleet.health.timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "health-check-interval-secs",
        "SECS",
        "60",
        Group::Workers,
        "Time between health probes of a worker",
        |c, v| {
            c.fleet.health.check_interval = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "health-success-threshold",
        "N",
        "2",
        Group::Workers,
        "Consecutive successful probes that make a worker ready",
        |c, v| {
            c.fleet.health.success_threshold = integer(v, 1, 1000)? as u32;
            Ok(())
        },
    ),
    Flag::one(
        "health-failure-threshold",
        "N",
        "3",
        Group::Workers,
        "Consecutive failed probes that take a worker out of rotation",
        |c, v| {
            c.fleet.health.failure_threshold = integer(v, 1, 1000)? as u32;
            Ok(())
        },
    ),
    Flag::switch(
        "disable-health-check",
        Group::Workers,
        "Never probe workers; they are routable as soon as they are registered",
        |c| c.fleet.health.disabled = true,
    ),
    Flag::one(
        "drain-settle-secs",
        "SECS",
        "5",
        Group::Workers,
        "How long a removed ready worker drains before it goes (0: at once)",
        |c, v| {
            c.fleet.health.drain_settle = seconds(v, 0)?;
            Ok(())
        },
    ),
    Flag::one(
        "load-monitor-interval",
        "SECS",
        "10",
        Group::Workers,
        "Time between engine load polls of each ready worker (GET /loads, engine_load)",
        |c, v| {
            c.control.load_monitor_interval = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::switch(
        "disable-load-monitoring",
        Group::Workers,
        "Poll engine load only for worker groups whose policy needs it (power_of_two)",
        |c| c.control.disable_load_monitoring = true,
    ),
    Flag::one(
        "worker-startup-timeout-secs",
        "SECS",
        "1800",
        Group::Workers,
        "How long registration keeps probing a worker that does not answer",
        |c, v| {
            c.control.startup_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "worker-startup-check-interval",
        "SECS",
        "30",
        Group::Workers,
        "Time between registration probes of a worker that does not answer yet",
        |c, v| {
            c.control.startup_check_interval = seconds(v, 1)?;
            Ok(())
        },
    ),
    // Routing
    Flag::many(
        "model-alias",
        "ALIAS=MODEL",
        "none",
        Group::Routing,
        "Another name for a served model; requests naming ALIAS go to MODEL's workers",
        |c, values| {
            for v in values {
                c.fleet.model_aliases.push(model_alias(v)?);
            }
            Ok(())
        },
    ),
    Flag::switch(
        "enable-igw",
        Group::Routing,
        "Several models behind one gateway: each request goes to workers of its \"model\"",
        |c| c.fleet.enable_igw = true,
    ),
    Flag::switch(
        "dp-aware",
        Group::Routing,
        "Route to each data-parallel rank of an engine as its own worker (dp_size from \
         /server_info; the gateway sets data_parallel_rank in the body)",
        |c| c.fleet.dp_aware = true,
    ),
    Flag::one(
        "policy",
        "NAME",
        "round_robin",
        Group::Routing,
        "Routing policy: random, round_robin, power_of_two, cache_aware, prefix_hash, \
         consistent_hashing, manual, bucket",
        |c, v| {
            c.routing.policy = choice(v, PolicyName::ALL, PolicyName::as_str)?;
            Ok(())
        },
    ),
    Flag::one(
        "prefill-policy",
        "NAME",
        "none (follows --policy)",
        Group::Routing,
        "Policy among prefill workers (prefill/decode mode)",
        |c, v| {
            c.routing.prefill_policy = Some(choice(v, PolicyName::ALL, PolicyName::as_str)?);
            Ok(())
        },
    ),
    Flag::one(
        "decode-policy",
        "NAME",
        "none (follows --policy)",
        Group::Routing,
        "Policy among decode workers (prefill/decode mode)",
        |c, v| {
            c.routing.decode_policy = Some(choice(v, PolicyName::ALL, PolicyName::as_str)?);
            Ok(())
        },
    ),
    Flag::one(
        "cache-threshold",
        "RATIO",
        "0.3",
        Group::Routing,
        "cache_aware: smallest prefix match ratio (0-1) that routes to the matching worker",
        |c, v| {
            c.routing.params.cache_threshold = float(v, 0.0, 1.0)? as f32;
            Ok(())
        },
    ),
    Flag::one(
        "balance-abs-threshold",
        "N",
        "64",
        Group::Routing,
        "cache_aware: load difference (requests) above which the least loaded worker wins",
        |c, v| {
            c.routing.params.balance_abs_threshold = integer(v, 0, 1 << 32)? as usize;
            Ok(())
        },
    ),
    Flag::one(
        "balance-rel-threshold",
        "RATIO",
        "1.5",
        Group::Routing,
        "cache_aware: load ratio (max/min) that must also be passed to spill (>= 1)",
        |c, v| {
            c.routing.params.balance_rel_threshold = float(v, 1.0, 1e6)? as f32;
            Ok(())
        },
    ),
    Flag::one(
        "eviction-interval",
        "SECS",
        "120",
        Group::Routing,
        "cache_aware: seconds between trims of the prefix trees",
        |c, v| {
            c.routing.params.eviction_interval = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "max-tree-size",
        "CHARS",
        "67108864",
        Group::Routing,
        "cache_aware: characters each worker may hold in a prefix tree after a trim",
        |c, v| {
            c.routing.params.max_tree_size = integer(v, 1, 1 << 40)? as usize;
            Ok(())
        },
    ),
    Flag::one(
        "prefix-token-count",
        "N",
        "256",
        Group::Routing,
        "prefix_hash: leading tokens of the prompt that choose the worker",
        |c, v| {
            c.routing.params.prefix_token_count = integer(v, 1, 1 << 20)? as usize;
            Ok(())
        },
    ),
    Flag::many(
        "routing-key-headers",
        "NAME",
        "x-gw-routing-key",
        Group::Routing,
        "Headers whose value is the sticky routing key (manual, consistent_hashing), first \
         present wins",
        |c, values| {
            c.routing.routing_key_headers = values
                .iter()
                .map(|v| header_name(v))
                .collect::<Result<_, _>>()?;
            Ok(())
        },
    ),
    // Retries and circuit breakers
    Flag::one(
        "retry-max-retries",
        "N",
        "5",
        Group::Resilience,
        "Retries after the first attempt (408/429/5xx answers and failed exchanges, before \
         any response byte reaches the client)",
        |c, v| {
            c.resilience.retry.max_retries = integer(v, 0, 100)? as u32;
            Ok(())
        },
    ),
    Flag::one(
        "retry-initial-backoff-ms",
        "MS",
        "50",
        Group::Resilience,
        "Delay before the first retry",
        |c, v| {
            c.resilience.retry.initial_backoff = Duration::from_millis(integer(v, 0, MAX_SECS * 1000)?);
            Ok(())
        },
    ),
    Flag::one(
        "retry-max-backoff-ms",
        "MS",
        "30000",
        Group::Resilience,
        "Longest delay between retries",
        |c, v| {
            c.resilience.retry.max_backoff = Duration::from_millis(integer(v, 0, MAX_SECS * 1000)?);
            Ok(())
        },
    ),
    Flag::one(
        "retry-backoff-multiplier",
        "X",
        "1.5",
        Group::Resilience,
        "Growth of the delay from one retry to the next (>= 1)",
        |c, v| {
            c.resilience.retry.multiplier = float(v, 1.0, 100.0)?;
            Ok(())
        },
    ),
    Flag::one(
        "retry-jitter-factor",
        "F",
        "0.2",
        Group::Resilience,
        "Fraction of each delay added or removed at random (0-1)",
        |c, v| {
            c.resilience.retry.jitter = float(v, 0.0, 1.0)?;
            Ok(())
        },
    ),
    Flag::switch(
        "disable-retries",
        Group::Resilience,
        "Send every request once; bodies stream through unbuffered",
        |c| c.resilience.disable_retries = true,
    ),
    Flag::one(
        "max-buffered-request-bytes",
        "BYTES",
        "16MiB",
        Group::Resilience,
        "Largest request body kept for replay on retry; larger bodies stream and are not \
         retried",
        |c, v| {
            c.pipeline.max_buffered_request_bytes = byte_size(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "max-buffered-request-total-bytes",
        "BYTES",
        "1GiB",
        Group::Resilience,
        "Request-body bytes the gateway holds for all requests at once; past it a body that \
         could stream does (not retried) and one that routing must read whole gets 503 \
         request_buffer_budget_full",
        |c, v| {
            c.admission.max_buffered_request_total_bytes = byte_size(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "cb-failure-threshold",
        "N",
        "10",
        Group::Resilience,
        "Consecutive counted failures that open a worker's circuit breaker",
        |c, v| {
            c.resilience.breaker.failure_threshold = integer(v, 1, u64::from(u32::MAX))? as u32;
            Ok(())
        },
    ),
    Flag::one(
        "cb-success-threshold",
        "N",
        "3",
        Group::Resilience,
        "Successes in half-open state that close the breaker",
        |c, v| {
            c.resilience.breaker.success_threshold = integer(v, 1, u64::from(u32::MAX))? as u32;
            Ok(())
        },
    ),
    Flag::one(
        "cb-timeout-duration-secs",
        "SECS",
        "60",
        Group::Resilience,
        "Time an open breaker waits before letting trial requests through (half-open)",
        |c, v| {
            c.resilience.breaker.open_for = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "cb-window-duration-secs",
        "SECS",
        "120",
        Group::Resilience,
        "Accepted for compatibility and unused: the breaker counts consecutive failures",
        |c, v| {
            c.resilience.breaker.window = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::switch(
        "disable-circuit-breaker",
        Group::Resilience,
        "Workers' circuit breakers never open",
        |c| c.resilience.breaker.disabled = true,
    ),
    // Admission control and overload protection
    Flag::one(
        "max-concurrent-requests",
        "N",
        "none",
        Group::Admission,
        "Inference requests in flight at once (each holds a token until its response ends, streams included); others queue; 0: no limit",
        |c, v| {
            let n = integer(v, 0, u64::from(u32::MAX))?;
            c.admission.max_concurrent = (n > 0).then_some(n as usize);
            Ok(())
        },
    ),
    Flag::one(
        "queue-size",
        "N",
        "100",
        Group::Admission,
        "Requests that may wait for admission (FIFO); full: 429 admission_queue_full; 0: no queue, 429 at once",
        |c, v| {
            c.admission.queue_size = integer(v, 0, 1_000_000)? as usize;
            Ok(())
        },
    ),
    Flag::one(
        "queue-timeout-secs",
        "SECS",
        "60",
        Group::Admission,
        "Longest wait for admission before 503 admission_queue_timeout (also the media budget's wait)",
        |c, v| {
            c.admission.queue_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "pd-admission-wait-secs",
        "SECS",
        "30",
        Group::Admission,
        "Longest wait of a prefill/decode dispatch to gRPC engines for room on its decode \
         worker (the worker's max_running_requests, else 256 at once) before 503 \
         worker_overload_protection_shed",
        |c, v| {
            c.admission.pd_admission_wait = seconds(v, 0)?;
            Ok(())
        },
    ),
    Flag::one(
        "rate-limit-tokens-per-second",
        "RATE",
        "none",
        Group::Admission,
        "Inference requests admitted per second on average (burst: one second's worth); excess waits in the queue",
        |c, v| {
            let rate = float(v, 0.0, 1e9)?;
            if rate <= 0.0 {
                return Err(Invalid::new(v, "expected a number above 0"));
            }
            c.admission.rate_per_second = Some(rate);
            Ok(())
        },
    ),
    Flag::one(
        "multimodal-max-inflight-bytes",
        "BYTES",
        "none",
        Group::Admission,
        "Body bytes of media-carrying requests in flight; larger request: 413, budget full: wait, then 429",
        |c, v| {
            c.admission.multimodal_max_inflight_bytes = Some(byte_size(v)?);
            Ok(())
        },
    ),
    Flag::switch(
        "worker-overload-protection",
        Group::Admission,
        "Take workers out of routing while their engine reports overload (KV usage 0.9 unless set)",
        |c| c.fleet.overload.protection = true,
    ),
    Flag::one(
        "worker-overload-waiting-requests",
        "N",
        "none",
        Group::Admission,
        "Waiting requests (summed over DP ranks) at or above which a worker is overloaded; turns protection on",
        |c, v| {
            c.fleet.overload.waiting_requests = Some(integer(v, 1, u64::from(u32::MAX))?);
            Ok(())
        },
    ),
    Flag::one(
        "worker-overload-token-usage",
        "RATIO",
        "none (0.9 under --worker-overload-protection)",
        Group::Admission,
        "Mean KV usage in (0, 1] at or above which a worker is overloaded; turns protection on",
        |c, v| {
            let usage = float(v, 0.0, 1.0)?;
            if usage <= 0.0 {
                return Err(Invalid::new(v, "expected a number in (0, 1]"));
            }
            c.fleet.overload.token_usage = Some(usage);
            Ok(())
        },
    ),
    // Runtime
    Flag::one(
        "runtime-worker-threads",
        "N",
        "number of CPUs",
        Group::Runtime,
        "Data-plane threads, each with its own runtime and listener socket",
        |c, v| {
            c.runtime.worker_threads = integer(v, 1, MAX_THREADS)? as usize;
            Ok(())
        },
    ),
    Flag::one(
        "io-engine",
        "ENGINE",
        "auto",
        Group::Runtime,
        "I/O engine: auto (epoll, the faster here; logs whether io_uring is available), uring, epoll",
        |c, v| {
            c.runtime.io_engine = choice(v, IoEngine::ALL, IoEngine::as_str)?;
            Ok(())
        },
    ),
    // Limits and timeouts
    Flag::one(
        "request-timeout-secs",
        "SECS",
        "1800",
        Group::LimitsAndTimeouts,
        "Default timeout of a request to a worker",
        |c, v| {
            c.pipeline.request_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "max-payload-size",
        "BYTES",
        "512MiB",
        Group::LimitsAndTimeouts,
        "Largest accepted request body; plain bytes or a K/M/G, KiB/MiB/GiB suffix",
        |c, v| {
            c.pipeline.max_payload_size = byte_size(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "request-body-timeout-secs",
        "SECS",
        "120",
        Group::LimitsAndTimeouts,
        "Time a client has to send its whole request body, read before dispatch or \
         streamed to a worker (408 request_timeout); a body the gateway reads holds no \
         admission token meanwhile. Raise it for large uploads over slow links",
        |c, v| {
            c.pipeline.request_body_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "request-body-idle-timeout-secs",
        "SECS",
        "30",
        Group::LimitsAndTimeouts,
        "Longest silence inside a request body, read or streamed to a worker (408 \
         request_timeout)",
        |c, v| {
            c.pipeline.request_body_idle_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "shutdown-grace-period-secs",
        "SECS",
        "180",
        Group::LimitsAndTimeouts,
        "Time in-flight requests get to finish on shutdown",
        |c, v| {
            c.runtime.shutdown_grace_period = seconds(v, 0)?;
            Ok(())
        },
    ),
    Flag::one(
        "upstream-pool-idle-timeout-secs",
        "SECS",
        "3",
        Group::LimitsAndTimeouts,
        "Idle time after which upstream connections are closed (0 keeps them forever)",
        |c, v| {
            let idle = seconds(v, 0)?;
            c.pipeline.upstream_pool_idle_timeout = (!idle.is_zero()).then_some(idle);
            Ok(())
        },
    ),
    Flag::one(
        "stream-stall-timeout-secs",
        "SECS",
        "300",
        Group::LimitsAndTimeouts,
        "A relayed response whose worker sends nothing for this long in the middle of it fails; an SSE stream then ends with an error event in the route's dialect (0: no stall limit)",
        |c, v| {
            let stall = seconds(v, 0)?;
            c.pipeline.stream_stall_timeout = (!stall.is_zero()).then_some(stall);
            Ok(())
        },
    ),
    Flag::one(
        "mcp-loop-timeout-secs",
        "SECS",
        "300",
        Group::LimitsAndTimeouts,
        "Longest time one request's MCP tool loop spends on MCP calls, all of them together (Responses mcp tools, the provider backend's loop); past it a call fails at once, the model sees the error as the tool's result, and the loop ends by its round and call limits",
        |c, v| {
            c.pipeline.mcp_loop_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::switch(
        "mcp-allow-private-addresses",
        Group::LimitsAndTimeouts,
        "Let MCP servers that a request names (Responses mcp tools' server_url, Messages mcp_servers) be on loopback, link-local or private addresses; without it they are refused (servers from --mcp-config-path are the operator's and always allowed)",
        |c| c.pipeline.mcp_allow_private = true,
    ),
    Flag::one(
        "mcp-call-timeout-secs",
        "SECS",
        "60",
        Group::LimitsAndTimeouts,
        "Longest wait for one call to an MCP server in the provider backend's tool loop (connecting, listing tools, or running one); a tool that takes longer is an error result the model sees",
        |c, v| {
            c.pipeline.mcp_call_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "header-read-timeout-secs",
        "SECS",
        "30",
        Group::LimitsAndTimeouts,
        "Time a client has to send its request head, counted from accept for the first request and from its first byte for later ones, else the connection is closed",
        |c, v| {
            c.server.header_read_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "keep-alive-timeout-secs",
        "SECS",
        "75",
        Group::LimitsAndTimeouts,
        "Idle keep-alive client connections are closed after this long without a request; the header read timeout starts only once a request's first byte arrives",
        |c, v| {
            c.server.keep_alive_timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "max-connections",
        "N",
        "none (from the open-file limit: (limit - 128) / 2)",
        Group::LimitsAndTimeouts,
        "Client connections open at once over all threads; a connection beyond it is answered 503 (Retry-After: 1, Connection: close) and closed. At startup the soft open-file limit is raised to the hard one; the default leaves half of the descriptors, and 128 more, for upstream connections and the metrics and health listeners",
        |c, v| {
            c.server.max_connections = Some(integer(v, 1, u64::from(u32::MAX))? as usize);
            Ok(())
        },
    ),
    // Logging
    Flag::one(
        "log-level",
        "LEVEL",
        "info",
        Group::Logging,
        "Minimum log level: trace, debug, info, warn, error",
        |c, v| {
            c.log.level = choice(v, LogLevel::ALL, LogLevel::as_str)?;
            Ok(())
        },
    ),
    Flag::switch(
        "log-json",
        Group::Logging,
        "Write log records as JSON objects",
        |c| c.log.json = true,
    ),
    Flag::one(
        "log-dir",
        "DIR",
        "none",
        Group::Logging,
        "Write logs to daily-rotated files in this directory instead of stderr",
        |c, v| {
            if v.is_empty() {
                return Err(Invalid::new(v, "expected a directory path"));
            }
            c.log.dir = Some(PathBuf::from(v));
            Ok(())
        },
    ),
    // Authentication
    Flag::one(
        "api-key",
        "KEY",
        "none",
        Group::Authentication,
        "Data-plane bearer key; also the key sent to workers from --worker-urls",
        |c, v| {
            if v.is_empty() {
                return Err(Invalid::new(v, "expected a non-empty key"));
            }
            c.auth.api_key = Some(Secret::new(v));
            Ok(())
        },
    )
    .secret(),
    Flag::one(
        "tenant-api-key",
        "TENANT:KEY",
        "none",
        Group::Authentication,
        "Data-plane key of one tenant (identity auth:<TENANT>); repeatable",
        |c, v| {
            let key = TenantKey::parse(v).map_err(|e| Invalid::new(v, e))?;
            c.auth.tenant_api_keys.push(key);
            Ok(())
        },
    )
    .secret(),
    Flag::many(
        "control-plane-api-keys",
        "ID:NAME:ROLE:KEY",
        "none (env CONTROL_PLANE_API_KEYS: one key)",
        Group::Authentication,
        "Control-plane keys, ROLE admin or user; only admin may use the control plane",
        |c, values| {
            for v in values {
                let key = ControlPlaneKey::parse(v).map_err(|e| Invalid::new(v, e))?;
                c.auth.control_plane_api_keys.push(key);
            }
            Ok(())
        },
    )
    .secret(),
    Flag::one(
        "jwt-issuer",
        "URL",
        "none (env JWT_ISSUER)",
        Group::Authentication,
        "OIDC issuer of control-plane JWTs; needs --jwt-audience",
        |c, v| {
            c.auth.jwt_issuer = Some(http_url(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "jwt-audience",
        "AUD",
        "none (env JWT_AUDIENCE)",
        Group::Authentication,
        "Audience control-plane JWTs must carry; needs --jwt-issuer",
        |c, v| {
            if v.is_empty() {
                return Err(Invalid::new(v, "expected a non-empty audience"));
            }
            c.auth.jwt_audience = Some(v.to_owned());
            Ok(())
        },
    ),
    Flag::one(
        "jwt-jwks-uri",
        "URL",
        "none: discovered (env JWT_JWKS_URI)",
        Group::Authentication,
        "Key set of the issuer; otherwise read from its OIDC discovery document",
        |c, v| {
            c.auth.jwt_jwks_uri = Some(http_url(v)?);
            Ok(())
        },
    ),
    Flag::one(
        "jwt-role-claim",
        "CLAIM",
        "roles",
        Group::Authentication,
        "JWT claim holding the caller's roles",
        |c, v| {
            if v.is_empty() {
                return Err(Invalid::new(v, "expected a claim name"));
            }
            c.auth.jwt_role_claim = v.to_owned();
            Ok(())
        },
    ),
    Flag::many(
        "jwt-role-mapping",
        "IDP_ROLE=ROLE",
        "none",
        Group::Authentication,
        "Maps an IdP role to admin or user; first mapped value wins; repeatable",
        |c, values| {
            for v in values {
                c.auth.jwt_role_mapping.push(role_mapping(v)?);
            }
            Ok(())
        },
    ),
    Flag::switch(
        "disable-audit-logging",
        Group::Authentication,
        "No control-plane audit records (target smg::audit)",
        |c| c.auth.disable_audit_logging = true,
    ),
    // Metrics
    Flag::one(
        "prometheus-host",
        "ADDR",
        "0.0.0.0",
        Group::Metrics,
        "IP address the metrics listener (GET /metrics) binds",
        |c, v| {
            c.metrics.host = ip_addr(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "prometheus-port",
        "PORT",
        "29000",
        Group::Metrics,
        "Port of the metrics listener (must be > 0)",
        |c, v| {
            c.metrics.port = port(v, false)?;
            Ok(())
        },
    ),
    Flag::one(
        "health-check-port",
        "PORT",
        "none (off)",
        Group::Metrics,
        "Port of an extra listener on --host that answers only GET /health, /liveness and /readiness, like the main listener, without recording them in the gw_http_* metrics",
        |c, v| {
            c.server.health_check_port = Some(port(v, false)?);
            Ok(())
        },
    ),
    Flag::many(
        "prometheus-duration-buckets",
        "SECS",
        "none (29 buckets from 0.001 to 7200)",
        Group::Metrics,
        "Bucket bounds of the latency histograms, ascending",
        |c, values| {
            let mut buckets = Vec::with_capacity(values.len());
            for v in values {
                let bound = float(v, 0.0, 1e9)?;
                if buckets.last().is_some_and(|prev| *prev >= bound) {
                    return Err(Invalid::new(v, "expected bounds in ascending order"));
                }
                buckets.push(bound);
            }
            c.metrics.duration_buckets = buckets;
            Ok(())
        },
    ),
    // History store
    Flag::one(
        "history-backend",
        "BACKEND",
        "memory",
        Group::History,
        "Where stored responses and conversations live: memory (this process, bounded), none (nothing kept), postgres (--postgres-db-url), redis (--redis-url); postgres and redis are shared by every replica using them",
        |c, v| {
            c.history.backend = choice(v, HistoryBackend::ALL, HistoryBackend::as_str)?;
            Ok(())
        },
    ),
    Flag::one(
        "postgres-db-url",
        "URL",
        "none",
        Group::History,
        "Database of --history-backend postgres: postgres://user:password@host:port/dbname; the gateway creates and migrates its tables",
        |c, v| {
            crate::history::postgres::check_url(v).map_err(|e| Invalid::new(v, e))?;
            c.history.postgres_url = Some(Secret::new(v));
            Ok(())
        },
    )
    .secret(),
    Flag::one(
        "redis-url",
        "URL",
        "none",
        Group::History,
        "Server of --history-backend redis: redis://[user:password@]host:port[/db]",
        |c, v| {
            crate::history::redis::check_url(v).map_err(|e| Invalid::new(v, e))?;
            c.history.redis_url = Some(Secret::new(v));
            Ok(())
        },
    )
    .secret(),
    Flag::one(
        "history-pool-size",
        "N",
        "8",
        Group::History,
        "Connections a postgres or redis history store keeps open at most",
        |c, v| {
            c.history.pool_size = usize::try_from(integer(v, 1, 1024)?)
                .map_err(|_| Invalid::new(v, "expected an integer 1-1024"))?;
            Ok(())
        },
    ),
    Flag::one(
        "history-timeout-secs",
        "SECS",
        "5",
        Group::History,
        "Longest a history store call may take (pool wait, connect, query) before it fails with a storage error",
        |c, v| {
            c.history.timeout = seconds(v, 1)?;
            Ok(())
        },
    ),
    Flag::one(
        "history-memory-max-responses",
        "N",
        "10000",
        Group::History,
        "Stored responses the memory history store keeps at most",
        |c, v| {
            c.history.memory_max_responses = count(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "history-memory-max-conversations",
        "N",
        "10000",
        Group::History,
        "Conversations the memory history store keeps at most",
        |c, v| {
            c.history.memory_max_conversations = count(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "history-memory-max-bytes",
        "BYTES",
        "512MiB",
        Group::History,
        "Bytes the memory history store keeps at most, all tenants together; a write past it \
         evicts the writer's own oldest history, never another tenant's (K/M/G, KiB/MiB/GiB)",
        |c, v| {
            c.history.memory_max_bytes = memory_bytes(v)?;
            Ok(())
        },
    ),
    Flag::one(
        "history-memory-max-bytes-per-tenant",
        "BYTES",
        "128MiB",
        Group::History,
        "Bytes the memory history store keeps at most for one tenant (the callers without a \
         tenant key count as one); past it the tenant's oldest history is evicted",
        |c, v| {
            c.history.memory_max_bytes_per_tenant = memory_bytes(v)?;
            Ok(())
        },
    ),
];

/// The row for `--name`, if any.
pub fn lookup(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|flag| flag.name == name)
}

// ---------------------------------------------------------------------------------------
// Value parsers shared by the setters. Each returns `Invalid` with an "expected ..." text.

/// Upper bound of `--runtime-worker-threads`.
pub const MAX_THREADS: u64 = 4096;

/// Upper bound of every `*-secs` flag: one year keeps `Instant` arithmetic far from overflow.
pub const MAX_SECS: u64 = 365 * 24 * 60 * 60;

/// An absolute `http://` or `https://` URL with a host (the stricter IdP rules are applied
/// when JWT authentication starts).
pub fn http_url(v: &str) -> Result<String, Invalid> {
    const EXPECTED: &str = "expected an absolute http:// or https:// URL";
    let uri: http::Uri = v.parse().map_err(|_| Invalid::new(v, EXPECTED))?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http") | Some("https"));
    if !scheme_ok || uri.host().is_none_or(str::is_empty) {
        return Err(Invalid::new(v, EXPECTED));
    }
    Ok(v.to_owned())
}

/// `alias=canonical`, both non-empty and different.
pub fn model_alias(v: &str) -> Result<(String, String), Invalid> {
    const EXPECTED: &str = "expected alias=model with two different non-empty names";
    match v.split_once('=') {
        Some((alias, model)) if !alias.is_empty() && !model.is_empty() && alias != model => {
            Ok((alias.to_owned(), model.to_owned()))
        }
        _ => Err(Invalid::new(v, EXPECTED)),
    }
}

/// `idp_role=gateway_role`, gateway role `admin` or `user`.
pub fn role_mapping(v: &str) -> Result<(String, Role), Invalid> {
    const EXPECTED: &str = "expected idp_role=admin or idp_role=user";
    let (idp, role) = v.split_once('=').ok_or_else(|| Invalid::new(v, EXPECTED))?;
    let role = Role::parse(role).ok_or_else(|| Invalid::new(v, EXPECTED))?;
    if idp.is_empty() {
        return Err(Invalid::new(v, EXPECTED));
    }
    Ok((idp.to_owned(), role))
}

pub fn ip_addr(v: &str) -> Result<IpAddr, Invalid> {
    v.parse()
        .map_err(|_| Invalid::new(v, "expected an IP address such as 0.0.0.0 or ::1"))
}

/// A file path (not empty; whether it can be read is checked when it is used).
pub fn file_path(v: &str) -> Result<PathBuf, Invalid> {
    if v.is_empty() {
        return Err(Invalid::new(v, "expected a file path"));
    }
    Ok(v.into())
}

/// A port number; `allow_zero` for listeners where 0 means "pick a free port".
pub fn port(v: &str, allow_zero: bool) -> Result<u16, Invalid> {
    let expected = if allow_zero {
        "expected an integer 0-65535"
    } else {
        "expected an integer 1-65535"
    };
    let n: u16 = v.parse().map_err(|_| Invalid::new(v, expected))?;
    if n == 0 && !allow_zero {
        return Err(Invalid::new(v, "Port must be > 0"));
    }
    Ok(n)
}

/// A decimal integer in `min..=max`.
pub fn integer(v: &str, min: u64, max: u64) -> Result<u64, Invalid> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Invalid::new(v, format!("expected an integer {min}-{max}"))),
    }
}

/// Whole seconds, at least `min`, at most [`MAX_SECS`].
pub fn seconds(v: &str, min: u64) -> Result<Duration, Invalid> {
    match v.parse::<u64>() {
        Ok(n) if (min..=MAX_SECS).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(Invalid::new(
            v,
            format!("expected whole seconds {min}-{MAX_SECS}"),
        )),
    }
}

/// An HTTP header name, stored lowercase.
pub fn header_name(v: &str) -> Result<String, Invalid> {
    let valid = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if valid {
        Ok(v.to_ascii_lowercase())
    } else {
        Err(Invalid::new(v, "expected an HTTP header name"))
    }
}

/// A count of records a memory bound allows: 1 to 100 million.
fn count(v: &str) -> Result<usize, Invalid> {
    usize::try_from(integer(v, 1, 100_000_000)?)
        .map_err(|_| Invalid::new(v, "expected an integer 1-100000000"))
}

/// A memory history store bound: a [`byte_size`] this machine can hold.
fn memory_bytes(v: &str) -> Result<usize, Invalid> {
    usize::try_from(byte_size(v)?)
        .map_err(|_| Invalid::new(v, "expected a byte count this machine can hold"))
}

/// A decimal number in `min..=max`.
pub fn float(v: &str, min: f64, max: f64) -> Result<f64, Invalid> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(x),
        _ => Err(Invalid::new(v, format!("expected a number {min}-{max}"))),
    }
}

/// One of a fixed set of names.
pub fn choice<T: Copy>(v: &str, all: &[T], name: fn(&T) -> &'static str) -> Result<T, Invalid> {
    if let Some(found) = all.iter().find(|item| name(item) == v) {
        return Ok(*found);
    }
    let names: Vec<&str> = all.iter().map(name).collect();
    Err(Invalid::new(
        v,
        format!("expected one of {}", names.join(", ")),
    ))
}

/// A tokenizer cache bound: a [`byte_size`], or 0 for a layer that is off.
fn cache_bytes(v: &str) -> Result<usize, Invalid> {
    if v.bytes().all(|b| b == b'0') && !v.is_empty() {
        return Ok(0);
    }
    let bytes = byte_size(v)?;
    usize::try_from(bytes)
        .map_err(|_| Invalid::new(v, "expected a byte count this machine can hold"))
}

/// A byte count: plain digits, or digits followed by `K`, `M`, `G` or `KiB`, `MiB`, `GiB`
/// (binary multiples, unit letters case-insensitive), optionally with a `B` for bytes.
/// At least 1.
pub fn byte_size(v: &str) -> Result<u64, Invalid> {
    let bad = || {
        Invalid::new(
            v,
            "expected a positive byte count, optionally with a K, M, G, KiB, MiB or GiB suffix",
        )
    };
    let digits_end = v.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, unit) = v.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    match n.checked_mul(multiplier) {
        Some(bytes) if bytes >= 1 => Ok(bytes),
        _ => Err(bad()),
    }
}

/// A worker URL (`http://`, `https://`, `grpc://`, `grpcs://`, and with `zmq` an `ipc://`
/// ZMQ worker, which can only be regular), checked by the same rules as a registration
/// through the API and returned in its normalised form, so that spellings of one worker
/// are recognised as one at startup.
pub fn worker_url(v: &str, zmq: bool) -> Result<String, Invalid> {
    // Userinfo may hold credentials: never echo it back.
    let shown = redact_userinfo(v);
    match parse_worker_url(v) {
        Ok(url) if !zmq && matches!(url.transport, Transport::Zmq { .. }) => Err(Invalid::new(
            &shown,
            "expected an http://, https:// or grpc:// URL (ipc:// ZMQ workers are regular \
             workers only: --worker-urls)",
        )),
        Ok(url) => Ok(url.normalized),
        Err(err) => Err(Invalid::new(&shown, err.to_string())),
    }
}

// ---------------------------------------------------------------------------------------
// --help

/// The full `--help` text: usage header, then every flag by group with its default.
/// No trailing newline.
pub fn render_help() -> String {
    const BUILTIN: &[(&str, &str)] = &[
        ("-h, --help", "Print this help and exit"),
        ("-V, --version", "Print the version and exit"),
    ];
    let width = FLAGS
        .iter()
        .map(|flag| flag.synopsis().len())
        .chain(BUILTIN.iter().map(|(synopsis, _)| synopsis.len()))
        .max()
        .unwrap_or(0);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "tollgate {} - inference gateway for LLM serving engines",
        env!("CARGO_PKG_VERSION")
    );
    out.push('\n');
    out.push_str("Usage: tollgate [FLAGS]\n");
    out.push('\n');
    out.push_str(
        "Values go after the flag (--port 8080) or after '=' (--port=8080); flags ending\n\
         in '...' take one or more values, up to the next flag.\n",
    );
    out.push('\n');
    for (synopsis, help) in BUILTIN {
        let _ = writeln!(out, "  {synopsis:<width$}  {help}");
    }
    for group in Group::ALL {
        let mut rows = FLAGS.iter().filter(|flag| flag.group == *group).peekable();
        if rows.peek().is_none() {
            continue;
        }
        out.push('\n');
        let _ = writeln!(out, "{}:", group.title());
        for flag in rows {
            let _ = writeln!(
                out,
                "  {:<width$}  {} [default: {}]",
                flag.synopsis(),
                flag.help,
                flag.default
            );
        }
    }
    // Callers print it with `println!`.
    if out.ends_with('\n') {
        out.pop();
    }
    out
}
