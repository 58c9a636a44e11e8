//! `relay-floor`: the least an HTTP/1.1 relay built on the gateway's own parts can cost, as
//! a reference row for `perf/compare` beside nginx.
//!
//! hyper's HTTP/1.1 server with the gateway's head limits, on one current-thread runtime
//! with a local task set (as a tollgate data-plane thread); per request the client's body
//! read whole, a keep-alive connection to the one upstream from a thread-local pool, the
//! request written in one buffer, the upstream's head parsed with `httparse` into a
//! `HeaderMap` (as the gateway's own client does), and the answer returned through hyper.
//! Header maps on both sides and hyper's dispatcher are all paid here; what is not paid is
//! everything the gateway adds: routing, auth, limits and timeouts, admission, selection,
//! retries, breakers, metrics, the streamed relay. Comparing tollgate with this floor says
//! how much of its cost is its own machinery rather than the HTTP stack under it.
//!
//! It answers `GET /health` itself and relays everything else. No timeouts and no bounds
//! beyond hyper's: a measurement tool for 127.0.0.1, never a proxy to expose.

use std::cell::RefCell;
use std::convert::Infallible;
use std::ffi::OsString;
use std::process::ExitCode;
use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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

/// Largest upstream response head and body read (bodies of the small scenario are far
/// below).
const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// Fields of an upstream head, as the gateway's client first tries.
const HEAD_FIELDS: usize = 24;

struct Flags {
    host: String,
    port: u16,
    upstream: String,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Flags>, String> {
    use lexopt::prelude::*;
    let mut flags = Flags {
        host: "127.0.0.1".to_owned(),
        port: 30010,
        upstream: String::new(),
    };
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
            Long("host") => flags.host = string(&mut parser)?,
            Long("port") => {
                flags.port = string(&mut parser)?
                    .parse()
                    .map_err(|_| "--port takes a port number".to_owned())?
            }
            Long("upstream") => flags.upstream = string(&mut parser)?,
            other => return Err(other.unexpected().to_string()),
        }
    }
    if flags.upstream.is_empty() {
        return Err("--upstream is required".to_owned());
    }
    Ok(Some(flags))
}

/// One keep-alive connection to the upstream and what was read past the last answer.
struct Upstream {
    stream: TcpStream,
    buf: BytesMut,
}

thread_local! {
    static POOL: RefCell<Vec<Upstream>> = const { RefCell::new(Vec::new()) };
}

/// Why an exchange with the upstream produced no answer.
enum Failed {
    Io(std::io::Error),
    Head,
    Closed,
    TooLarge,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Io(err) => write!(f, "{err}"),
            Failed::Head => f.write_str("an answer head it cannot relay"),
            Failed::Closed => f.write_str("the upstream closed mid-answer"),
            Failed::TooLarge => f.write_str("an answer over 16 MiB"),
        }
    }
}

impl From<std::io::Error> for Failed {
    fn from(err: std::io::Error) -> Failed {
        Failed::Io(err)
    }
}

async fn relay(
    upstream: Rc<str>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == "/health" {
        return Ok(Response::new(Full::new(Bytes::from_static(b"ok"))));
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|c| c.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let pooled = POOL.with(|pool| pool.borrow_mut().pop());
    let mut conn = match pooled {
        Some(conn) => conn,
        None => match TcpStream::connect(&*upstream).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                Upstream {
                    stream,
                    buf: BytesMut::with_capacity(8 * 1024),
                }
            }
            Err(_) => return Ok(status(StatusCode::BAD_GATEWAY)),
        },
    };
    match exchange(&mut conn, &upstream, &parts, &body).await {
        Ok((answer, reusable)) => {
            if reusable {
                POOL.with(|pool| pool.borrow_mut().push(conn));
            }
            Ok(answer)
        }
        Err(err) => {
            eprintln!("relay-floor: upstream exchange failed: {err}");
            Ok(status(StatusCode::BAD_GATEWAY))
        }
    }
}

/// Writes the request and reads one `Content-Length` answer; whether the connection can
/// serve another.
async fn exchange(
    conn: &mut Upstream,
    authority: &str,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Result<(Response<Full<Bytes>>, bool), Failed> {
    let mut out = BytesMut::with_capacity(512 + body.len());
    out.put_slice(parts.method.as_str().as_bytes());
    out.put_u8(b' ');
    let target = parts.uri.path_and_query().map_or("/", |t| t.as_str());
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\nhost: ");
    out.put_slice(authority.as_bytes());
    out.put_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    out.put_slice(body.len().to_string().as_bytes());
    out.put_slice(b"\r\n\r\n");
    out.put_slice(body);
    conn.stream.write_all(&out).await?;
    loop {
        if !conn.buf.is_empty() {
            if let Some(answer) = answer(&mut conn.buf)? {
                let (head_len, length, response, reusable) = answer;
                while conn.buf.len() < head_len + length {
                    read_more(conn).await?;
                }
                let _ = conn.buf.split_to(head_len);
                let mut response = response;
                *response.body_mut() = Full::new(conn.buf.split_to(length).freeze());
                return Ok((response, reusable));
            }
        }
        read_more(conn).await?;
    }
}

async fn read_more(conn: &mut Upstream) -> Result<(), Failed> {
    if conn.buf.len() >= MAX_ANSWER {
        return Err(Failed::TooLarge);
    }
    if conn.stream.read_buf(&mut conn.buf).await? == 0 {
        return Err(Failed::Closed);
    }
    Ok(())
}

/// The upstream's head at the front of `buf`, parsed into the client's response (its body
/// still empty): head length, body length, response, reusable. `None`: incomplete.
type Parsed = (usize, usize, Response<Full<Bytes>>, bool);

fn answer(buf: &mut BytesMut) -> Result<Option<Parsed>, Failed> {
    let mut fields = [httparse::EMPTY_HEADER; HEAD_FIELDS];
    let mut head = httparse::Response::new(&mut fields);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failed::Head),
    };
    let code = head.code.ok_or(Failed::Head)?;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut length = None;
    let mut reusable = head.version == Some(1);
    for field in head.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Failed::Head)?;
        if name == CONTENT_LENGTH {
            let text = std::str::from_utf8(field.value).map_err(|_| Failed::Head)?;
            length = Some(text.trim().parse::<usize>().map_err(|_| Failed::Head)?);
            continue;
        }
        if name == TRANSFER_ENCODING {
            // Chunked answers are out of this floor's scope.
            return Err(Failed::Head);
        }
        if name == CONNECTION {
            reusable &= !field.value.eq_ignore_ascii_case(b"close");
            continue;
        }
        let value = HeaderValue::from_bytes(field.value).map_err(|_| Failed::Head)?;
        headers.append(name, value);
    }
    let length = length.ok_or(Failed::Head)?;
    if length > MAX_ANSWER {
        return Err(Failed::TooLarge);
    }
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::from_u16(code).map_err(|_| Failed::Head)?;
    *response.headers_mut() = headers;
    Ok(Some((len, length, response, reusable)))
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
    let upstream: Rc<str> = Rc::from(flags.upstream.as_str());
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
