//! Heads of the HTTP/1.1 exchange with a worker: the request head written out in one
//! buffer, and the response head parsed (with `httparse`, hyper's own parser) into a
//! status, headers that share the read buffer, and the body's framing.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// Largest response head accepted from a worker (as for client request heads).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields accepted in a worker's response head.
pub const MAX_HEAD_FIELDS: usize = 100;

/// How the request body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqFraming {
    /// No body and no length header (`GET` and the like without one).
    None,
    Length(u64),
    Chunked,
}

/// Writes the request head into `out`: request line, `host`, the given headers (framing
/// headers among them are replaced by `framing`'s), and the blank line.
pub fn encode_request(
    out: &mut BytesMut,
    method: &Method,
    target: &str,
    authority: &str,
    headers: &HeaderMap,
    framing: ReqFraming,
) {
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.put_slice(b" HTTP/1.1\r\nhost: ");
    out.put_slice(authority.as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in headers {
        if matches!(
            *name,
            header::HOST | header::CONTENT_LENGTH | header::TRANSFER_ENCODING
        ) {
            continue;
        }
        put_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match framing {
        ReqFraming::None => {}
        ReqFraming::Length(n) => put_field(out, b"content-length", itoa_u64(n).as_slice()),
        ReqFraming::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.put_slice(b"\r\n");
}

/// One header field line, `name: value` and CRLF, for the heads both sides of the gateway
/// write: requests to workers, answers to clients (`server::plain_h1`).
pub fn put_field(out: &mut impl BufMut, name: &[u8], value: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// A chunk's size line (hex digits and CRLF), for the chunked bodies both sides of the
/// gateway write: requests to workers, answers to clients (`server::plain_h1`).
pub fn put_chunk_size(out: &mut impl BufMut, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[i..]);
    out.put_slice(b"\r\n");
}

/// A `u64` in decimal digits, on the stack.
pub fn itoa_u64(mut n: u64) -> Digits {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Digits { buf, start: i }
}

pub struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespFraming {
    /// No body (`HEAD`, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the worker closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub framing: RespFraming,
    /// Whether the connection may carry another request after this response.
    pub reusable: bool,
}

/// Why a worker's response head was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Not an HTTP/1.x response head.
    Malformed,
    /// Longer than [`MAX_HEAD_BYTES`] or with more than [`MAX_HEAD_FIELDS`] fields.
    TooLarge,
    /// `Content-Length` unparsable, or several that disagree.
    BadLength,
    /// `101 Switching Protocols`: never asked for.
    Upgrade,
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadError::Malformed => "malformed response head from the worker",
            HeadError::TooLarge => "response head from the worker too large",
            HeadError::BadLength => "invalid content-length from the worker",
            HeadError::Upgrade => "the worker switched protocols unasked",
        })
    }
}

impl std::error::Error for HeadError {}

/// Fields a response head is first parsed with: most answers have a handful, and the
/// parser's field and offset arrays are set up on every response, so the full
/// [`MAX_HEAD_FIELDS`] is tried only for a head that has more.
const COMMON_HEAD_FIELDS: usize = 24;

/// Parses one response head from the front of `buf`. `Ok(None)`: incomplete, read more.
/// On success the head's bytes are taken off `buf` (header values share them), interim
/// `1xx` answers included: they are skipped, as the client never asked for them.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, HeadError> {
    match parse_with::<COMMON_HEAD_FIELDS>(buf, method) {
        Err(HeadError::TooLarge) if buf.len() < MAX_HEAD_BYTES => {
            parse_with::<MAX_HEAD_FIELDS>(buf, method)
        }
        other => other,
    }
}

/// Where a field lies in a head: its name's offset and length, its value's offset and
/// length (the value without the whitespace around it). A head is at most
/// [`MAX_HEAD_BYTES`], so offsets fit `u32`, which halves the array every parse sets up.
type Span = [u32; 4];

/// The head as read so far: the version, the status code, the head's length and how many
/// of the spans hold its fields.
struct Read {
    http11: bool,
    code: u16,
    len: usize,
    count: usize,
}

/// [`parse_response`] with room for `N` fields; more is [`HeadError::TooLarge`].
fn parse_with<const N: usize>(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, HeadError> {
    loop {
        let mut spans = [[0u32; 4]; N];
        let read = match read_plain(buf, &mut spans) {
            Some(read) => read,
            None => match read_general(buf, &mut spans)? {
                Some(read) => read,
                None => return Ok(None),
            },
        };
        if read.len > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
        let status = StatusCode::from_u16(read.code).map_err(|_| HeadError::Malformed)?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(HeadError::Upgrade);
        }
        if status.is_informational() {
            let _ = buf.split_to(read.len);
            continue;
        }
        let head = buf.split_to(read.len).freeze();
        return finish(status, read.http11, &head, &spans[..read.count], method);
    }
}

/// Reads the head with `httparse` (hyper's own parser), which takes every form RFC 9112
/// allows a recipient to accept. `Ok(None)`: incomplete.
fn read_general<const N: usize>(
    buf: &[u8],
    spans: &mut [Span; N],
) -> Result<Option<Read>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; N];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    if len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let code = parsed.code.ok_or(HeadError::Malformed)?;
    let base = buf.as_ptr() as usize;
    let offset = |part: &[u8]| (part.as_ptr() as usize - base) as u32;
    let count = parsed.headers.len();
    for (span, field) in spans.iter_mut().zip(parsed.headers.iter()) {
        *span = [
            offset(field.name.as_bytes()),
            field.name.len() as u32,
            offset(field.value),
            field.value.len() as u32,
        ];
    }
    Ok(Some(Read {
        http11: parsed.version == Some(1),
        code,
        len,
        count,
    }))
}

/// Bytes of a field name (RFC 9110 `token`), as httparse takes them.
static NAME_BYTE: [bool; 256] = {
    let mut map = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        map[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    map
};

/// Bytes of a field value or a reason phrase on the plain path: tab and visible ASCII with
/// space. (httparse also takes obs-text, bytes from 0x80: such heads go the general way.)
static TEXT_BYTE: [bool; 256] = {
    let mut map = [false; 256];
    let mut b = 0;
    while b < 256 {
        map[b] = matches!(b, 0x09 | 0x20..=0x7e);
        b += 1;
    }
    map
};

/// The whitespace around a field value: space and tab.
static BLANK_BYTE: [bool; 256] = {
    let mut map = [false; 256];
    map[b' ' as usize] = true;
    map[b'\t' as usize] = true;
    map
};

/// Reads a head of the shape nearly every worker sends, in one pass without httparse's
/// set-up: `HTTP/1.0` or `HTTP/1.1`, a three-digit code, an optional reason, `name: value`
/// fields with token names and tab or visible-ASCII values, every line ended by CRLF, at
/// most `N` fields. Anything else — a head not all here yet, a bare LF, obs-text, a byte
/// that is not allowed, more fields — gives `None`, and [`read_general`] decides: this
/// path takes only heads httparse takes, and reads them as it does (the same version,
/// code, length, names and values, a value without the whitespace around it), which the
/// tests and the `h1_response` fuzz target check against it.
fn read_plain<const N: usize>(buf: &[u8], spans: &mut [Span; N]) -> Option<Read> {
    let http11 = match buf.get(..9)? {
        b"HTTP/1.1 " => true,
        b"HTTP/1.0 " => false,
        _ => return None,
    };
    let mut code = 0u16;
    for &digit in buf.get(9..12)? {
        if !digit.is_ascii_digit() {
            return None;
        }
        code = code * 10 + u16::from(digit - b'0');
    }
    let mut at = 12;
    if *buf.get(at)? == b' ' {
        at = skip_text(buf, at + 1);
    }
    at = after_crlf(buf, at)?;
    let mut count = 0;
    loop {
        if *buf.get(at)? == b'\r' {
            return Some(Read {
                http11,
                code,
                len: after_crlf(buf, at)?,
                count,
            });
        }
        let name_at = at;
        at = skip(buf, at, &NAME_BYTE);
        if at == name_at || *buf.get(at)? != b':' {
            return None;
        }
        let name_len = at - name_at;
        let value_at = skip(buf, at + 1, &BLANK_BYTE);
        at = skip_text(buf, value_at);
        let mut value_end = at;
        while value_end > value_at && BLANK_BYTE[usize::from(buf[value_end - 1])] {
            value_end -= 1;
        }
        at = after_crlf(buf, at)?;
        *spans.get_mut(count)? = [
            u32::try_from(name_at).ok()?,
            u32::try_from(name_len).ok()?,
            u32::try_from(value_at).ok()?,
            u32::try_from(value_end - value_at).ok()?,
        ];
        count += 1;
    }
}

/// Where the run of `table`'s bytes starting at `from` ends (the buffer's end at most), in
/// one pass over a slice.
fn skip(buf: &[u8], from: usize, table: &[bool; 256]) -> usize {
    buf.get(from..).map_or(buf.len(), |rest| {
        from + rest
            .iter()
            .position(|&b| !table[usize::from(b)])
            .unwrap_or(rest.len())
    })
}

/// Where the run of [`TEXT_BYTE`]s starting at `from` ends (the buffer's end at most).
/// Field values are most of a head's bytes, so they are looked at eight at a time: a word
/// with no byte below 0x20 and none above 0x7e is all text. In a word that has one, the
/// lowest flagged byte is the first outside that range (the borrows and carries of the
/// word arithmetic only ever flag bytes above a flagged one); a tab there is text, and the
/// scan goes on after it.
fn skip_text(buf: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = from;
    while let Some(word) = buf
        .get(at..at + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
    {
        let x = u64::from_le_bytes(word);
        let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let above_tilde = (x.wrapping_add(ONES) | x) & HIGH;
        let flagged = below_space | above_tilde;
        if flagged == 0 {
            at += 8;
            continue;
        }
        at += (flagged.trailing_zeros() / 8) as usize;
        if buf.get(at) != Some(&b'\t') {
            return at;
        }
        at += 1;
    }
    skip(buf, at, &TEXT_BYTE)
}

/// The position after the CRLF at `at`, if one is there.
fn after_crlf(buf: &[u8], at: usize) -> Option<usize> {
    (buf.get(at..at + 2)? == b"\r\n").then_some(at + 2)
}

fn finish(
    status: StatusCode,
    http11: bool,
    head: &Bytes,
    spans: &[Span],
    method: &Method,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut headers = HeaderMap::with_capacity(spans.len());
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_coded = false;
    let mut close = !http11;
    for &[name_at, name_len, value_at, value_len] in spans {
        let (name_at, value_at) = (name_at as usize, value_at as usize);
        let name_bytes = &head[name_at..name_at + name_len as usize];
        let name = match known_name(name_bytes) {
            Some(name) => name,
            None => HeaderName::from_bytes(name_bytes).map_err(|_| HeadError::Malformed)?,
        };
        let raw = head.slice(value_at..value_at + value_len as usize);
        if name == header::CONTENT_LENGTH {
            let n = parse_length(&raw).ok_or(HeadError::BadLength)?;
            if length.is_some_and(|seen| seen != n) {
                return Err(HeadError::BadLength);
            }
            length = Some(n);
        } else if name == header::TRANSFER_ENCODING {
            transfer_coded = true;
            // Only the last coding decides; a later field's codings come after.
            chunked = last_coding_is_chunked(&raw);
        } else if name == header::CONNECTION {
            close |= has_token(&raw, b"close");
            if !http11 && has_token(&raw, b"keep-alive") {
                close = false;
            }
        }
        let value = HeaderValue::from_maybe_shared(raw).map_err(|_| HeadError::Malformed)?;
        headers.append(name, value);
    }
    let no_body = *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        RespFraming::Empty
    } else if transfer_coded {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length; without `chunked`
        // last the body runs until the connection closes.
        if chunked {
            RespFraming::Chunked
        } else {
            RespFraming::UntilClose
        }
    } else if let Some(n) = length {
        RespFraming::Length(n)
    } else {
        RespFraming::UntilClose
    };
    // A response framed both ways may have been meant for another parser: its
    // connection carries nothing more.
    let reusable =
        !close && framing != RespFraming::UntilClose && !(transfer_coded && length.is_some());
    Ok(Some(ResponseHead {
        status,
        headers,
        framing,
        reusable,
    }))
}

/// The field names workers send on nearly every response, recognised when written in
/// lowercase as they usually are: `HeaderName::from_bytes` lowercases each name into a
/// scratch buffer before it looks it up. Any other spelling goes that way.
fn known_name(name: &[u8]) -> Option<HeaderName> {
    Some(match name {
        b"content-type" => header::CONTENT_TYPE,
        b"content-length" => header::CONTENT_LENGTH,
        b"date" => header::DATE,
        b"server" => header::SERVER,
        b"transfer-encoding" => header::TRANSFER_ENCODING,
        b"connection" => header::CONNECTION,
        b"cache-control" => header::CACHE_CONTROL,
        _ => return None,
    })
}

fn parse_length(raw: &[u8]) -> Option<u64> {
    let trimmed = raw.trim_ascii();
    if trimmed.is_empty() {
        return None;
    }
    // A list of equal values (`5, 5`) is one length (RFC 9110 §8.6).
    let mut value: Option<u64> = None;
    for part in trimmed.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = part.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?;
        if value.is_some_and(|v| v != n) {
            return None;
        }
        value = Some(n);
    }
    value
}

fn last_coding_is_chunked(raw: &[u8]) -> bool {
    raw.rsplit(|&b| b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// Whether a comma-separated field value (`Connection`, say) lists `token`.
pub fn has_token(raw: &[u8], token: &[u8]) -> bool {
    raw.split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<Option<ResponseHead>, HeadError> {
        parse_response(&mut BytesMut::from(raw), &Method::POST)
    }

    #[test]
    fn request_head_carries_host_and_framing() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("999"));
        headers.insert(header::HOST, HeaderValue::from_static("client.example"));
        let mut out = BytesMut::new();
        encode_request(
            &mut out,
            &Method::POST,
            "/v1/chat/completions?x=1",
            "10.0.0.1:8000",
            &headers,
            ReqFraming::Length(42),
        );
        assert_eq!(
            &out[..],
            b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 10.0.0.1:8000\r\n\
content-type: application/json\r\ncontent-length: 42\r\n\r\n"
        );
        out.clear();
        encode_request(
            &mut out,
            &Method::GET,
            "",
            "h",
            &HeaderMap::new(),
            ReqFraming::None,
        );
        assert_eq!(&out[..], b"GET / HTTP/1.1\r\nhost: h\r\n\r\n");
        out.clear();
        encode_request(
            &mut out,
            &Method::POST,
            "/",
            "h",
            &HeaderMap::new(),
            ReqFraming::Chunked,
        );
        assert!(out.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        assert_eq!(itoa_u64(0).as_slice(), b"0");
        assert_eq!(itoa_u64(u64::MAX).as_slice(), b"18446744073709551615");
    }

    #[test]
    fn chunk_size_lines_are_lowercase_hex() {
        let mut out = Vec::new();
        put_chunk_size(&mut out, 0);
        put_chunk_size(&mut out, 0x1f2e);
        assert_eq!(out, b"0\r\n1f2e\r\n");
    }

    #[test]
    fn framing_of_each_kind() {
        let head = parse("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (head.framing, head.reusable),
            (RespFraming::Length(12), true)
        );
        let head = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((head.framing, head.reusable), (RespFraming::Chunked, true));
        let head = parse("HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            (head.framing, head.reusable),
            (RespFraming::UntilClose, false)
        );
        let head = parse("HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, RespFraming::Empty);
        let head = parse("HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!head.reusable);
        let head = parse("HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!head.reusable);
        let head =
            parse("HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!((head.framing, head.reusable), (RespFraming::Chunked, false));
    }

    #[test]
    fn interim_answers_are_skipped_and_the_rest_stays() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok",
        );
        let head = parse_response(&mut buf, &Method::POST).unwrap().unwrap();
        assert_eq!(head.status, StatusCode::CREATED);
        assert_eq!(head.headers["x-a"], "1");
        assert_eq!(&buf[..], b"ok");
    }

    /// A head with more fields than the first pass has room for is parsed again with
    /// room for all of them; past [`MAX_HEAD_FIELDS`] it is too large.
    #[test]
    fn heads_with_many_fields_take_the_second_pass() {
        let head = |fields: usize| {
            let mut text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n".to_owned();
            for i in 0..fields {
                text.push_str(&format!("x-f{i}: {i}\r\n"));
            }
            text.push_str("content-length: 2\r\n\r\nok");
            BytesMut::from(text.as_str())
        };
        let mut buf = head(COMMON_HEAD_FIELDS + 5);
        let parsed = parse_response(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(parsed.headers.len(), COMMON_HEAD_FIELDS + 6);
        assert_eq!(parsed.headers["x-f28"], "28");
        assert_eq!(&buf[..], b"ok");
        let mut buf = head(MAX_HEAD_FIELDS);
        assert_eq!(
            parse_response(&mut buf, &Method::GET).unwrap_err(),
            HeadError::TooLarge
        );
    }

    /// A head as one path read it: what it found and the spans of its fields.
    type Reading = (Read, Vec<Span>);

    /// What each path makes of `raw`: `None` from the plain path means it left the head
    /// to the general one.
    fn both(raw: &[u8]) -> (Option<Reading>, Result<Option<Reading>, HeadError>) {
        let mut plain_spans = [[0u32; 4]; COMMON_HEAD_FIELDS];
        let plain = read_plain(raw, &mut plain_spans).map(|read| {
            let spans = plain_spans[..read.count].to_vec();
            (read, spans)
        });
        let mut general_spans = [[0u32; 4]; COMMON_HEAD_FIELDS];
        let general = read_general(raw, &mut general_spans).map(|read| {
            read.map(|read| {
                let spans = general_spans[..read.count].to_vec();
                (read, spans)
            })
        });
        (plain, general)
    }

    fn same(a: &Reading, b: &Reading) -> bool {
        (a.0.http11, a.0.code, a.0.len, a.0.count, &a.1)
            == (b.0.http11, b.0.code, b.0.len, b.0.count, &b.1)
    }

    /// The plain path takes the heads workers send, and whatever it takes, httparse reads
    /// the same way: heads with every kind of odd byte put in, and cut short, are read by
    /// both and compared.
    #[test]
    fn the_plain_path_reads_as_httparse_does() {
        let common: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 402\r\ndate: Mon, 30 Nov 2026 09:05:03 GMT\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nDate: x\r\nServer: uvicorn\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.0 503\r\nx-a:\t v \t\r\nx-b:\r\nx-c:   \r\n\r\n",
            b"HTTP/1.1 404 Not Found \r\n\r\n",
        ];
        for raw in common {
            let (plain, general) = both(raw);
            let (plain, general) = (plain.unwrap(), general.unwrap().unwrap());
            assert!(same(&plain, &general), "{:?}", String::from_utf8_lossy(raw));
        }
        let odd = [
            b'\r', b'\n', b' ', b'\t', b':', b',', 0x80, 0xff, 0x7f, 0, 0x0b, b'a', b'Z', b'-',
            b'0', b'9', b'"', b'(', b'/', b'H',
        ];
        crate::rng::seed_this_thread(0x5eed_4ead);
        let mut plain_taken = 0;
        for round in 0..20_000 {
            let mut raw = common[round % common.len()].to_vec();
            for _ in 0..=crate::rng::below(3) {
                let at = crate::rng::below(raw.len() + 1);
                let byte = odd[crate::rng::below(odd.len())];
                match crate::rng::below(3) {
                    0 => raw.insert(at, byte),
                    1 if at < raw.len() => raw[at] = byte,
                    _ => raw.truncate(at),
                }
            }
            let (plain, general) = both(&raw);
            if let Some(plain) = plain {
                plain_taken += 1;
                let general = general.ok().flatten();
                assert!(
                    general
                        .as_ref()
                        .is_some_and(|general| same(&plain, general)),
                    "{:?}",
                    String::from_utf8_lossy(&raw)
                );
            }
        }
        assert!(plain_taken > 1_000, "{plain_taken}");
    }

    #[test]
    fn text_runs_end_where_the_table_says() {
        let bytes = [
            b'a', b' ', b'\t', b'~', 0x7f, 0x80, 0xff, 0x1f, 0x20, b'\r', b'\n', 0, b'Z', 0x9f,
        ];
        crate::rng::seed_this_thread(0x7e47_5c4a);
        for _ in 0..20_000 {
            let len = crate::rng::below(40);
            let buf: Vec<u8> = (0..len)
                .map(|_| match crate::rng::below(4) {
                    0 => bytes[crate::rng::below(bytes.len())],
                    _ => b'a' + crate::rng::below(26) as u8,
                })
                .collect();
            for from in 0..=len + 1 {
                assert_eq!(
                    skip_text(&buf, from),
                    skip(&buf, from, &TEXT_BYTE).max(from.min(len)),
                    "{buf:?} from {from}"
                );
            }
        }
    }

    #[test]
    fn bad_heads_are_refused() {
        assert!(matches!(parse("HTTP/1.1 200 OK\r\ncontent-"), Ok(None)));
        assert_eq!(
            parse("HTTP/1.1 2000 OK\r\n\r\n").unwrap_err(),
            HeadError::Malformed
        );
        assert_eq!(parse("NOPE\r\n\r\n").unwrap_err(), HeadError::Malformed);
        assert_eq!(
            parse("HTTP/1.1 101 Switching\r\n\r\n").unwrap_err(),
            HeadError::Upgrade
        );
        for length in ["x", "", "-1", "1, 2", "99999999999999999999999"] {
            assert_eq!(
                parse(&format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n"
                ))
                .unwrap_err(),
                HeadError::BadLength,
                "{length:?}"
            );
        }
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n").unwrap_err(),
            HeadError::BadLength
        );
        let head = parse("HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, RespFraming::Length(7));
        let many: String = (0..=MAX_HEAD_FIELDS)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert_eq!(
            parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).unwrap_err(),
            HeadError::TooLarge
        );
        let long = "v".repeat(MAX_HEAD_BYTES);
        assert_eq!(
            parse(&format!("HTTP/1.1 200 OK\r\nx: {long}")).unwrap_err(),
            HeadError::TooLarge
        );
    }
}
