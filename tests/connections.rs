//! Client connections, black box over raw sockets: the `--max-connections` cap and its 503
//! refusal, rate-limited logs of refusals and accept errors, descriptors left for upstream
//! connections under a flood, the header-read timeout from accept (HTTP/1.1 and the h2c
//! preface), the keep-alive timeout between requests, and the `--health-check-port` probes.

use crate::common;
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{
    eventually, free_port, gateway, gateway_with_nofile, gateway_with_soft_nofile, get, mock,
    post_json, sample, scrape,
};
use serde_json::Value;
use support::RawConn;

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n";

/// The log lines of one kind of rate-limited record.
fn lines_with(log: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// The `suppressed=N` count of a log line, if it has one.
fn suppressed(line: &str) -> Option<u64> {
    let rest = &line[line.find("suppressed=")? + "suppressed=".len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Opens a connection that is over the limit and checks the refusal: a 503 with
/// `Connection: close`, a `Retry-After`, the gateway's error envelope, then the close.
fn expect_refusal(addr: SocketAddr) {
    let mut conn = RawConn::connect(addr);
    let resp = conn
        .read_response(Duration::from_secs(5))
        .expect("a refusal");
    assert_eq!(resp.status, 503, "{resp:?}");
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(resp.header("retry-after").is_some(), "{resp:?}");
    let body: Value = serde_json::from_slice(&resp.body).expect("json body");
    assert_eq!(body["error"]["code"], "too_many_connections", "{body}");
    assert!(conn.wait_closed(Duration::from_secs(2)).is_some());
}

fn health_on(conn: &mut RawConn) -> u16 {
    conn.write(HEALTH).expect("write");
    conn.read_response(Duration::from_secs(5))
        .map_or(0, |r| r.status)
}

#[test]
fn connections_beyond_max_connections_get_a_503_and_a_close() {
    let gw = gateway(&["--max-connections", "3"]);
    let mut held: Vec<RawConn> = (0..3).map(|_| RawConn::connect(gw.addr)).collect();
    std::thread::sleep(Duration::from_millis(300));
    expect_refusal(gw.addr);
    expect_refusal(gw.addr);
    // The connections within the limit are untouched and served.
    for conn in &mut held {
        assert_eq!(health_on(conn), 200);
    }
    // A freed slot takes a new connection.
    held.pop();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(health_on(&mut RawConn::connect(gw.addr)), 200);
}

#[test]
fn refusals_are_logged_once_a_second_with_a_count_of_the_rest() {
    let gw = gateway(&["--max-connections", "1"]);
    let _held = RawConn::connect(gw.addr);
    std::thread::sleep(Duration::from_millis(200));
    let burst = Instant::now();
    for _ in 0..30 {
        expect_refusal(gw.addr);
    }
    let seconds = burst.elapsed().as_secs() as usize;
    let logged = lines_with(&gw.log_text(), "connection refused");
    assert!(!logged.is_empty(), "the first refusal is logged");
    assert!(
        logged.len() <= seconds + 2,
        "{} refusal lines for 30 refusals in {seconds} s:\n{}",
        logged.len(),
        logged.join("\n")
    );
    std::thread::sleep(Duration::from_millis(1100));
    expect_refusal(gw.addr);
    std::thread::sleep(Duration::from_millis(200));
    let logged = lines_with(&gw.log_text(), "connection refused");
    let counted: u64 = logged.iter().filter_map(|l| suppressed(l)).sum();
    assert_eq!(
        counted as usize + logged.len(),
        31,
        "every refusal is either logged or counted:\n{}",
        logged.join("\n")
    );
}

/// A flood of silent connections under a small descriptor limit: the default connection
/// cap (derived from the limit) refuses the excess with a 503 instead of running out of
/// descriptors, so a freed slot is usable at once and the request it carries still finds
/// a descriptor for its upstream connection; nothing floods the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_leaves_descriptors_for_upstream() {
    let upstream = mock(&[]);
    let gw = gateway_with_nofile(&["--worker-urls", &upstream.url()], 256);
    let ready = format!("{}/readiness", gw.url());
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(&ready).await.status == 200
        })
        .await
    );
    let addr = gw.addr;
    let flood = tokio::task::spawn_blocking(move || {
        let flood: Vec<TcpStream> = (0..400)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        // The ones still open without a byte received are the ones the gateway holds
        // (or, without a cap, the ones it never accepted).
        let mut open = Vec::new();
        for mut s in flood {
            s.set_nonblocking(true).expect("nonblocking");
            let mut buf = [0u8; 64];
            if matches!(s.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock) {
                open.push(s);
            }
        }
        open
    })
    .await
    .expect("flood");
    assert!(flood.len() < 400, "some connections must have been refused");
    let mut held = flood;
    held.truncate(held.len().saturating_sub(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let chat = tokio::time::timeout(
        Duration::from_secs(10),
        post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &support::chat(false, Value::Null),
        ),
    )
    .await
    .expect("a request on a freed slot is served in time");
    assert_eq!(chat.status, 200, "{}", chat.text());
    let log = gw.log_text();
    assert!(
        lines_with(&log, "accept failed").len() <= 3,
        "{}",
        lines_with(&log, "accept failed").join("\n")
    );
    assert!(lines_with(&log, "connection refused").len() <= 5);
    drop(held);
}

/// Sends `first` (perhaps nothing) on a new connection to a gateway with a 1 s header-read
/// timeout, then nothing more, and checks the gateway closes it at that timeout.
fn stalled_connection_closes_at_the_header_read_timeout(first: &[u8]) {
    let gw = gateway(&[
        "--header-read-timeout-secs",
        "1",
        "--keep-alive-timeout-secs",
        "30",
    ]);
    let mut conn = RawConn::connect(gw.addr);
    conn.write(first).expect("write");
    let closed = conn
        .wait_closed(Duration::from_secs(5))
        .expect("a stalled connection still open after 5 s");
    assert!(
        closed >= Duration::from_millis(800),
        "closed after {closed:?}"
    );
    assert!(closed <= Duration::from_secs(3), "closed after {closed:?}");
}

#[test]
fn a_silent_connection_closes_at_the_header_read_timeout() {
    stalled_connection_closes_at_the_header_read_timeout(b"");
}

#[test]
fn a_stalled_h2c_preface_closes_at_the_header_read_timeout() {
    stalled_connection_closes_at_the_header_read_timeout(b"PRI * HTTP/2.0\r\n");
}

/// Between requests the keep-alive timeout applies, not the header-read timeout.
#[test]
fn an_idle_keep_alive_connection_lives_until_the_keep_alive_timeout() {
    let gw = gateway(&[
        "--header-read-timeout-secs",
        "1",
        "--keep-alive-timeout-secs",
        "3",
    ]);
    let mut conn = RawConn::connect(gw.addr);
    assert_eq!(health_on(&mut conn), 200);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        health_on(&mut conn),
        200,
        "reused after 2 s idle (header timeout 1 s, keep-alive 3 s)"
    );
    let closed = conn
        .wait_closed(Duration::from_secs(6))
        .expect("idle connection still open 6 s after its last response");
    assert!(
        closed >= Duration::from_millis(2500),
        "closed after {closed:?}"
    );
    assert!(
        closed <= Duration::from_millis(4500),
        "closed after {closed:?}"
    );
}

/// A keep-alive connection idle past the park delay (100 ms) gives its buffers back and
/// resumes when the client comes back: whatever the client sends then — pipelined
/// requests in one write, a head split across the delay, a body that trickles in after
/// it — is served on the same connection, in order, with nothing lost.
#[test]
fn parked_keep_alive_connections_resume_with_nothing_lost() {
    let m = mock(&[]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let park = Duration::from_millis(300);
    let mut conn = RawConn::connect(gw.addr);
    assert_eq!(health_on(&mut conn), 200);

    // Parked, then two requests in one write.
    std::thread::sleep(park);
    let mut two = HEALTH.to_vec();
    two.extend_from_slice(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n");
    conn.write(&two).expect("write");
    let first = conn.read_response(Duration::from_secs(5)).expect("first");
    let second = conn.read_response(Duration::from_secs(5)).expect("second");
    assert_eq!((first.status, second.status), (200, 200));
    let models: Value = serde_json::from_slice(&second.body).expect("models json");
    assert_eq!(models["object"], "list", "{models}");

    // A head split across the park delay.
    std::thread::sleep(park);
    conn.write(b"GET /health HT").expect("write");
    std::thread::sleep(park);
    conn.write(b"TP/1.1\r\nHost: gw\r\n\r\n").expect("write");
    let split = conn
        .read_response(Duration::from_secs(5))
        .expect("split head");
    assert_eq!(split.status, 200);

    // A body that arrives well after its head.
    std::thread::sleep(park);
    let body = br#"{"model":"mock-model","messages":[{"role":"user","content":"hi"}]}"#;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write(head.as_bytes()).expect("write");
    std::thread::sleep(park);
    conn.write(&body[..10]).expect("write");
    std::thread::sleep(park);
    conn.write(&body[10..]).expect("write");
    let chat = conn.read_response(Duration::from_secs(10)).expect("chat");
    assert_eq!(
        chat.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&chat.body)
    );
    let reply: Value = serde_json::from_slice(&chat.body).expect("chat json");
    assert_eq!(reply["object"], "chat.completion", "{reply}");

    // And once more after a last idle period; the connection is still the first one.
    std::thread::sleep(park);
    assert_eq!(health_on(&mut conn), 200);
    assert!(conn.pending().is_empty());
}

/// A client that reads a long stream slowly, through a small receive window, pausing:
/// the stream arrives whole and the connection serves the next request. (Whether the end
/// of the body is still in the gateway's buffers when the park comes due depends on the
/// kernel's socket buffers here; `server::tests` pins that case down over an in-memory
/// connection.)
#[test]
fn a_slow_reader_gets_its_whole_response_before_the_connection_parks() {
    const TOKENS: usize = 100_000;
    let m = mock(&[]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("small receive buffer");
    socket.connect(&gw.addr.into()).expect("connect");
    let mut stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = format!(
        r#"{{"model":"mock-model","stream":true,"max_tokens":{TOKENS},"messages":[{{"role":"user","content":"hi"}}],"mock":{{"output_tokens":{TOKENS}}}}}"#
    );
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    // Read everything, pausing 30 ms after every 512 KiB; the chunked body ends with
    // the zero-length chunk after `data: [DONE]`.
    let mut got = Vec::new();
    let mut since_pause = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while !got.ends_with(b"data: [DONE]\n\n\r\n0\r\n\r\n") {
        let n = stream.read(&mut buf).expect("the response breaks off");
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
        since_pause += n;
        if since_pause >= 512 * 1024 {
            since_pause = 0;
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..200.min(text.len())]
    );
    assert_eq!(
        text.matches("\"finish_reason\":\"").count(),
        1,
        "one final chunk"
    );
    assert!(
        text.contains(&format!("tok{} ", TOKENS - 1)),
        "the last token arrived"
    );
    stream.write_all(HEALTH).expect("write");
    let mut reply = [0u8; 512];
    let n = stream
        .read(&mut reply)
        .expect("the next request is answered");
    assert!(
        reply[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&reply[..n])
    );
}

/// Once a head has begun, the header-read timeout runs from its first byte, also on a
/// connection that idled before (a slowloris after an idle period).
#[test]
fn a_slow_head_after_an_idle_period_closes_at_the_header_read_timeout() {
    let gw = gateway(&[
        "--header-read-timeout-secs",
        "1",
        "--keep-alive-timeout-secs",
        "10",
    ]);
    let mut conn = RawConn::connect(gw.addr);
    assert_eq!(health_on(&mut conn), 200);
    std::thread::sleep(Duration::from_millis(1500));
    let mut stream = conn.stream.try_clone().expect("clone");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    stream
        .write_all(b"GET /health HTTP/1.1\r\n")
        .expect("the connection outlived the header timeout while idle");
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        if started.elapsed() > Duration::from_secs(5) {
            break None;
        }
        match stream.read(&mut buf) {
            Ok(0) => break Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break Some(started.elapsed()),
        }
        if stream.write_all(b"x").is_err() {
            break Some(started.elapsed());
        }
    };
    let closed = closed.expect("a slow head still open after 5 s");
    assert!(
        closed >= Duration::from_millis(800),
        "closed after {closed:?}"
    );
    assert!(closed <= Duration::from_secs(3), "closed after {closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_port_answers_probes_outside_the_http_metrics() {
    let upstream = mock(&[]);
    let port = free_port().to_string();
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--health-check-port",
        &port,
    ]);
    let health = r#"gw_http_requests_total{method="GET",path="/health"}"#;
    let readiness_series = r#"gw_http_requests_total{method="GET",path="/readiness"}"#;
    // The harness polls the main listener's /readiness until the worker is in rotation;
    // those probes are recorded, and the side port's must add nothing to them.
    let before = scrape(&gw).await;
    let base = format!("http://127.0.0.1:{port}");
    let ready = format!("{base}/readiness");
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(&ready).await.status == 200
        })
        .await
    );
    let readiness = get(&ready).await.json();
    assert_eq!(readiness["status"], "ready", "{readiness}");
    assert_eq!(readiness["ready_workers"], 1, "{readiness}");
    assert_eq!(get(&format!("{base}/health")).await.status, 200);
    assert_eq!(get(&format!("{base}/liveness")).await.status, 200);
    assert_eq!(get(&format!("{base}/v1/models")).await.status, 404);
    let refused = post_json(&format!("{base}/health"), &Value::Null).await;
    assert_eq!(refused.status, 405);
    assert_eq!(
        refused.headers.get("allow").and_then(|v| v.to_str().ok()),
        Some("GET")
    );

    let text = scrape(&gw).await;
    assert_eq!(
        sample(&text, health),
        None,
        "probes are not recorded:\n{text}"
    );
    assert_eq!(
        sample(&text, readiness_series),
        sample(&before, readiness_series),
        "{text}"
    );
    // The main listener's probes still are.
    assert_eq!(get(&format!("{}/health", gw.url())).await.status, 200);
    assert_eq!(sample(&scrape(&gw).await, health), Some(1.0));
}

/// The usual soft open-file limit (1,024 here: 256) would hold the default cap to a few
/// hundred connections although the hard limit allows far more: the gateway raises its
/// soft limit to the hard one at startup and derives the cap from that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let hard = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            let line = l
                .lines()
                .find(|l| l.starts_with("Max open files"))?
                .to_owned();
            line.split_whitespace()
                .nth(4)
                .and_then(|v| v.parse::<u64>().ok())
        });
    let Some(hard) = hard.filter(|&h| h > 1024) else {
        eprintln!("hard open-file limit unlimited or too low here; nothing to raise");
        return;
    };
    let gw = gateway_with_soft_nofile(&[], 256);
    // Startup lines go to stderr, read by a thread that may trail the listening line.
    gw.log_count("open-file limit raised", 1, Duration::from_secs(5))
        .await;
    let log = gw.log_text();
    assert!(log.contains("open-file limit raised"), "{log}");
    let expected = format!("max_connections={}", (hard - 128) / 2);
    assert!(log.contains(&expected), "want {expected} in:\n{log}");
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", gw.child.id())).expect("gateway limits");
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(soft, Some(hard), "{limits}");
}
