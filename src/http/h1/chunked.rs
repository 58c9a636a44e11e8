//! The framing of a chunked response body (RFC 9112 §7.1), checked as it streams.
//!
//! The relay hands the payload on as the slices of its read buffer that it already is;
//! nothing is decoded into a new buffer. [`Chunked::step`] looks at the front of what is
//! buffered and says how many bytes are framing (dropped), how many are payload (handed
//! on as they are) and where the body ends. It keeps a few words of state, so any split
//! of the stream across reads gives the same pieces, and a worker that breaks the framing
//! is caught at the byte that breaks it instead of being relayed as garbage.
//!
//! Accepted as RFC 9112 allows: hex sizes with any number of leading zeros (up to a
//! `u64`), whitespace before extensions, chunk extensions (skipped), trailer fields
//! (skipped: the gateway relays no trailers), a bare `\n` nowhere. Extension and trailer
//! lines are bounded ([`MAX_LINE`], [`MAX_TRAILERS`]) so a worker cannot keep the relay
//! busy on framing alone.

use std::fmt;

/// Longest chunk-size line (size, whitespace and extensions) accepted.
pub const MAX_LINE: u32 = 4096;
/// Most trailer bytes accepted after the last chunk.
pub const MAX_TRAILERS: u32 = 16 * 1024;

/// What the front of the buffered bytes is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// This many bytes are framing: drop them.
    Framing(usize),
    /// This many bytes are payload: hand them on.
    Data(usize),
    /// The body ended after this many bytes (framing); what follows is not the body's.
    End(usize),
}

/// How a worker broke the chunked framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk size is missing, not hexadecimal, or larger than a `u64`.
    BadSize,
    /// A line did not end in `\r\n`, or chunk data was not followed by `\r\n`.
    BadLineEnd,
    /// A chunk-size line or the trailer section passed its bound.
    TooLong,
    /// More input after the body ended.
    AfterEnd,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::BadSize => "invalid chunk size in the worker's response",
            ChunkError::BadLineEnd => "invalid line end in the worker's chunked response",
            ChunkError::TooLong => "chunk extensions or trailers of the worker's response too long",
            ChunkError::AfterEnd => "data after the end of the worker's chunked response",
        })
    }
}

impl std::error::Error for ChunkError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Expecting the first hex digit of a chunk size.
    SizeStart,
    /// Hex digits of a size (value so far).
    Size(u64),
    /// Whitespace or extensions after the size, up to `\r`.
    Ext(u64),
    /// Expecting the `\n` that ends a size line.
    SizeLf(u64),
    /// This many payload bytes still to come.
    Data(u64),
    /// Expecting the `\r` after chunk data.
    DataCr,
    /// Expecting the `\n` after chunk data.
    DataLf,
    /// After the last chunk: at the start of a trailer line or of the final `\r\n`.
    TrailerStart,
    /// Inside a trailer line, up to `\r`.
    Trailer,
    /// Expecting the `\n` that ends a trailer line.
    TrailerLf,
    /// Expecting the `\n` that ends the body.
    EndLf,
    /// The body is over.
    Done,
}

/// The framing state of one chunked body.
#[derive(Clone, Debug)]
pub struct Chunked {
    state: State,
    /// Bytes of the current size line, or of the trailers so far.
    line: u32,
}

impl Default for Chunked {
    fn default() -> Chunked {
        Chunked::new()
    }
}

impl Chunked {
    pub const fn new() -> Chunked {
        Chunked {
            state: State::SizeStart,
            line: 0,
        }
    }

    /// Whether the body's end has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Classifies the front of `input`, which must not be empty: at least one byte is
    /// always accounted for (framing runs are consumed whole, as far as `input` goes).
    pub fn step(&mut self, input: &[u8]) -> Result<Piece, ChunkError> {
        if let State::Data(left) = self.state {
            let n = usize::try_from(left).map_or(input.len(), |left| left.min(input.len()));
            let left = left - n as u64;
            self.state = if left == 0 {
                State::DataCr
            } else {
                State::Data(left)
            };
            return Ok(Piece::Data(n));
        }
        if self.state == State::Done {
            return Err(ChunkError::AfterEnd);
        }
        for (i, &b) in input.iter().enumerate() {
            self.state = self.framing_byte(b)?;
            match self.state {
                State::Data(_) => return Ok(Piece::Framing(i + 1)),
                State::Done => return Ok(Piece::End(i + 1)),
                _ => {}
            }
        }
        Ok(Piece::Framing(input.len()))
    }

    /// The state after one framing byte.
    fn framing_byte(&mut self, b: u8) -> Result<State, ChunkError> {
        let next = match self.state {
            State::SizeStart => {
                self.line = 1;
                State::Size(u64::from(hex(b).ok_or(ChunkError::BadSize)?))
            }
            State::Size(n) => {
                self.count_line(MAX_LINE)?;
                match hex(b) {
                    Some(d) => n
                        .checked_mul(16)
                        .map(|n| State::Size(n | u64::from(d)))
                        .ok_or(ChunkError::BadSize)?,
                    None => return self.after_size(n, b),
                }
            }
            State::Ext(n) => {
                self.count_line(MAX_LINE)?;
                return self.after_size(n, b);
            }
            State::SizeLf(n) => match (b, n) {
                (b'\n', 0) => {
                    self.line = 0;
                    State::TrailerStart
                }
                (b'\n', n) => State::Data(n),
                _ => return Err(ChunkError::BadLineEnd),
            },
            State::DataCr if b == b'\r' => State::DataLf,
            State::DataLf if b == b'\n' => State::SizeStart,
            State::DataCr | State::DataLf => return Err(ChunkError::BadLineEnd),
            State::TrailerStart => {
                self.count_line(MAX_TRAILERS)?;
                if b == b'\r' {
                    State::EndLf
                } else {
                    State::Trailer
                }
            }
            State::Trailer => {
                self.count_line(MAX_TRAILERS)?;
                if b == b'\r' {
                    State::TrailerLf
                } else {
                    State::Trailer
                }
            }
            State::TrailerLf => {
                self.count_line(MAX_TRAILERS)?;
                match b {
                    b'\n' => State::TrailerStart,
                    _ => return Err(ChunkError::BadLineEnd),
                }
            }
            State::EndLf if b == b'\n' => State::Done,
            State::EndLf => return Err(ChunkError::BadLineEnd),
            // `step` handles these before any framing byte.
            State::Data(_) | State::Done => return Err(ChunkError::AfterEnd),
        };
        Ok(next)
    }

    /// A byte after a size's digits: whitespace or an extension until `\r`.
    fn after_size(&mut self, n: u64, b: u8) -> Result<State, ChunkError> {
        match b {
            b'\r' => Ok(State::SizeLf(n)),
            b'\n' => Err(ChunkError::BadLineEnd),
            // An extension must start with `;` (after optional whitespace); anything else
            // right after the digits is not a size.
            b' ' | b'\t' | b';' => Ok(State::Ext(n)),
            _ if matches!(self.state, State::Ext(_)) => Ok(State::Ext(n)),
            _ => Err(ChunkError::BadSize),
        }
    }

    fn count_line(&mut self, max: u32) -> Result<(), ChunkError> {
        self.line += 1;
        if self.line > max {
            Err(ChunkError::TooLong)
        } else {
            Ok(())
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Runs `input` through a fresh decoder in pieces of the given sizes (cycled) and returns
/// the payload, whether the end was seen, and the first error. For tests and the fuzz
/// target, which check that every split decodes alike.
pub fn decode_split(input: &[u8], splits: &[usize]) -> (Vec<u8>, bool, Option<ChunkError>) {
    let mut chunked = Chunked::new();
    let mut payload = Vec::new();
    let mut pos = 0;
    let mut split = splits.iter().copied().filter(|&s| s > 0).cycle();
    while pos < input.len() {
        let take = split.next().unwrap_or(input.len()).min(input.len() - pos);
        let mut window = &input[pos..pos + take];
        while !window.is_empty() {
            match chunked.step(window) {
                Ok(Piece::Framing(n)) => window = &window[n..],
                Ok(Piece::Data(n)) => {
                    payload.extend_from_slice(&window[..n]);
                    window = &window[n..];
                }
                Ok(Piece::End(n)) => {
                    if n < window.len() {
                        return (payload, true, Some(ChunkError::AfterEnd));
                    }
                    window = &window[n..];
                }
                Err(err) => return (payload, chunked.is_done(), Some(err)),
            }
        }
        pos += take;
    }
    (payload, chunked.is_done(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(input: &[u8]) -> (Vec<u8>, bool, Option<ChunkError>) {
        decode_split(input, &[input.len().max(1)])
    }

    #[test]
    fn plain_chunks_and_the_end() {
        let input = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(whole(input), (b"hello world".to_vec(), true, None));
    }

    #[test]
    fn every_split_gives_the_same_payload() {
        let input =
            b"3;name=\"v\"\r\nabc\r\n000A \t; x\r\n0123456789\r\n0\r\nx-t: 1\r\nx-u: 2\r\n\r\n";
        let expected = whole(input);
        assert_eq!(expected, (b"abc0123456789".to_vec(), true, None));
        for size in 1..input.len() {
            assert_eq!(decode_split(input, &[size]), expected, "split {size}");
        }
        assert_eq!(decode_split(input, &[1, 7, 2, 13]), expected);
    }

    #[test]
    fn odd_sizes_and_uppercase_hex() {
        let mut input = b"1F\r\n".to_vec();
        input.extend_from_slice(&[b'x'; 31]);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        let (payload, done, err) = whole(&input);
        assert_eq!((payload.len(), done, err), (31, true, None));
    }

    #[test]
    fn unfinished_body_is_not_done() {
        assert_eq!(whole(b"5\r\nhel"), (b"hel".to_vec(), false, None));
        assert_eq!(
            whole(b"5\r\nhello\r\n0\r\n"),
            (b"hello".to_vec(), false, None)
        );
    }

    #[test]
    fn broken_framing_is_caught() {
        for (input, err) in [
            (&b"x\r\n"[..], ChunkError::BadSize),
            (b"\r\n", ChunkError::BadSize),
            (b"5x\r\nhello\r\n", ChunkError::BadSize),
            (b"5\nhello", ChunkError::BadLineEnd),
            (b"5\r\nhelloXX", ChunkError::BadLineEnd),
            (b"5\r\nhello\r\n0\r\n\rX", ChunkError::BadLineEnd),
            (b"5\r\nhello\r\n0\r\nx-t: 1\rX", ChunkError::BadLineEnd),
            (b"10000000000000000\r\n", ChunkError::BadSize),
            (b"0\r\n\r\nextra", ChunkError::AfterEnd),
        ] {
            assert_eq!(
                whole(input).2,
                Some(err),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn long_extensions_and_trailers_are_bounded() {
        let mut line = b"1;".to_vec();
        line.extend(std::iter::repeat_n(b'e', MAX_LINE as usize));
        line.extend_from_slice(b"\r\nx\r\n");
        assert_eq!(whole(&line).2, Some(ChunkError::TooLong));

        let mut trailers = b"0\r\nx-t: ".to_vec();
        trailers.extend(std::iter::repeat_n(b'v', MAX_TRAILERS as usize));
        assert_eq!(whole(&trailers).2, Some(ChunkError::TooLong));
    }

    #[test]
    fn a_huge_chunk_streams_in_pieces() {
        let mut chunked = Chunked::new();
        assert_eq!(chunked.step(b"FFFFFFFF\r\n"), Ok(Piece::Framing(10)));
        assert_eq!(chunked.step(&[0u8; 100]), Ok(Piece::Data(100)));
        assert_eq!(chunked.step(&[0u8; 7]), Ok(Piece::Data(7)));
    }
}
