//! Helpers shared by the integration test files on top of `common`: request bodies, timed
//! streaming reads, a raw HTTP/1.1 connection that parses responses one by one, a bare h2c
//! connection, and the gateway error envelope check.

#![allow(dead_code)]

pub mod echo;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

use crate::common::Reply;

/// The client type `common::client` builds.
pub type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// The text of a Responses object's `message` items, concatenated.
/// The JSON payloads of an SSE body, in order (`[DONE]` left out, `event:` lines skipped).
pub fn stream_events(sse: &str) -> Vec<Value> {
    sse.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// The text of a streamed chat completion's first choice: its deltas' content, joined.
pub fn chat_delta_text(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .filter_map(|c| c["delta"]["content"].as_str())
        .collect()
}

pub fn response_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .map(|item| item["content"][0]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// One user message, as chat and messages bodies want it.
pub fn messages() -> Value {
    json!([{"role": "user", "content": "hello there, gateway"}])
}

/// A generation body for `path` that the mock accepts; `stream` sets `"stream"`, `mock`
/// (if not null) is the mock's per-request override object.
pub fn generation_body(path: &str, stream: bool, mock: Value) -> Value {
    let mut body = match path {
        "/v1/chat/completions" => json!({"model": "mock-model", "messages": messages()}),
        "/v1/completions" => json!({"model": "mock-model", "prompt": "once upon a time"}),
        "/generate" => json!({"text": "once upon a time", "sampling_params": {}}),
        "/v1/messages" => {
            json!({"model": "mock-model", "max_tokens": 1000, "messages": messages()})
        }
        "/v1/responses" => json!({"model": "mock-model", "input": "once upon a time"}),
        other => panic!("no generation body for {other}"),
    };
    if stream {
        body["stream"] = json!(true);
    }
    if !mock.is_null() {
        body["mock"] = mock;
    }
    body
}

/// A chat completions body.
pub fn chat(stream: bool, mock: Value) -> Value {
    generation_body("/v1/chat/completions", stream, mock)
}

/// Sends a request and returns the response with its body not yet read.
pub async fn start(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> http::Response<Incoming> {
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body.into())).expect("request");
    tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .expect("response head within 30 s")
        .expect("response head")
}

/// Starts a JSON POST and returns the response with its body not yet read.
pub async fn start_json(client: &HttpClient, url: &str, body: &Value) -> http::Response<Incoming> {
    start(
        client,
        "POST",
        url,
        &[("content-type", "application/json")],
        serde_json::to_vec(body).expect("json"),
    )
    .await
}

/// Data frames of a body with their arrival times, and how the body ended.
#[derive(Debug, Default)]
pub struct Frames {
    pub frames: Vec<(Instant, Bytes)>,
    /// The body ended with an error (rather than cleanly).
    pub error: Option<String>,
    /// The body neither ended nor failed within the timeout.
    pub timed_out: bool,
}

impl Frames {
    pub fn text(&self) -> String {
        let mut all = Vec::new();
        for (_, b) in &self.frames {
            all.extend_from_slice(b);
        }
        String::from_utf8_lossy(&all).into_owned()
    }

    pub fn clean_end(&self) -> bool {
        self.error.is_none() && !self.timed_out
    }
}

/// Reads a body frame by frame, stamping each data frame on arrival, for at most `limit`.
pub async fn read_frames(body: &mut Incoming, limit: Duration) -> Frames {
    let end = Instant::now() + limit;
    let mut out = Frames::default();
    loop {
        let remaining = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, body.frame()).await {
            Err(_) => {
                out.timed_out = true;
                return out;
            }
            Ok(None) => return out,
            Ok(Some(Err(e))) => {
                out.error = Some(e.to_string());
                return out;
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    out.frames.push((Instant::now(), data));
                }
            }
        }
    }
}

/// Reads frames until `needle` has been seen (or the body ends, or `limit` passes).
/// Returns the text read so far.
pub async fn read_until(body: &mut Incoming, needle: &str, limit: Duration) -> String {
    let end = Instant::now() + limit;
    let mut all = Vec::new();
    loop {
        if String::from_utf8_lossy(&all).contains(needle) {
            break;
        }
        let remaining = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    all.extend_from_slice(&data);
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

/// One bare h2c (prior knowledge) connection; every request sent through the returned
/// handle is a stream of that same connection.
pub async fn h2_connection(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    let driver = tokio::spawn(conn);
    (send, driver)
}

/// Checks the gateway error envelope and header: `{"error":{"type":<reason phrase>,
/// "code":<code>,"message":<non-empty>,"param":null}}` and `x-gw-error-code: <code>`.
pub fn assert_gateway_error(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "status; body {:?}", reply.text());
    let header = reply
        .headers
        .get("x-gw-error-code")
        .unwrap_or_else(|| panic!("no x-gw-error-code header: {:?}", reply.headers));
    assert_eq!(header.to_str().expect("ascii header"), code);
    let ct = reply
        .headers
        .get("content-type")
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert!(ct.starts_with("application/json"), "content-type {ct:?}");
    let body = reply.json();
    let top = body.as_object().expect("envelope is an object");
    assert_eq!(top.len(), 1, "only `error` at the top level: {body}");
    let err = body["error"].as_object().expect("`error` is an object");
    let mut keys: Vec<&str> = err.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["code", "message", "param", "type"],
        "envelope keys: {body}"
    );
    let reason = http::StatusCode::from_u16(status)
        .expect("status")
        .canonical_reason()
        .expect("reason phrase");
    assert_eq!(err["type"], reason, "type is the reason phrase: {body}");
    assert_eq!(err["code"], code, "code: {body}");
    assert_eq!(err["code"].as_str(), Some(code), "code equals the header");
    assert!(err["param"].is_null(), "param null: {body}");
    let message = err["message"].as_str().expect("message is a string");
    assert!(!message.is_empty(), "message non-empty");
}

/// A response read off a raw HTTP/1.1 connection.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Lowercase names, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A raw client connection that can carry several HTTP/1.1 exchanges.
pub struct RawConn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    pub fn connect(addr: SocketAddr) -> RawConn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        RawConn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads more bytes into the buffer; `Ok(0)` when the peer closed.
    fn fill(&mut self, deadline: Instant) -> std::io::Result<usize> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(remaining))?;
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads exactly one response (head and body) within `timeout`; `None` when the
    /// connection closed or failed before a complete response arrived.
    pub fn read_response(&mut self, timeout: Duration) -> Option<RawResponse> {
        let deadline = Instant::now() + timeout;
        let head_end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos + 4;
            }
            match self.fill(deadline) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?;
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")?
            .get(..3)?
            .parse()
            .ok()?;
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
            })
            .collect();
        self.buf.drain(..head_end);
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let body = if status < 200 || status == 204 || status == 304 {
            Vec::new()
        } else if get("transfer-encoding").is_some_and(|te| te.contains("chunked")) {
            self.read_chunked(deadline)?
        } else if let Some(len) = get("content-length") {
            let len: usize = len.parse().ok()?;
            while self.buf.len() < len {
                match self.fill(deadline) {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
            self.buf.drain(..len).collect()
        } else {
            // Delimited by close.
            loop {
                match self.fill(deadline) {
                    Ok(0) => break,
                    Err(_) => return None,
                    Ok(_) => {}
                }
            }
            std::mem::take(&mut self.buf)
        };
        Some(RawResponse {
            status,
            headers,
            body,
        })
    }

    fn read_chunked(&mut self, deadline: Instant) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(pos) = find(&self.buf, b"\r\n") {
                    break pos;
                }
                match self.fill(deadline) {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            };
            let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).ok()?;
            self.buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers (if any) up to the empty line.
                loop {
                    if let Some(pos) = find(&self.buf, b"\r\n") {
                        let empty = pos == 0;
                        self.buf.drain(..pos + 2);
                        if empty {
                            return Some(body);
                        }
                        continue;
                    }
                    match self.fill(deadline) {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => {}
                    }
                }
            }
            while self.buf.len() < size + 2 {
                match self.fill(deadline) {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
        }
    }

    /// Waits up to `timeout` for the peer to close the connection (EOF or reset). Returns
    /// the time it took, or `None` if it stayed open. Bytes that arrive meanwhile are kept.
    pub fn wait_closed(&mut self, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            match self.fill(deadline) {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(start.elapsed()),
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => return Some(start.elapsed()),
                Err(_) => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
            }
        }
    }

    /// Bytes received but not consumed by a parsed response.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Like `common::raw_exchange`, but tolerates the server closing while the request is still
/// being written (it may answer early and reset): reads on a separate thread while writing.
pub fn raw_roundtrip(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> (Vec<u8>, bool) {
    let stream = TcpStream::connect(addr).expect("connect");
    let mut reader = stream.try_clone().expect("clone");
    reader.set_read_timeout(Some(timeout)).expect("timeout");
    let handle = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        let closed = loop {
            match reader.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                    ) =>
                {
                    break true
                }
                Err(_) => break false,
            }
        };
        (out, closed)
    });
    let mut writer = stream;
    let _ = writer.write_all(bytes);
    handle.join().expect("reader thread")
}

/// Sends a signal (e.g. "TERM") to a process without waiting for it.
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Waits up to `timeout` for a child process to exit.
pub fn wait_exit(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
