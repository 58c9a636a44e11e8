use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::flags::{Group, Kind, FLAGS};
use super::*;
use crate::auth::Role;
use crate::secret::Secret;

fn parse(args: &[&str]) -> Result<Command, ConfigError> {
    parse_args(args.iter().map(OsString::from))
}

fn run(args: &[&str]) -> Config {
    match parse(args) {
        Ok(Command::Run(config)) => *config,
        Ok(other) => panic!("expected Run for {args:?}, got {other:?}"),
        Err(err) => panic!("expected Run for {args:?}, got error: {err}"),
    }
}

fn error(args: &[&str]) -> String {
    match parse(args) {
        Err(err) => {
            let text = err.to_string();
            assert!(!text.contains('\n'), "error must be one line: {text:?}");
            text
        }
        Ok(other) => panic!("expected an error for {args:?}, got {other:?}"),
    }
}

#[test]
fn defaults() {
    let c = run(&[]);
    assert_eq!(c.server.host, "0.0.0.0".parse::<IpAddr>().unwrap());
    assert_eq!(c.server.port, 30000);
    assert!(c.control.worker_urls.is_empty());
    assert_eq!(c.routing.policy, PolicyName::RoundRobin);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.runtime.worker_threads, cpus);
    assert!(c.runtime.worker_threads >= 1);
    assert_eq!(c.runtime.io_engine, IoEngine::Auto);
    assert_eq!(c.pipeline.request_timeout, Duration::from_secs(1800));
    assert_eq!(c.pipeline.max_payload_size, 536_870_912);
    assert_eq!(c.runtime.shutdown_grace_period, Duration::from_secs(180));
    assert_eq!(
        c.pipeline.upstream_pool_idle_timeout,
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        c.pipeline.stream_stall_timeout,
        Some(Duration::from_secs(300))
    );
    assert_eq!(c.server.header_read_timeout, Duration::from_secs(30));
    assert_eq!(c.server.keep_alive_timeout, Duration::from_secs(75));
    assert_eq!(c.server.max_connections, None);
    assert_eq!(c.server.health_check_port, None);
    assert_eq!(c.log.level, LogLevel::Info);
    assert!(!c.log.json);
    assert_eq!(c.log.dir, None);
    assert!(c.auth.api_key.is_none());
    assert_eq!(c.metrics.host, "0.0.0.0".parse::<IpAddr>().unwrap());
    assert_eq!(c.metrics.port, 29000);
    assert_eq!(format!("{c:?}"), format!("{:?}", Config::default()));
}

#[test]
fn every_flag_parsed() {
    let c = run(&[
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "--worker-urls",
        "http://w1:8000",
        "https://w2.example.com",
        "--policy",
        "cache_aware",
        "--runtime-worker-threads",
        "3",
        "--io-engine",
        "epoll",
        "--request-timeout-secs",
        "60",
        "--max-payload-size",
        "4MiB",
        "--shutdown-grace-period-secs",
        "0",
        "--upstream-pool-idle-timeout-secs",
        "0",
        "--stream-stall-timeout-secs",
        "7",
        "--header-read-timeout-secs",
        "5",
        "--keep-alive-timeout-secs",
        "9",
        "--max-connections",
        "5000",
        "--health-check-port",
        "8081",
        "--log-level",
        "debug",
        "--log-json",
        "--log-dir",
        "/var/log/tollgate",
        "--api-key",
        "sk-test",
        "--prometheus-host",
        "::1",
        "--prometheus-port",
        "9100",
    ]);
    assert_eq!(c.server.host, "127.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(c.server.port, 8080);
    assert_eq!(
        c.control.worker_urls,
        ["http://w1:8000", "https://w2.example.com"]
    );
    assert_eq!(c.routing.policy, PolicyName::CacheAware);
    assert_eq!(c.runtime.worker_threads, 3);
    assert_eq!(c.runtime.io_engine, IoEngine::Epoll);
    assert_eq!(c.pipeline.request_timeout, Duration::from_secs(60));
    assert_eq!(c.pipeline.max_payload_size, 4 * 1024 * 1024);
    assert_eq!(c.runtime.shutdown_grace_period, Duration::ZERO);
    assert_eq!(c.pipeline.upstream_pool_idle_timeout, None);
    assert_eq!(
        c.pipeline.stream_stall_timeout,
        Some(Duration::from_secs(7))
    );
    assert_eq!(c.server.header_read_timeout, Duration::from_secs(5));
    assert_eq!(c.server.keep_alive_timeout, Duration::from_secs(9));
    assert_eq!(c.server.max_connections, Some(5000));
    assert_eq!(c.server.health_check_port, Some(8081));
    assert_eq!(c.log.level, LogLevel::Debug);
    assert!(c.log.json);
    assert_eq!(c.log.dir, Some(PathBuf::from("/var/log/tollgate")));
    assert_eq!(c.auth.api_key.as_ref().map(Secret::expose), Some("sk-test"));
    assert_eq!(c.metrics.host, "::1".parse::<IpAddr>().unwrap());
    assert_eq!(c.metrics.port, 9100);
}

#[test]
fn equals_syntax() {
    let c = run(&[
        "--port=0",
        "--policy=random",
        "--worker-urls=http://a:1",
        "--api-key=-starts-with-dash",
    ]);
    assert_eq!(c.server.port, 0);
    assert_eq!(c.routing.policy, PolicyName::Random);
    assert_eq!(c.control.worker_urls, ["http://a:1"]);
    assert_eq!(
        c.auth.api_key.as_ref().map(Secret::expose),
        Some("-starts-with-dash")
    );
}

#[test]
fn choices() {
    for policy in PolicyName::ALL {
        assert_eq!(run(&["--policy", policy.as_str()]).routing.policy, *policy);
    }
    for level in LogLevel::ALL {
        assert_eq!(run(&["--log-level", level.as_str()]).log.level, *level);
    }
    for engine in IoEngine::ALL {
        assert_eq!(
            run(&["--io-engine", engine.as_str()]).runtime.io_engine,
            *engine
        );
    }
    let names: Vec<&str> = PolicyName::ALL.iter().map(PolicyName::as_str).collect();
    assert_eq!(
        names,
        [
            "random",
            "round_robin",
            "power_of_two",
            "cache_aware",
            "prefix_hash",
            "consistent_hashing",
            "manual",
            "bucket"
        ]
    );
}

#[test]
fn byte_sizes() {
    for (text, bytes) in [
        ("1", 1u64),
        ("1024", 1024),
        ("2K", 2048),
        ("2k", 2048),
        ("2KiB", 2048),
        ("3M", 3 << 20),
        ("3MiB", 3 << 20),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("7B", 7),
    ] {
        assert_eq!(
            run(&["--max-payload-size", text]).pipeline.max_payload_size,
            bytes,
            "{text}"
        );
    }
}

#[test]
fn multi_values_and_repeats() {
    let c = run(&[
        "--worker-urls",
        "http://a",
        "http://b",
        "--policy",
        "random",
    ]);
    assert_eq!(c.control.worker_urls, ["http://a", "http://b"]);
    assert_eq!(c.routing.policy, PolicyName::Random);

    // ZMQ workers (spec 1) come from --worker-urls too.
    let c = run(&["--worker-urls", "ipc:///tmp/engine", "grpc://g:1"]);
    assert_eq!(c.control.worker_urls, ["ipc:///tmp/engine", "grpc://g:1"]);

    let c = run(&[
        "--worker-urls",
        "http://a",
        "--port",
        "1",
        "--worker-urls",
        "https://b",
        "http://c",
    ]);
    assert_eq!(c.control.worker_urls, ["http://a", "https://b", "http://c"]);

    // `=` limits the flag to one value; the next word is then a positional argument.
    let err = error(&["--worker-urls=http://a", "http://b"]);
    assert!(err.contains("unexpected argument 'http://b'"), "{err}");
}

#[test]
fn last_single_value_wins() {
    let c = run(&[
        "--port",
        "1",
        "--port",
        "2",
        "--log-level=warn",
        "--log-level",
        "error",
    ]);
    assert_eq!(c.server.port, 2);
    assert_eq!(c.log.level, LogLevel::Error);
}

#[test]
fn bad_values_name_the_flag() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--host", "localhost"], "--host", "IP address"),
        (&["--port", "abc"], "--port", "0-65535"),
        (&["--port", "65536"], "--port", "0-65535"),
        (&["--port", "-1"], "--port", "0-65535"),
        (
            &["--decode", "ipc:///tmp/w"],
            "--decode",
            "regular workers only",
        ),
        (
            &["--worker-urls", "HTTP://w:1"],
            "--worker-urls",
            "lowercase",
        ),
        (&["--worker-urls", "http://"], "--worker-urls", "host"),
        (&["--worker-urls", "http:///x"], "--worker-urls", "host"),
        (
            &["--worker-urls", "http://a b"],
            "--worker-urls",
            "valid URL",
        ),
        (&["--worker-urls", "w:1"], "--worker-urls", "http://"),
        (&["--policy", "fastest"], "--policy", "round_robin"),
        (
            &["--runtime-worker-threads", "0"],
            "--runtime-worker-threads",
            "1-",
        ),
        (
            &["--runtime-worker-threads", "x"],
            "--runtime-worker-threads",
            "1-",
        ),
        (&["--io-engine", "kqueue"], "--io-engine", "epoll"),
        (
            &["--request-timeout-secs", "0"],
            "--request-timeout-secs",
            "1-",
        ),
        (
            &["--request-timeout-secs", "1.5"],
            "--request-timeout-secs",
            "seconds",
        ),
        (
            &["--request-timeout-secs", "99999999999"],
            "--request-timeout-secs",
            "seconds",
        ),
        (
            &["--max-payload-size", "0"],
            "--max-payload-size",
            "byte count",
        ),
        (
            &["--max-payload-size", "10X"],
            "--max-payload-size",
            "suffix",
        ),
        (
            &["--max-payload-size", "KiB"],
            "--max-payload-size",
            "byte count",
        ),
        (
            &["--max-payload-size", "99999999999G"],
            "--max-payload-size",
            "byte count",
        ),
        (
            &["--shutdown-grace-period-secs", "-5"],
            "--shutdown-grace-period-secs",
            "0-",
        ),
        (
            &["--upstream-pool-idle-timeout-secs", "x"],
            "--upstream-pool-idle-timeout-secs",
            "0-",
        ),
        (
            &["--stream-stall-timeout-secs", "-1"],
            "--stream-stall-timeout-secs",
            "0-",
        ),
        (
            &["--header-read-timeout-secs", "0"],
            "--header-read-timeout-secs",
            "1-",
        ),
        (
            &["--keep-alive-timeout-secs", "0"],
            "--keep-alive-timeout-secs",
            "1-",
        ),
        (&["--log-level", "loud"], "--log-level", "info"),
        (&["--log-dir", ""], "--log-dir", "directory"),
        (&["--api-key", ""], "--api-key", "non-empty"),
        (
            &["--prometheus-host", "x"],
            "--prometheus-host",
            "IP address",
        ),
        (
            &["--prometheus-port", "http"],
            "--prometheus-port",
            "1-65535",
        ),
        (
            &["--prometheus-port", "0"],
            "--prometheus-port",
            "Port must be > 0",
        ),
    ];
    for (args, flag, expected) in cases {
        let err = error(args);
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        if let Err(e) = parse(args) {
            assert_eq!(e.flag(), Some(*flag));
        }
    }
    assert_eq!(
        error(&["--port", "abc"]),
        "invalid value 'abc' for --port: expected an integer 0-65535"
    );
    assert_eq!(
        error(&["--prometheus-port", "0"]),
        "invalid value '0' for --prometheus-port: Port must be > 0"
    );
}

#[test]
fn structural_errors() {
    assert_eq!(error(&["--foo"]), "unknown flag --foo (see --help)");
    assert_eq!(error(&["--foo=bar"]), "unknown flag --foo (see --help)");
    assert_eq!(error(&["-x"]), "unknown flag -x (see --help)");
    assert_eq!(error(&["--host"]), "missing value for --host");
    assert_eq!(
        error(&["--host", "--port", "1"]),
        "missing value for --host"
    );
    assert_eq!(error(&["--api-key", "-k"]), "missing value for --api-key");
    assert_eq!(error(&["--worker-urls"]), "missing value for --worker-urls");
    assert_eq!(
        error(&["--worker-urls", "--port", "1"]),
        "missing value for --worker-urls"
    );
    assert!(error(&["--log-json=yes"]).contains("--log-json"));
    assert!(error(&["--log-json=yes"]).contains("takes no value"));
    assert!(error(&["--help=1"]).contains("--help"));
    assert!(error(&["serve"]).starts_with("unexpected argument 'serve'"));
    assert!(error(&["--log-json", "yes"]).starts_with("unexpected argument 'yes'"));
    assert!(error(&["--", "--port"]).starts_with("unexpected argument '--port'"));
    // Values with control characters stay on one line.
    assert!(error(&["--port", "1\n2"]).contains("1\\n2"));
}

#[cfg(unix)]
#[test]
fn non_unicode_values_are_rejected() {
    use std::os::unix::ffi::OsStringExt;
    let args = vec![
        OsString::from("--log-dir"),
        OsString::from_vec(vec![b'/', 0xff, 0xfe]),
    ];
    let err = parse_args(args).map(|_| ()).unwrap_err();
    assert_eq!(err.flag(), Some("--log-dir"));
    assert!(err.to_string().contains("UTF-8"));
}

#[test]
fn help_and_version() {
    let version = format!("tollgate {}", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["-V"], &["--port", "1", "--version"]] {
        match parse(args) {
            Ok(Command::Version(text)) => assert_eq!(text, version),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    for args in [&["--help"][..], &["-h"], &["--log-json", "--help"]] {
        match parse(args) {
            Ok(Command::Help(text)) => assert_eq!(text, help_text()),
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

#[test]
fn help_lists_every_flag_with_default() {
    let help = help_text();
    assert!(help.starts_with("tollgate "));
    assert!(help.contains("Usage: tollgate"));
    assert!(help.contains("--help") && help.contains("--version"));
    for flag in FLAGS {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&flag.synopsis()))
            .unwrap_or_else(|| panic!("--{} missing from help", flag.name));
        assert!(
            line.contains(&format!("[default: {}]", flag.default)),
            "{line}"
        );
        assert!(line.contains(flag.help), "{line}");
    }
    for group in Group::ALL {
        if FLAGS.iter().any(|flag| flag.group == *group) {
            assert!(
                help.contains(&format!("\n{}:\n", group.title())),
                "{group:?}"
            );
        }
    }
    for title in [
        "Listener",
        "Workers",
        "Routing",
        "Retries and circuit breakers",
        "Admission control and overload protection",
        "Runtime",
        "Limits and timeouts",
        "Logging",
        "Authentication",
        "Metrics",
    ] {
        assert!(help.contains(&format!("\n{title}:\n")), "{title}");
    }
}

/// The default printed in `--help` is the default `Config` actually has.
#[test]
fn help_defaults_match_config_defaults() {
    let defaults = format!("{:?}", Config::default());
    for flag in FLAGS {
        match flag.kind {
            Kind::Switch(_) => assert_eq!(flag.default, "off", "--{}", flag.name),
            Kind::Many { .. } if flag.default.starts_with("none") => {}
            Kind::Many { set, .. } => {
                let mut config = Config::default();
                let values: Vec<String> = flag.default.split(' ').map(str::to_owned).collect();
                assert!(set(&mut config, &values).is_ok(), "--{}", flag.name);
                assert_eq!(format!("{config:?}"), defaults, "--{}", flag.name);
            }
            // "none", possibly followed by where the value comes from instead.
            Kind::One { .. } if flag.default.starts_with("none") => {}
            Kind::One { set, .. } => {
                let mut config = Config::default();
                if set(&mut config, flag.default).is_ok() {
                    assert_eq!(format!("{config:?}"), defaults, "--{}", flag.name);
                } else {
                    // Computed at startup; the help text describes it in words.
                    assert_eq!(flag.name, "runtime-worker-threads");
                }
            }
        }
    }
}

#[test]
fn flag_names_are_unique_and_well_formed() {
    for (i, flag) in FLAGS.iter().enumerate() {
        assert!(!flag.name.starts_with('-'), "{}", flag.name);
        assert!(
            flag.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{}",
            flag.name
        );
        assert!(!matches!(flag.name, "help" | "version"));
        assert!(!flag.help.contains('\n'), "{}", flag.name);
        assert!(
            FLAGS[i + 1..].iter().all(|other| other.name != flag.name),
            "duplicate --{}",
            flag.name
        );
    }
}

#[test]
fn secrets_are_redacted() {
    let c = run(&["--api-key", "sk-very-secret"]);
    let debug = format!("{c:?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("<redacted>"));
    let key = c
        .auth
        .api_key
        .as_ref()
        .map(|k| (format!("{k}"), format!("{k:?}")));
    assert_eq!(
        key,
        Some(("<redacted>".to_owned(), "<redacted>".to_owned()))
    );
    // Secret flags never echo their value in errors.
    let err = error(&["--api-key="]);
    assert_eq!(err, "invalid value for --api-key: expected a non-empty key");
    // URL credentials are not echoed either.
    let err = error(&["--worker-urls", "ftp://user:hunter2@w"]);
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("<redacted>@w"), "{err}");
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Result<Config, String> {
    let lookup = |var: &str| {
        env.iter()
            .find(|(k, _)| *k == var)
            .map(|(_, v)| (*v).to_owned())
    };
    match parse_args_with_env(args.iter().map(OsString::from), lookup) {
        Ok(Command::Run(config)) => Ok(*config),
        Ok(other) => panic!("expected Run for {args:?}, got {other:?}"),
        Err(err) => Err(err.to_string()),
    }
}

#[test]
fn auth_defaults() {
    let c = run(&[]);
    assert!(c.auth.tenant_api_keys.is_empty());
    assert!(c.auth.control_plane_api_keys.is_empty());
    assert!(
        c.auth.jwt_issuer.is_none()
            && c.auth.jwt_audience.is_none()
            && c.auth.jwt_jwks_uri.is_none()
    );
    assert_eq!(c.auth.jwt_role_claim, "roles");
    assert!(c.auth.jwt_role_mapping.is_empty());
    assert!(!c.auth.disable_audit_logging);
}

#[test]
fn auth_flags() {
    let c = run(&[
        "--tenant-api-key",
        "acme:k1",
        "--tenant-api-key=beta:k:2",
        "--control-plane-api-keys",
        "a:Ops:admin:x",
        "b:Viewer:user:y",
        "--control-plane-api-keys",
        "c:More:Admin:z",
        "--jwt-issuer",
        "https://idp.example.com/realms/x",
        "--jwt-audience",
        "tollgate",
        "--jwt-jwks-uri",
        "https://idp.example.com/keys",
        "--jwt-role-claim",
        "gw_roles",
        "--jwt-role-mapping",
        "platform-admins=admin",
        "viewers=user",
        "--disable-audit-logging",
    ]);
    let tenants: Vec<_> = c
        .auth
        .tenant_api_keys
        .iter()
        .map(|t| t.tenant_id.as_str())
        .collect();
    assert_eq!(tenants, ["acme", "beta"]);
    assert_eq!(c.auth.tenant_api_keys[1].key.expose(), "k:2");
    let ids: Vec<_> = c
        .auth
        .control_plane_api_keys
        .iter()
        .map(|k| k.id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(c.auth.control_plane_api_keys[2].role, Role::Admin);
    assert_eq!(
        c.auth.jwt_issuer.as_deref(),
        Some("https://idp.example.com/realms/x")
    );
    assert_eq!(c.auth.jwt_audience.as_deref(), Some("tollgate"));
    assert_eq!(
        c.auth.jwt_jwks_uri.as_deref(),
        Some("https://idp.example.com/keys")
    );
    assert_eq!(c.auth.jwt_role_claim, "gw_roles");
    assert_eq!(
        c.auth.jwt_role_mapping,
        [
            ("platform-admins".to_owned(), Role::Admin),
            ("viewers".to_owned(), Role::User)
        ]
    );
    assert!(c.auth.disable_audit_logging);
}

#[test]
fn auth_flag_errors_name_the_flag_and_hide_secrets() {
    let e = error(&["--tenant-api-key", "nocolon-secret"]);
    assert!(
        e.contains("--tenant-api-key") && e.contains("tenant_id:key"),
        "{e}"
    );
    assert!(!e.contains("nocolon-secret"), "{e}");
    let e = error(&["--control-plane-api-keys", "a:b:superuser:hidden-key"]);
    assert!(
        e.contains("--control-plane-api-keys") && e.contains("admin or user"),
        "{e}"
    );
    assert!(!e.contains("hidden-key"), "{e}");
    let e = error(&["--jwt-role-mapping", "x"]);
    assert!(
        e.contains("--jwt-role-mapping") && e.contains("idp_role="),
        "{e}"
    );
    let e = error(&["--jwt-role-mapping", "x=root"]);
    assert!(e.contains("--jwt-role-mapping"), "{e}");
    let e = error(&["--jwt-issuer", "idp.example.com"]);
    assert!(e.contains("--jwt-issuer") && e.contains("URL"), "{e}");
    let e = error(&["--jwt-issuer", "ftp://idp.example.com"]);
    assert!(e.contains("--jwt-issuer"), "{e}");
}

#[test]
fn jwt_issuer_and_audience_come_together() {
    let e = error(&["--jwt-issuer", "https://idp.example.com"]);
    assert_eq!(e, "--jwt-issuer requires --jwt-audience (both must be set)");
    let e = error(&["--jwt-audience", "aud"]);
    assert_eq!(e, "--jwt-audience requires --jwt-issuer (both must be set)");
    let e = error(&["--jwt-jwks-uri", "https://idp.example.com/keys"]);
    assert!(e.starts_with("--jwt-jwks-uri requires --jwt-issuer"), "{e}");
}

#[test]
fn ambiguous_keys_are_refused() {
    let e = error(&["--tenant-api-key", "a:same", "--tenant-api-key", "b:same"]);
    assert!(e.contains("--tenant-api-key") && !e.contains("same"), "{e}");
    let e = error(&["--api-key", "same", "--tenant-api-key", "a:same"]);
    assert!(e.contains("--tenant-api-key") && !e.contains("same"), "{e}");
    let e = error(&["--control-plane-api-keys", "k:a:admin:x", "k:b:user:y"]);
    assert!(e.contains("'k' is used twice"), "{e}");
}

#[test]
fn environment_fills_unset_auth_flags() {
    let env = [
        ("CONTROL_PLANE_API_KEYS", "envkey:Env:admin:env-secret"),
        ("JWT_ISSUER", "https://idp.example.com"),
        ("JWT_AUDIENCE", "aud-env"),
        ("JWT_JWKS_URI", "https://idp.example.com/jwks"),
    ];
    let c = run_env(&[], &env).unwrap();
    assert_eq!(c.auth.control_plane_api_keys.len(), 1);
    assert_eq!(c.auth.control_plane_api_keys[0].id, "envkey");
    assert_eq!(
        c.auth.jwt_issuer.as_deref(),
        Some("https://idp.example.com")
    );
    assert_eq!(c.auth.jwt_audience.as_deref(), Some("aud-env"));
    assert_eq!(
        c.auth.jwt_jwks_uri.as_deref(),
        Some("https://idp.example.com/jwks")
    );

    // Flags win over the environment.
    let c = run_env(
        &[
            "--control-plane-api-keys",
            "flag:F:user:f",
            "--jwt-audience",
            "aud-flag",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(c.auth.control_plane_api_keys[0].id, "flag");
    assert_eq!(c.auth.jwt_audience.as_deref(), Some("aud-flag"));

    let e = run_env(&[], &[("CONTROL_PLANE_API_KEYS", "broken-secret")]).unwrap_err();
    assert!(
        e.contains("CONTROL_PLANE_API_KEYS") && !e.contains("broken-secret"),
        "{e}"
    );
    let e = run_env(&[], &[("JWT_ISSUER", "https://idp.example.com")]).unwrap_err();
    assert!(e.contains("--jwt-issuer requires --jwt-audience"), "{e}");
}

#[test]
fn prefill_and_decode_workers_with_bootstrap_ports() {
    let c = run(&[
        "--pd-disaggregation",
        "--prefill",
        "http://p1:8000",
        "9000",
        "--prefill",
        "http://p2:8000",
        "--prefill",
        "http://p3:8000",
        "none",
        "--decode",
        "http://d1:8000",
        "http://d2:8000",
        "--upstream-http2",
    ]);
    assert!(c.fleet.pd_disaggregation);
    assert!(c.fleet.upstream_http2);
    let prefill: Vec<(&str, Option<u16>)> = c
        .control
        .prefill_workers
        .iter()
        .map(|p| (p.url.as_str(), p.bootstrap_port))
        .collect();
    assert_eq!(
        prefill,
        [
            ("http://p1:8000", Some(9000)),
            ("http://p2:8000", None),
            ("http://p3:8000", None)
        ]
    );
    assert_eq!(
        c.control.decode_workers,
        ["http://d1:8000", "http://d2:8000"]
    );
}

#[test]
fn prefill_and_decode_flags_are_checked() {
    let e = error(&["--pd-disaggregation", "--prefill", "http://p:1", "0"]);
    assert!(
        e.contains("--prefill") && e.contains("Port must be > 0"),
        "{e}"
    );
    let e = error(&["--pd-disaggregation", "--prefill", "http://p:1", "2", "3"]);
    assert!(e.contains("at most one bootstrap port"), "{e}");
    let e = error(&["--pd-disaggregation", "--prefill", "ipc:///tmp/p"]);
    assert!(e.contains("--prefill"), "{e}");
    let e = error(&["--prefill", "http://p:1"]);
    assert!(
        e.starts_with("--prefill requires --pd-disaggregation"),
        "{e}"
    );
    let e = error(&["--decode", "http://d:1"]);
    assert!(
        e.starts_with("--decode requires --pd-disaggregation"),
        "{e}"
    );
    let e = error(&["--pd-disaggregation", "--worker-urls", "http://w:1"]);
    assert!(
        e.contains("--worker-urls") && e.contains("--prefill"),
        "{e}"
    );
    // A mixed fleet is an IGW deployment.
    let c = run(&[
        "--pd-disaggregation",
        "--enable-igw",
        "--worker-urls",
        "http://w:1",
        "--decode",
        "http://d:1",
    ]);
    assert_eq!(c.control.worker_urls, ["http://w:1"]);
}

#[test]
fn routing_and_resilience_flags() {
    let c = run(&[]);
    assert_eq!(c.routing.routing_key_headers, ["x-gw-routing-key"]);
    assert_eq!(
        (
            c.routing.params.cache_threshold,
            c.routing.params.balance_abs_threshold
        ),
        (0.3, 64)
    );
    assert_eq!(c.resilience.retry.max_retries, 5);
    assert_eq!(c.pipeline.max_buffered_request_bytes, 16 * 1024 * 1024);
    assert_eq!(c.resilience.breaker.failure_threshold, 10);
    let c = run(&[
        "--policy",
        "cache_aware",
        "--prefill-policy",
        "bucket",
        "--cache-threshold",
        "0.5",
        "--balance-abs-threshold",
        "8",
        "--balance-rel-threshold",
        "2",
        "--eviction-interval",
        "30",
        "--max-tree-size",
        "1000",
        "--prefix-token-count",
        "64",
        "--routing-key-headers",
        "X-Session-Id",
        "x-user",
        "--retry-max-retries",
        "2",
        "--retry-backoff-multiplier",
        "2.5",
        "--retry-jitter-factor",
        "0",
        "--disable-retries",
        "--max-buffered-request-bytes",
        "1MiB",
        "--cb-failure-threshold",
        "4",
        "--cb-timeout-duration-secs",
        "5",
        "--disable-circuit-breaker",
    ]);
    assert_eq!(c.routing.prefill_policy, Some(PolicyName::Bucket));
    assert_eq!(c.routing.decode_policy, None);
    assert_eq!(c.routing.params.cache_threshold, 0.5);
    assert_eq!(c.routing.params.balance_abs_threshold, 8);
    assert_eq!(c.routing.params.eviction_interval, Duration::from_secs(30));
    assert_eq!(
        (
            c.routing.params.max_tree_size,
            c.routing.params.prefix_token_count
        ),
        (1000, 64)
    );
    assert_eq!(c.routing.routing_key_headers, ["x-session-id", "x-user"]);
    assert_eq!(
        (
            c.resilience.retry.max_retries,
            c.resilience.retry.multiplier
        ),
        (2, 2.5)
    );
    assert!(c.resilience.disable_retries);
    assert_eq!(c.resilience.retry_in_force().max_retries, 0);
    assert_eq!(c.pipeline.max_buffered_request_bytes, 1024 * 1024);
    assert_eq!(c.resilience.breaker.failure_threshold, 4);
    assert_eq!(c.resilience.breaker.open_for, Duration::from_secs(5));
    assert!(c.resilience.breaker.disabled);

    for (args, flag) in [
        (&["--cache-threshold", "1.5"][..], "--cache-threshold"),
        (&["--retry-jitter-factor", "-0.1"], "--retry-jitter-factor"),
        (
            &["--retry-backoff-multiplier", "0.5"],
            "--retry-backoff-multiplier",
        ),
        (
            &["--retry-backoff-multiplier", "NaN"],
            "--retry-backoff-multiplier",
        ),
        (&["--cb-failure-threshold", "0"], "--cb-failure-threshold"),
        (
            &["--routing-key-headers", "bad header"],
            "--routing-key-headers",
        ),
    ] {
        let e = error(args);
        assert!(e.contains(flag), "{args:?}: {e}");
    }
}

#[test]
fn admission_and_overload_flags() {
    let c = run(&[]);
    assert_eq!(c.admission, crate::admission::AdmissionConfig::default());
    assert_eq!(c.admission.queue_size, 100);
    assert_eq!(c.admission.queue_timeout, Duration::from_secs(60));
    assert!(!c.admission.limits());
    assert!(!c.fleet.overload.on());
    let c = run(&[
        "--max-concurrent-requests",
        "8",
        "--queue-size",
        "0",
        "--queue-timeout-secs",
        "5",
        "--rate-limit-tokens-per-second",
        "2.5",
        "--multimodal-max-inflight-bytes",
        "64MiB",
        "--worker-overload-protection",
        "--worker-overload-waiting-requests",
        "12",
        "--worker-overload-token-usage",
        "0.75",
    ]);
    assert_eq!(c.admission.max_concurrent, Some(8));
    assert_eq!(c.admission.queue_size, 0);
    assert_eq!(c.admission.queue_timeout, Duration::from_secs(5));
    assert_eq!(c.admission.rate_per_second, Some(2.5));
    assert_eq!(c.admission.multimodal_max_inflight_bytes, Some(64 << 20));
    assert!(c.fleet.overload.protection);
    assert_eq!(c.fleet.overload.waiting_requests, Some(12));
    assert_eq!(c.fleet.overload.token_usage, Some(0.75));
    // 0 concurrent requests means no limit.
    assert_eq!(
        run(&["--max-concurrent-requests", "0"])
            .admission
            .max_concurrent,
        None
    );
    for (args, flag) in [
        (
            &["--max-concurrent-requests", "-1"][..],
            "--max-concurrent-requests",
        ),
        (&["--queue-size", "x"], "--queue-size"),
        (&["--queue-timeout-secs", "0"], "--queue-timeout-secs"),
        (
            &["--rate-limit-tokens-per-second", "0"],
            "--rate-limit-tokens-per-second",
        ),
        (
            &["--multimodal-max-inflight-bytes", "0"],
            "--multimodal-max-inflight-bytes",
        ),
        (
            &["--worker-overload-waiting-requests", "0"],
            "--worker-overload-waiting-requests",
        ),
        (
            &["--worker-overload-token-usage", "0"],
            "--worker-overload-token-usage",
        ),
        (
            &["--worker-overload-token-usage", "1.01"],
            "--worker-overload-token-usage",
        ),
    ] {
        let e = error(args);
        assert!(e.contains(flag), "{args:?}: {e}");
    }
}

#[test]
fn request_body_flags() {
    let c = run(&[]);
    assert_eq!(c.admission.max_buffered_request_total_bytes, 1 << 30);
    assert_eq!(c.pipeline.request_body_timeout, Duration::from_secs(120));
    assert_eq!(
        c.pipeline.request_body_idle_timeout,
        Duration::from_secs(30)
    );
    let c = run(&[
        "--max-buffered-request-total-bytes",
        "64MiB",
        "--request-body-timeout-secs",
        "10",
        "--request-body-idle-timeout-secs",
        "2",
    ]);
    assert_eq!(c.admission.max_buffered_request_total_bytes, 64 << 20);
    assert_eq!(c.pipeline.request_body_timeout, Duration::from_secs(10));
    assert_eq!(c.pipeline.request_body_idle_timeout, Duration::from_secs(2));
    for flag in [
        "--request-body-timeout-secs",
        "--request-body-idle-timeout-secs",
    ] {
        assert!(error(&[flag, "0"]).contains(flag));
    }
}

#[test]
fn stream_stall_timeout_zero_is_off() {
    let c = run(&["--stream-stall-timeout-secs", "0"]);
    assert_eq!(c.pipeline.stream_stall_timeout, None);
}

#[test]
fn tokenizer_cache_flags() {
    assert_eq!(run(&[]).tokenizer_cache, TokenizerCacheSettings::default());
    let c = run(&[
        "--tokenizer-cache-enable-l0",
        "--tokenizer-cache-l0-max-entries",
        "20000",
        "--tokenizer-cache-l0-max-memory",
        "8MiB",
        "--tokenizer-cache-enable-l1",
        "--tokenizer-cache-l1-max-memory",
        "104857600",
    ]);
    assert_eq!(
        c.tokenizer_cache,
        TokenizerCacheSettings {
            l0_max_entries: 20000,
            l0_max_bytes: 8 << 20,
            l1_max_bytes: 100 << 20,
        }
    );
    let off = run(&[
        "--tokenizer-cache-l0-max-entries",
        "0",
        "--tokenizer-cache-l1-max-memory",
        "0",
    ]);
    assert_eq!(off.tokenizer_cache.l0_max_entries, 0);
    assert_eq!(off.tokenizer_cache.l1_max_bytes, 0);
    assert!(error(&["--tokenizer-cache-l1-max-memory", "lots"])
        .contains("--tokenizer-cache-l1-max-memory"));
    assert!(error(&["--tokenizer-cache-l0-max-entries", "-1"])
        .contains("--tokenizer-cache-l0-max-entries"));
}

#[test]
fn backend_flag() {
    use crate::fleet::provider::Backend;
    assert_eq!(run(&[]).fleet.backend, Backend::Http);
    assert_eq!(run(&["--backend", "http"]).fleet.backend, Backend::Http);
    let c = run(&[
        "--backend",
        "anthropic",
        "--worker-urls",
        "https://api.anthropic.com",
    ]);
    assert_eq!(c.fleet.backend, Backend::Anthropic);
    assert_eq!(c.control.worker_urls, ["https://api.anthropic.com"]);
    // The spec's neutral spelling is the same backend.
    assert_eq!(run(&["--backend=vendor"]).fleet.backend, Backend::Anthropic);
    let e = error(&["--backend", "openai"]);
    assert!(e.contains("--backend") && e.contains("anthropic"), "{e}");
    let e = error(&["--backend", "anthropic", "--pd-disaggregation"]);
    assert!(
        e.contains("--backend") && e.contains("--pd-disaggregation"),
        "{e}"
    );
    let help = match parse(&["--help"]) {
        Ok(Command::Help(text)) => text,
        other => panic!("{other:?}"),
    };
    assert!(help.contains("--backend <KIND>"), "{help}");
    assert!(help.contains("/v1/messages"), "{help}");
}

#[test]
fn history_flags() {
    let c = run(&[]);
    assert_eq!(c.history.backend, HistoryBackend::Memory);
    assert_eq!(c.history.pool_size, 8);
    assert_eq!(c.history.timeout, Duration::from_secs(5));
    assert_eq!(c.history.memory_max_responses, 10_000);
    assert_eq!(c.history.memory_max_conversations, 10_000);
    assert_eq!(c.history.memory_max_bytes, 512 << 20);
    assert_eq!(c.history.memory_max_bytes_per_tenant, 128 << 20);
    let c = run(&[
        "--history-memory-max-bytes",
        "64MiB",
        "--history-memory-max-bytes-per-tenant=100k",
    ]);
    assert_eq!(c.history.memory_max_bytes, 64 << 20);
    assert_eq!(c.history.memory_max_bytes_per_tenant, 100 << 10);
    let c = run(&[
        "--history-backend",
        "postgres",
        "--postgres-db-url",
        "postgres://tg:pg-secret@db:5433/hist",
        "--history-pool-size",
        "3",
        "--history-timeout-secs=2",
        "--history-memory-max-responses",
        "5",
        "--history-memory-max-conversations",
        "6",
    ]);
    assert_eq!(c.history.backend, HistoryBackend::Postgres);
    assert_eq!(
        c.history.postgres_url.as_ref().map(Secret::expose),
        Some("postgres://tg:pg-secret@db:5433/hist")
    );
    assert_eq!(c.history.pool_size, 3);
    assert_eq!(c.history.timeout, Duration::from_secs(2));
    assert_eq!(c.history.memory_max_responses, 5);
    assert_eq!(c.history.memory_max_conversations, 6);
    assert!(!format!("{c:?}").contains("pg-secret"));
    let c = run(&[
        "--history-backend",
        "redis",
        "--redis-url",
        "redis://:r-secret@127.0.0.1:6390/1",
    ]);
    assert_eq!(c.history.backend, HistoryBackend::Redis);
    assert_eq!(
        run(&["--history-backend", "none"]).history.backend,
        HistoryBackend::None
    );

    // A durable backend without its server is refused at startup.
    let e = error(&["--history-backend", "postgres"]);
    assert!(e.contains("--postgres-db-url"), "{e}");
    let e = error(&["--history-backend", "redis"]);
    assert!(e.contains("--redis-url"), "{e}");
    // Bad values name the flag and never echo a URL (it may carry a password).
    let e = error(&["--history-backend", "sqlite"]);
    assert!(
        e.contains("--history-backend") && e.contains("postgres"),
        "{e}"
    );
    let e = error(&["--postgres-db-url", "mysql://u:pg-secret@db/x"]);
    assert!(
        e.contains("--postgres-db-url") && !e.contains("pg-secret"),
        "{e}"
    );
    let e = error(&["--redis-url", "rediss://:r-secret@h"]);
    assert!(e.contains("--redis-url") && !e.contains("r-secret"), "{e}");
    assert!(error(&["--history-pool-size", "0"]).contains("--history-pool-size"));
    assert!(error(&["--history-timeout-secs", "0"]).contains("--history-timeout-secs"));
    assert!(error(&["--history-memory-max-responses", "0"]).contains("max-responses"));

    let help = help_text();
    assert!(help.contains("\nHistory store:\n"), "{help}");
    for flag in [
        "--history-backend <BACKEND>",
        "--postgres-db-url <URL>",
        "--redis-url <URL>",
        "--history-pool-size <N>",
        "--history-timeout-secs <SECS>",
        "--history-memory-max-responses <N>",
        "--history-memory-max-conversations <N>",
    ] {
        assert!(help.contains(flag), "{flag} missing from help");
    }
}
