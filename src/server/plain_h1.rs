//! Plain HTTP/1.1 requests, answered by the server itself rather than through hyper.
//!
//! Most requests a gateway sees are the same shape: an HTTP/1.1 request in origin form
//! whose head and `Content-Length` body arrive together, answered with a body the client
//! reads as it comes. hyper's dispatcher, its request-body channel and its
//! response encoding cost about a microsecond of CPU on each such request (measured in
//! `docs/performance.md`, "What hyper's server side costs"), as much as the whole
//! remaining gap to nginx. So the connection parses such a request here from the bytes it
//! read ([`parse`]), hands the handler its body whole, and writes the answer itself
//! ([`Exchange`]).
//!
//! Everything else goes to hyper, with the bytes read so far, for the rest of the
//! connection (until it is parked): chunked bodies, bodies not all read with their head
//! (hyper streams them under the handler's body timeouts), `Expect`,
//! `Upgrade`, `TE`, `HEAD`, `CONNECT`, HTTP/1.0, a head hyper would refuse (malformed,
//! too many fields, too large), and any request larger than [`MAX_PLAIN`]. hyper's own
//! answers to bad input (400, 431) and its handling of the rarer framings therefore stay
//! exactly as they were. The smuggling guard under both (`h1_framing`) sees every byte
//! either way.
//!
//! While an answer is on its way, the client's side is watched as hyper watches it: one
//! read when nothing unread is waiting, so a client that leaves cancels its request, and
//! bytes it pipelines wait for the next turn.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body::Body;
use hyper::rt::Write;

use crate::http::body::RespBody;
use crate::http::guard::Guard;
use crate::http::h1::head;
use crate::http::request_body::RequestBody;

/// The most a request (head and body together) may take to be answered here; a larger one
/// goes to hyper, which streams its body.
pub const MAX_PLAIN: usize = 16 * 1024;

/// Frames up to this size are copied in after the head or the frames before them, to leave
/// in one write; larger ones are written from where they lie.
const COPY_MAX: usize = 1024;

/// How much is gathered for one write before it goes out.
const GATHER_MAX: usize = 16 * 1024;

/// Header fields a plain request may carry; more go to hyper, which takes up to
/// `MAX_HEADER_FIELDS` and answers 431 past that.
const MAX_FIELDS: usize = 48;

/// What the bytes read so far hold.
#[derive(Debug)]
// Returned and taken apart at once, once a request: boxing the request would cost an
// allocation each time to save a move.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    /// A complete plain request, `len` bytes of the input; `close`: the client asked for
    /// the connection to close after it.
    Request {
        req: Request<RequestBody>,
        len: usize,
        close: bool,
    },
    /// A request head under way that may still be plain: read more.
    Partial,
    /// Something hyper serves.
    Hyper,
}

/// Looks at the bytes a connection has read and not yet served.
pub fn parse(buf: &Bytes) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut head = httparse::Request::new(&mut fields);
    let head_len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_PLAIN => return Parsed::Partial,
        Ok(httparse::Status::Partial) | Err(_) => return Parsed::Hyper,
    };
    let (Some(method), Some(path), Some(1)) = (head.method, head.path, head.version) else {
        return Parsed::Hyper;
    };
    if method == "HEAD" || method == "CONNECT" || !path.starts_with('/') {
        return Parsed::Hyper;
    }
    let mut length: Option<usize> = None;
    let mut close = false;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for field in head.headers.iter() {
        let name = field.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            match (length, decimal(field.value)) {
                (None, Some(n)) => length = Some(n),
                _ => return Parsed::Hyper,
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            match connection_close(field.value) {
                Some(asked) => close |= asked,
                None => return Parsed::Hyper,
            }
        } else if [&b"transfer-encoding"[..], b"expect", b"upgrade", b"te"]
            .iter()
            .any(|framing| name.eq_ignore_ascii_case(framing))
        {
            return Parsed::Hyper;
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_maybe_shared(buf.slice_ref(field.value)),
        ) else {
            return Parsed::Hyper;
        };
        headers.append(name, value);
    }
    // A body that has not all arrived with its head goes to hyper, which streams it to
    // the handler: the handler's body timeouts (408) and limits apply to a client that
    // stalls mid-body, which waiting here would hide from them.
    let body_len = length.unwrap_or(0);
    let Some(len) = head_len
        .checked_add(body_len)
        .filter(|&len| len <= MAX_PLAIN && len <= buf.len())
    else {
        return Parsed::Hyper;
    };
    let (Ok(method), Ok(uri)) = (
        Method::from_bytes(method.as_bytes()),
        Uri::from_maybe_shared(buf.slice_ref(path.as_bytes())),
    ) else {
        return Parsed::Hyper;
    };
    let mut req = Request::new(RequestBody::whole(buf.slice(head_len..len)));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Parsed::Request { req, len, close }
}

/// A `Content-Length` value: digits only, as RFC 9112 has it (no sign, no list).
fn decimal(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 15 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')))
}

/// Whether a `Connection` value asks to close; `None` for any option other than `close`
/// and `keep-alive` (hyper serves those).
fn connection_close(value: &[u8]) -> Option<bool> {
    let mut close = false;
    for option in value.split(|&b| b == b',') {
        let option = option.trim_ascii();
        if option.eq_ignore_ascii_case(b"close") {
            close = true;
        } else if !option.eq_ignore_ascii_case(b"keep-alive") && !option.is_empty() {
            return None;
        }
    }
    Some(close)
}

/// The handler's answer on its way.
pub type Answer = Pin<Box<dyn Future<Output = Response<RespBody>> + Send>>;

/// One request answered here: the handler's future, then the answer written out.
pub struct Exchange {
    stage: Stage,
    /// Close the connection once the answer is out.
    close: bool,
    /// Counts the request on its connection until its answer is out (declared after the
    /// stage, so the body goes first).
    _activity: Guard,
}

// The exchange is boxed whole; boxing the writing stage as well would be a second
// allocation a request.
#[allow(clippy::large_enum_variant)]
enum Stage {
    Handling(Answer),
    Writing(Writing),
}

/// How the answer's body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// No body may follow the head (1xx, 204, 304).
    None,
    /// This many bytes still to come.
    Length(u64),
    Chunked,
}

struct Writing {
    body: RespBody,
    framing: Framing,
    out: Out,
    /// The body has ended and its end is in `out`.
    ended: bool,
    /// It ended short of its length: what came is written, then the connection closes.
    short: bool,
}

impl Exchange {
    pub fn new(answer: Answer, close: bool, activity: Guard) -> Exchange {
        Exchange {
            stage: Stage::Handling(answer),
            close,
            _activity: activity,
        }
    }

    /// The connection is to close after this answer (shutdown drain, idle goodbye).
    pub fn close_after(&mut self) {
        self.close = true;
    }

    /// Whether the connection closes once this answer is out.
    pub fn closes(&self) -> bool {
        self.close
    }

    /// Drives the answer to the client: ready once all of it is written and flushed; an
    /// error when the connection must close without its end (the client's side failed,
    /// or the body did, after the head was out).
    pub fn poll<W: Write + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match &mut self.stage {
                Stage::Handling(answer) => {
                    let resp = ready!(answer.as_mut().poll(cx));
                    self.stage = Stage::Writing(Writing::start(resp, &mut self.close));
                }
                Stage::Writing(writing) => return writing.poll(io, cx),
            }
        }
    }
}

impl Writing {
    fn start(resp: Response<RespBody>, close: &mut bool) -> Writing {
        let (parts, body) = resp.into_parts();
        let mut head = Vec::with_capacity(256);
        let framing = encode_head(&parts, body.size_hint().exact(), close, &mut head);
        Writing {
            ended: framing == Framing::None,
            short: false,
            body,
            framing,
            out: Out::new(head),
        }
    }

    fn poll<W: Write + Unpin>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            // What the body has ready joins what waits to be written (the head, at first),
            // so a small answer leaves in one write, and so do the events a worker sent
            // together (as hyper's write queue gathers them). Small frames are copied in, up
            // to [`GATHER_MAX`]; a large one is written as it came, and nothing is asked
            // of the body until it is out, so a client that stops reading stops the relay.
            let mut waiting = false;
            while !self.ended && !self.out.holds_data() && self.out.head.len() < GATHER_MAX {
                match Pin::new(&mut self.body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            self.frame(data)?;
                        }
                    }
                    Poll::Ready(Some(Err(err))) => {
                        tracing::debug!(error = %err, "the answer's body failed; closing");
                        return Poll::Ready(Err(io::Error::other(err)));
                    }
                    Poll::Ready(None) => self.end(),
                    Poll::Pending => {
                        waiting = true;
                        break;
                    }
                }
            }
            if !self.out.is_empty() {
                ready!(self.out.poll_write(io, cx))?;
                continue;
            }
            if self.ended {
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                if self.short {
                    return Poll::Ready(Err(io::Error::other(
                        "the answer's body ended short of its length",
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            if waiting {
                // What was written goes out before the wait (a TLS stream may hold it).
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                return Poll::Pending;
            }
        }
    }

    /// Queues one data frame in its framing: copied after what waits when small, else
    /// held as it came.
    fn frame(&mut self, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let chunked = match &mut self.framing {
            Framing::None => return Ok(()),
            Framing::Length(left) => {
                if data.len() as u64 > *left {
                    return Err(io::Error::other("the answer's body overran its length"));
                }
                *left -= data.len() as u64;
                false
            }
            Framing::Chunked => {
                head::put_chunk_size(&mut self.out.head, data.len());
                true
            }
        };
        let copied = data.len() <= COPY_MAX;
        if copied {
            self.out.head.extend_from_slice(&data);
        } else {
            self.out.data = data;
        }
        let last =
            self.body.is_end_stream() && !matches!(self.framing, Framing::Length(left) if left > 0);
        self.ended = last;
        if chunked {
            let after: &'static [u8] = if last { b"\r\n0\r\n\r\n" } else { b"\r\n" };
            if copied {
                self.out.head.extend_from_slice(after);
            } else {
                self.out.tail = after;
            }
        }
        Ok(())
    }

    /// The body ended: the chunked end, or a note that the length was not met. Nothing
    /// is held as it came here (frames are asked for only once that is out), so the end
    /// follows what waits.
    fn end(&mut self) {
        self.ended = true;
        match self.framing {
            Framing::Chunked => self.out.head.extend_from_slice(b"0\r\n\r\n"),
            Framing::Length(left) => self.short = left > 0,
            Framing::None => {}
        }
    }
}

/// Writes the answer's head: status line, the handler's fields with the framing the server
/// chooses, `date` and, when closing, `connection: close`. A `Connection: close` from the
/// handler closes the connection too (`close` is set). One pass over the fields.
fn encode_head(
    parts: &http::response::Parts,
    exact: Option<u64>,
    close: &mut bool,
    out: &mut Vec<u8>,
) -> Framing {
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // The first `Content-Length` field's value, as the handler set it.
    let mut declared: Option<Option<usize>> = None;
    let mut dated = false;
    let mut connection = false;
    for (name, value) in parts.headers.iter() {
        if name == CONTENT_LENGTH {
            declared.get_or_insert_with(|| decimal(value.as_bytes()));
            // A 304 keeps the length of what it stands for; the others' framing is ours.
            if status != StatusCode::NOT_MODIFIED {
                continue;
            }
        } else if name == TRANSFER_ENCODING {
            continue;
        } else if name == DATE {
            dated = true;
        } else if name == CONNECTION {
            connection = true;
            *close |= head::has_token(value.as_bytes(), b"close");
        }
        head::put_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let framing = if bodiless {
        Framing::None
    } else {
        match declared.flatten().map(|n| n as u64).or(exact) {
            Some(length) => {
                head::put_field(out, b"content-length", head::itoa_u64(length).as_slice());
                Framing::Length(length)
            }
            None => {
                head::put_field(out, b"transfer-encoding", b"chunked");
                Framing::Chunked
            }
        }
    };
    if !dated {
        push_date(out);
    }
    if *close && !connection {
        head::put_field(out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

thread_local! {
    /// The `date` value of the current second: formatted once a second per thread.
    static DATE_TEXT: RefCell<(u64, [u8; 29])> = const { RefCell::new((0, [0; 29])) };
}

fn push_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE_TEXT.with_borrow_mut(|(at, text)| {
        if *at != second {
            let formatted = httpdate::fmt_http_date(now);
            if formatted.len() == text.len() {
                text.copy_from_slice(formatted.as_bytes());
                *at = second;
            }
        }
        if *at == second {
            head::put_field(out, b"date", text);
        }
    });
}

/// What waits to be written: the head (and a chunk's size line), a body frame as it came,
/// and the framing after it; written with one vectored write where the IO allows.
struct Out {
    head: Vec<u8>,
    /// How much of `head` is written.
    written: usize,
    data: Bytes,
    tail: &'static [u8],
}

impl Out {
    fn new(head: Vec<u8>) -> Out {
        Out {
            head,
            written: 0,
            data: Bytes::new(),
            tail: b"",
        }
    }

    fn is_empty(&self) -> bool {
        self.written == self.head.len() && self.data.is_empty() && self.tail.is_empty()
    }

    fn holds_data(&self) -> bool {
        !self.data.is_empty()
    }

    fn poll_write<W: Write + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.is_empty() {
            let pieces = [&self.head[self.written..], &self.data[..], self.tail];
            let mut slices = [io::IoSlice::new(&[]); 3];
            let mut count = 0;
            for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
                slices[count] = io::IoSlice::new(piece);
                count += 1;
            }
            // One piece (gathered, usually) is a plain write: a vectored call costs the
            // kernel more (see `server/tokio_io.rs`).
            let mut n = ready!(if count == 1 {
                Pin::new(&mut *io).poll_write(cx, &slices[0])
            } else {
                Pin::new(&mut *io).poll_write_vectored(cx, &slices[..count])
            })?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let from_head = n.min(self.head.len() - self.written);
            self.written += from_head;
            n -= from_head;
            let from_data = n.min(self.data.len());
            bytes::Buf::advance(&mut self.data, from_data);
            n -= from_data;
            self.tail = &self.tail[n.min(self.tail.len())..];
        }
        self.head.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
