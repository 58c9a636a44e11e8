//! Command line, black box: help, flag errors (exit 2, one line naming the flag), and both
//! IO engines starting and serving.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::{gateway, run_to_exit};

/// Runs the gateway with `args` and returns its output; fails if it is still running after
/// 10 s (it would be serving instead of refusing the flags).
fn run(args: &[&str]) -> Output {
    run_to_exit(args, &[])
}

const GROUPS: &[&str] = &[
    "Listener:",
    "Workers:",
    "Routing:",
    "Runtime:",
    "Limits and timeouts:",
    "Logging:",
    "Authentication:",
    "Metrics:",
    "History store:",
];

/// (group, flag) of every flag of this issue, in help order.
const FLAGS: &[(&str, &str)] = &[
    ("Listener:", "--host"),
    ("Listener:", "--port"),
    ("Workers:", "--worker-urls"),
    ("Routing:", "--policy"),
    ("Runtime:", "--runtime-worker-threads"),
    ("Runtime:", "--io-engine"),
    ("Limits and timeouts:", "--request-timeout-secs"),
    ("Limits and timeouts:", "--max-payload-size"),
    ("Limits and timeouts:", "--shutdown-grace-period-secs"),
    ("Limits and timeouts:", "--upstream-pool-idle-timeout-secs"),
    ("Limits and timeouts:", "--header-read-timeout-secs"),
    ("Limits and timeouts:", "--keep-alive-timeout-secs"),
    ("Logging:", "--log-level"),
    ("Logging:", "--log-json"),
    ("Logging:", "--log-dir"),
    ("Authentication:", "--api-key"),
    ("Metrics:", "--prometheus-host"),
    ("Metrics:", "--prometheus-port"),
    ("History store:", "--history-backend"),
    ("History store:", "--postgres-db-url"),
    ("History store:", "--redis-url"),
    ("History store:", "--history-pool-size"),
    ("History store:", "--history-timeout-secs"),
];

#[test]
fn help_lists_every_group_and_flag() {
    for switch in ["--help", "-h"] {
        let out = run(&[switch]);
        assert_eq!(out.status.code(), Some(0), "{switch}");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = help.lines().collect();
        // Each group heading on its own line, in order.
        let mut group_at = Vec::new();
        for group in GROUPS {
            let at = lines
                .iter()
                .position(|l| l.trim() == *group)
                .unwrap_or_else(|| panic!("{switch}: group {group} missing:\n{help}"));
            group_at.push(at);
        }
        assert!(
            group_at.windows(2).all(|w| w[0] < w[1]),
            "groups out of order"
        );
        // Each flag listed as the first word of a line in its group's section.
        for (group, flag) in FLAGS {
            let g = GROUPS.iter().position(|x| x == group).expect("group");
            let from = group_at[g];
            let to = group_at.get(g + 1).copied().unwrap_or(lines.len());
            let found = lines[from..to]
                .iter()
                .any(|l| l.split_whitespace().next() == Some(*flag));
            assert!(found, "{switch}: {flag} not listed under {group}:\n{help}");
        }
        for flag in ["--help", "--version"] {
            assert!(help.contains(flag), "{flag} missing");
        }
    }
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tollgate "));
}

/// Exit status 2, nothing on stdout, and exactly one line on stderr that names `flag`.
fn assert_rejected(args: &[&str], flag: &str) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: stdout {:?}", out.stdout);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected: {stderr:?}");
    assert!(stderr.ends_with('\n'), "{args:?}: {stderr:?}");
    assert!(
        lines[0].contains(flag),
        "{args:?}: {flag} not named: {stderr:?}"
    );
    stderr
}

#[test]
fn unknown_flag_exits_2_with_one_line() {
    assert_rejected(&["--bogus-flag"], "--bogus-flag");
    assert_rejected(
        &["--port", "30001", "--no-such-thing", "1"],
        "--no-such-thing",
    );
}

#[test]
fn bad_values_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["--port", "banana"], "--port"),
        (&["--port", "70000"], "--port"),
        (&["--port=-1"], "--port"),
        (&["--io-engine", "kqueue"], "--io-engine"),
        (&["--policy", "fastest"], "--policy"),
        (&["--max-payload-size", "12XB"], "--max-payload-size"),
        (
            &["--request-timeout-secs", "soon"],
            "--request-timeout-secs",
        ),
        (
            &["--keep-alive-timeout-secs", "-3"],
            "--keep-alive-timeout-secs",
        ),
        (&["--log-level", "loud"], "--log-level"),
        (
            &["--runtime-worker-threads", "many"],
            "--runtime-worker-threads",
        ),
        (&["--request-timeout-secs"], "--request-timeout-secs"),
        (&["--worker-urls"], "--worker-urls"),
    ];
    for (args, flag) in cases {
        assert_rejected(args, flag);
    }
}

#[test]
fn prometheus_port_zero_is_rejected() {
    let stderr = assert_rejected(&["--prometheus-port", "0"], "--prometheus-port");
    assert!(stderr.contains("Port must be > 0"), "{stderr:?}");
}

async fn engine_serves_health(engine: &str, log_name: &str) {
    let gw = gateway(&["--io-engine", engine]);
    let c = common::client(false);
    for _ in 0..3 {
        let reply = common::send(&c, "GET", &format!("{}/health", gw.url()), &[], "").await;
        assert_eq!(reply.status, 200, "{engine}");
    }
    let reply = common::send(
        &common::client(true),
        "GET",
        &format!("{}/liveness", gw.url()),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 200, "{engine} over h2c");
    let needle = format!("engine=\"{log_name}\"");
    let named = common::eventually(Duration::from_secs(2), || {
        let found = gw.log_text().contains(&needle);
        async move { found }
    })
    .await;
    assert!(
        named,
        "{engine}: startup log does not name the engine:\n{}",
        gw.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoll_engine_starts_and_serves() {
    engine_serves_health("epoll", "epoll").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uring_engine_starts_and_serves() {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "0".to_string());
    if disabled != "0" {
        eprintln!("io_uring disabled on this machine (io_uring_disabled={disabled}): skipped");
        return;
    }
    engine_serves_health("uring", "io_uring").await;
}

/// A durable history store that cannot be reached stops startup (exit 1) before anything
/// listens, with one message naming the server but never the URL's password.
#[test]
fn an_unreachable_history_store_stops_startup_without_its_password() {
    let cases = [
        (
            "postgres",
            "--postgres-db-url",
            "postgres://tg:pw-never-shown@127.0.0.1:1/hist",
        ),
        (
            "redis",
            "--redis-url",
            "redis://:pw-never-shown@127.0.0.1:1/0",
        ),
    ];
    for (backend, flag, url) in cases {
        let out = run(&[
            "--history-backend",
            backend,
            flag,
            url,
            "--history-timeout-secs",
            "2",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{backend}: {stderr}");
        assert!(stderr.contains("history store"), "{backend}: {stderr}");
        assert!(stderr.contains("127.0.0.1:1"), "{backend}: {stderr}");
        assert!(!stderr.contains("pw-never-shown"), "{backend}: {stderr}");
    }
    // Without its URL, the backend is refused on the command line (exit 2).
    let stderr = assert_rejected(&["--history-backend", "postgres"], "--history-backend");
    assert!(stderr.contains("--postgres-db-url"), "{stderr}");
}

/// A `--mcp-config-path` file that is not a valid configuration stops startup (exit 1)
/// with the reason, never the servers' tokens; so does a missing file.
#[test]
fn a_bad_mcp_config_stops_startup_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("tg-mcp-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            r#"{"builtins": [{"type": "web_search", "url": "http://x/mcp", "tool": "t",
                "authorization": "tok-never-shown"}]}"#,
            "unknown built-in",
        ),
        (
            r#"{"builtins": [{"type": "file_search", "url": "http://x/mcp", "tool": "t"},
                             {"type": "file_search", "url": "http://y/mcp", "tool": "t",
                              "authorization": "tok-never-shown"}]}"#,
            "backed twice",
        ),
        ("{", "not valid"),
    ];
    for (n, (text, said)) in cases.iter().enumerate() {
        let path = dir.join(format!("{n}.json"));
        std::fs::write(&path, text).unwrap();
        let out = run(&["--mcp-config-path", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(stderr.contains("--mcp-config-path"), "{stderr}");
        assert!(stderr.contains(said), "{said}: {stderr}");
        assert!(!stderr.contains("tok-never-shown"), "{stderr}");
    }
    let missing = dir.join("missing.json");
    let out = run(&["--mcp-config-path", missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("missing.json"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
