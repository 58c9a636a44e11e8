//! The gateway's own HTTP calls to workers: health probes, registration-time detection and
//! administrative fan-out (`/flush_cache`, profiling, model and server information).
//!
//! These calls are few and small next to the data plane, so they share one plain pooled
//! client per runtime instead of the tuned upstream pools, and every call is bounded as a
//! whole (connect, request, body) so a stuck worker can never hold an admin request or a
//! registration job. Spec 1, "What a worker receives": the gateway's own calls present the
//! worker key as a bearer token.

use std::error::Error as StdError;

use crate::http::client::error_chain;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

use crate::engine::grpc;
use crate::fleet::{Transport, Worker, WorkerUrl};
use crate::http::client::{self, ClientOptions};
use crate::http::tls::UpstreamTls;

/// One pooled client for the gateway's own calls, speaking one way to plain-HTTP workers.
pub type CallPool = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The clients for the gateway's own calls to workers: one for HTTP/1.1 workers (HTTP/2
/// only where TLS negotiates it) and one for workers reached with HTTP/2 prior knowledge
/// (h2c on `http://`), since one pool cannot choose per request. Cheap to clone.
#[derive(Clone)]
pub struct CallClient {
    http1: CallPool,
    h2c: CallPool,
    /// For gRPC workers' administrative RPCs (flush, profiling, loads).
    grpc: grpc::Wire,
}

impl CallClient {
    /// Builds both pools, trusting `tls`'s roots for `https://` workers. Build one per
    /// tokio runtime: a pool spawns connection tasks on the runtime it is used from, and
    /// connections must not outlive it.
    pub fn new(tls: &UpstreamTls) -> CallClient {
        CallClient {
            http1: client::build(ClientOptions::control_calls(tls.clone(), false)),
            h2c: client::build(ClientOptions::control_calls(tls.clone(), true)),
            grpc: grpc::client::wire(Some(Duration::from_secs(30)), tls),
        }
    }

    /// The pool for gRPC workers' RPCs.
    pub fn grpc(&self) -> &grpc::Wire {
        &self.grpc
    }

    /// The pool for a worker reached with HTTP/2 prior knowledge (`true`) or not.
    pub fn pool(&self, http2: bool) -> &CallPool {
        if http2 {
            &self.h2c
        } else {
            &self.http1
        }
    }
}

/// Largest reply body read from a worker. Detection, information and fan-out replies are a
/// few KiB; the cap only stops a misbehaving worker from filling the gateway's memory, and
/// with fan-out keeping up to 64 calls in flight it bounds one fan-out to 256 MiB.
pub const MAX_CALL_BODY: usize = 4 * 1024 * 1024;

/// A worker's complete reply.
#[derive(Debug)]
pub struct CallReply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why a call to a worker produced no reply (or, for [`probe_health`], no healthy one).
///
/// The messages go to logs and admin responses: they describe the failure, never the
/// request headers, so the worker key cannot leak through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The worker is reached over gRPC or ZMQ, not HTTP.
    NotHttp,
    /// No connection could be made (refused, DNS, TLS, connect timeout).
    Connect(String),
    /// No complete reply within the call's timeout.
    Timeout,
    /// The connection broke, or the request could not be built or sent.
    Transport(String),
    /// The reply body exceeds [`MAX_CALL_BODY`].
    TooLarge,
    /// A reply whose status is not 2xx where success was required.
    Status(u16),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::NotHttp => f.write_str("worker is not reached over HTTP"),
            CallError::Connect(reason) => write!(f, "connection failed: {reason}"),
            CallError::Timeout => f.write_str("timed out"),
            CallError::Transport(reason) => write!(f, "request failed: {reason}"),
            CallError::TooLarge => {
                write!(f, "reply body larger than {MAX_CALL_BODY} bytes")
            }
            CallError::Status(status) => write!(f, "answered {status}"),
        }
    }
}

impl StdError for CallError {}

/// `User-Agent` of the gateway's administrative calls (fan-out, forwarded information).
pub const AGENT: &str = concat!("tollgate/", env!("CARGO_PKG_VERSION"));
/// `User-Agent` of health probes, registration detection and engine load polls, so engine
/// logs (and tests) can tell the gateway's housekeeping from real traffic.
pub const PROBE_AGENT: &str = concat!("tollgate-probe/", env!("CARGO_PKG_VERSION"));

/// `method path_and_query` on a registered worker, with its key as bearer token.
///
/// `content-type: application/json` is set when a body is given. The whole exchange,
/// including reading the body (capped at [`MAX_CALL_BODY`]), must finish within `timeout`.
pub async fn call(
    client: &CallClient,
    worker: &Worker,
    method: Method,
    path_and_query: &str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Result<CallReply, CallError> {
    let (scheme, authority) = worker.http_origin().ok_or(CallError::NotHttp)?;
    // An external provider reads its key where it wants it (see `ProviderKey::apply`).
    let bearer = match worker.provider {
        Some(_) => None,
        None => worker.bearer.as_ref(),
    };
    let mut request = build_request(
        scheme,
        authority,
        bearer,
        method,
        path_and_query,
        body,
        AGENT,
    )?;
    if let Some(provider) = &worker.provider {
        provider.apply(request.headers_mut());
    }
    bounded(client.pool(worker.http2), request, timeout).await
}

/// As [`call`], for a URL that is not registered yet (registration, detection): the
/// origin comes from `url`, the bearer value (`Bearer <key>`) is given explicitly, and the
/// caller picks the pool (the protocol).
pub async fn call_url(
    client: &CallPool,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    method: Method,
    path_and_query: &str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Result<CallReply, CallError> {
    let Transport::Http { scheme, authority } = &url.transport else {
        return Err(CallError::NotHttp);
    };
    let request = build_request(
        scheme,
        authority,
        bearer,
        method,
        path_and_query,
        body,
        PROBE_AGENT,
    )?;
    bounded(client, request, timeout).await
}

/// `GET path` with `headers` added (an external provider's key, which need not be a bearer
/// token), on a worker that is not registered yet or with a caller's own key.
pub async fn get_with_headers(
    client: &CallPool,
    url: &WorkerUrl,
    headers: HeaderMap,
    path_and_query: &str,
    timeout: Duration,
) -> Result<CallReply, CallError> {
    let Transport::Http { scheme, authority } = &url.transport else {
        return Err(CallError::NotHttp);
    };
    let mut request = build_request(
        scheme,
        authority,
        None,
        Method::GET,
        path_and_query,
        None,
        PROBE_AGENT,
    )?;
    request.headers_mut().extend(headers);
    bounded(client, request, timeout).await
}

/// `GET /health` with the worker key: `Ok` on a 2xx reply within `timeout`, else the reason
/// (a non-2xx reply is [`CallError::Status`]).
pub async fn probe_health(
    client: &CallPool,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    timeout: Duration,
) -> Result<(), CallError> {
    let reply = call_url(client, url, bearer, Method::GET, "/health", None, timeout).await?;
    if reply.status.is_success() {
        Ok(())
    } else {
        Err(CallError::Status(reply.status.as_u16()))
    }
}

/// Sends `request` and reads its whole reply, all within `timeout`.
async fn bounded(
    client: &CallPool,
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<CallReply, CallError> {
    tokio::time::timeout(timeout, send(client, request))
        .await
        .map_err(|_| CallError::Timeout)?
}

/// The request to send; a path that cannot be part of a URI is a transport error (the
/// caller's mistake, reported rather than panicking).
fn build_request(
    scheme: &Scheme,
    authority: &Authority,
    bearer: Option<&HeaderValue>,
    method: Method,
    path_and_query: &str,
    body: Option<Bytes>,
    agent: &'static str,
) -> Result<Request<Full<Bytes>>, CallError> {
    let uri = Uri::builder()
        .scheme(scheme.clone())
        .authority(authority.clone())
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| CallError::Transport(format!("invalid request path: {e}")))?;
    let has_body = body.is_some();
    let mut request = Request::new(Full::new(body.unwrap_or_default()));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert(USER_AGENT, HeaderValue::from_static(agent));
    if let Some(bearer) = bearer {
        headers.insert(AUTHORIZATION, bearer.clone());
    }
    if has_body {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    Ok(request)
}

/// Sends the request and reads the reply body up to [`MAX_CALL_BODY`].
async fn send(client: &CallPool, request: Request<Full<Bytes>>) -> Result<CallReply, CallError> {
    let response = client.request(request).await.map_err(|e| {
        if e.is_connect() {
            CallError::Connect(error_chain(&e))
        } else {
            CallError::Transport(error_chain(&e))
        }
    })?;
    let (parts, body) = response.into_parts();
    let collected = Limited::new(body, MAX_CALL_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                CallError::TooLarge
            } else {
                CallError::Transport(error_chain(&*e))
            }
        })?;
    Ok(CallReply {
        status: parts.status,
        headers: parts.headers,
        body: collected.to_bytes(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use http::Response;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use uuid::Uuid;

    use super::*;
    use crate::fleet::spec::WorkerSpec;
    use crate::fleet::WorkerDefaults;
    use crate::fleet::{parse_worker_url, Discovered};
    use crate::secret::Secret;

    /// One request as the test server saw it.
    #[derive(Clone, Debug)]
    pub(crate) struct Seen {
        pub method: Method,
        pub path: String,
        pub headers: HeaderMap,
        pub body: Bytes,
    }

    /// A plain-http server on 127.0.0.1 answering `answer(method, path, headers)` with
    /// `(status, body)`. Returns its base URL and the requests it served.
    pub(crate) async fn serve<F>(answer: F) -> (String, Arc<Mutex<Vec<Seen>>>)
    where
        F: Fn(&Method, &str, &HeaderMap) -> (u16, Vec<u8>) + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let answer = answer.clone();
                let log = log.clone();
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let answer = answer.clone();
                    let log = log.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let path = parts
                            .uri
                            .path_and_query()
                            .map_or("/", |p| p.as_str())
                            .to_owned();
                        let (status, out) = answer(&parts.method, &path, &parts.headers);
                        log.lock().unwrap().push(Seen {
                            method: parts.method,
                            path,
                            headers: parts.headers,
                            body,
                        });
                        let resp = Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from(out)))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    /// A URL on which nothing listens: a port bound and released again.
    pub(crate) async fn dead_url() -> String {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{addr}")
    }

    /// A server that accepts connections and never answers.
    async fn silent_url() -> String {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        format!("http://{addr}")
    }

    pub(crate) fn bearer(key: &str) -> HeaderValue {
        HeaderValue::try_from(format!("Bearer {key}")).unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// The HTTP/1.1 pool alone, for calls that pick their pool themselves.
    pub(crate) fn plain_pool() -> CallPool {
        client::build(ClientOptions::control_calls(UpstreamTls::platform(), false))
    }

    #[tokio::test]
    async fn call_url_sends_key_and_body_and_returns_the_reply() {
        let (base, seen) = serve(|_, path, _| (201, format!("echo {path}").into_bytes())).await;
        let url = parse_worker_url(&base).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let key = bearer("sk-worker");
        let reply = call_url(
            client.pool(false),
            &url,
            Some(&key),
            Method::POST,
            "/flush_cache?x=1",
            Some(Bytes::from_static(b"{}")),
            SECOND,
        )
        .await
        .unwrap();
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.body, "echo /flush_cache?x=1");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, Method::POST);
        assert_eq!(seen[0].headers[AUTHORIZATION], "Bearer sk-worker");
        assert_eq!(seen[0].headers[CONTENT_TYPE], "application/json");
        assert_eq!(seen[0].body, "{}");
    }

    #[tokio::test]
    async fn call_without_key_or_body_sends_neither_header() {
        let (base, seen) = serve(|_, _, _| (200, Vec::new())).await;
        let worker = Worker::for_url(&base).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let reply = call(&client, &worker, Method::GET, "/v1/loads", None, SECOND)
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        let seen = seen.lock().unwrap();
        assert!(seen[0].headers.get(AUTHORIZATION).is_none());
        assert!(seen[0].headers.get(CONTENT_TYPE).is_none());
        assert_eq!(seen[0].path, "/v1/loads");
    }

    #[tokio::test]
    async fn call_presents_the_worker_key() {
        let (base, seen) = serve(|_, _, _| (200, Vec::new())).await;
        let mut spec = WorkerSpec::new(parse_worker_url(&base).unwrap());
        spec.api_key = Some(Secret::new("sk-registered"));
        let worker = Worker::new(
            Uuid::new_v4(),
            spec,
            Discovered::default(),
            &WorkerDefaults::default(),
        );
        let client = CallClient::new(&UpstreamTls::platform());
        call(&client, &worker, Method::GET, "/health", None, SECOND)
            .await
            .unwrap();
        assert_eq!(
            seen.lock().unwrap()[0].headers[AUTHORIZATION],
            "Bearer sk-registered"
        );
    }

    #[tokio::test]
    async fn non_http_workers_are_refused_without_a_call() {
        let client = CallClient::new(&UpstreamTls::platform());
        let worker = Worker::for_url("grpc://127.0.0.1:1").unwrap();
        let err = call(&client, &worker, Method::GET, "/health", None, SECOND)
            .await
            .unwrap_err();
        assert_eq!(err, CallError::NotHttp);
        let url = parse_worker_url("ipc:///tmp/engine.sock").unwrap();
        let err = probe_health(client.pool(false), &url, None, SECOND)
            .await
            .unwrap_err();
        assert_eq!(err, CallError::NotHttp);
    }

    #[tokio::test]
    async fn a_dead_port_is_a_connect_error() {
        let url = parse_worker_url(&dead_url().await).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let key = bearer("sk-hidden");
        let err = probe_health(client.pool(false), &url, Some(&key), SECOND)
            .await
            .unwrap_err();
        assert!(matches!(err, CallError::Connect(_)), "{err:?}");
        let shown = err.to_string();
        assert!(
            !shown.contains('\n') && !shown.contains("sk-hidden"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_silent_worker_times_out() {
        let url = parse_worker_url(&silent_url().await).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let started = std::time::Instant::now();
        let err = probe_health(client.pool(false), &url, None, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(err, CallError::Timeout);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn probe_health_needs_a_2xx() {
        let (base, seen) = serve(|_, path, headers| match path {
            "/health" if headers.get(AUTHORIZATION).is_some() => (200, Vec::new()),
            _ => (503, Vec::new()),
        })
        .await;
        let url = parse_worker_url(&base).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let key = bearer("k");
        assert_eq!(
            probe_health(client.pool(false), &url, Some(&key), SECOND).await,
            Ok(())
        );
        assert_eq!(
            probe_health(client.pool(false), &url, None, SECOND).await,
            Err(CallError::Status(503))
        );
        let seen = seen.lock().unwrap();
        assert!(seen
            .iter()
            .all(|s| s.method == Method::GET && s.path == "/health"));
    }

    #[tokio::test]
    async fn oversized_replies_are_refused() {
        let (base, _) = serve(|_, _, _| (200, vec![b'x'; MAX_CALL_BODY + 1])).await;
        let url = parse_worker_url(&base).unwrap();
        let client = CallClient::new(&UpstreamTls::platform());
        let err = call_url(
            client.pool(false),
            &url,
            None,
            Method::GET,
            "/",
            None,
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert_eq!(err, CallError::TooLarge);
    }

    #[test]
    fn an_invalid_path_is_reported_not_panicked() {
        let url = parse_worker_url("http://127.0.0.1:1").unwrap();
        let Transport::Http { scheme, authority } = &url.transport else {
            unreachable!()
        };
        let err = build_request(
            scheme,
            authority,
            None,
            Method::GET,
            "bad path",
            None,
            AGENT,
        )
        .unwrap_err();
        assert!(matches!(err, CallError::Transport(_)), "{err:?}");
    }
}
