//! Follows HTTP/1.1 request framing (RFC 9112) on the raw bytes a client sends, just far
//! enough to notice a request head that carries both `Content-Length` and
//! `Transfer-Encoding`.
//!
//! hyper accepts such a request (it drops `Content-Length` and closes the connection
//! afterwards) and never tells the handler, so the connection's IO adapter runs every byte
//! it reads through an [`H1Framing`] and refuses the connection on [`Verdict::Conflict`].
//!
//! The tracker keeps a few words of state and never allocates or buffers. Line ends are
//! found with `memchr` and a whole line at hand is looked at as a slice; a line split
//! across reads is followed byte by byte (name matched so far, value parsed so far) until
//! its end arrives. Bodies are skipped by counting. Any split of the stream across
//! [`H1Framing::feed`] calls gives the same verdicts.
//!
//! Where hyper would answer `400` itself (an unparsable `Content-Length`, a
//! `Transfer-Encoding` that does not end in `chunked`, a broken chunk size line, ...) the
//! tracker stops following and reports [`Verdict::Disengaged`]: hyper closes such a
//! connection, so nothing after it is served. Wherever hyper accepts the input the tracker
//! frames it the same way hyper does, so the two never disagree on where a request head
//! starts. In particular:
//!
//! * chunk sizes and lengths are limited by overflow of a `u64`, not by their number of
//!   digits (hyper accepts any number of leading zeros);
//! * inside chunked trailers only `\r\n` ends a line, as in hyper's chunked decoder;
//! * `CONNECT` and `Upgrade:` requests are followed like any other request: this gateway
//!   never accepts an upgrade, and hyper keeps reading requests on the connection after
//!   answering one without `101`.

use memchr::{memchr, memchr2, memchr_iter};

/// The HTTP/2 connection preface; a stream starting with it is not HTTP/1.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const CONTENT_LENGTH: &[u8] = b"content-length";
const TRANSFER_ENCODING: &[u8] = b"transfer-encoding";
const CHUNKED: &[u8] = b"chunked";

/// What the tracker concluded after the bytes fed so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong so far; keep feeding.
    Continue,
    /// A request head carried both `Content-Length` and `Transfer-Encoding`. Stop serving
    /// this connection. Sticky: every later call answers `Conflict` too.
    Conflict,
    /// The tracker stopped following the stream (HTTP/2 preface, or framing that hyper
    /// rejects itself); it answers `Disengaged` from now on, cheaply. hyper remains the
    /// real parser.
    Disengaged,
}

/// Where the stream stands relative to request heads, for the connection's timers: the
/// header-read timeout runs while a head is under way, the keep-alive timeout between
/// requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request head begun: before the first byte, or between requests.
    NoHead,
    /// Part of a request head (or of the HTTP/2 preface) has arrived, not all of it.
    InHead,
    /// Inside a request body. The timers treat it as [`Phase::NoHead`] (the request's own
    /// body timeouts apply); only an idle connection between requests may be parked.
    InBody,
    /// The tracker no longer follows the stream (HTTP/2, or framing hyper refuses).
    Unfollowed,
}

/// Where in the request stream the next byte falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of the connection, this many bytes of [`H2_PREFACE`] seen so far.
    Preface(usize),
    /// Inside a request head (or before one); see [`Line`].
    Head,
    /// A `Content-Length` body with this many bytes still to come.
    Body(u64),
    /// Expecting the first hex digit of a chunk size.
    ChunkStart,
    /// Reading the hex digits of a chunk size (value so far).
    ChunkSize(u64),
    /// Whitespace after the chunk size.
    ChunkSizeWs(u64),
    /// Inside chunk extensions, up to `\r`.
    ChunkExt(u64),
    /// Expecting the `\n` that ends a chunk size line.
    ChunkSizeLf(u64),
    /// Chunk data with this many bytes still to come.
    ChunkData(u64),
    /// Expecting the `\r` after chunk data.
    ChunkDataCr,
    /// Expecting the `\n` after chunk data.
    ChunkDataLf,
    /// After the last chunk: at the start of a trailer line or of the final `\r\n`.
    TrailerStart,
    /// Inside a trailer line, up to `\r`.
    Trailer,
    /// Expecting the `\n` that ends a trailer line.
    TrailerLf,
    /// Expecting the `\n` that ends the chunked body.
    EndLf,
    Conflict,
    Disengaged,
}

/// A header whose value matters for framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    ContentLength,
    TransferEncoding,
}

impl Field {
    /// The lowercase name, without the colon.
    fn name(self) -> &'static [u8] {
        match self {
            Field::ContentLength => CONTENT_LENGTH,
            Field::TransferEncoding => TRANSFER_ENCODING,
        }
    }
}

/// Progress through the current line of a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Nothing of the line seen yet.
    Start,
    /// The line so far is a lone `\r` (an empty line if `\n` follows).
    StartCr,
    /// The rest of the line does not matter.
    Skip,
    /// The line so far is this many bytes of a field's name.
    Name { field: Field, matched: u8 },
    /// Inside a `Content-Length` value.
    Length(Digits),
    /// Inside a `Transfer-Encoding` value; the state of its current comma-separated token.
    Coding(Token),
}

/// A `Content-Length` value: optional whitespace, decimal digits, optional whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Digits {
    Lead,
    Value(u64),
    Trail(u64),
}

impl Digits {
    /// Takes the next value byte; `None` once the value cannot be a length.
    fn step(self, b: u8) -> Option<Digits> {
        match (self, b) {
            (Digits::Lead, b' ' | b'\t' | b'\r') => Some(Digits::Lead),
            (Digits::Lead, b'0'..=b'9') => Some(Digits::Value(u64::from(b - b'0'))),
            (Digits::Value(n), b'0'..=b'9') => n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
                .map(Digits::Value),
            (Digits::Value(n) | Digits::Trail(n), b' ' | b'\t' | b'\r') => Some(Digits::Trail(n)),
            _ => None,
        }
    }

    fn value(self) -> Option<u64> {
        match self {
            Digits::Lead => None,
            Digits::Value(n) | Digits::Trail(n) => Some(n),
        }
    }
}

/// One comma-separated token of a `Transfer-Encoding` value, compared, trimmed and
/// case-insensitively, with `chunked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Only whitespace so far.
    Lead,
    /// This many bytes of `chunked` matched; all of it, then only whitespace, at 7.
    Chunked(u8),
    /// Anything else.
    Other,
}

impl Token {
    fn step(self, b: u8) -> Token {
        let ws = matches!(b, b' ' | b'\t' | b'\r');
        match self {
            _ if b == b',' => Token::Lead,
            Token::Lead if ws => Token::Lead,
            Token::Lead => Token::Chunked(0).step(b),
            Token::Chunked(n) if ws => {
                if usize::from(n) == CHUNKED.len() {
                    Token::Chunked(n)
                } else {
                    Token::Other
                }
            }
            Token::Chunked(n) => match CHUNKED.get(usize::from(n)) {
                Some(&c) if b.to_ascii_lowercase() == c => Token::Chunked(n.saturating_add(1)),
                _ => Token::Other,
            },
            Token::Other => Token::Other,
        }
    }

    fn is_chunked(self) -> bool {
        self == Token::Chunked(CHUNKED.len() as u8)
    }
}

fn hex(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some(u64::from(b - b'0')),
        b'a'..=b'f' => Some(u64::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u64::from(b - b'A' + 10)),
        _ => None,
    }
}

/// Follows the request framing of one HTTP/1.1 connection; see the module docs.
#[derive(Debug, Clone)]
pub struct H1Framing {
    state: State,
    /// The current line, while in [`State::Head`].
    line: Line,
    /// The request line of the current head has been seen (so lines are header fields).
    in_head: bool,
    /// The current head has a `Content-Length` field.
    has_length: bool,
    /// Its value (the first, when there are several that agree).
    length: Option<u64>,
    /// A `Content-Length` value did not parse, or two disagreed.
    bad_length: bool,
    /// The current head has a `Transfer-Encoding` field.
    has_coding: bool,
    /// The last `Transfer-Encoding` field ends in `chunked`.
    chunked: bool,
}

impl Default for H1Framing {
    fn default() -> Self {
        Self::new()
    }
}

impl H1Framing {
    /// A tracker for a new connection, before its first byte.
    pub const fn new() -> Self {
        H1Framing {
            state: State::Preface(0),
            line: Line::Start,
            in_head: false,
            has_length: false,
            length: None,
            bad_length: false,
            has_coding: false,
            chunked: false,
        }
    }

    /// The verdict for everything fed so far.
    pub fn verdict(&self) -> Verdict {
        match self.state {
            State::Conflict => Verdict::Conflict,
            State::Disengaged => Verdict::Disengaged,
            _ => Verdict::Continue,
        }
    }

    /// Where the stream stands after the bytes fed so far; see [`Phase`].
    pub fn phase(&self) -> Phase {
        match self.state {
            State::Preface(0) => Phase::NoHead,
            State::Preface(_) => Phase::InHead,
            State::Head if self.in_head || self.line != Line::Start => Phase::InHead,
            State::Conflict | State::Disengaged => Phase::Unfollowed,
            State::Head => Phase::NoHead,
            _ => Phase::InBody,
        }
    }

    /// Feeds the next bytes read from the client, in order and split anywhere. Returns
    /// [`Verdict::Conflict`] once the line completing a `Content-Length` +
    /// `Transfer-Encoding` pair in one request head has been seen, in either order.
    pub fn feed(&mut self, bytes: &[u8]) -> Verdict {
        let mut rest = bytes;
        while !rest.is_empty() {
            let used = match self.state {
                State::Conflict | State::Disengaged => break,
                State::Preface(matched) => self.preface(matched, rest),
                State::Head => self.head(rest),
                State::Body(left) => {
                    let (used, left) = skip(left, rest.len());
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Body(left)
                    };
                    used
                }
                State::ChunkData(left) => {
                    let (used, left) = skip(left, rest.len());
                    self.state = if left == 0 {
                        State::ChunkDataCr
                    } else {
                        State::ChunkData(left)
                    };
                    used
                }
                State::ChunkExt(size) => match memchr2(b'\r', b'\n', rest) {
                    Some(at) => {
                        self.state = if rest.get(at) == Some(&b'\r') {
                            State::ChunkSizeLf(size)
                        } else {
                            // hyper refuses a bare LF in chunk extensions.
                            State::Disengaged
                        };
                        at + 1
                    }
                    None => rest.len(),
                },
                State::Trailer => match memchr(b'\r', rest) {
                    Some(at) => {
                        self.state = State::TrailerLf;
                        at + 1
                    }
                    None => rest.len(),
                },
                _ => self.chunk_framing(rest),
            };
            rest = rest.get(used..).unwrap_or_default();
        }
        self.verdict()
    }

    /// Matches the start of the stream against the HTTP/2 preface; on the first byte that
    /// differs, replays the matched part as the start of an HTTP/1 request. Returns how
    /// many of `bytes` it used.
    fn preface(&mut self, matched: usize, bytes: &[u8]) -> usize {
        let want = H2_PREFACE.get(matched..).unwrap_or_default();
        let same = want.iter().zip(bytes).take_while(|(a, b)| a == b).count();
        if same == want.len() {
            self.state = State::Disengaged;
        } else if same == bytes.len() {
            self.state = State::Preface(matched + same);
        } else {
            self.state = State::Head;
            let seen = H2_PREFACE.get(..matched + same).unwrap_or_default();
            // State is Head now, so this cannot come back here.
            self.feed(seen);
        }
        same
    }

    /// Runs head bytes until the head ends (or a conflict shows); returns how many of
    /// `bytes` it used.
    fn head(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        // The end of a line that began in an earlier read: byte by byte.
        if !matches!(self.line, Line::Start | Line::Skip) {
            for &b in bytes {
                at += 1;
                if b == b'\n' {
                    if self.end_line() {
                        return at;
                    }
                    break;
                }
                self.line = self.line_byte(b);
                if self.line == Line::Skip {
                    break;
                }
            }
        }
        // Whole lines: each looked at as a slice.
        let rest = bytes.get(at..).unwrap_or_default();
        let mut start = 0;
        for nl in memchr_iter(b'\n', rest) {
            if self.line == Line::Start {
                self.line = self.whole_line(rest.get(start..nl).unwrap_or_default());
            }
            start = nl + 1;
            if self.end_line() {
                return at + start;
            }
        }
        // The start of a line whose end has not arrived yet.
        if self.line == Line::Start {
            for &b in rest.get(start..).unwrap_or_default() {
                self.line = self.line_byte(b);
                if self.line == Line::Skip {
                    break;
                }
            }
        }
        bytes.len()
    }

    /// The line state after all of `line` (a whole line, without its `\n`), exactly as
    /// [`Self::line_byte`] would leave it byte by byte.
    fn whole_line(&mut self, line: &[u8]) -> Line {
        match line {
            [] => Line::Start,
            [b'\r'] => Line::StartCr,
            _ if !self.in_head => Line::Skip,
            _ => {
                if let Some(value) = strip_name(line, CONTENT_LENGTH) {
                    let digits = value
                        .iter()
                        .try_fold(Digits::Lead, |digits, &b| digits.step(b));
                    match digits {
                        Some(digits) => Line::Length(digits),
                        None => {
                            self.note_length(None);
                            Line::Skip
                        }
                    }
                } else if let Some(value) = strip_name(line, TRANSFER_ENCODING) {
                    Line::Coding(value.iter().fold(Token::Lead, |token, &b| token.step(b)))
                } else {
                    Line::Skip
                }
            }
        }
    }

    /// The line state after byte `b` (never `\n`).
    fn line_byte(&mut self, b: u8) -> Line {
        match self.line {
            Line::Start if b == b'\r' => Line::StartCr,
            // The request line: nothing in it matters.
            Line::Start if !self.in_head => Line::Skip,
            Line::Start => match b.to_ascii_lowercase() {
                b'c' => Line::Name {
                    field: Field::ContentLength,
                    matched: 1,
                },
                b't' => Line::Name {
                    field: Field::TransferEncoding,
                    matched: 1,
                },
                _ => Line::Skip,
            },
            Line::StartCr | Line::Skip => Line::Skip,
            Line::Name { field, matched } => match field.name().get(usize::from(matched)) {
                Some(&c) if b.to_ascii_lowercase() == c => Line::Name {
                    field,
                    matched: matched.saturating_add(1),
                },
                None if b == b':' => match field {
                    Field::ContentLength => Line::Length(Digits::Lead),
                    Field::TransferEncoding => Line::Coding(Token::Lead),
                },
                _ => Line::Skip,
            },
            Line::Length(digits) => match digits.step(b) {
                Some(digits) => Line::Length(digits),
                None => {
                    self.note_length(None);
                    Line::Skip
                }
            },
            Line::Coding(token) => Line::Coding(token.step(b)),
        }
    }

    /// Handles the `\n` ending the current head line. Returns `true` when that left the
    /// head (its end, or a conflict).
    fn end_line(&mut self) -> bool {
        match std::mem::replace(&mut self.line, Line::Start) {
            // An empty line before the request line is skipped; after it, ends the head.
            Line::Start | Line::StartCr => {
                if self.in_head {
                    self.end_head();
                    return true;
                }
                return false;
            }
            Line::Skip | Line::Name { .. } => {}
            Line::Length(digits) => self.note_length(digits.value()),
            Line::Coding(token) => {
                self.has_coding = true;
                self.chunked = token.is_chunked();
            }
        }
        self.in_head = true;
        if self.has_length && self.has_coding {
            self.state = State::Conflict;
            return true;
        }
        false
    }

    /// Records one `Content-Length` field (`None`: its value did not parse).
    fn note_length(&mut self, value: Option<u64>) {
        self.has_length = true;
        match (value, self.length) {
            (None, _) => self.bad_length = true,
            (Some(n), Some(first)) if n != first => self.bad_length = true,
            (Some(n), _) => self.length = Some(n),
        }
    }

    /// Decides what follows the head just ended and resets the per-head fields.
    fn end_head(&mut self) {
        self.state = if self.has_coding {
            if self.has_length {
                State::Conflict
            } else if self.chunked {
                State::ChunkStart
            } else {
                // hyper answers 400 to a request whose last coding is not chunked.
                State::Disengaged
            }
        } else if self.bad_length {
            // hyper answers 400 to an unparsable or ambiguous Content-Length.
            State::Disengaged
        } else {
            match self.length {
                Some(n) if n > 0 => State::Body(n),
                _ => State::Head,
            }
        };
        self.line = Line::Start;
        self.in_head = false;
        self.has_length = false;
        self.length = None;
        self.bad_length = false;
        self.has_coding = false;
        self.chunked = false;
    }

    /// Runs chunked framing bytes (size lines, CRLFs) until the state needs something else;
    /// returns how many of `bytes` it used.
    fn chunk_framing(&mut self, bytes: &[u8]) -> usize {
        let mut used = 0;
        for &b in bytes {
            used += 1;
            self.chunk_byte(b);
            if matches!(
                self.state,
                State::ChunkData(_)
                    | State::ChunkExt(_)
                    | State::Trailer
                    | State::Head
                    | State::Disengaged
            ) {
                break;
            }
        }
        used
    }

    /// One byte of chunked framing (outside chunk data), as hyper's chunked decoder takes it.
    fn chunk_byte(&mut self, b: u8) {
        self.state = match (self.state, b) {
            (State::ChunkStart, _) => hex(b).map_or(State::Disengaged, State::ChunkSize),
            (State::ChunkSize(n), _) if hex(b).is_some() => n
                .checked_mul(16)
                .zip(hex(b))
                .and_then(|(n, d)| n.checked_add(d))
                .map_or(State::Disengaged, State::ChunkSize),
            (State::ChunkSize(n) | State::ChunkSizeWs(n), b' ' | b'\t') => State::ChunkSizeWs(n),
            (State::ChunkSize(n) | State::ChunkSizeWs(n) | State::ChunkExt(n), b'\r') => {
                State::ChunkSizeLf(n)
            }
            (State::ChunkSize(n) | State::ChunkSizeWs(n), b';') => State::ChunkExt(n),
            (State::ChunkExt(n), _) if b != b'\n' => State::ChunkExt(n),
            (State::ChunkSizeLf(0), b'\n') => State::TrailerStart,
            (State::ChunkSizeLf(n), b'\n') => State::ChunkData(n),
            (State::ChunkDataCr, b'\r') => State::ChunkDataLf,
            (State::ChunkDataLf, b'\n') => State::ChunkStart,
            (State::TrailerStart, b'\r') => State::EndLf,
            (State::Trailer, b'\r') => State::TrailerLf,
            (State::TrailerStart | State::Trailer, _) => State::Trailer,
            (State::TrailerLf, b'\n') => State::TrailerStart,
            (State::EndLf, b'\n') => State::Head,
            _ => State::Disengaged,
        };
    }
}

/// The rest of `line` after `name` (lowercase) and a colon, if it starts with them.
fn strip_name<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let (start, rest) = line.split_at_checked(name.len())?;
    match rest.split_first() {
        Some((b':', value)) if start.eq_ignore_ascii_case(name) => Some(value),
        _ => None,
    }
}

/// Skips up to `left` of `available` bytes: returns (bytes used, bytes still left).
fn skip(left: u64, available: usize) -> (usize, u64) {
    let used = usize::try_from(left).map_or(available, |left| left.min(available));
    (used, left.saturating_sub(used as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `stream` in one call, one byte at a time and in every two-piece split, checks
    /// they agree and returns the verdict.
    fn verdict(stream: &[u8]) -> Verdict {
        let whole = H1Framing::new().feed(stream);
        let mut bytewise = H1Framing::new();
        let mut last = bytewise.feed(&[]);
        for b in stream {
            let next = bytewise.feed(std::slice::from_ref(b));
            if last != Verdict::Continue {
                assert_eq!(next, last, "verdicts are sticky");
            }
            last = next;
        }
        assert_eq!(last, whole, "byte at a time");
        for split in 0..=stream.len() {
            let (a, b) = stream.split_at(split);
            let mut t = H1Framing::new();
            t.feed(a);
            assert_eq!(t.feed(b), whole, "split at {split}");
        }
        whole
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";

    #[test]
    fn phase_follows_heads_bodies_and_the_h2_preface() {
        let mut t = H1Framing::new();
        assert_eq!(t.phase(), Phase::NoHead);
        t.feed(b"POST / HT");
        assert_eq!(t.phase(), Phase::InHead);
        t.feed(b"TP/1.1\r\ncontent-length: 4\r\n");
        assert_eq!(t.phase(), Phase::InHead);
        t.feed(b"\r\nab");
        assert_eq!(t.phase(), Phase::InBody);
        t.feed(b"cd");
        assert_eq!(t.phase(), Phase::NoHead, "between requests");
        t.feed(b"G");
        assert_eq!(t.phase(), Phase::InHead);
        let mut h2 = H1Framing::new();
        h2.feed(b"PRI * HTTP/2.0\r\n");
        assert_eq!(h2.phase(), Phase::InHead);
        h2.feed(b"\r\nSM\r\n\r\n");
        assert_eq!(h2.phase(), Phase::Unfollowed);
    }

    #[test]
    fn content_length_alone_is_fine() {
        assert_eq!(
            verdict(b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
            Verdict::Continue
        );
        let mut s = b"POST / HTTP/1.1\r\ncontent-length:   3 \t\r\n\r\nabc".to_vec();
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
    }

    #[test]
    fn chunked_alone_is_fine() {
        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            .to_vec();
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
        let mut s =
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, CHUNKED \r\n\r\n0\r\n\r\n".to_vec();
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
    }

    #[test]
    fn both_in_either_order_and_any_case_conflict() {
        for head in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            b"POST / HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nCONTENT-LENGTH: 5\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n",
            b"POST / HTTP/1.1\r\ncOnTeNt-LeNgTh: 0\r\nhost: x\r\ntRaNsFeR-eNcOdInG: gzip\r\n\r\n",
            b"POST / HTTP/1.1\nTransfer-Encoding: chunked\nContent-Length: 5\n\n",
            // A Content-Length that does not parse still conflicts.
            b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length:\r\n\r\n",
        ] {
            assert_eq!(
                verdict(head),
                Verdict::Conflict,
                "{:?}",
                head.escape_ascii()
            );
        }
    }

    #[test]
    fn conflict_is_reported_when_the_completing_line_ends() {
        let head = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n";
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&head[..head.len() - 1]), Verdict::Continue);
        assert_eq!(t.feed(b"\n"), Verdict::Conflict);
        assert_eq!(t.feed(b"\r\nanything"), Verdict::Conflict);
    }

    #[test]
    fn both_split_one_byte_at_a_time() {
        let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n";
        let mut t = H1Framing::new();
        let verdicts: Vec<Verdict> = head.iter().map(|b| t.feed(&[*b])).collect();
        let first = verdicts.iter().position(|v| *v == Verdict::Conflict);
        // Exactly at the `\n` ending the Content-Length line.
        assert_eq!(first, Some(head.len() - 3));
        assert!(verdicts
            .iter()
            .skip(head.len() - 3)
            .all(|v| *v == Verdict::Conflict));
    }

    #[test]
    fn pipelined_later_request_conflicts() {
        let mut s = Vec::new();
        s.extend_from_slice(GET);
        s.extend_from_slice(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd");
        s.extend_from_slice(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        s.extend_from_slice(b"3;x=y\r\nabc\r\n0\r\nx-t: 1\r\n\r\n");
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
        s.extend_from_slice(b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n");
        s.extend_from_slice(b"Content-Length: 3\r\n\r\n");
        assert_eq!(verdict(&s), Verdict::Conflict);
    }

    #[test]
    fn headers_in_bodies_are_not_heads() {
        let body = b"content-length: 1\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut s =
            format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        s.extend_from_slice(body);
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);

        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        s.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
        s.extend_from_slice(body);
        s.extend_from_slice(b"\r\n0\r\n\r\n");
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
    }

    #[test]
    fn trailers_are_not_a_head() {
        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        s.extend_from_slice(b"0\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        s.extend_from_slice(b"A ; name=\"v;x\" ; other\r\n0123456789\r\n");
        s.extend_from_slice(b"0000000000000000000001\r\nz\r\n");
        s.extend_from_slice(b"0;last\r\nx-checksum: abc\r\nx-other: 2\r\n\r\n");
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&s), Verdict::Continue);
        assert_eq!(t.state, State::Head);
        s.extend_from_slice(b"POST / HTTP/1.1\r\nContent-Length: 1\r\n");
        s.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        assert_eq!(verdict(&s), Verdict::Conflict);
    }

    #[test]
    fn trailer_lines_end_only_at_crlf() {
        // As in hyper, a bare LF inside the trailer section does not end a trailer line:
        // the "request" below is part of the trailers, and the body ends at the final CRLF.
        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
        s.extend_from_slice(b"\nPOST / HTTP/1.1\nContent-Length: 1\nTransfer-Encoding: x\n");
        s.extend_from_slice(b"\r\n\r\n");
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&s), Verdict::Continue);
        assert_eq!(t.state, State::Head);
    }

    #[test]
    fn broken_chunked_framing_disengages() {
        let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for body in [
            &b"x\r\n"[..],
            b"5\nhello\r\n",
            b"5\r\nhelloXX",
            b"5;ext\nhello\r\n",
            b"1 2\r\n",
            b"10000000000000000\r\n",
            b"0\r\n\r\r",
            b"0\r\nx: y\rz",
        ] {
            let mut s = head.to_vec();
            s.extend_from_slice(body);
            assert_eq!(
                verdict(&s),
                Verdict::Disengaged,
                "{:?}",
                body.escape_ascii()
            );
        }
    }

    #[test]
    fn framing_hyper_refuses_disengages() {
        for head in [
            &b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chun ked\r\n\r\n",
        ] {
            assert_eq!(
                verdict(head),
                Verdict::Disengaged,
                "{:?}",
                head.escape_ascii()
            );
        }
        // Repeated, agreeing lengths are fine.
        let mut s =
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 02\r\n\r\nok".to_vec();
        s.extend_from_slice(GET);
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&s), Verdict::Continue);
        assert_eq!(t.state, State::Head);
    }

    #[test]
    fn lookalike_header_names_are_ignored() {
        let mut s = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Lengths: x\r\n".to_vec();
        s.extend_from_slice(b"Transfer-Encodings: chunked\r\nX-Transfer-Encoding: chunked\r\n");
        s.extend_from_slice(b"Content-Type: a\r\nTE: trailers\r\n\r\nok");
        s.extend_from_slice(GET);
        assert_eq!(verdict(&s), Verdict::Continue);
        // The request line is not a header, even when it looks like one.
        assert_eq!(
            verdict(b"transfer-encoding: chunked\r\ncontent-length: 0\r\n\r\n"),
            Verdict::Continue
        );
        assert_eq!(
            verdict(b"content-length: 1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            Verdict::Continue
        );
    }

    #[test]
    fn h2_preface_disengages() {
        let mut s = H2_PREFACE.to_vec();
        assert_eq!(verdict(&s), Verdict::Disengaged);
        s.extend_from_slice(
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert_eq!(verdict(&s), Verdict::Disengaged);
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&H2_PREFACE[..10]), Verdict::Continue);
        assert_eq!(t.feed(&H2_PREFACE[10..]), Verdict::Disengaged);
    }

    #[test]
    fn almost_h2_preface_is_http1() {
        // Diverging anywhere in the preface: the bytes so far are replayed as HTTP/1.
        let conflict =
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for cut in 0..H2_PREFACE.len() {
            let mut s = H2_PREFACE[..cut].to_vec();
            s.extend_from_slice(b"X\r\n");
            s.extend_from_slice(conflict);
            assert_eq!(verdict(&s), Verdict::Conflict, "cut {cut}");
        }
        assert_eq!(verdict(b"PRI * HTTP/1.1\r\n\r\n"), Verdict::Continue);
    }

    #[test]
    fn connect_and_upgrade_are_followed() {
        // This gateway never switches protocols and hyper keeps serving the connection
        // after answering these, so the requests after them are still checked.
        let conflict =
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for first in [
            &b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"[..],
            b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"POST / HTTP/1.1\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nhi",
        ] {
            let mut s = first.to_vec();
            assert_eq!(verdict(&s), Verdict::Continue);
            s.extend_from_slice(conflict);
            assert_eq!(verdict(&s), Verdict::Conflict);
        }
    }

    #[test]
    fn leading_empty_lines_are_skipped() {
        let mut s = b"\r\n\n\r\nPOST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi\r\n".to_vec();
        s.extend_from_slice(GET);
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&s), Verdict::Continue);
        assert_eq!((t.state, t.in_head), (State::Head, false));
        s.extend_from_slice(
            b"\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n",
        );
        assert_eq!(verdict(&s), Verdict::Conflict);
    }

    #[test]
    fn bare_lf_line_ends() {
        let mut s = b"POST / HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc".to_vec();
        s.extend_from_slice(b"POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n2\r\nok\r\n0\r\n\r\n");
        s.extend_from_slice(b"GET / HTTP/1.1\n\n");
        let mut t = H1Framing::new();
        assert_eq!(t.feed(&s), Verdict::Continue);
        assert_eq!(t.state, State::Head);
        s.extend_from_slice(b"GET / HTTP/1.1\ncontent-length: 0\ntransfer-encoding: chunked\n");
        assert_eq!(verdict(&s), Verdict::Conflict);
    }

    #[test]
    fn huge_body_is_skipped_across_many_feeds() {
        // Body bytes that look like a conflicting head, 70 bytes each.
        let fake = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let chunk = fake.repeat(1000);
        let size: u64 = 4 * 1024 * 1024 * 1024 + 12_345;
        let mut t = H1Framing::new();
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {size}\r\n\r\n");
        assert_eq!(t.feed(head.as_bytes()), Verdict::Continue);
        let mut left = size;
        while left > chunk.len() as u64 {
            assert_eq!(t.feed(&chunk), Verdict::Continue);
            left -= chunk.len() as u64;
        }
        let tail = usize::try_from(left).unwrap_or(0);
        assert_eq!(t.feed(&chunk[..tail]), Verdict::Continue);
        assert_eq!(t.state, State::Head);
        assert_eq!(t.feed(fake), Verdict::Conflict);
    }

    #[test]
    fn empty_feeds_change_nothing() {
        let mut t = H1Framing::default();
        assert_eq!(t.feed(&[]), Verdict::Continue);
        assert_eq!(t.feed(b"GET"), Verdict::Continue);
        assert_eq!(t.feed(&[]), Verdict::Continue);
        assert_eq!(t.verdict(), Verdict::Continue);
    }

    /// A tiny deterministic generator for the property test.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// A stream of well-formed requests, the last one possibly conflicting.
    fn generate(rng: &mut Rng) -> (Vec<u8>, Verdict) {
        let mut s = Vec::new();
        let eol: &[u8] = if rng.below(4) == 0 { b"\n" } else { b"\r\n" };
        for _ in 0..=rng.below(4) {
            if rng.below(3) == 0 {
                s.extend_from_slice(eol);
            }
            s.extend_from_slice(b"POST /v1/chat/completions HTTP/1.1");
            s.extend_from_slice(eol);
            s.extend_from_slice(b"Host: gw");
            s.extend_from_slice(eol);
            let body = b"{\"content-length:\":\"\r\ntransfer-encoding: chunked\r\n\r\n\"}"
                .repeat(usize::try_from(rng.below(3)).unwrap_or(0));
            match rng.below(3) {
                0 => {
                    s.extend_from_slice(format!("Content-Length: {}", body.len()).as_bytes());
                    s.extend_from_slice(eol);
                    s.extend_from_slice(eol);
                    s.extend_from_slice(&body);
                }
                1 => {
                    s.extend_from_slice(b"transfer-encoding: chunked");
                    s.extend_from_slice(eol);
                    s.extend_from_slice(eol);
                    let mut rest = &body[..];
                    while !rest.is_empty() {
                        let n = usize::try_from(rng.below(rest.len() as u64) + 1).unwrap_or(1);
                        let (a, b) = rest.split_at(n.min(rest.len()));
                        s.extend_from_slice(format!("{n:X};e=1\r\n").as_bytes());
                        s.extend_from_slice(a);
                        s.extend_from_slice(b"\r\n");
                        rest = b;
                    }
                    s.extend_from_slice(b"0\r\nx-trailer: content-length: 1\r\n\r\n");
                }
                _ => s.extend_from_slice(eol),
            }
        }
        if rng.below(2) == 0 {
            s.extend_from_slice(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n");
            s.extend_from_slice(b"content-length: 0\r\n\r\n");
            (s, Verdict::Conflict)
        } else {
            (s, Verdict::Continue)
        }
    }

    #[test]
    fn every_split_gives_the_same_verdict() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..40 {
            let (stream, expected) = generate(&mut rng);
            assert_eq!(verdict(&stream), expected, "{:?}", stream.escape_ascii());
            // Random multi-piece splits too.
            for _ in 0..20 {
                let mut t = H1Framing::new();
                let mut rest = &stream[..];
                let mut last = Verdict::Continue;
                while !rest.is_empty() {
                    let n = usize::try_from(rng.below(64) + 1)
                        .unwrap_or(1)
                        .min(rest.len());
                    let (a, b) = rest.split_at(n);
                    last = t.feed(a);
                    rest = b;
                }
                assert_eq!(last, expected);
            }
        }
    }

    #[test]
    fn state_is_small() {
        assert!(std::mem::size_of::<H1Framing>() <= 64);
    }
}
