//! The adversarial sweep of issue 22, kept as tests: every limit added in round 2 (the
//! connection cap, header and keep-alive timeouts, request-body timeouts and budgets, the
//! HTTP header rules) attacked at once and one by one, while a legitimate client keeps
//! asking. Each attack is bounded in connections and time, on 127.0.0.1 only.

use crate::common;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{gateway, mock, post_json, Proc};
use serde_json::{json, Value};
use support::RawConn;

const CHAT_BODY: &str =
    r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"sweep"}]}"#;

/// Open descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// How long the gateway took to close `stream` (reading and discarding whatever it sent),
/// or `None` if it was still open after `limit`.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut sink = [0u8; 4096];
    while start.elapsed() < limit {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        match stream.read(&mut sink) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// A client that connects and says nothing.
fn silent(addr: SocketAddr) -> JoinHandle<Option<Duration>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).ok()?;
        closed_within(&mut s, Duration::from_secs(10))
    })
}

/// A head sent one byte every 200 ms (never complete within the header timeout).
fn slowloris(addr: SocketAddr) -> JoinHandle<Option<Duration>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).ok()?;
        let start = Instant::now();
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaa";
        for byte in head.iter() {
            if s.write_all(&[*byte]).is_err() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
            if start.elapsed() > Duration::from_secs(10) {
                return None;
            }
        }
        closed_within(&mut s, Duration::from_secs(10)).map(|_| start.elapsed())
    })
}

/// A body declared large and sent one byte every 300 ms: each gap is within the idle
/// timeout, so only the whole-body timeout stops it. Returns the status the gateway sent
/// and when.
fn trickle(addr: SocketAddr) -> JoinHandle<Option<(u16, Duration)>> {
    std::thread::spawn(move || {
        let mut conn = RawConn::connect(addr);
        let start = Instant::now();
        conn.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\
              Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
        )
        .ok()?;
        let writer = conn.stream.try_clone().ok()?;
        let feeding = std::thread::spawn(move || {
            let mut writer = writer;
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(300));
                if writer.write_all(b" ").is_err() {
                    return;
                }
            }
        });
        let reply = conn.read_response(Duration::from_secs(12));
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        let _ = feeding.join();
        reply.map(|r| (r.status, start.elapsed()))
    })
}

/// A stream asked for and dropped after its first bytes.
fn dropped_stream(addr: SocketAddr) -> JoinHandle<bool> {
    std::thread::spawn(move || {
        let body = r#"{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"x"}],"mock":{"itl_ms":20}}"#;
        let Ok(mut s) = TcpStream::connect(addr) else {
            return false;
        };
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(head.as_bytes()).is_err() {
            return false;
        }
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut first = [0u8; 64];
        matches!(s.read(&mut first), Ok(n) if n > 0)
    })
}

async fn chat(gw: &Proc) -> (u16, Duration) {
    let start = Instant::now();
    let body: Value = serde_json::from_str(CHAT_BODY).expect("json");
    let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &body).await;
    (reply.status, start.elapsed())
}

/// Every attack at once against a gateway with tight limits: the legitimate client is
/// served throughout, every attacker is cut off by the limit meant for it, and the
/// gateway's descriptors come back to where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bad_day_leaves_legitimate_clients_served() {
    let good = mock(&["--model", "m"]);
    let flaky = mock(&["--model", "m", "--fail-rate", "0.5", "--fail-status", "503"]);
    let gw = gateway(&[
        "--worker-urls",
        &good.url(),
        &flaky.url(),
        "--max-connections",
        "96",
        "--header-read-timeout-secs",
        "1",
        "--request-body-idle-timeout-secs",
        "1",
        "--request-body-timeout-secs",
        "3",
        "--max-concurrent-requests",
        "8",
        "--queue-timeout-secs",
        "10",
    ]);
    assert_eq!(chat(&gw).await.0, 200);
    let baseline = fds(gw.child.id());

    let addr = gw.addr;
    let silent: Vec<_> = (0..40).map(|_| silent(addr)).collect();
    let slow: Vec<_> = (0..6).map(|_| slowloris(addr)).collect();
    let trickles: Vec<_> = (0..6).map(|_| trickle(addr)).collect();
    let drops: Vec<_> = (0..12).map(|_| dropped_stream(addr)).collect();

    for i in 0..30 {
        let (status, took) = chat(&gw).await;
        assert_eq!(status, 200, "legitimate request {i} during the attack");
        assert!(took < Duration::from_secs(3), "request {i} took {took:?}");
    }

    for (i, t) in silent.into_iter().enumerate() {
        let closed = t.join().expect("thread");
        assert!(
            closed.is_some_and(|d| d < Duration::from_secs(3)),
            "silent connection {i} closed after {closed:?} (header timeout 1 s)"
        );
    }
    for (i, t) in slow.into_iter().enumerate() {
        let closed = t.join().expect("thread");
        assert!(
            closed.is_some_and(|d| d < Duration::from_secs(4)),
            "slowloris {i} lasted {closed:?} (header timeout 1 s from its first byte)"
        );
    }
    for (i, t) in trickles.into_iter().enumerate() {
        let answer = t.join().expect("thread");
        let (status, took) = answer.unwrap_or_else(|| panic!("trickle {i} got no answer"));
        assert_eq!(status, 408, "trickle {i}");
        assert!(
            took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
            "trickle {i} cut after {took:?} (body timeout 3 s, idle 1 s never reached)"
        );
    }
    for t in drops {
        assert!(
            t.join().expect("thread"),
            "a dropped stream saw its first bytes"
        );
    }

    // Nothing an attacker opened outlives it (upstream pools may keep a few connections).
    let settled = common::eventually(Duration::from_secs(10), || async {
        fds(gw.child.id()) <= baseline + 16
    })
    .await;
    assert!(
        settled,
        "descriptors {} against {baseline} before the attack",
        fds(gw.child.id())
    );
    assert_eq!(chat(&gw).await.0, 200, "served after the attack");
}

/// Framing and credential headers in their tricky spellings: every one is refused before
/// routing, none reaches a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_header_spellings_are_refused() {
    let m = mock(&["--model", "m"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let cases: [(&str, &[u16]); 6] = [
        // Two credentials in two spellings of one name.
        (
            "Authorization: Bearer a\r\nauthorization: Bearer b\r\nContent-Length: 2\r\n",
            &[400],
        ),
        // Two Host fields, or one naming two hosts.
        ("Host: y\r\nContent-Length: 2\r\n", &[400]),
        // chunked applied twice, or a coding this gateway cannot undo.
        ("Transfer-Encoding: chunked, chunked\r\n", &[400, 501]),
        (
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
            &[501],
        ),
        (
            "Transfer-Encoding: identity\r\nContent-Length: 2\r\n",
            &[400, 501],
        ),
        // A Content-Length that is not one number.
        ("Content-Length: 2, 3\r\n", &[400]),
    ];
    for (extra, wanted) in cases {
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             {extra}\r\n{{}}"
        );
        let mut conn = RawConn::connect(gw.addr);
        conn.write(request.as_bytes()).expect("write");
        let reply = conn.read_response(Duration::from_secs(5));
        let status = reply.map(|r| r.status);
        assert!(
            status.is_some_and(|s| wanted.contains(&s)),
            "{extra:?}: got {status:?}, want one of {wanted:?}"
        );
    }
    let seen = common::mock_requests(&m).await;
    assert!(
        seen.iter().all(|r| r["path"] != "/v1/chat/completions"),
        "a refused request reached the worker: {seen:?}"
    );
}

/// Worker URLs in other spellings of one registered worker are the same worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_spellings_do_not_register_a_worker_twice() {
    let m = mock(&["--model", "m"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let port = m.addr.port();
    for spelling in [
        format!("http://LOCALHOST.:{port}"),
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:0{port}/v1/../"),
    ] {
        let spec = json!({"url": spelling, "health": {"disable_health_check": true}});
        let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
        // localhost is another name than 127.0.0.1 (resolution is not identity); the
        // literal spellings are the registered worker.
        if spelling.contains("LOCALHOST") {
            assert!(
                reply.status == 202 || reply.status == 409,
                "{spelling}: {}",
                reply.text()
            );
            continue;
        }
        assert_eq!(reply.status, 409, "{spelling}: {}", reply.text());
    }
    let twice = json!({"url": format!("http://localhost:{port}"),
                       "health": {"disable_health_check": true}});
    let reply = post_json(&format!("{}/workers", gw.url()), &twice).await;
    assert_eq!(
        reply.status,
        409,
        "localhost. and localhost are one name: {}",
        reply.text()
    );
}

/// A body streamed to the worker unread (retries off) and trickled in just faster than
/// the idle timeout still ends at the whole-body timeout, with a 408, and the worker's
/// breaker does not count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_trickled_under_the_idle_timeout_ends_at_the_body_timeout() {
    let m = mock(&["--model", "m"]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--disable-retries",
        "--request-body-idle-timeout-secs",
        "1",
        "--request-body-timeout-secs",
        "2",
    ]);
    let (status, took) = trickle(gw.addr)
        .join()
        .expect("thread")
        .expect("an answer to the trickled body");
    assert_eq!(status, 408);
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "cut after {took:?} (body timeout 2 s)"
    );
    let text = common::scrape(&gw).await;
    assert!(
        common::sample(
            &text,
            r#"gw_router_request_body_path_total{path="streamed",reason="pure_forward"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "the body streamed unread:\n{text}"
    );
    assert_eq!(chat(&gw).await.0, 200, "the worker is still in rotation");
}
