//! Shared harness of the black-box tests: start the real `tollgate` binary and bundled
//! `mock-worker` processes on 127.0.0.1, and talk to them over real sockets.
//!
//! `TOLLGATE_TEST_IO_ENGINE` (auto, uring, epoll) picks the gateway's IO engine, so CI runs
//! the same suite on both engines; `TOLLGATE_TEST_BINARY` runs it against another build of
//! the gateway (e.g. `perf/pgo`'s).

#![allow(dead_code)]

pub mod pki;
pub mod stores;
pub mod tls;
pub mod tokenizer;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The gateway binary under test: the one cargo built with the tests, or the binary
/// `TOLLGATE_TEST_BINARY` names (a `perf/pgo` build, to test what ships).
pub fn gateway_binary() -> String {
    std::env::var("TOLLGATE_TEST_BINARY")
        .ok()
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tollgate").to_owned())
}
pub const MOCK: &str = env!("CARGO_BIN_EXE_mock-worker");
pub const GRPC_ENGINE: &str = env!("CARGO_BIN_EXE_grpc-engine");
pub const RELAY_FLOOR: &str = env!("CARGO_BIN_EXE_relay-floor");

/// A child process killed on drop, with its stderr captured for assertions and failures.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<String>>,
    /// The gateway's metrics listener (`None` for mock workers).
    pub metrics: Option<SocketAddr>,
}

impl Proc {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://…/metrics` of a gateway.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.metrics.expect("a gateway"))
    }

    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// How often `needle` is in the log once it has been there `count` times, or once
    /// `timeout` passes. A thread reads the log from the child's pipe, so a line the child
    /// flushed before it answered can reach the log a moment after the answer reaches
    /// the test: counting at once races that thread.
    pub async fn log_count(&self, needle: &str, count: usize, timeout: Duration) -> usize {
        let end = Instant::now() + timeout;
        loop {
            let seen = self.log_text().matches(needle).count();
            if seen >= count || Instant::now() >= end {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How often `needle` is in the log once `expected` lines are in (up to `timeout`) and
    /// a further second has brought no other: for asserting that exactly `expected` were
    /// logged when any extra line would come ahead of the awaited ones, so a partly read
    /// log cannot pass for a complete one.
    pub async fn settled_log_count(
        &self,
        needle: &str,
        expected: usize,
        timeout: Duration,
    ) -> usize {
        self.log_count(needle, expected, timeout).await;
        self.log_count(needle, expected + 1, Duration::from_secs(1))
            .await
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn capture<R: Read + Send + 'static>(reader: R, log: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut lines = BufReader::new(reader).lines();
        while let Some(Ok(line)) = lines.next() {
            if std::env::var_os("TOLLGATE_TEST_VERBOSE").is_some() {
                eprintln!("{line}");
            }
            if let Ok(mut l) = log.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
}

/// Starts a mock worker with extra flags; returns once it listens.
pub fn mock(args: &[&str]) -> Proc {
    listening(MOCK, args)
}

/// Starts a `grpc-engine` (mock mode unless `args` say `--llama-server`); returns once it
/// listens. Its event lines (`generate ...`, `abort ...`, `cancelled ...`) land in the log.
pub fn grpc_engine(args: &[&str]) -> Proc {
    listening(GRPC_ENGINE, args)
}

/// Starts `relay-floor` (`perf/relay_floor/`) with extra flags; returns once it listens.
pub fn relay_floor(args: &[&str]) -> Proc {
    listening(RELAY_FLOOR, args)
}

/// Starts a bundled server that announces `LISTENING <addr>` as its first stdout line.
fn listening(binary: &str, args: &[&str]) -> Proc {
    let mut child = Command::new(binary)
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {binary}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    let mut reader = BufReader::new(stdout);
    reader
        .read_line(&mut first)
        .unwrap_or_else(|e| panic!("{binary} prints its address: {e}"));
    let addr: SocketAddr = first
        .trim()
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("unexpected {binary} output {first:?}"))
        .parse()
        .expect("listening address");
    let log = Arc::new(Mutex::new(String::new()));
    capture(reader, log.clone());
    if let Some(err) = child.stderr.take() {
        capture(err, log.clone());
    }
    Proc {
        child,
        addr,
        log,
        metrics: None,
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn io_engine() -> String {
    std::env::var("TOLLGATE_TEST_IO_ENGINE").unwrap_or_else(|_| "auto".into())
}

/// Runs the gateway with `args` and extra environment until it exits, and returns its
/// output; fails if it is still running after 10 s (it would be serving instead of
/// refusing its configuration).
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(gateway_binary());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn tollgate");
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "tollgate {args:?} kept running instead of exiting:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the gateway with extra flags and waits until it accepts connections.
pub fn gateway(args: &[&str]) -> Proc {
    gateway_with_env(args, &[])
}

/// Starts the gateway on a port the OS picks (`--port 0`: two gateways can never share
/// a port, which `SO_REUSEPORT` would otherwise allow) and learns the address from its
/// "tollgate listening" log record.
pub fn gateway_with_env(args: &[&str], env: &[(&str, &str)]) -> Proc {
    start_gateway(args, env, None)
}

/// An open-file limit (`RLIMIT_NOFILE`) to start the gateway under.
#[derive(Clone, Copy)]
pub struct Nofile {
    pub limit: u32,
    /// Lower only the soft limit (the hard one stays as it was).
    pub soft_only: bool,
}

/// Starts the gateway with its open-file limit (soft and hard) lowered to `nofile`.
pub fn gateway_with_nofile(args: &[&str], nofile: u32) -> Proc {
    let limit = Nofile {
        limit: nofile,
        soft_only: false,
    };
    start_gateway(args, &[], Some(limit))
}

/// Starts the gateway with only its soft open-file limit lowered to `nofile`.
pub fn gateway_with_soft_nofile(args: &[&str], nofile: u32) -> Proc {
    let limit = Nofile {
        limit: nofile,
        soft_only: true,
    };
    start_gateway(args, &[], Some(limit))
}

fn start_gateway(args: &[&str], env: &[(&str, &str)], nofile: Option<Nofile>) -> Proc {
    // The metrics port is chosen here and can be taken by another test between the check
    // and the bind: the gateway then refuses to start, and another port is tried.
    for _ in 0..5 {
        if let Some(proc) = try_gateway(args, env, nofile) {
            return proc;
        }
    }
    panic!("tollgate could not bind a metrics port in five tries");
}

/// One start; `None` when the metrics port was taken.
fn try_gateway(args: &[&str], env: &[(&str, &str)], nofile: Option<Nofile>) -> Option<Proc> {
    let engine = io_engine();
    let metrics_port = free_port().to_string();
    let mut cmd = match nofile {
        // The shell lowers its own limit and then becomes the gateway (same process id).
        Some(Nofile { limit, soft_only }) => {
            let script = if soft_only {
                r#"ulimit -S -n "$0" && exec "$@""#
            } else {
                r#"ulimit -n "$0" && exec "$@""#
            };
            let mut sh = Command::new("sh");
            sh.args(["-c", script])
                .arg(limit.to_string())
                .arg(gateway_binary());
            sh
        }
        None => Command::new(gateway_binary()),
    };
    cmd.args(["--host", "127.0.0.1", "--port", "0"])
        .args([
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            &metrics_port,
        ])
        .args(["--runtime-worker-threads", "2", "--io-engine", &engine])
        .args(["--log-level", "debug"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn tollgate");
    let log = Arc::new(Mutex::new(String::new()));
    if let Some(out) = child.stdout.take() {
        capture(out, log.clone());
    }
    if let Some(err) = child.stderr.take() {
        capture(err, log.clone());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        let text = log.lock().map(|l| l.clone()).unwrap_or_default();
        if let Some(addr) = listening_addr(&text) {
            break addr;
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Give the log reader a moment to catch the last line.
            std::thread::sleep(Duration::from_millis(50));
            let text = log.lock().map(|l| l.clone()).unwrap_or_default();
            if text.contains("for metrics") {
                return None;
            }
            panic!("tollgate exited early ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "tollgate did not start listening:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let metrics = format!("127.0.0.1:{metrics_port}").parse().ok();
    // The wait speaks plain HTTP; `tls::tls_gateway` waits over TLS instead.
    if !args.contains(&"--tls-cert-path") {
        wait_for_startup_workers(addr, args);
    }
    Some(Proc {
        child,
        addr,
        log,
        metrics,
    })
}

/// Command-line workers register like API ones (probed, detected, ready after their
/// health checks pass) while the gateway already listens. Tests expect the workers they
/// started to be in rotation, so this waits (up to 15 s) until `/readiness` counts every
/// `--worker-urls` entry that accepts connections; entries nothing listens on are left
/// to the test.
fn wait_for_startup_workers(addr: SocketAddr, args: &[&str]) {
    let live = args
        .iter()
        .skip_while(|a| **a != "--worker-urls")
        .skip(1)
        .take_while(|a| !a.starts_with("--"))
        .filter(|url| accepts_connections(url))
        .count();
    if live == 0 {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let (reply, _) = raw_exchange(
            addr,
            b"GET /readiness HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            Duration::from_secs(2),
        );
        let text = String::from_utf8_lossy(&reply);
        let ready = text
            .split("\"ready_workers\":")
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if ready >= live {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether something listens at the host:port of `url` (an `http://` URL).
fn accepts_connections(url: &str) -> bool {
    let Some(authority) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
    else {
        return false;
    };
    use std::net::ToSocketAddrs;
    authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok()
        })
}

/// The listener address in the "tollgate listening" record, plain (`addr=…`) or JSON
/// (`"addr":"…"`).
fn listening_addr(log: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|l| l.contains("tollgate listening"))?;
    let start = line
        .find("addr=")
        .map(|i| i + "addr=".len())
        .or_else(|| line.find("\"addr\":\"").map(|i| i + "\"addr\":\"".len()))?;
    let rest = &line[start..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '"' || c == ',')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A response read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// HTTP/1.1 or h2c (prior knowledge) client.
pub fn client(h2: bool) -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build_http()
}

pub async fn send<C>(
    client: &Client<C, Full<Bytes>>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body.into())).expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .expect("response within 30 s")
        .expect("response");
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(30), body.collect())
        .await
        .expect("body within 30 s")
        .expect("body")
        .to_bytes();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

/// Shorthand: HTTP/1.1 request with a JSON body.
/// `method` on `path` of `gw` with a JSON `body` (none: empty), as the tenant of API key
/// `key` (none: no `Authorization`).
pub async fn call_with_key(
    gw: &Proc,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    key: Option<&str>,
) -> Reply {
    let url = format!("{}{path}", gw.url());
    let bearer = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("authorization", b.as_str()));
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    send(&client(false), method, &url, &headers, body).await
}

pub async fn post_json(url: &str, body: &serde_json::Value) -> Reply {
    post_json_with(url, body, &[]).await
}

/// HTTP/1.1 request with a JSON body and extra headers.
pub async fn post_json_with(
    url: &str,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send(
        &client(false),
        "POST",
        url,
        &all,
        serde_json::to_vec(body).expect("json"),
    )
    .await
}

pub async fn get(url: &str) -> Reply {
    send(&client(false), "GET", url, &[], Bytes::new()).await
}

/// The mock worker's request log.
/// The mock's request log without the gateway's housekeeping (health probes and
/// registration detection, sent with a `tollgate-probe/` user agent).
pub async fn mock_requests(mock: &Proc) -> Vec<serde_json::Value> {
    mock_requests_all(mock)
        .await
        .into_iter()
        .filter(|r| {
            !r["headers"]["user-agent"]
                .as_str()
                .is_some_and(|ua| ua.starts_with("tollgate-probe/"))
        })
        .collect()
}

/// The mock's whole request log, housekeeping included.
pub async fn mock_requests_all(mock: &Proc) -> Vec<serde_json::Value> {
    let reply = get(&format!("{}/mock/requests", mock.url())).await;
    match reply.json() {
        serde_json::Value::Array(items) => items,
        other => panic!("unexpected request log {other}"),
    }
}

/// Writes raw bytes on a fresh connection and reads until the peer closes or `timeout`.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(timeout)).expect("timeout");
    s.write_all(bytes).expect("write");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (out, closed)
}

/// Status code of the first response in raw HTTP/1.1 bytes.
pub fn raw_status(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// The gateway's `GET /workers` list (no control-plane auth).
pub async fn listed_workers(gw: &Proc) -> Vec<serde_json::Value> {
    let reply = get(&format!("{}/workers", gw.url())).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["workers"]
        .as_array()
        .cloned()
        .expect("workers array")
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// Waits until the gateway's `/readiness` answers 200 (a worker can take traffic).
pub async fn wait_ready(gw: &Proc) {
    let url = format!("{}/readiness", gw.url());
    assert!(
        eventually(Duration::from_secs(20), || {
            let url = url.clone();
            async move { get(&url).await.status == 200 }
        })
        .await,
        "no worker became ready:\n{}",
        gw.log_text()
    );
}

/// The gateway's `/metrics` exposition.
pub async fn scrape(gw: &Proc) -> String {
    let reply = get(&gw.metrics_url()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text()
}

/// The value of the sample `series` (name with its labels, exactly as exported).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Sets the engine load a mock worker reports (`/v1/loads`, `/metrics`).
pub async fn set_load(m: &Proc, running: u64, waiting: u64, token_usage: f64) {
    let patch = serde_json::json!({
        "load": {"running": running, "waiting": waiting, "token_usage": token_usage}
    });
    let reply = post_json(&format!("{}/mock/config", m.url()), &patch).await;
    assert_eq!(reply.status, 200, "mock config: {}", reply.text());
}
