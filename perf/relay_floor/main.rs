//! `relay-floor`: the least an HTTP/1.1 relay built on the gateway's own parts can cost, as
//! a reference row for `perf/compare` beside nginx.
//!
//! hyper's HTTP/1.1 server with the gateway's head limits, on one current-thread runtime
//! with a local task set (as a tollgate data-plane thread); per request the client's body
//! read whole and the exchange made with the gateway's own HTTP/1.1 client
//! (`tollgate::http::h1`: its thread-local pool, its request writer, its head parser into a
//! `HeaderMap`), the answer returned through hyper. Header maps on both sides, hyper's
//! dispatcher and the worker side exactly as tollgate runs it are all paid here; what is not
//! paid is everything else the gateway adds: routing, auth, limits and timeouts, admission,
//! selection, retries, breakers, metrics, the relay of streams. Comparing tollgate with
//! this floor says how much of its cost is its own machinery rather than the HTTP stack
//! under it.
//!
//! It answers `GET /health` itself and relays everything else. No timeouts and no bounds
//! beyond hyper's: a measurement tool for 127.0.0.1, never a proxy to expose.

use std::convert::Infallible;
use std::ffi::OsString;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tollgate::http::h1::{self, Keep};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HELP: &str = "\
relay-floor: a bare hyper relay to one upstream, the cost floor perf/compare sets beside
tollgate and nginx (no limits, no timeouts: for 127.0.0.1 measurements only)

USAGE: relay-floor --upstream HOST:PORT [--host ADDR] [--port PORT]

  --upstream HOST:PORT  the HTTP/1.1 server every request goes to (required)
  --host ADDR           listen address (default 127.0.0.1)
  --port PORT           listen port (default 30010; 0 picks a free one)
  -h, --help            this text
";

/// Idle upstream connections kept (the floor's load never needs more than its clients'
/// count) until the upstream closes them: nothing sweeps them.
const KEEP: Keep = Keep {
    max_idle: 1024,
    idle_timeout: None,
};
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest upstream body read when it did not come with the head.
const MAX_ANSWER: usize = 16 * 1024 * 1024;

struct Flags {
    host: String,
    port: u16,
    upstream: Authority,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Flags>, String> {
    use lexopt::prelude::*;
    let (mut host, mut port, mut upstream) = ("127.0.0.1".to_owned(), 30010, None);
    let mut parser = lexopt::Parser::from_args(args);
    let string = |parser: &mut lexopt::Parser| -> Result<String, String> {
        parser
            .value()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|_| "a value is not UTF-8".to_owned())
    };
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("host") => host = string(&mut parser)?,
            Long("port") => {
                port = string(&mut parser)?
                    .parse()
                    .map_err(|_| "--port takes a port number".to_owned())?
            }
            Long("upstream") => {
                let value = string(&mut parser)?;
                upstream = Some(
                    value
                        .parse::<Authority>()
                        .map_err(|_| format!("--upstream {value:?} is not HOST:PORT"))?,
                );
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    let upstream = upstream.ok_or("--upstream is required")?;
    Ok(Some(Flags {
        host,
        port,
        upstream,
    }))
}

/// What the upstream receives besides the framing: the gateway states the media type.
struct Upstream {
    origin: Authority,
    headers: HeaderMap,
}

/// One request: the body read whole, the exchange over the gateway's own HTTP/1.1 client
/// (`tollgate::http::h1`: its pool, its request writer, its head parser), the answer as one
/// buffer when it came whole with the head, as the gateway answers a small request.
async fn relay(
    upstream: Rc<Upstream>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == "/health" {
        return Ok(Response::new(Full::new(Bytes::from_static(b"ok"))));
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|c| c.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let exchange = h1::Exchange {
        origin: &upstream.origin,
        method: &parts.method,
        target: parts.uri.path_and_query().map_or("/", |t| t.as_str()),
        headers: &upstream.headers,
        connect_timeout: CONNECT_TIMEOUT,
        keep: KEEP,
    };
    let (head, mut answer) = match h1::exchange(exchange, Full::new(body)).await {
        Ok(exchanged) => exchanged,
        Err(err) => {
            eprintln!("relay-floor: upstream exchange failed: {err}");
            return Ok(status(StatusCode::BAD_GATEWAY));
        }
    };
    let body = match answer.take_whole() {
        Some(whole) => whole,
        None => match Limited::new(answer, MAX_ANSWER).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(err) => {
                eprintln!("relay-floor: upstream body failed: {err}");
                return Ok(status(StatusCode::BAD_GATEWAY));
            }
        },
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = head.status;
    *response.headers_mut() = head.headers;
    Ok(response)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

async fn serve(flags: Flags) -> std::io::Result<()> {
    let listener = TcpListener::bind((flags.host.as_str(), flags.port)).await?;
    // The bundled servers' first line, which tests and scripts wait for.
    println!("LISTENING {}", listener.local_addr()?);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let upstream = Rc::new(Upstream {
        origin: flags.upstream,
        headers,
    });
    let mut h1 = http1::Builder::new();
    h1.keep_alive(true).max_buf_size(64 * 1024).max_headers(100);
    let h1 = Rc::new(h1);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                eprintln!("relay-floor: accept failed: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (h1, upstream) = (h1.clone(), upstream.clone());
        tokio::task::spawn_local(async move {
            let svc = service_fn(move |req| relay(upstream.clone(), req));
            let _ = h1.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

fn main() -> ExitCode {
    let flags = match parse(std::env::args_os().skip(1)) {
        Ok(Some(flags)) => flags,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("relay-floor: {message} (see --help)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("relay-floor: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    match local.block_on(&runtime, serve(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("relay-floor: {err}");
            ExitCode::FAILURE
        }
    }
}
