//! Command-line configuration: flags parsed with `lexopt` into one validated [`Config`].
//!
//! Every flag lives in one table ([`flags::FLAGS`]): its name, value name, the default shown
//! in `--help`, its help group, a one-line meaning, and the setter that validates the value
//! and stores it in [`Config`]. The parser's list of known flags and the `--help` text are
//! both read from that table, so they cannot drift apart.
//!
//! Adding a flag means: one field in [`Config`] (with its default in `Config::default`) and
//! one row in [`flags::FLAGS`] whose setter fills that field.

pub mod flags;

use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use lexopt::Arg;

use flags::{Flag, Invalid, Kind};

pub use crate::admission::AdmissionConfig;
use crate::auth::keys::{ControlPlaneKey, TenantKey};
use crate::auth::Role;
use crate::resilience::RetryConfig;
use crate::secret::Secret;
pub use crate::workers::overload::OverloadDefaults;

/// What the command line asks the binary to do.
#[derive(Debug)]
pub enum Command {
    /// Start the gateway with this configuration.
    Run(Box<Config>),
    /// Print this text (the `--help` output) to stdout and exit 0.
    Help(String),
    /// Print this text (`tollgate <version>`) to stdout and exit 0.
    Version(String),
}

/// Which I/O engine the per-core runtimes use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoEngine {
    /// Probe io_uring once at startup; fall back to epoll when it is unavailable.
    Auto,
    /// Require io_uring.
    Uring,
    /// Plain tokio (epoll).
    Epoll,
}

impl IoEngine {
    pub const ALL: &'static [IoEngine] = &[IoEngine::Auto, IoEngine::Uring, IoEngine::Epoll];

    pub fn as_str(&self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "uring",
            IoEngine::Epoll => "epoll",
        }
    }
}

impl fmt::Display for IoEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Routing policy names, spelled as the spec and the `policy` metric label spell them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyName {
    Random,
    RoundRobin,
    PowerOfTwo,
    CacheAware,
    PrefixHash,
    ConsistentHashing,
    Manual,
    Bucket,
}

impl PolicyName {
    pub const ALL: &'static [PolicyName] = &[
        PolicyName::Random,
        PolicyName::RoundRobin,
        PolicyName::PowerOfTwo,
        PolicyName::CacheAware,
        PolicyName::PrefixHash,
        PolicyName::ConsistentHashing,
        PolicyName::Manual,
        PolicyName::Bucket,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyName::Random => "random",
            PolicyName::RoundRobin => "round_robin",
            PolicyName::PowerOfTwo => "power_of_two",
            PolicyName::CacheAware => "cache_aware",
            PolicyName::PrefixHash => "prefix_hash",
            PolicyName::ConsistentHashing => "consistent_hashing",
            PolicyName::Manual => "manual",
            PolicyName::Bucket => "bucket",
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Minimum level of log records that are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub const ALL: &'static [LogLevel] = &[
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gateway-wide circuit-breaker settings; a worker's `resilience` block overrides them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerDefaults {
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub open_for: Duration,
    /// Accepted and unused: the breaker counts consecutive failures, not a window.
    pub window: Duration,
    pub disabled: bool,
}

impl Default for BreakerDefaults {
    fn default() -> BreakerDefaults {
        BreakerDefaults {
            failure_threshold: 10,
            success_threshold: 3,
            open_for: Duration::from_secs(60),
            window: Duration::from_secs(120),
            disabled: false,
        }
    }
}

/// One `--prefill` occurrence: the worker's URL and, optionally, its KV bootstrap port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillWorker {
    pub url: String,
    pub bootstrap_port: Option<u16>,
}

/// The validated configuration of one gateway process.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--host`: address of the main listener.
    pub host: IpAddr,
    /// `--port`: port of the main listener; 0 asks the OS for a free port.
    pub port: u16,
    /// `--worker-urls`: workers registered at startup (`http://` or `https://`, with a host).
    pub worker_urls: Vec<String>,
    /// `--pd-disaggregation`: the fleet is prefill and decode workers.
    pub pd_disaggregation: bool,
    /// `--prefill URL [BOOTSTRAP_PORT]`: prefill workers registered at startup.
    pub prefill_workers: Vec<PrefillWorker>,
    /// `--decode URL`: decode workers registered at startup.
    pub decode_workers: Vec<String>,
    /// `--upstream-http2`: prefer HTTP/2 (h2c) towards workers that do not set `http2`.
    pub upstream_http2: bool,
    /// `--health-check-timeout-secs`: probe timeout, registration probes included.
    pub health_check_timeout: Duration,
    /// `--health-check-interval-secs`: time between probes of a worker.
    pub health_check_interval: Duration,
    /// `--health-success-threshold`: consecutive successes that make a worker ready.
    pub health_success_threshold: u32,
    /// `--health-failure-threshold`: consecutive failures that take it out of rotation.
    pub health_failure_threshold: u32,
    /// `--disable-health-check`: workers are routable on registration and never probed.
    pub disable_health_check: bool,
    /// `--drain-settle-secs`: how long a removed ready worker drains.
    pub drain_settle: Duration,
    /// `--load-monitor-interval`: time between engine load polls of a worker.
    pub load_monitor_interval: Duration,
    /// `--disable-load-monitoring`: poll engine load only for groups that need it.
    pub disable_load_monitoring: bool,
    /// `--worker-startup-timeout-secs`: how long registration waits for a worker to answer.
    pub worker_startup_timeout: Duration,
    /// `--worker-startup-check-interval`: time between registration probes.
    pub worker_startup_check_interval: Duration,
    /// `--model-alias alias=canonical`: extra names of served models.
    pub model_aliases: Vec<(String, String)>,
    /// `--enable-igw`: several models behind one gateway; requests go to workers of their
    /// `model`.
    pub enable_igw: bool,
    /// `--dp-aware`: each data-parallel rank of an engine is registered as its own routing
    /// target, and requests to a rank carry `data_parallel_rank` in their body.
    pub dp_aware: bool,
    /// `--policy`: routing policy.
    pub policy: PolicyName,
    /// `--prefill-policy`, `--decode-policy`: per-role policies; `None` follows `--policy`.
    pub prefill_policy: Option<PolicyName>,
    pub decode_policy: Option<PolicyName>,
    /// `--cache-threshold`: cache_aware smallest match ratio that routes by prefix.
    pub cache_threshold: f64,
    /// `--balance-abs-threshold`: cache_aware load difference that triggers a spill.
    pub balance_abs_threshold: usize,
    /// `--balance-rel-threshold`: cache_aware load ratio that must also be passed.
    pub balance_rel_threshold: f64,
    /// `--eviction-interval`: time between prefix-tree trims.
    pub eviction_interval: Duration,
    /// `--max-tree-size`: characters per worker kept after a trim.
    pub max_tree_size: usize,
    /// `--prefix-token-count`: prompt tokens hashed by prefix_hash.
    pub prefix_token_count: usize,
    /// `--routing-key-headers`: lowercase header names carrying the routing key.
    pub routing_key_headers: Vec<String>,
    /// `--retry-*`: retry count and backoff.
    pub retry: RetryConfig,
    /// `--disable-retries`: every request is sent once.
    pub disable_retries: bool,
    /// `--max-buffered-request-bytes`: largest body kept for replay.
    pub max_buffered_request_bytes: u64,
    /// `--cb-*`, `--disable-circuit-breaker`: gateway defaults of workers' breakers.
    pub breaker: BreakerDefaults,
    /// `--max-concurrent-requests`, `--queue-*`, `--rate-limit-tokens-per-second`,
    /// `--multimodal-max-inflight-bytes`: admission control.
    pub admission: AdmissionConfig,
    /// `--worker-overload-*`: overload protection defaults of workers.
    pub overload: OverloadDefaults,
    /// `--runtime-worker-threads`: data-plane threads, one runtime each (>= 1).
    pub runtime_worker_threads: usize,
    /// `--io-engine`: io_uring, epoll, or probe.
    pub io_engine: IoEngine,
    /// `--request-timeout-secs`: default timeout of a request to a worker.
    pub request_timeout: Duration,
    /// `--max-payload-size`: largest accepted request body, in bytes (>= 1).
    pub max_payload_size: u64,
    /// `--request-body-timeout-secs`: time a client has to send the part of its body the
    /// gateway reads before dispatch.
    pub request_body_timeout: Duration,
    /// `--request-body-idle-timeout-secs`: longest silence inside a request body, read or
    /// streamed.
    pub request_body_idle_timeout: Duration,
    /// `--shutdown-grace-period-secs`: how long in-flight requests may finish on shutdown.
    pub shutdown_grace_period: Duration,
    /// `--upstream-pool-idle-timeout-secs`: idle keep time of upstream connections;
    /// `None` (flag value 0) keeps them forever.
    pub upstream_pool_idle_timeout: Option<Duration>,
    /// `--header-read-timeout-secs`: time a client has to send the request head.
    pub header_read_timeout: Duration,
    /// `--keep-alive-timeout-secs`: idle keep-alive client connections are closed after this.
    pub keep_alive_timeout: Duration,
    /// `--max-connections`: client connections open at once over all data-plane threads;
    /// `None` derives it from the open-file limit at startup
    /// ([`crate::server::limit::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// `--health-check-port`: port of the probe-only listener on `--host`; `None`: off.
    pub health_check_port: Option<u16>,
    /// `--log-level`.
    pub log_level: LogLevel,
    /// `--log-json`: one JSON object per log record.
    pub log_json: bool,
    /// `--log-dir`: also write logs to files in this directory.
    pub log_dir: Option<PathBuf>,
    /// `--api-key`: data-plane shared key, and the key of workers from `--worker-urls`.
    pub api_key: Option<Secret>,
    /// `--tenant-api-key`: data-plane keys that resolve to a tenant identity.
    pub tenant_api_keys: Vec<TenantKey>,
    /// `--control-plane-api-keys` (or `CONTROL_PLANE_API_KEYS`): control-plane keys.
    pub control_plane_api_keys: Vec<ControlPlaneKey>,
    /// `--jwt-issuer` (or `JWT_ISSUER`): OIDC issuer of control-plane JWTs.
    pub jwt_issuer: Option<String>,
    /// `--jwt-audience` (or `JWT_AUDIENCE`): expected `aud` of control-plane JWTs.
    pub jwt_audience: Option<String>,
    /// `--jwt-jwks-uri` (or `JWT_JWKS_URI`): key set URI; discovered from the issuer if unset.
    pub jwt_jwks_uri: Option<String>,
    /// `--jwt-role-claim`: the claim that holds roles.
    pub jwt_role_claim: String,
    /// `--jwt-role-mapping`: IdP role to gateway role, first match wins.
    pub jwt_role_mapping: Vec<(String, Role)>,
    /// `--disable-audit-logging`: no control-plane audit records.
    pub disable_audit_logging: bool,
    /// `--prometheus-host`: address of the metrics listener.
    pub prometheus_host: IpAddr,
    /// `--prometheus-port`: port of the metrics listener (> 0).
    pub prometheus_port: u16,
    /// `--prometheus-duration-buckets`: latency histogram bounds, ascending.
    pub prometheus_duration_buckets: Vec<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 30000,
            worker_urls: Vec::new(),
            pd_disaggregation: false,
            prefill_workers: Vec::new(),
            decode_workers: Vec::new(),
            upstream_http2: false,
            health_check_timeout: Duration::from_secs(5),
            health_check_interval: Duration::from_secs(60),
            health_success_threshold: 2,
            health_failure_threshold: 3,
            disable_health_check: false,
            drain_settle: Duration::from_secs(5),
            load_monitor_interval: Duration::from_secs(10),
            disable_load_monitoring: false,
            worker_startup_timeout: Duration::from_secs(1800),
            worker_startup_check_interval: Duration::from_secs(30),
            model_aliases: Vec::new(),
            enable_igw: false,
            dp_aware: false,
            policy: PolicyName::RoundRobin,
            prefill_policy: None,
            decode_policy: None,
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval: Duration::from_secs(120),
            max_tree_size: 67_108_864,
            prefix_token_count: 256,
            routing_key_headers: vec!["x-gw-routing-key".to_owned()],
            retry: RetryConfig::default(),
            disable_retries: false,
            max_buffered_request_bytes: 16 * 1024 * 1024,
            breaker: BreakerDefaults::default(),
            admission: AdmissionConfig::default(),
            overload: OverloadDefaults::default(),
            runtime_worker_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            io_engine: IoEngine::Auto,
            request_timeout: Duration::from_secs(1800),
            max_payload_size: 512 * 1024 * 1024,
            request_body_timeout: Duration::from_secs(120),
            request_body_idle_timeout: Duration::from_secs(30),
            shutdown_grace_period: Duration::from_secs(180),
            upstream_pool_idle_timeout: Some(Duration::from_secs(3)),
            header_read_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(75),
            max_connections: None,
            health_check_port: None,
            log_level: LogLevel::Info,
            log_json: false,
            log_dir: None,
            api_key: None,
            tenant_api_keys: Vec::new(),
            control_plane_api_keys: Vec::new(),
            jwt_issuer: None,
            jwt_audience: None,
            jwt_jwks_uri: None,
            jwt_role_claim: "roles".to_owned(),
            jwt_role_mapping: Vec::new(),
            disable_audit_logging: false,
            prometheus_host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            prometheus_port: 29000,
            prometheus_duration_buckets: crate::metrics::DURATION_BUCKETS.to_vec(),
        }
    }
}

/// Why the command line was refused. `Display` is one line naming the flag and what was
/// expected; secret values are never part of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    kind: ErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ErrorKind {
    /// `--foo` or `-x` is not a known flag (stored with its dashes).
    UnknownFlag(String),
    /// A valued flag came last, or was followed by something that looks like a flag.
    MissingValue(String),
    /// A switch was given a value (`--log-json=yes`).
    SwitchWithValue(String),
    /// A positional argument (already escaped and shortened for display).
    UnexpectedArgument(String),
    /// The value did not validate. `value` is `None` for secret flags.
    InvalidValue {
        flag: String,
        value: Option<String>,
        expected: String,
    },
    /// The value is not valid UTF-8 (never echoed).
    NotUnicode(String),
    /// A flag that needs another one: `--jwt-issuer` without `--jwt-audience`.
    Requires { flag: String, needs: String },
    /// Values of one flag that contradict each other or another flag (secrets never echoed).
    Conflict { flag: String, problem: String },
    /// An environment variable's value did not validate (the value is never echoed).
    InvalidEnv { var: &'static str, expected: String },
}

impl ConfigError {
    /// The flag the error is about (with its dashes), when there is one.
    pub fn flag(&self) -> Option<&str> {
        match &self.kind {
            ErrorKind::UnknownFlag(f)
            | ErrorKind::MissingValue(f)
            | ErrorKind::SwitchWithValue(f)
            | ErrorKind::NotUnicode(f) => Some(f),
            ErrorKind::InvalidValue { flag, .. }
            | ErrorKind::Requires { flag, .. }
            | ErrorKind::Conflict { flag, .. } => Some(flag),
            ErrorKind::InvalidEnv { var, .. } => Some(var),
            ErrorKind::UnexpectedArgument(_) => None,
        }
    }

    fn new(kind: ErrorKind) -> Self {
        ConfigError { kind }
    }

    fn invalid(flag: &Flag, problem: Invalid) -> Self {
        let value = if flag.secret {
            None
        } else {
            Some(display_value(&problem.value))
        };
        ConfigError::new(ErrorKind::InvalidValue {
            flag: format!("--{}", flag.name),
            value,
            expected: problem.expected.into_owned(),
        })
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::UnknownFlag(flag) => write!(f, "unknown flag {flag} (see --help)"),
            ErrorKind::MissingValue(flag) => write!(f, "missing value for {flag}"),
            ErrorKind::SwitchWithValue(flag) => {
                write!(
                    f,
                    "unexpected value for {flag}: it is a switch and takes no value"
                )
            }
            ErrorKind::UnexpectedArgument(arg) => {
                write!(
                    f,
                    "unexpected argument '{arg}' (flags start with --; see --help)"
                )
            }
            ErrorKind::InvalidValue {
                flag,
                value: Some(value),
                expected,
            } => write!(f, "invalid value '{value}' for {flag}: {expected}"),
            ErrorKind::InvalidValue {
                flag,
                value: None,
                expected,
            } => write!(f, "invalid value for {flag}: {expected}"),
            ErrorKind::NotUnicode(flag) => {
                write!(f, "invalid value for {flag}: expected valid UTF-8")
            }
            ErrorKind::Requires { flag, needs } => {
                write!(f, "{flag} requires {needs} (both must be set)")
            }
            ErrorKind::Conflict { flag, problem } => write!(f, "invalid {flag}: {problem}"),
            ErrorKind::InvalidEnv { var, expected } => {
                write!(f, "invalid value of environment variable {var}: {expected}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Longest stretch of a user-supplied value echoed back in an error.
const MAX_ECHO_CHARS: usize = 80;

/// Escapes control characters (so the message stays one line) and shortens long values.
fn display_value(raw: &str) -> String {
    let mut out = String::new();
    for (i, c) in raw.chars().enumerate() {
        if i == MAX_ECHO_CHARS {
            out.push_str("...");
            break;
        }
        if c == '\'' || c == '\\' || c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// The `--version` text.
pub fn version_text() -> String {
    format!("tollgate {}", env!("CARGO_PKG_VERSION"))
}

/// The `--help` text, generated from the flag table.
pub fn help_text() -> String {
    flags::render_help()
}

/// Parses the command line (without `argv[0]`).
///
/// `--help`/`-h` and `--version`/`-V` end parsing where they appear. Valued flags accept
/// `--flag VALUE` and `--flag=VALUE`; multi-value flags take every following argument up to
/// the next flag and may be repeated. A single-valued flag given twice keeps the last value.
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, ConfigError> {
    parse_args_with_env(args, |_| None)
}

/// [`parse_args`], then the environment variables of the native binary
/// (`CONTROL_PLANE_API_KEYS`, `JWT_ISSUER`, `JWT_AUDIENCE`, `JWT_JWKS_URI`), each used only
/// when its flag was not given, then the checks that span several flags.
pub fn parse_args_with_env<I, E>(args: I, env: E) -> Result<Command, ConfigError>
where
    I: IntoIterator<Item = OsString>,
    E: Fn(&str) -> Option<String>,
{
    match parse_flags(args)? {
        Command::Run(mut config) => {
            apply_env(&mut config, env)?;
            check_combinations(&config)?;
            Ok(Command::Run(config))
        }
        other => Ok(other),
    }
}

/// Environment variables fill what the flags left unset.
fn apply_env<E: Fn(&str) -> Option<String>>(
    config: &mut Config,
    env: E,
) -> Result<(), ConfigError> {
    let invalid = |var: &'static str, expected: &str| {
        ConfigError::new(ErrorKind::InvalidEnv {
            var,
            expected: expected.to_owned(),
        })
    };
    if config.control_plane_api_keys.is_empty() {
        if let Some(raw) = env("CONTROL_PLANE_API_KEYS").filter(|v| !v.is_empty()) {
            let key = ControlPlaneKey::parse(&raw)
                .map_err(|expected| invalid("CONTROL_PLANE_API_KEYS", expected))?;
            config.control_plane_api_keys.push(key);
        }
    }
    let urls = [
        ("JWT_ISSUER", &mut config.jwt_issuer),
        ("JWT_JWKS_URI", &mut config.jwt_jwks_uri),
    ];
    for (var, slot) in urls {
        if slot.is_none() {
            if let Some(raw) = env(var).filter(|v| !v.is_empty()) {
                let url = flags::http_url(&raw).map_err(|e| invalid(var, &e.expected))?;
                *slot = Some(url);
            }
        }
    }
    if config.jwt_audience.is_none() {
        config.jwt_audience = env("JWT_AUDIENCE").filter(|v| !v.is_empty());
    }
    Ok(())
}

/// Rules that involve more than one flag.
fn check_combinations(config: &Config) -> Result<(), ConfigError> {
    let requires = |flag: &str, needs: &str| {
        ConfigError::new(ErrorKind::Requires {
            flag: flag.to_owned(),
            needs: needs.to_owned(),
        })
    };
    match (&config.jwt_issuer, &config.jwt_audience) {
        (Some(_), None) => return Err(requires("--jwt-issuer", "--jwt-audience")),
        (None, Some(_)) => return Err(requires("--jwt-audience", "--jwt-issuer")),
        _ => {}
    }
    if config.jwt_jwks_uri.is_some() && config.jwt_issuer.is_none() {
        return Err(requires("--jwt-jwks-uri", "--jwt-issuer"));
    }
    let conflict = |flag: &str, problem: &str| {
        ConfigError::new(ErrorKind::Conflict {
            flag: flag.to_owned(),
            problem: problem.to_owned(),
        })
    };
    if !config.pd_disaggregation {
        if !config.prefill_workers.is_empty() {
            return Err(requires("--prefill", "--pd-disaggregation"));
        }
        if !config.decode_workers.is_empty() {
            return Err(requires("--decode", "--pd-disaggregation"));
        }
    } else if !config.worker_urls.is_empty() && !config.enable_igw {
        return Err(conflict(
            "--worker-urls",
            "regular workers cannot be listed with --pd-disaggregation; use --prefill and --decode (or --enable-igw for a mixed fleet)",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for tenant in &config.tenant_api_keys {
        let key = tenant.key.expose();
        if config.api_key.as_ref().is_some_and(|k| k.expose() == key) {
            return Err(conflict(
                "--tenant-api-key",
                "a tenant key equals --api-key; every key must identify one caller",
            ));
        }
        if !seen.insert(key) {
            return Err(conflict(
                "--tenant-api-key",
                "two tenant entries share one key; every key must identify one caller",
            ));
        }
    }
    let mut ids = std::collections::HashSet::new();
    for key in &config.control_plane_api_keys {
        if !ids.insert(key.id.as_str()) {
            return Err(conflict(
                "--control-plane-api-keys",
                &format!(
                    "key id '{}' is used twice; ids must be unique",
                    display_value(&key.id)
                ),
            ));
        }
    }
    Ok(())
}

/// The flags alone.
fn parse_flags<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, ConfigError> {
    let mut parser = lexopt::Parser::from_args(args);
    let mut config = Config::default();
    loop {
        let arg = match parser.next() {
            Ok(Some(arg)) => arg,
            Ok(None) => break,
            Err(err) => return Err(from_lexopt(err)),
        };
        let flag = match arg {
            Arg::Short('h') => return Ok(Command::Help(help_text())),
            Arg::Short('V') => return Ok(Command::Version(version_text())),
            Arg::Long("help") => {
                reject_attached_value(&mut parser, "--help")?;
                return Ok(Command::Help(help_text()));
            }
            Arg::Long("version") => {
                reject_attached_value(&mut parser, "--version")?;
                return Ok(Command::Version(version_text()));
            }
            Arg::Short(c) => {
                return Err(ConfigError::new(ErrorKind::UnknownFlag(format!(
                    "-{}",
                    display_value(c.encode_utf8(&mut [0; 4]))
                ))))
            }
            Arg::Long(name) => match flags::lookup(name) {
                Some(flag) => flag,
                None => {
                    return Err(ConfigError::new(ErrorKind::UnknownFlag(format!(
                        "--{}",
                        display_value(name)
                    ))))
                }
            },
            Arg::Value(value) => {
                return Err(ConfigError::new(ErrorKind::UnexpectedArgument(
                    display_value(&value.to_string_lossy()),
                )))
            }
        };
        apply_flag(flag, &mut parser, &mut config)?;
    }
    Ok(Command::Run(Box::new(config)))
}

/// Reads the value(s) of one known flag from the parser and stores them.
fn apply_flag(
    flag: &'static Flag,
    parser: &mut lexopt::Parser,
    config: &mut Config,
) -> Result<(), ConfigError> {
    let dashed = || format!("--{}", flag.name);
    match flag.kind {
        Kind::Switch(set) => {
            reject_attached_value(parser, &dashed())?;
            set(config);
            Ok(())
        }
        Kind::One { set, .. } => {
            let raw = match parser.optional_value() {
                Some(attached) => attached,
                None => match parser.value() {
                    Ok(next) if !looks_like_flag(&next) => next,
                    _ => return Err(ConfigError::new(ErrorKind::MissingValue(dashed()))),
                },
            };
            let value = raw
                .into_string()
                .map_err(|_| ConfigError::new(ErrorKind::NotUnicode(dashed())))?;
            set(config, &value).map_err(|problem| ConfigError::invalid(flag, problem))
        }
        Kind::Many { set, .. } => {
            let raw: Vec<OsString> = match parser.values() {
                Ok(values) => values.collect(),
                Err(_) => return Err(ConfigError::new(ErrorKind::MissingValue(dashed()))),
            };
            let mut values = Vec::with_capacity(raw.len());
            for value in raw {
                let value = value
                    .into_string()
                    .map_err(|_| ConfigError::new(ErrorKind::NotUnicode(dashed())))?;
                values.push(value);
            }
            set(config, &values).map_err(|problem| ConfigError::invalid(flag, problem))
        }
    }
}

/// A switch (or `--help`) written as `--switch=value`.
fn reject_attached_value(parser: &mut lexopt::Parser, dashed: &str) -> Result<(), ConfigError> {
    match parser.optional_value() {
        Some(_) => Err(ConfigError::new(ErrorKind::SwitchWithValue(
            dashed.to_owned(),
        ))),
        None => Ok(()),
    }
}

/// `--x` or `-x` (a letter) is taken for a flag, not a value; `-1` and `-` are values.
fn looks_like_flag(value: &std::ffi::OsStr) -> bool {
    let bytes = value.as_encoded_bytes();
    match bytes {
        [b'-', b'-', ..] => true,
        [b'-', second, ..] => second.is_ascii_alphabetic(),
        _ => false,
    }
}

/// Maps the parser's own errors (only reachable in corner cases) to one-line messages.
fn from_lexopt(err: lexopt::Error) -> ConfigError {
    match err {
        lexopt::Error::MissingValue { option } => ConfigError::new(ErrorKind::MissingValue(
            option.unwrap_or_else(|| "a flag".to_owned()),
        )),
        lexopt::Error::UnexpectedValue { option, .. } => {
            ConfigError::new(ErrorKind::SwitchWithValue(option))
        }
        lexopt::Error::UnexpectedOption(option) => {
            ConfigError::new(ErrorKind::UnknownFlag(display_value(&option)))
        }
        lexopt::Error::UnexpectedArgument(value) => ConfigError::new(
            ErrorKind::UnexpectedArgument(display_value(&value.to_string_lossy())),
        ),
        lexopt::Error::NonUnicodeValue(_) => {
            ConfigError::new(ErrorKind::NotUnicode("a flag".to_owned()))
        }
        lexopt::Error::ParsingFailed { value, .. } => {
            ConfigError::new(ErrorKind::UnexpectedArgument(display_value(&value)))
        }
        lexopt::Error::Custom(err) => ConfigError::new(ErrorKind::UnexpectedArgument(
            display_value(&err.to_string()),
        )),
    }
}

#[cfg(test)]
mod tests;
