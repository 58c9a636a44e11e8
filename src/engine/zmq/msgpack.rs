//! The MessagePack subset vLLM's engine core speaks (msgspec's encoding): a writer that
//! appends to a buffer, and a reader over one frame that never trusts a length it has not
//! checked against the bytes left, and bounds nesting.
//!
//! Written here rather than taken from a crate because the protocol needs so little of
//! the format (maps, arrays, strings, integers, floats, nil, booleans, one ext type) and
//! the decoder has to be lenient in ways a derive-based one is not: vLLM appends fields to
//! its positional structs, so a reader skips what it does not know.

use std::fmt;

/// The deepest nesting a skipped value may have; engine messages nest a few levels.
const MAX_DEPTH: usize = 32;

/// Why a frame could not be read.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed msgpack: {}", self.0)
    }
}

pub type Result<T> = std::result::Result<T, Malformed>;

/// Appends MessagePack values to a buffer, in the smallest form msgspec would pick.
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(capacity),
        }
    }

    pub fn nil(&mut self) {
        self.buf.push(0xc0);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
    }

    pub fn uint(&mut self, v: u64) {
        match v {
            0..=0x7f => self.buf.push(v as u8),
            0x80..=0xff => self.buf.extend_from_slice(&[0xcc, v as u8]),
            0x100..=0xffff => {
                self.buf.push(0xcd);
                self.buf.extend_from_slice(&(v as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                self.buf.push(0xce);
                self.buf.extend_from_slice(&(v as u32).to_be_bytes());
            }
            _ => {
                self.buf.push(0xcf);
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
        }
    }

    pub fn int(&mut self, v: i64) {
        match v {
            0.. => self.uint(v as u64),
            -32..=-1 => self.buf.push(v as i8 as u8),
            -128..=-33 => self.buf.extend_from_slice(&[0xd0, v as i8 as u8]),
            -32768..=-129 => {
                self.buf.push(0xd1);
                self.buf.extend_from_slice(&(v as i16).to_be_bytes());
            }
            -2_147_483_648..=-32769 => {
                self.buf.push(0xd2);
                self.buf.extend_from_slice(&(v as i32).to_be_bytes());
            }
            _ => {
                self.buf.push(0xd3);
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
        }
    }

    /// A float64 (`0xcb`), as msgspec writes every Python float.
    pub fn f64(&mut self, v: f64) {
        self.buf.push(0xcb);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn str(&mut self, s: &str) {
        let len = s.len();
        match len {
            0..=31 => self.buf.push(0xa0 | len as u8),
            32..=0xff => self.buf.extend_from_slice(&[0xd9, len as u8]),
            0x100..=0xffff => {
                self.buf.push(0xda);
                self.buf.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                self.buf.push(0xdb);
                self.buf.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub fn array(&mut self, len: usize) {
        self.header(len, 0x90, 0xdc);
    }

    pub fn map(&mut self, len: usize) {
        self.header(len, 0x80, 0xde);
    }

    fn header(&mut self, len: usize, fix: u8, wide: u8) {
        match len {
            0..=15 => self.buf.push(fix | len as u8),
            16..=0xffff => {
                self.buf.push(wide);
                self.buf.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                self.buf.push(wide + 1);
                self.buf.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
    }
}

/// What the next value is, as far as the engine messages care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Bin,
    Array,
    Map,
    Ext,
}

/// Reads values from one frame in order.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.pos == self.buf.len()
    }

    fn byte(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or(Malformed("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.buf.len())
            .ok_or(Malformed("length past the end of the frame"))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len_of(&mut self, bytes: usize) -> Result<usize> {
        Ok(match bytes {
            1 => self.byte()? as usize,
            2 => u16::from_be_bytes(self.be()?) as usize,
            _ => u32::from_be_bytes(self.be()?) as usize,
        })
    }

    /// The kind of the next value, without reading it.
    pub fn peek(&self) -> Result<Kind> {
        let b = *self.buf.get(self.pos).ok_or(Malformed("truncated"))?;
        Ok(match b {
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => Kind::Int,
            0x80..=0x8f | 0xde | 0xdf => Kind::Map,
            0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
            0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
            0xc0 => Kind::Nil,
            0xc2 | 0xc3 => Kind::Bool,
            0xc4..=0xc6 => Kind::Bin,
            0xca | 0xcb => Kind::Float,
            0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
            0xc1 => return Err(Malformed("reserved byte 0xc1")),
        })
    }

    /// Reads a nil if one is next; `false` (nothing read) otherwise.
    pub fn nil(&mut self) -> Result<bool> {
        if self.peek()? == Kind::Nil {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.byte()? {
            0xc2 => Ok(false),
            0xc3 => Ok(true),
            _ => Err(Malformed("expected a boolean")),
        }
    }

    /// Any integer that fits an `i64`.
    pub fn int(&mut self) -> Result<i64> {
        let b = self.byte()?;
        Ok(match b {
            0x00..=0x7f => i64::from(b),
            0xe0..=0xff => i64::from(b as i8),
            0xcc => i64::from(self.byte()?),
            0xcd => i64::from(u16::from_be_bytes(self.be()?)),
            0xce => i64::from(u32::from_be_bytes(self.be()?)),
            0xcf => i64::try_from(u64::from_be_bytes(self.be()?))
                .map_err(|_| Malformed("integer out of range"))?,
            0xd0 => i64::from(self.byte()? as i8),
            0xd1 => i64::from(i16::from_be_bytes(self.be()?)),
            0xd2 => i64::from(i32::from_be_bytes(self.be()?)),
            0xd3 => i64::from_be_bytes(self.be()?),
            _ => return Err(Malformed("expected an integer")),
        })
    }

    /// An integer that fits a `u32` (token ids, counts, ranks).
    pub fn u32(&mut self) -> Result<u32> {
        u32::try_from(self.int()?).map_err(|_| Malformed("integer out of range"))
    }

    /// A float, or an integer read as one (msgspec accepts both for a float field).
    pub fn f64(&mut self) -> Result<f64> {
        match self.peek()? {
            Kind::Int => Ok(self.int()? as f64),
            _ => match self.byte()? {
                0xca => Ok(f64::from(f32::from_be_bytes(self.be()?))),
                0xcb => Ok(f64::from_be_bytes(self.be()?)),
                _ => Err(Malformed("expected a float")),
            },
        }
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let b = self.byte()?;
        let len = match b {
            0xa0..=0xbf => (b & 0x1f) as usize,
            0xd9 => self.len_of(1)?,
            0xda => self.len_of(2)?,
            0xdb => self.len_of(4)?,
            _ => return Err(Malformed("expected a string")),
        };
        std::str::from_utf8(self.take(len)?).map_err(|_| Malformed("string is not UTF-8"))
    }

    /// A string or a binary value, as bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = match self.peek()? {
            Kind::Str => return self.str().map(str::as_bytes),
            Kind::Bin => match self.byte()? {
                0xc4 => self.len_of(1)?,
                0xc5 => self.len_of(2)?,
                _ => self.len_of(4)?,
            },
            _ => return Err(Malformed("expected bytes")),
        };
        self.take(len)
    }

    pub fn array(&mut self) -> Result<usize> {
        let b = self.byte()?;
        let len = match b {
            0x90..=0x9f => (b & 0x0f) as usize,
            0xdc => self.len_of(2)?,
            0xdd => self.len_of(4)?,
            _ => return Err(Malformed("expected an array")),
        };
        self.bounded(len)
    }

    pub fn map(&mut self) -> Result<usize> {
        let b = self.byte()?;
        let len = match b {
            0x80..=0x8f => (b & 0x0f) as usize,
            0xde => self.len_of(2)?,
            0xdf => self.len_of(4)?,
            _ => return Err(Malformed("expected a map")),
        };
        self.bounded(len)
    }

    /// An extension value: its type and payload.
    pub fn ext(&mut self) -> Result<(i8, &'a [u8])> {
        let b = self.byte()?;
        let len = match b {
            0xd4 => 1,
            0xd5 => 2,
            0xd6 => 4,
            0xd7 => 8,
            0xd8 => 16,
            0xc7 => self.len_of(1)?,
            0xc8 => self.len_of(2)?,
            0xc9 => self.len_of(4)?,
            _ => return Err(Malformed("expected an extension")),
        };
        let kind = self.byte()? as i8;
        Ok((kind, self.take(len)?))
    }

    /// A container length no larger than the bytes left: every element takes at least one
    /// byte, so a larger one is a lie and must not size an allocation.
    fn bounded(&self, len: usize) -> Result<usize> {
        if len > self.buf.len() - self.pos {
            return Err(Malformed("container longer than the frame"));
        }
        Ok(len)
    }

    /// Skips the next value, whatever it is.
    pub fn skip(&mut self) -> Result<()> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Malformed("nested too deep"));
        }
        match self.peek()? {
            Kind::Nil | Kind::Bool => {
                self.pos += 1;
            }
            Kind::Int => {
                self.int().map(drop).or_else(|e| {
                    // A u64 above i64::MAX is still a well-formed value to skip.
                    if e.0 == "integer out of range" {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })?;
            }
            Kind::Float => {
                self.f64()?;
            }
            Kind::Str | Kind::Bin => {
                self.bytes()?;
            }
            Kind::Ext => {
                self.ext()?;
            }
            Kind::Array => {
                for _ in 0..self.array()? {
                    self.skip_at(depth + 1)?;
                }
            }
            Kind::Map => {
                for _ in 0..self.map()? {
                    self.skip_at(depth + 1)?;
                    self.skip_at(depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_in_their_smallest_form() {
        for v in [
            0i64,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            u32::MAX as i64,
            i64::MAX,
            -1,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            i32::MIN as i64,
            i64::MIN,
        ] {
            let mut w = Writer::with_capacity(9);
            w.int(v);
            let mut r = Reader::new(&w.buf);
            assert_eq!(r.int().unwrap(), v, "{v}");
            assert!(r.done());
        }
        let mut w = Writer::with_capacity(3);
        w.uint(300);
        assert_eq!(w.buf, [0xcd, 0x01, 0x2c]);
    }

    #[test]
    fn strings_arrays_and_maps_use_msgspec_headers() {
        let mut w = Writer::with_capacity(64);
        w.array(22);
        w.map(2);
        w.str("r1");
        assert_eq!(&w.buf[..5], &[0xdc, 0x00, 0x16, 0x82, 0xa2]);
        let long = "x".repeat(40);
        let mut w = Writer::with_capacity(64);
        w.str(&long);
        assert_eq!(&w.buf[..2], &[0xd9, 40]);
        assert_eq!(Reader::new(&w.buf).str().unwrap(), long);
    }

    #[test]
    fn lying_lengths_and_deep_nesting_are_refused() {
        // An array claiming 4 billion elements in a 5-byte frame.
        assert!(Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff])
            .array()
            .is_err());
        assert!(Reader::new(&[0xdb, 0, 0, 0, 9, b'a']).str().is_err());
        let deep = vec![0x91; 100];
        assert_eq!(Reader::new(&deep).skip(), Err(Malformed("nested too deep")));
        assert!(Reader::new(&[]).skip().is_err());
        assert!(Reader::new(&[0xc1]).skip().is_err());
        assert!(Reader::new(&[0xa2, 0xff, 0xfe]).str().is_err());
    }

    #[test]
    fn skip_steps_over_every_kind() {
        let mut w = Writer::with_capacity(64);
        w.array(6);
        w.nil();
        w.bool(true);
        w.f64(1.5);
        w.map(1);
        w.str("k");
        w.array(1);
        w.int(-5);
        w.uint(u64::MAX);
        w.buf.extend_from_slice(&[0xc7, 2, 3, 9, 9]);
        w.int(7);
        let mut r = Reader::new(&w.buf);
        r.skip().unwrap();
        assert_eq!(r.int().unwrap(), 7);
        assert!(r.done());
    }
}
