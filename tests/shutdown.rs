//! Graceful shutdown, black box: on SIGTERM the gateway stops taking connections, lets
//! in-flight streams finish within the grace period, and exits 0; past the grace period it
//! exits anyway.

use crate::common;
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{client, gateway, mock};
use serde_json::Value;
use support::{read_frames, signal, start_json, wait_exit};

/// After SIGTERM a new connection is either refused or closed without an answer. Returns a
/// description of what happened instead, if anything.
fn new_connection_is_turned_away(addr: std::net::SocketAddr) -> Result<(), String> {
    let mut s = match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
        Err(_) => return Ok(()),
        Ok(s) => s,
    };
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        .is_err()
    {
        return Ok(());
    }
    let mut buf = [0u8; 1024];
    match s.read(&mut buf) {
        Ok(0) => Ok(()),
        Ok(n) => Err(format!(
            "served after SIGTERM: {:?}",
            String::from_utf8_lossy(&buf[..n])
        )),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(format!("neither refused nor closed within 1 s: {e}")),
    }
}

async fn in_flight_stream_completes_after_sigterm(h2: bool) {
    let upstream = mock(&["--itl-ms", "100", "--output-tokens", "20"]);
    let mut gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--shutdown-grace-period-secs",
        "10",
    ]);
    let c = client(h2);
    let started = Instant::now();
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reader = tokio::spawn(async move {
        let mut body = resp.into_body();
        read_frames(&mut body, Duration::from_secs(10)).await
    });

    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(gw.child.id(), "TERM");
    let sigterm_at = Instant::now();

    // The stream in flight completes.
    let frames = reader.await.expect("reader");
    assert!(frames.clean_end(), "{frames:?}");
    let text = frames.text();
    assert!(text.contains("tok19 "), "{text:?}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1800),
        "the stream was not paced as generated: {:?}",
        started.elapsed()
    );

    // Then the gateway exits 0 promptly, long before the grace period is over, even though
    // the client still holds its (now idle) connection.
    let status = tokio::task::block_in_place(|| wait_exit(&mut gw.child, Duration::from_secs(2)));
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running 2 s after the last stream ended:\n{}",
            gw.log_text()
        )
    });
    assert!(status.success(), "exit status {status}:\n{}", gw.log_text());
    assert!(sigterm_at.elapsed() < Duration::from_secs(5));
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_stream_completes_after_sigterm_h1() {
    in_flight_stream_completes_after_sigterm(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_stream_completes_after_sigterm_h2() {
    in_flight_stream_completes_after_sigterm(true).await;
}

/// While a stream keeps the gateway draining, a new connection is refused or closed
/// without an answer within 1 s of SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_connections_are_turned_away_after_sigterm() {
    let upstream = mock(&["--itl-ms", "100", "--output-tokens", "20"]);
    let mut gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--shutdown-grace-period-secs",
        "10",
    ]);
    let c = client(false);
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reader = tokio::spawn(async move {
        let mut body = resp.into_body();
        read_frames(&mut body, Duration::from_secs(10)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(gw.child.id(), "TERM");
    let sigterm_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let addr = gw.addr;
    let verdict = tokio::task::spawn_blocking(move || new_connection_is_turned_away(addr))
        .await
        .expect("probe");
    let probed_within = sigterm_at.elapsed();

    // The gateway was still draining during the probe (the stream ran on).
    let frames = reader.await.expect("reader");
    assert!(frames.clean_end(), "{frames:?}");
    assert!(frames.text().ends_with("data: [DONE]\n\n"));
    let status = tokio::task::block_in_place(|| wait_exit(&mut gw.child, Duration::from_secs(8)));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");

    if let Err(what) = verdict {
        panic!("new connection after SIGTERM: {what}");
    }
    assert!(probed_within < Duration::from_secs(2), "{probed_within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_gateway_exits_zero_promptly() {
    let mut gw = gateway(&[]);
    // An idle keep-alive connection must not hold the shutdown up.
    let reply = common::get(&format!("{}/health", gw.url())).await;
    assert_eq!(reply.status, 200);
    let mut idle = support::RawConn::connect(gw.addr);
    idle.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        .expect("write");
    assert_eq!(
        idle.read_response(Duration::from_secs(5)).map(|r| r.status),
        Some(200)
    );
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| gw.terminate(Duration::from_secs(3)));
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", gw.log_text()));
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        idle.wait_closed(Duration::from_secs(1)).is_some(),
        "the idle connection is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_stream_is_cut_at_the_grace_period() {
    let upstream = mock(&["--itl-ms", "100", "--output-tokens", "100000"]);
    let mut gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--shutdown-grace-period-secs",
        "1",
    ]);
    let c = client(false);
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let seen = support::read_until(&mut body, "tok2 ", Duration::from_secs(5)).await;
    assert!(seen.contains("tok2 "), "{seen:?}");
    let reader = tokio::spawn(async move { read_frames(&mut body, Duration::from_secs(10)).await });

    let started = Instant::now();
    signal(gw.child.id(), "TERM");
    let status = tokio::task::block_in_place(|| wait_exit(&mut gw.child, Duration::from_secs(5)));
    let elapsed = started.elapsed();
    let status = status.unwrap_or_else(|| panic!("still running after 5 s:\n{}", gw.log_text()));
    assert!(status.success(), "exit status {status}:\n{}", gw.log_text());
    assert!(
        elapsed >= Duration::from_millis(800),
        "exited before the grace period: {elapsed:?}"
    );
    assert!(
        elapsed <= Duration::from_secs(3),
        "exited only after {elapsed:?}"
    );

    // The client's stream ends (it cannot be complete) instead of hanging.
    let frames = reader.await.expect("reader");
    assert!(
        !frames.timed_out,
        "client stream hung after the gateway exited"
    );
    assert!(!frames.text().contains("[DONE]"));
}
