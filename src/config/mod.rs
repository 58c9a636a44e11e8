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

use lexopt::Arg;

use flags::{Flag, Invalid, Kind};

pub use crate::admission::AdmissionConfig;
use crate::auth::keys::ControlPlaneKey;
pub use crate::auth::AuthSettings;
pub use crate::chat::encode_cache::CacheSettings as TokenizerCacheSettings;
pub use crate::control::{ControlSettings, PrefillWorker};
pub use crate::fleet::overload::OverloadDefaults;
pub use crate::fleet::{FleetSettings, WorkerDefaults};
pub use crate::history::{HistoryBackend, HistorySettings};
pub use crate::logging::{LogLevel, LogSettings};
pub use crate::metrics::MetricsSettings;
pub use crate::pipeline::PipelineSettings;
pub use crate::resilience::{BreakerDefaults, ResilienceSettings, RetryConfig};
pub use crate::routing::{PolicyName, RoutingSettings};
pub use crate::runtime::{IoEngine, RuntimeSettings};
pub use crate::server::ServerSettings;

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

/// The validated configuration of one gateway process: each module's settings, composed.
///
/// A module owns its settings type and its defaults; this struct only gathers them, and
/// the wiring (`crate::app`, `crate::startup`) hands each module its own part, never the
/// whole `Config`.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Listener flag group and the edge timeouts and limits of client connections.
    pub server: ServerSettings,
    /// Data-plane threads, IO engine, shutdown grace.
    pub runtime: RuntimeSettings,
    /// Log output.
    pub log: LogSettings,
    /// Data-plane keys, control-plane keys and JWT, audit.
    pub auth: AuthSettings,
    /// The metrics listener and histogram buckets.
    pub metrics: MetricsSettings,
    /// Routing policies and their parameters.
    pub routing: RoutingSettings,
    /// Retries and circuit-breaker defaults.
    pub resilience: ResilienceSettings,
    /// Admission control.
    pub admission: AdmissionConfig,
    /// What shapes the fleet and the defaults workers inherit.
    pub fleet: FleetSettings,
    /// Startup workers, registration timing, the load monitor.
    pub control: ControlSettings,
    /// The data path's request limits, timeouts and upstream pools.
    pub pipeline: PipelineSettings,
    /// Bounds of the tokenizer caches (gRPC workers' prompts).
    pub tokenizer_cache: TokenizerCacheSettings,
    /// The history store: backend, its server, pool and timeout, the memory bounds.
    pub history: HistorySettings,
}

impl Config {
    /// What workers inherit where their spec is silent, from the modules that own it.
    pub fn worker_defaults(&self) -> WorkerDefaults {
        WorkerDefaults {
            health: self.fleet.health,
            breaker: self.resilience.breaker,
            overload: self.fleet.overload,
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
    if config.auth.control_plane_api_keys.is_empty() {
        if let Some(raw) = env("CONTROL_PLANE_API_KEYS").filter(|v| !v.is_empty()) {
            let key = ControlPlaneKey::parse(&raw)
                .map_err(|expected| invalid("CONTROL_PLANE_API_KEYS", expected))?;
            config.auth.control_plane_api_keys.push(key);
        }
    }
    let urls = [
        ("JWT_ISSUER", &mut config.auth.jwt_issuer),
        ("JWT_JWKS_URI", &mut config.auth.jwt_jwks_uri),
    ];
    for (var, slot) in urls {
        if slot.is_none() {
            if let Some(raw) = env(var).filter(|v| !v.is_empty()) {
                let url = flags::http_url(&raw).map_err(|e| invalid(var, &e.expected))?;
                *slot = Some(url);
            }
        }
    }
    if config.auth.jwt_audience.is_none() {
        config.auth.jwt_audience = env("JWT_AUDIENCE").filter(|v| !v.is_empty());
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
    match (&config.auth.jwt_issuer, &config.auth.jwt_audience) {
        (Some(_), None) => return Err(requires("--jwt-issuer", "--jwt-audience")),
        (None, Some(_)) => return Err(requires("--jwt-audience", "--jwt-issuer")),
        _ => {}
    }
    match (&config.server.tls.cert_path, &config.server.tls.key_path) {
        (Some(_), None) => return Err(requires("--tls-cert-path", "--tls-key-path")),
        (None, Some(_)) => return Err(requires("--tls-key-path", "--tls-cert-path")),
        _ => {}
    }
    if config.auth.jwt_jwks_uri.is_some() && config.auth.jwt_issuer.is_none() {
        return Err(requires("--jwt-jwks-uri", "--jwt-issuer"));
    }
    let conflict = |flag: &str, problem: &str| {
        ConfigError::new(ErrorKind::Conflict {
            flag: flag.to_owned(),
            problem: problem.to_owned(),
        })
    };
    if !config.fleet.pd_disaggregation {
        if !config.control.prefill_workers.is_empty() {
            return Err(requires("--prefill", "--pd-disaggregation"));
        }
        if !config.control.decode_workers.is_empty() {
            return Err(requires("--decode", "--pd-disaggregation"));
        }
    } else if !config.control.worker_urls.is_empty() && !config.fleet.enable_igw {
        return Err(conflict(
            "--worker-urls",
            "regular workers cannot be listed with --pd-disaggregation; use --prefill and --decode (or --enable-igw for a mixed fleet)",
        ));
    }
    if config.fleet.backend.is_provider() && config.fleet.pd_disaggregation {
        return Err(conflict(
            "--backend",
            "a provider backend has no prefill/decode workers; drop --pd-disaggregation",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for tenant in &config.auth.tenant_api_keys {
        let key = tenant.key.expose();
        if config
            .auth
            .api_key
            .as_ref()
            .is_some_and(|k| k.expose() == key)
        {
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
    let history = &config.history;
    match history.backend {
        HistoryBackend::Postgres if history.postgres_url.is_none() => {
            return Err(requires("--history-backend postgres", "--postgres-db-url"));
        }
        HistoryBackend::Redis if history.redis_url.is_none() => {
            return Err(requires("--history-backend redis", "--redis-url"));
        }
        _ => {}
    }
    let mut ids = std::collections::HashSet::new();
    for key in &config.auth.control_plane_api_keys {
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
