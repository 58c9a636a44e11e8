//! The gateway's own listener over TLS (`--tls-cert-path`, `--tls-key-path`), black box,
//! with certificates made at test time: HTTP/1.1 and h2 by ALPN (our client and curl),
//! streams, handshake failures that close only their connection, the header-read and
//! keep-alive timers over TLS, the request-smuggling check on the decrypted bytes, startup
//! refusals, and certificate reload on SIGHUP under load. Run on both IO engines
//! (`TOLLGATE_TEST_IO_ENGINE=uring` and `=epoll`).

use crate::common;
use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pki::{Kind, Pki, ServerCert};
use common::tls::{client_config, handshake, leaf_der, tls_gateway, TlsConn, H1, H2};
use common::{eventually, free_port, gateway, get, mock, raw_exchange, run_to_exit, scrape, Proc};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn chat(stream: bool) -> Value {
    support::chat(stream, Value::Null)
}

/// A mock worker and a TLS gateway in front of it, serving `cert`.
async fn tls_setup(pki: &Pki, cert: &ServerCert, extra: &[&str]) -> (Proc, Proc) {
    let upstream = mock(&["--output-tokens", "4", "--itl-ms", "2"]);
    let url = upstream.url();
    let mut args = vec!["--worker-urls", url.as_str()];
    args.extend_from_slice(extra);
    let gw = tls_gateway(&args, cert, &pki.ca).await;
    (upstream, gw)
}

/// A TLS gateway with its CA and certificate, in front of a mock worker.
struct Served {
    gw: Proc,
    _upstream: Proc,
    pki: Pki,
    cert: ServerCert,
}

async fn served(extra: &[&str]) -> Served {
    let pki = Pki::new();
    let cert = pki.server("gateway", Kind::Good);
    let (_upstream, gw) = tls_setup(&pki, &cert, extra).await;
    Served {
        gw,
        _upstream,
        pki,
        cert,
    }
}

/// Copies a certificate and its key over the files the gateway serves.
fn install(from: &ServerCert, to: &ServerCert) {
    std::fs::copy(&from.cert, &to.cert).expect("copy cert");
    std::fs::copy(&from.key, &to.key).expect("copy key");
}

/// Sends SIGHUP and waits until the log has `count` records containing `record`.
async fn hup_and_wait(gw: &Proc, record: &str, count: usize) {
    support::signal(gw.child.id(), "HUP");
    let seen = eventually(Duration::from_secs(10), || async {
        gw.log_text().matches(record).count() >= count
    })
    .await;
    assert!(seen, "no {record:?} #{count} in:\n{}", gw.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_h2_by_alpn() {
    let Served {
        gw,
        pki,
        cert,
        _upstream,
    } = served(&[]).await;
    type Case<'a> = (&'a [&'a [u8]], Option<&'a [u8]>);
    let cases: [Case; 4] = [
        (&[H1], Some(H1)),
        (&[H2], Some(H2)),
        (&[H2, H1], Some(H2)),
        // No ALPN: HTTP/1.1 (hyper's auto builder finds no h2 preface).
        (&[], None),
    ];
    for (offer, chosen) in cases {
        let mut conn = TlsConn::open(gw.addr, client_config(&pki.ca, offer))
            .await
            .expect("handshake");
        assert_eq!(conn.alpn.as_deref(), chosen, "offered {offer:?}");
        assert_eq!(conn.peer_cert, leaf_der(&cert.cert));
        // Several requests on one kept-alive connection.
        for _ in 0..3 {
            let reply = conn
                .post_json("/v1/chat/completions", &chat(false))
                .await
                .expect("reply");
            assert_eq!(reply.status, 200, "{offer:?}: {}", reply.text());
            assert!(reply.json()["choices"].is_array(), "{}", reply.text());
        }
        let health = conn.send("GET", "/health", &[], "").await.expect("health");
        assert_eq!(health.status, 200);
    }
    // The metrics listener stays cleartext.
    assert!(scrape(&gw).await.contains("gw_"));
}

/// Runs curl against the gateway; `None` (with a message) when curl is not installed.
fn curl(gw: &Proc, ca: &Path, version: &str) -> Option<String> {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("curl not found; skipping the curl checks");
        return None;
    }
    let port = gw.addr.port();
    let body = serde_json::to_string(&chat(false)).expect("json");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", version])
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .arg("--cacert")
        .arg(ca)
        .args(["-H", "content-type: application/json", "--data", &body])
        .args(["-w", "\nHTTP_VERSION=%{http_version}"])
        .arg(format!("https://localhost:{port}/v1/chat/completions"))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {version}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_with_the_ca_over_http1_and_h2() {
    let Served {
        gw, pki, _upstream, ..
    } = served(&[]).await;
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let Some(out) = curl(&gw, &pki.ca, flag) else {
            return;
        };
        assert!(out.contains("\"choices\""), "curl {flag}: {out}");
        assert!(
            out.ends_with(&format!("HTTP_VERSION={version}")),
            "curl {flag}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_tls() {
    let Served {
        gw, pki, _upstream, ..
    } = served(&[]).await;
    for alpn in [H1, H2] {
        let mut conn = TlsConn::open(gw.addr, client_config(&pki.ca, &[alpn]))
            .await
            .expect("handshake");
        let body = serde_json::to_vec(&chat(true)).expect("json");
        let resp = conn
            .start(
                "POST",
                "/v1/chat/completions",
                &[("content-type", "application/json")],
                body,
            )
            .await
            .expect("response");
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap_or_default();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let mut body = resp.into_body();
        let frames = support::read_frames(&mut body, Duration::from_secs(10)).await;
        assert!(frames.clean_end(), "{frames:?}");
        let text = frames.text();
        for i in 0..4 {
            assert!(text.contains(&format!("tok{i} ")), "{text}");
        }
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusting_client_fails_alone() {
    let Served {
        gw, pki, _upstream, ..
    } = served(&[]).await;
    let trusting = client_config(&pki.ca, &[H1]);
    let mut open = TlsConn::open(gw.addr, trusting.clone())
        .await
        .expect("handshake");
    let stranger = Pki::new();
    for _ in 0..5 {
        let err = handshake(gw.addr, client_config(&stranger.ca, &[H1]))
            .await
            .expect_err("an untrusted certificate is refused");
        assert!(
            err.contains("UnknownIssuer") || err.contains("invalid peer certificate"),
            "{err}"
        );
    }
    let reply = open
        .post_json("/v1/chat/completions", &chat(false))
        .await
        .expect("reply");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut fresh = TlsConn::open(gw.addr, trusting).await.expect("handshake");
    let reply = fresh
        .post_json("/v1/chat/completions", &chat(false))
        .await
        .expect("reply");
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_http_to_the_tls_port_is_closed() {
    let Served { gw, _upstream, .. } = served(&[]).await;
    let started = Instant::now();
    let (reply, closed) = tokio::task::spawn_blocking(move || {
        raw_exchange(
            gw.addr,
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            Duration::from_secs(10),
        )
    })
    .await
    .expect("exchange");
    assert!(closed, "the connection stayed open");
    assert!(!reply.starts_with(b"HTTP/"), "{reply:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_end_at_the_header_read_timeout() {
    let Served {
        gw, pki, _upstream, ..
    } = served(&["--header-read-timeout-secs", "1"]).await;
    let addr = gw.addr;
    // Nothing at all, and the first bytes of a ClientHello record that never completes.
    let starts: [&'static [u8]; 2] = [b"", &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]];
    for start in starts {
        let began = Instant::now();
        let (_, closed) =
            tokio::task::spawn_blocking(move || raw_exchange(addr, start, Duration::from_secs(8)))
                .await
                .expect("exchange");
        let took = began.elapsed();
        assert!(closed, "{start:?}: still open after {took:?}");
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(4),
            "{start:?}: closed after {took:?}"
        );
    }
    // The gateway still serves.
    let mut conn = TlsConn::open(addr, client_config(&pki.ca, &[H1]))
        .await
        .expect("handshake");
    let reply = conn.send("GET", "/health", &[], "").await.expect("health");
    assert_eq!(reply.status, 200);
}

/// Reads a TLS stream until the peer closes it or `limit` passes; the time it took, if
/// closed.
async fn wait_closed<S: AsyncReadExt + Unpin>(tls: &mut S, limit: Duration) -> Option<Duration> {
    let began = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((began + limit).into(), tls.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(began.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_timers_run_over_tls() {
    let args = [
        "--header-read-timeout-secs",
        "1",
        "--keep-alive-timeout-secs",
        "2",
    ];
    let Served {
        gw, pki, _upstream, ..
    } = served(&args).await;
    let config = client_config(&pki.ca, &[H1]);
    // Handshake done, no request head: the header-read timeout (from accept) closes it.
    let mut tls = handshake(gw.addr, config.clone()).await.expect("handshake");
    let took = wait_closed(&mut tls, Duration::from_secs(5)).await;
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(3)),
        "header read: {took:?}"
    );
    // One request, then idle: the keep-alive timeout closes it.
    let mut tls = handshake(gw.addr, config).await.expect("handshake");
    tls.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tls.read(&mut buf).await.expect("response");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let took = wait_closed(&mut tls, Duration::from_secs(8)).await;
    assert!(
        took.is_some_and(|t| t >= Duration::from_millis(1500) && t < Duration::from_secs(6)),
        "keep-alive: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_check_reads_decrypted_bytes() {
    let Served {
        gw, pki, _upstream, ..
    } = served(&[]).await;
    let mut tls = handshake(gw.addr, client_config(&pki.ca, &[H1]))
        .await
        .expect("handshake");
    // hyper alone would answer this /health with a 200; the check answers its own 400.
    tls.write_all(
        b"GET /health HTTP/1.1\r\nHost: localhost\r\ncontent-length: 5\r\n\
          transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .expect("write");
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut reply)).await;
    assert!(read.is_ok(), "the connection stayed open");
    assert_eq!(
        reply,
        tollgate::server::CONFLICT_REPLY,
        "{}",
        String::from_utf8_lossy(&reply)
    );
}

/// Runs the gateway with `tls` flags until it exits; its stderr.
fn refused(tls: &[&str]) -> String {
    let metrics = free_port().to_string();
    let mut args = vec![
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--prometheus-port",
        &metrics,
    ];
    args.extend_from_slice(tls);
    let out = run_to_exit(&args, &[]);
    assert!(!out.status.success(), "{tls:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn startup_refuses_unusable_certificates() {
    let pki = Pki::new();
    let good = pki.server("good", Kind::Good);
    let other = pki.server("other", Kind::Good);
    let (cert, key) = (good.cert_str(), good.key_str());
    for (args, needs) in [
        (
            vec!["--tls-cert-path", cert],
            ["--tls-cert-path", "--tls-key-path"],
        ),
        (
            vec!["--tls-key-path", key],
            ["--tls-key-path", "--tls-cert-path"],
        ),
    ] {
        let err = refused(&args);
        assert!(needs.iter().all(|n| err.contains(n)), "{args:?}: {err}");
    }
    let missing = pki.dir.join("missing.pem");
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(&garbage, "this is not PEM\n").expect("write");
    let (missing, garbage) = (
        missing.to_str().expect("utf-8"),
        garbage.to_str().expect("utf-8"),
    );
    let cases: [(&str, &str, &[&str]); 6] = [
        (missing, key, &["missing.pem", "cannot read"]),
        (cert, missing, &["missing.pem", "cannot read"]),
        (garbage, key, &["garbage.pem", "not a PEM file"]),
        // A key where the certificate goes, a certificate where the key goes.
        (key, key, &["good.key", "no PEM certificate"]),
        (cert, cert, &["good.pem", "no PEM private key"]),
        (
            cert,
            other.key_str(),
            &["other.key", "good.pem", "does not match"],
        ),
    ];
    let key_text = std::fs::read_to_string(&good.key).expect("key");
    let key_line = key_text.lines().nth(1).expect("a base64 line");
    for (cert, key, words) in cases {
        let err = refused(&["--tls-cert-path", cert, "--tls-key-path", key]);
        assert!(words.iter().all(|w| err.contains(w)), "{cert} {key}: {err}");
        assert!(!err.contains(key_line), "key material in {err}");
    }
}

/// A TLS gateway serving copies (`live.pem`, `live.key`) of the first of two certificates,
/// so a test can write the other over them.
struct Reloadable {
    first: ServerCert,
    second: ServerCert,
    gw: Proc,
    _upstream: Proc,
}

async fn reloadable(pki: &Pki) -> Reloadable {
    let first = pki.server("gateway-one", Kind::Good);
    let second = pki.server("gateway-two", Kind::Good);
    install(&first, &live(pki));
    let (_upstream, gw) = tls_setup(pki, &live(pki), &[]).await;
    Reloadable {
        first,
        second,
        gw,
        _upstream,
    }
}

/// The files the gateway of [`reloadable`] serves.
fn live(pki: &Pki) -> ServerCert {
    ServerCert {
        cert: pki.dir.join("live.pem"),
        key: pki.dir.join("live.key"),
    }
}

/// One client's loop: requests on one kept-alive connection until `stop`; the count of
/// successes and the failures.
async fn keep_requesting(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let mut conn = match TlsConn::open(addr, config).await {
        Ok(c) => c,
        Err(e) => return (0, vec![format!("handshake: {e}")]),
    };
    let (mut ok, mut failed) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        match conn.post_json("/v1/chat/completions", &chat(false)).await {
            Ok(r) if r.status == 200 => ok += 1,
            Ok(r) => failed.push(format!("status {}: {}", r.status, r.text())),
            Err(e) => {
                failed.push(e);
                break;
            }
        }
    }
    (ok, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_reloads_the_certificate_under_load() {
    let pki = Pki::new();
    let r = reloadable(&pki).await;
    let (first, second, gw) = (&r.first, &r.second, &r.gw);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let alpn = if i % 2 == 0 { H1 } else { H2 };
            let config = client_config(&pki.ca, &[alpn]);
            tokio::spawn(keep_requesting(gw.addr, config, stop.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (round, next) in [second, first, second].into_iter().enumerate() {
        install(next, &live(&pki));
        hup_and_wait(gw, "TLS certificate reloaded", round + 1).await;
        let conn = TlsConn::open(gw.addr, client_config(&pki.ca, &[H1]))
            .await
            .expect("handshake after reload");
        assert_eq!(conn.peer_cert, leaf_der(&next.cert), "round {round}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let (ok, failed) = client.await.expect("client task");
        assert!(failed.is_empty(), "failed requests: {failed:?}");
        assert!(ok > 0, "a client made no request");
    }
    assert!(gw.log_text().contains("live.pem"), "the path is logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_reload_keeps_the_old_certificate() {
    let pki = Pki::new();
    let r = reloadable(&pki).await;
    let (first, second, gw) = (&r.first, &r.second, &r.gw);
    let config = client_config(&pki.ca, &[H1]);
    let mut kept = TlsConn::open(gw.addr, config.clone())
        .await
        .expect("handshake");
    // A garbage certificate, then a valid certificate with the old (mismatched) key.
    let live = live(&pki);
    std::fs::write(&live.cert, "garbage\n").expect("write");
    hup_and_wait(gw, "TLS certificate not reloaded", 1).await;
    std::fs::copy(&second.cert, &live.cert).expect("copy");
    hup_and_wait(gw, "TLS certificate not reloaded", 2).await;
    assert!(
        gw.log_text().contains("does not match"),
        "{}",
        gw.log_text()
    );
    let mut fresh = TlsConn::open(gw.addr, config).await.expect("handshake");
    assert_eq!(fresh.peer_cert, leaf_der(&first.cert));
    for conn in [&mut kept, &mut fresh] {
        let reply = conn
            .post_json("/v1/chat/completions", &chat(false))
            .await
            .expect("reply");
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    assert!(!gw.log_text().contains("TLS certificate reloaded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_tls_keeps_serving() {
    let mut gw = gateway(&[]);
    support::signal(gw.child.id(), "HUP");
    let logged = eventually(Duration::from_secs(10), || async {
        gw.log_text().contains("nothing to reload")
    })
    .await;
    assert!(logged, "{}", gw.log_text());
    assert!(
        matches!(gw.child.try_wait(), Ok(None)),
        "the gateway exited"
    );
    assert_eq!(get(&format!("{}/health", gw.url())).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_stalled_handshake() {
    let Served {
        mut gw, _upstream, ..
    } = served(&[]).await;
    // Connected, no ClientHello: the 30 s header-read timeout would hold the drain.
    let stalled = std::net::TcpStream::connect(gw.addr).expect("connect");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let began = Instant::now();
    let status = gw.terminate(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "took {:?}",
        began.elapsed()
    );
    drop(stalled);
}
