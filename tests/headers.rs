//! Header policy, black box: only the allowlist reaches workers (values untouched),
//! `Authorization` precedence between the client and `--api-key`, and hop-by-hop headers of
//! worker responses stay on their hop.

use crate::common;
use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use common::{client, gateway, mock, mock_requests, send, Proc};
use serde_json::Value;

/// Every forwarded header with a value that would show any rewriting.
const ALLOWED: &[(&str, &str)] = &[
    ("authorization", "Bearer client.token-123_ABC"),
    ("anthropic-version", "2023-06-01"),
    (
        "anthropic-beta",
        "tools-2024-04-04,prompt-caching-2024-07-31",
    ),
    ("vendor-version", "v7"),
    ("vendor-beta", "beta feature; q=0.5"),
    ("x-request-id", "req-0001-ABC"),
    ("x-correlation-id", "corr 42"),
    ("x-request-id-span", "span=7"),
    (
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ),
    ("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    ("x-gw-routing-key", "user-1234"),
];

/// Headers a client may send that must stay at the edge.
const DROPPED: &[(&str, &str)] = &[
    ("x-api-key", "sk-secret"),
    ("cookie", "session=abc; theme=dark"),
    ("x-custom", "custom"),
    ("accept", "text/event-stream"),
    ("user-agent", "tests/1.0"),
    ("accept-encoding", "gzip"),
    ("x-forwarded-for", "10.0.0.1"),
    ("proxy-authorization", "Basic Zm9vOmJhcg=="),
    ("x-requestid", "no dash, not allowed"),
];

/// Headers the upstream hop itself may carry besides the allowlist.
const TRANSPORT: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "content-type",
];

async fn last_request(mock: &Proc) -> Value {
    mock_requests(mock).await.pop().expect("a recorded request")
}

async fn allowlist(h2: bool) {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let mut headers: Vec<(&str, &str)> = ALLOWED.to_vec();
    headers.extend_from_slice(DROPPED);
    headers.push(("content-type", "text/plain; charset=latin1"));
    headers.push(("x-request-id-multi", "first"));
    headers.push(("x-request-id-multi", "second"));
    if !h2 {
        headers.push(("host", "client-chosen.example"));
        headers.push(("connection", "keep-alive"));
        headers.push(("keep-alive", "timeout=5"));
        headers.push(("te", "trailers"));
    }
    let body = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    let reply = send(
        &client(h2),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &headers,
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    let seen = last_request(&upstream).await;
    let got = seen["headers"].as_object().expect("headers object");
    for (name, value) in ALLOWED {
        assert_eq!(
            got.get(*name).and_then(Value::as_str),
            Some(*value),
            "{name}"
        );
    }
    assert_eq!(got["x-request-id-multi"], "first, second");
    for (name, _) in DROPPED {
        assert!(
            !got.contains_key(*name),
            "{name} must not be forwarded: {seen}"
        );
    }
    assert_eq!(got["content-type"], "application/json");
    assert_eq!(
        got["host"],
        upstream.addr.to_string(),
        "host names the worker"
    );
    let allowed: BTreeSet<&str> = ALLOWED
        .iter()
        .map(|(n, _)| *n)
        .chain(TRANSPORT.iter().copied())
        .chain(["x-request-id-multi"])
        .collect();
    let extra: Vec<&String> = got
        .keys()
        .filter(|k| !allowed.contains(k.as_str()))
        .collect();
    assert!(extra.is_empty(), "unexpected headers forwarded: {extra:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_headers_reach_the_worker_h1() {
    allowlist(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_headers_reach_the_worker_h2() {
    allowlist(true).await;
}

async fn post_chat(gw: &Proc, h2: bool, headers: &[(&str, &str)]) -> common::Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send(
        &client(h2),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &all,
        serde_json::to_vec(&support::chat(false, Value::Null)).expect("json"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_authorization_is_passed_as_sent() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    for h2 in [false, true] {
        for value in [
            "Bearer client-token",
            "Basic dXNlcjpwYXNz",
            "bearer  Odd Spacing",
        ] {
            let reply = post_chat(&gw, h2, &[("authorization", value)]).await;
            assert_eq!(reply.status, 200);
            let seen = last_request(&upstream).await;
            assert_eq!(seen["headers"]["authorization"], value, "h2: {h2}");
        }
        // No key anywhere: no Authorization is invented.
        let reply = post_chat(&gw, h2, &[]).await;
        assert_eq!(reply.status, 200);
        let seen = last_request(&upstream).await;
        assert!(seen["headers"].get("authorization").is_none(), "{seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_key_reaches_the_worker_as_sent() {
    // `--api-key` guards the data plane and is also the worker's key: the client presents
    // it, the worker receives it unchanged, and `x-api-key` stays at the gateway.
    let upstream = mock(&["--api-key", "gwkey"]);
    let gw = gateway(&["--worker-urls", &upstream.url(), "--api-key", "gwkey"]);
    for h2 in [false, true] {
        let reply = post_chat(
            &gw,
            h2,
            &[
                ("authorization", "Bearer gwkey"),
                ("x-api-key", "client-side"),
            ],
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let seen = last_request(&upstream).await;
        assert_eq!(seen["headers"]["authorization"], "Bearer gwkey");
        assert!(seen["headers"].get("x-api-key").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_authorization_wins_over_the_worker_key() {
    let upstream = mock(&["--api-key", "gwkey"]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--api-key",
        "gwkey",
        "--tenant-api-key",
        "acme:tenant-token",
    ]);
    for h2 in [false, true] {
        let reply = post_chat(&gw, h2, &[("authorization", "Bearer tenant-token")]).await;
        // The gateway accepts the tenant key and passes it on instead of its own worker key;
        // the worker does not accept it, and its 401 is relayed.
        assert_eq!(reply.status, 401, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "authentication_error");
        let seen = last_request(&upstream).await;
        assert_eq!(seen["headers"]["authorization"], "Bearer tenant-token");
    }
}

/// A minimal worker answering every request with hop-by-hop headers and a chunked body.
fn hop_by_hop_worker() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve_hop_by_hop(stream));
        }
    });
    addr
}

const WORKER_BODY: &str = r#"{"object":"chat.completion","hop":"ok"}"#;

fn serve_hop_by_hop(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        // Read one request: head, then a Content-Length or chunked body.
        let request_end = loop {
            if let Some(end) = request_end(&buf) {
                break end;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..request_end);
        let (a, b) = WORKER_BODY.split_at(10);
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Worker-Header: kept\r\n\
             Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n\
             Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTrailer: X-Checksum\r\n\
             TE: trailers\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Where the first complete request in `buf` ends, if it is complete.
fn request_end(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if head.contains("transfer-encoding: chunked") {
        let rest = &buf[head_end..];
        let end = rest.windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head_end + end + 5);
    }
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap_or(0));
    (buf.len() >= head_end + len).then_some(head_end + len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_are_not_relayed() {
    let worker = hop_by_hop_worker();
    let gw = gateway(&["--worker-urls", &format!("http://{worker}")]);
    for h2 in [false, true] {
        for _ in 0..2 {
            let reply = post_chat(&gw, h2, &[]).await;
            assert_eq!(reply.status, 200, "h2: {h2}: {}", reply.text());
            assert_eq!(reply.text(), WORKER_BODY, "body relayed whole");
            let h = &reply.headers;
            assert_eq!(h["x-worker-header"], "kept");
            assert_eq!(h["content-type"], "application/json");
            for name in [
                "connection",
                "keep-alive",
                "proxy-connection",
                "upgrade",
                "trailer",
                "te",
            ] {
                assert!(h.get(name).is_none(), "h2: {h2}: {name} relayed: {h:?}");
            }
            let te: Vec<_> = h.get_all("transfer-encoding").iter().collect();
            if h2 {
                assert!(te.is_empty(), "{h:?}");
            } else {
                assert!(te.len() <= 1 && te.iter().all(|v| *v == "chunked"), "{h:?}");
            }
        }
    }
    // Also on the wire, as a raw HTTP/1.1 client sees it.
    let mut conn = support::RawConn::connect(gw.addr);
    let body = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    conn.write(&req).expect("write");
    let resp = conn
        .read_response(std::time::Duration::from_secs(5))
        .expect("response");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, WORKER_BODY.as_bytes());
    let names: Vec<&str> = resp.headers.iter().map(|(k, _)| k.as_str()).collect();
    for name in ["keep-alive", "proxy-connection", "upgrade", "trailer", "te"] {
        assert!(!names.contains(&name), "{name} on the wire: {names:?}");
    }
    assert!(
        names.iter().filter(|n| **n == "transfer-encoding").count() <= 1,
        "{names:?}"
    );
    assert!(
        resp.header("connection").is_none(),
        "the worker's Connection header leaked: {:?}",
        resp.headers
    );
}
