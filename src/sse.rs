//! Incremental server-sent events (SSE) frame parser; [`write`] frames the events the
//! gateway writes itself.
//!
//! Engines stream tokens as `text/event-stream`; the bytes arrive in whatever pieces TCP
//! and the HTTP codec hand over, so a frame can be split anywhere, even inside a `\r\n`.
//! [`SseParser`] takes those chunks one by one and calls back once per complete frame,
//! borrowing the frame from its own buffers so a token stream costs no allocation per
//! event once the buffers have grown to the largest frame.
//!
//! What it follows of the WHATWG event-stream rules: lines end in `\n`, `\r\n` or `\r`;
//! a blank line ends a frame; `data:` lines of one frame join with `\n`; `event:` names
//! the frame; lines starting with `:` are comments; one space after the colon is dropped;
//! a line without a colon is a field with an empty value; `id:`, `retry:` and unknown
//! fields are ignored (a load generator and a gateway have no use for reconnection
//! state); a frame without any `data:` line is not dispatched; an unfinished frame at the
//! end of the stream is dropped. The OpenAI `data: [DONE]` sentinel is an ordinary frame
//! that [`Frame::is_done`] recognises. A leading byte-order mark is not stripped.
//!
//! Bounded: the raw bytes of the lines since the last blank line may not exceed the limit
//! given at construction. Past it the parser fails with [`SseError::FrameTooLarge`] and
//! stays failed, so a peer that never ends a frame cannot grow the buffers without end.
//! The check depends only on the bytes, not on how they were split, so the same stream
//! yields the same frames and the same verdict however it arrives.

pub mod write;

use std::fmt;

/// One dispatched frame. Both fields borrow the parser's buffers and are valid until the
/// next call into the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The `event:` name, empty when the frame has none (the default `message` type).
    pub event: &'a [u8],
    /// The `data:` lines joined with `\n`.
    pub data: &'a [u8],
}

impl Frame<'_> {
    /// Whether this is the OpenAI end-of-stream sentinel `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }
}

/// Why the parser stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseError {
    /// A frame's lines grew past the limit without a blank line ending the frame.
    FrameTooLarge { limit: usize },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::FrameTooLarge { limit } => {
                write!(f, "server-sent event frame larger than {limit} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// Default frame limit: far above any token chunk, small enough to bound a bad stream.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1 << 20;

/// Incremental parser state; feed it chunks in stream order.
#[derive(Debug)]
pub struct SseParser {
    /// The unfinished last line of the previous chunks.
    line: Vec<u8>,
    /// The current frame's `data:` values joined with `\n`.
    data: Vec<u8>,
    /// The current frame's `event:` value.
    event: Vec<u8>,
    /// Whether the current frame has had a `data:` line (an empty one counts).
    has_data: bool,
    /// Raw bytes of the completed lines since the last blank line.
    frame_bytes: usize,
    /// The previous chunk ended in `\r`: a `\n` opening the next one belongs to it.
    skip_lf: bool,
    limit: usize,
    failed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl SseParser {
    /// A parser that fails once a frame's lines exceed `max_frame_bytes`.
    pub fn new(max_frame_bytes: usize) -> SseParser {
        SseParser {
            line: Vec::new(),
            data: Vec::new(),
            event: Vec::new(),
            has_data: false,
            frame_bytes: 0,
            skip_lf: false,
            limit: max_frame_bytes,
            failed: false,
        }
    }

    /// Whether bytes of an unfinished frame are held (a stream ending now was cut short).
    pub fn has_partial_frame(&self) -> bool {
        !self.line.is_empty() || self.frame_bytes > 0
    }

    /// Parses `chunk`, calling `on_frame` for every frame it completes. After an error
    /// every further call returns the same error without parsing.
    pub fn feed<F>(&mut self, mut chunk: &[u8], mut on_frame: F) -> Result<(), SseError>
    where
        F: FnMut(Frame<'_>),
    {
        if self.failed {
            return Err(self.error());
        }
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            let head = &chunk[..end];
            let crlf = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if crlf {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            if self.line.is_empty() {
                self.complete_line(head, &mut on_frame)?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                let outcome = self.complete_line(&line, &mut on_frame);
                line.clear();
                self.line = line;
                outcome?;
            }
        }
        if !chunk.is_empty() {
            // A complete line is at least as long as any of its prefixes, so failing on
            // the prefix fails exactly the streams that would fail once the line ends.
            if self.frame_bytes + self.line.len() + chunk.len() > self.limit {
                return Err(self.fail());
            }
            self.line.extend_from_slice(chunk);
        }
        Ok(())
    }

    fn complete_line<F>(&mut self, line: &[u8], on_frame: &mut F) -> Result<(), SseError>
    where
        F: FnMut(Frame<'_>),
    {
        if line.is_empty() {
            self.dispatch(on_frame);
            return Ok(());
        }
        self.frame_bytes += line.len();
        if self.frame_bytes > self.limit {
            return Err(self.fail());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_frame: &mut F)
    where
        F: FnMut(Frame<'_>),
    {
        if self.has_data {
            on_frame(Frame {
                event: &self.event,
                data: &self.data,
            });
        }
        self.data.clear();
        self.event.clear();
        self.has_data = false;
        self.frame_bytes = 0;
    }

    fn fail(&mut self) -> SseError {
        self.failed = true;
        // Release what the bad frame grew.
        self.line = Vec::new();
        self.data = Vec::new();
        self.event = Vec::new();
        self.error()
    }

    fn error(&self) -> SseError {
        SseError::FrameTooLarge { limit: self.limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (event, data) pairs and the verdict, for comparing whole results.
    type Parsed = (Vec<(String, String)>, Result<(), SseError>);

    fn parse_chunks(chunks: &[&[u8]], limit: usize) -> Parsed {
        let mut parser = SseParser::new(limit);
        let mut frames = Vec::new();
        let mut verdict = Ok(());
        for chunk in chunks {
            verdict = parser.feed(chunk, |f| {
                frames.push((
                    String::from_utf8_lossy(f.event).into_owned(),
                    String::from_utf8_lossy(f.data).into_owned(),
                ));
            });
            if verdict.is_err() {
                break;
            }
        }
        (frames, verdict)
    }

    fn parse(bytes: &[u8]) -> Parsed {
        parse_chunks(&[bytes], DEFAULT_MAX_FRAME_BYTES)
    }

    fn frames(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(e, d)| (e.to_string(), d.to_string()))
            .collect()
    }

    /// Every split into two chunks, and one byte at a time, parses like the whole.
    fn assert_split_invariant(bytes: &[u8], limit: usize) {
        let whole = parse_chunks(&[bytes], limit);
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            assert_eq!(parse_chunks(&[a, b], limit), whole, "split at {at}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_chunks(&singles, limit), whole, "byte at a time");
    }

    #[test]
    fn openai_stream_with_done() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n";
        let (got, verdict) = parse(stream);
        assert_eq!(
            got,
            frames(&[("", "{\"a\":1}"), ("", "{\"a\":2}"), ("", "[DONE]")])
        );
        assert!(verdict.is_ok());
        let mut parser = SseParser::default();
        let mut done = 0;
        parser
            .feed(stream, |f| done += usize::from(f.is_done()))
            .unwrap();
        assert_eq!(done, 1);
        assert_split_invariant(stream, DEFAULT_MAX_FRAME_BYTES);
    }

    #[test]
    fn named_events_and_comments() {
        let stream = b": keep-alive\n\nevent: message_start\ndata: {}\n\n: ping\nevent: ping\ndata: {\"type\":\"ping\"}\n\n";
        assert_eq!(
            parse(stream).0,
            frames(&[("message_start", "{}"), ("ping", "{\"type\":\"ping\"}")])
        );
        assert_split_invariant(stream, DEFAULT_MAX_FRAME_BYTES);
    }

    #[test]
    fn every_line_ending() {
        let stream = b"data: a\r\n\r\ndata: b\r\rdata: c\n\nevent: e\rdata: d\r\n\n";
        assert_eq!(
            parse(stream).0,
            frames(&[("", "a"), ("", "b"), ("", "c"), ("e", "d")])
        );
        assert_split_invariant(stream, DEFAULT_MAX_FRAME_BYTES);
    }

    #[test]
    fn cr_at_chunk_end_then_lf_is_one_line_end() {
        let got = parse_chunks(&[b"data: x\r", b"\n", b"\r", b"\n"], 1024);
        assert_eq!(got.0, frames(&[("", "x")]));
        // Without the skip, "\r" + "\n" would be two line ends and end the frame early.
        let got = parse_chunks(&[b"data: x\r", b"\ndata: y\n\n"], 1024);
        assert_eq!(got.0, frames(&[("", "x\ny")]));
    }

    #[test]
    fn multi_line_data_joins_with_newline() {
        let stream = b"data: one\ndata:two\ndata\ndata:  three\n\n";
        assert_eq!(parse(stream).0, frames(&[("", "one\ntwo\n\n three")]));
        assert_split_invariant(stream, DEFAULT_MAX_FRAME_BYTES);
    }

    #[test]
    fn frames_without_data_and_unknown_fields() {
        let stream = b"event: lonely\n\nid: 7\nretry: 10\nfoo: bar\ndata:\n\n";
        assert_eq!(parse(stream).0, frames(&[("", "")]));
    }

    #[test]
    fn unfinished_frame_is_held_not_dispatched() {
        let mut parser = SseParser::default();
        let mut n = 0;
        parser.feed(b"data: partial\n", |_| n += 1).unwrap();
        assert_eq!(n, 0);
        assert!(parser.has_partial_frame());
        parser.feed(b"\n", |_| n += 1).unwrap();
        assert_eq!(n, 1);
        assert!(!parser.has_partial_frame());
    }

    #[test]
    fn oversized_frame_fails_and_stays_failed() {
        let limit = 32;
        let big = [b"data: ".as_slice(), &[b'x'; 40], b"\n\n"].concat();
        let (got, verdict) = parse_chunks(&[b"data: ok\n\n", &big], limit);
        assert_eq!(got, frames(&[("", "ok")]));
        assert_eq!(verdict, Err(SseError::FrameTooLarge { limit }));

        let mut parser = SseParser::new(limit);
        assert!(parser.feed(&big, |_| {}).is_err());
        assert!(parser.feed(b"data: fine\n\n", |_| {}).is_err());
        assert_split_invariant(&big, limit);
    }

    #[test]
    fn many_small_lines_count_toward_the_limit() {
        let stream = b"data: 12345\ndata: 12345\ndata: 12345\n\n";
        assert!(parse_chunks(&[stream], 30).1.is_err());
        assert!(parse_chunks(&[stream], 33).1.is_ok());
        assert_split_invariant(stream, 30);
    }

    #[test]
    fn blank_lines_reset_the_count() {
        let stream = b"data: 123456\n\ndata: 123456\n\n";
        assert_eq!(parse_chunks(&[stream], 12).0.len(), 2);
        assert_split_invariant(stream, 12);
    }
}
