//! One request/response exchange with an HTTP/1.1 worker, driven by the task that serves
//! the client.
//!
//! There is no connection task and no channel between the worker's socket and the
//! client's: the response body ([`H1Body`]) owns the upstream connection and reads it when
//! the client's connection asks for the next frame. So everything one read brought is
//! handed on before the next read — the client's connection writes it out together — and
//! a client that stops reading stops the reads from the worker (TCP backpressure, nothing
//! buffered in between). Payload leaves as slices of the read buffer; chunked framing is
//! checked as it streams ([`super::chunked`]) and never copied. A finished body puts its
//! connection back into the thread's pool ([`super::pool`]); an unfinished one closes it,
//! which is how the worker learns that the client went away.

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::uri::Authority;
use http::{HeaderMap, Method};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::chunked::{ChunkError, Chunked, Piece};
use super::head::{self, HeadError, ReqFraming, RespFraming, ResponseHead};
use super::pool::{self, Conn, Keep};
use crate::http::{raw_send, BoxError};

/// A connection's read buffer starts at this size and is refilled by [`Conn::read_size`],
/// between this and [`MAX_READ`]; a read never asks for less than [`MIN_READ`] bytes. Small
/// by default: an SSE event is a few hundred bytes, and every open stream holds one.
const READ_BUF: usize = 4 * 1024;
const MAX_READ: usize = 64 * 1024;
const MIN_READ: usize = 512;
/// Request bodies up to this size are written together with the head (one copy, one
/// syscall); larger frames are written as they are.
const COALESCE: usize = 16 * 1024;

/// Why an exchange with a worker failed.
#[derive(Debug)]
pub enum H1Error {
    /// No connection could be made (refused, unreachable, or not within the timeout).
    Connect(io::Error),
    /// Reading or writing the connection failed.
    Io(io::Error),
    /// The worker closed the connection before its response was complete.
    Closed,
    Head(HeadError),
    Chunk(ChunkError),
    /// The client's request body failed while it was sent (the client's fault).
    ClientBody(BoxError),
}

impl fmt::Display for H1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            H1Error::Connect(e) => write!(f, "connecting to the worker failed: {e}"),
            H1Error::Io(e) => write!(f, "the connection to the worker failed: {e}"),
            H1Error::Closed => f.write_str("the worker closed the connection mid-response"),
            H1Error::Head(e) => e.fmt(f),
            H1Error::Chunk(e) => e.fmt(f),
            H1Error::ClientBody(e) => write!(f, "the client's body failed: {e}"),
        }
    }
}

impl std::error::Error for H1Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            H1Error::Connect(e) | H1Error::Io(e) => Some(e),
            H1Error::Head(e) => Some(e),
            H1Error::Chunk(e) => Some(e),
            H1Error::ClientBody(e) => Some(e.as_ref()),
            H1Error::Closed => None,
        }
    }
}

/// What one exchange needs to know besides the body.
pub struct Exchange<'a> {
    pub origin: &'a Authority,
    pub method: &'a Method,
    /// Path and query.
    pub target: &'a str,
    /// The headers the worker receives; `host` and framing headers are the exchange's.
    pub headers: &'a HeaderMap,
    pub connect_timeout: Duration,
    pub keep: Keep,
}

/// Sends the request and reads the worker's response head; the body follows as
/// [`H1Body`]. The caller bounds the whole call with its deadline.
///
/// Not an `async fn`: one keeps its arguments twice in its state (as they were passed and
/// as the locals they are moved into), and copies them from one to the other when first
/// polled. The block below uses what it captured in place, the body included (pinned where
/// it lies, hence `Unpin`).
#[allow(clippy::manual_async_fn)] // see above: the arguments are used in place
pub fn exchange<'e, B>(
    ex: Exchange<'e>,
    mut body: B,
) -> impl Future<Output = Result<(ResponseHead, H1Body), H1Error>> + 'e
where
    B: Body<Data = Bytes> + Unpin + 'e,
    B::Error: Into<BoxError>,
{
    async move {
        let mut conn = match pool::checkout(ex.origin) {
            Some(conn) => conn,
            None => connect(ex.origin, ex.connect_timeout).await?,
        };
        send_request(&mut conn.stream, &ex, Pin::new(&mut body)).await?;
        let head = loop {
            // The buffer is empty right after the request went out, as a rule: the parser
            // (which sets up its field table on every call) only runs once bytes are there.
            if !conn.buf.is_empty() {
                if let Some(head) =
                    head::parse_response(&mut conn.buf, ex.method).map_err(H1Error::Head)?
                {
                    break head;
                }
            }
            if poll_fn(|cx| poll_fill(&mut conn, cx))
                .await
                .map_err(H1Error::Io)?
                == 0
            {
                return Err(H1Error::Closed);
            }
        };
        let framing = match head.framing {
            RespFraming::Empty | RespFraming::Length(0) => Framing::Done,
            RespFraming::Length(n) => Framing::Length(n),
            RespFraming::Chunked => Framing::Chunked(Chunked::new()),
            RespFraming::UntilClose => Framing::UntilClose,
        };
        let mut body = H1Body {
            conn: Some(conn),
            framing,
            origin: ex.origin.clone(),
            keep: ex.keep,
            reusable: head.reusable,
        };
        if matches!(body.framing, Framing::Done) {
            body.finish();
        }
        Ok((head, body))
    }
}

async fn connect(origin: &Authority, timeout: Duration) -> Result<Conn, H1Error> {
    let host = origin.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = origin.port_u16().unwrap_or(80);
    let stream = tokio::time::timeout(timeout, TcpStream::connect((host, port)))
        .await
        .map_err(|_| H1Error::Connect(io::ErrorKind::TimedOut.into()))?
        .map_err(H1Error::Connect)?;
    // Events are small and must not wait for Nagle's delayed ACK dance.
    stream.set_nodelay(true).map_err(H1Error::Connect)?;
    Ok(Conn {
        stream,
        buf: BytesMut::with_capacity(READ_BUF),
        read_size: READ_BUF,
    })
}

/// Writes the head and the body. A body the gateway already holds whole leaves with the
/// head in one write; a streamed one is written frame by frame as the client sends it.
async fn send_request<B>(
    stream: &mut TcpStream,
    ex: &Exchange<'_>,
    mut body: Pin<&mut B>,
) -> Result<(), H1Error>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let framing = match body.size_hint().exact() {
        Some(0) if !expects_body(ex.method) => ReqFraming::None,
        Some(n) => ReqFraming::Length(n),
        None => ReqFraming::Chunked,
    };
    let mut out = BytesMut::with_capacity(512);
    head::encode_request(
        &mut out,
        ex.method,
        ex.target,
        ex.origin.as_str(),
        ex.headers,
        framing,
    );
    while !body.is_end_stream() {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.map_err(|e| H1Error::ClientBody(e.into()))?;
        let Ok(data) = frame.into_data() else {
            // Trailers of the client's body are not relayed.
            continue;
        };
        if data.is_empty() {
            continue;
        }
        if framing == ReqFraming::Chunked {
            head::put_chunk_size(&mut out, data.len());
        }
        if out.len() + data.len() <= COALESCE {
            out.put_slice(&data);
        } else {
            write(stream, &mut out).await?;
            raw_send::send_all(stream, &data)
                .await
                .map_err(H1Error::Io)?;
        }
        if framing == ReqFraming::Chunked {
            out.put_slice(b"\r\n");
        }
        // A streamed body goes out as it arrives: nothing waits in `out` for the
        // client's next frame.
        if !body.is_end_stream() {
            write(stream, &mut out).await?;
        }
    }
    if framing == ReqFraming::Chunked {
        out.put_slice(b"0\r\n\r\n");
    }
    write(stream, &mut out).await
}

async fn write(stream: &mut TcpStream, out: &mut BytesMut) -> Result<(), H1Error> {
    if !out.is_empty() {
        raw_send::send_all(stream, out).await.map_err(H1Error::Io)?;
        out.clear();
    }
    Ok(())
}

/// Methods whose requests carry a body even when it is empty (`content-length: 0`).
fn expects_body(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// Reads what the worker has sent into the connection's buffer; `Ok(0)` at its end.
///
/// A read that did not fill the space it was given emptied the socket, so the socket's
/// readiness is cleared with it: the next poll waits for the worker's next bytes instead
/// of spending a `read` to learn that nothing is there (one system call per event saved;
/// bytes that arrive later raise readiness again with their own event).
fn poll_fill(conn: &mut Conn, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    if conn.buf.capacity() - conn.buf.len() < MIN_READ {
        conn.buf.reserve(conn.read_size);
    }
    let spare = conn.buf.capacity() - conn.buf.len();
    loop {
        ready!(conn.stream.poll_read_ready(cx))?;
        let mut got = 0;
        let read = conn.stream.try_io(Interest::READABLE, || {
            got = conn.stream.try_read_buf(&mut conn.buf)?;
            if got > 0 && got < spare {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(got)
            }
        });
        if got > 0 {
            conn.read_size = if got == spare {
                (conn.read_size * 2).min(MAX_READ)
            } else if got < spare / 4 {
                (conn.read_size / 2).max(READ_BUF)
            } else {
                conn.read_size
            };
        }
        match read {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => {
                return Poll::Ready(Ok(got))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

#[derive(Debug)]
enum Framing {
    /// This many body bytes still to come.
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

/// A worker's response body, read from its connection as the client takes it.
#[derive(Debug)]
pub struct H1Body {
    /// `None` once the body is over (the connection pooled or closed).
    conn: Option<Conn>,
    framing: Framing,
    origin: Authority,
    keep: Keep,
    reusable: bool,
}

impl H1Body {
    /// The whole body, when it arrived with the head (a small answer, as a rule): taken out
    /// at once and the connection pooled, so the client's response is one buffer and not a
    /// relay with its timer. `None`: the body is to be relayed as it comes (nothing taken).
    pub fn take_whole(&mut self) -> Option<Bytes> {
        let whole = match (&self.framing, self.conn.as_mut()) {
            (Framing::Done, _) => Bytes::new(),
            (Framing::Length(left), Some(conn)) => match usize::try_from(*left) {
                Ok(left) if left <= conn.buf.len() => conn.buf.split_to(left).freeze(),
                _ => return None,
            },
            _ => return None,
        };
        self.finish();
        Some(whole)
    }

    /// The body is complete: the connection goes back to the pool if it can carry another
    /// request (nothing unread in its buffer).
    fn finish(&mut self) {
        self.framing = Framing::Done;
        if let Some(conn) = self.conn.take() {
            if self.reusable && conn.buf.is_empty() {
                pool::checkin(&self.origin, conn, self.keep);
            }
        }
    }

    fn fail(&mut self, err: H1Error) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        self.conn = None;
        self.framing = Framing::Done;
        Poll::Ready(Some(Err(err)))
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = H1Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if !conn.buf.is_empty() {
                let (data, ended) = match &mut this.framing {
                    Framing::Length(left) => {
                        let n = usize::try_from(*left)
                            .map_or(conn.buf.len(), |left| left.min(conn.buf.len()));
                        *left -= n as u64;
                        (Some(conn.buf.split_to(n).freeze()), *left == 0)
                    }
                    Framing::Chunked(chunked) => match chunked.step(&conn.buf) {
                        Ok(Piece::Framing(n)) => {
                            conn.buf.advance(n);
                            continue;
                        }
                        Ok(Piece::Data(n)) => (Some(conn.buf.split_to(n).freeze()), false),
                        Ok(Piece::End(n)) => {
                            conn.buf.advance(n);
                            (None, true)
                        }
                        Err(err) => return this.fail(H1Error::Chunk(err)),
                    },
                    Framing::UntilClose => (Some(conn.buf.split().freeze()), false),
                    Framing::Done => return Poll::Ready(None),
                };
                if ended {
                    this.finish();
                }
                return Poll::Ready(data.map(|data| Ok(Frame::data(data))));
            }
            match ready!(poll_fill(conn, cx)) {
                Ok(0) if matches!(this.framing, Framing::UntilClose) => {
                    this.conn = None;
                    this.framing = Framing::Done;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(H1Error::Closed),
                Ok(_) => {}
                Err(err) => return this.fail(H1Error::Io(err)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.framing, Framing::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(n) => SizeHint::with_exact(n),
            Framing::Done => SizeHint::with_exact(0),
            Framing::Chunked(_) | Framing::UntilClose => SizeHint::default(),
        }
    }
}
