//! Stop strings on the detokenized text stream.
//!
//! OpenAI's `stop` ends a generation as soon as one of the strings appears in the output.
//! The engine sees token ids, not text, so the gateway matches the strings on the text the
//! detokenizer emits, piece by piece, and must never send a client text that later turns
//! out to be part of a stop string: text that could still be the start of a match is held
//! back until the next pieces settle it, and nothing emitted is ever retracted.
//!
//! Which match wins: the one that starts earliest in the whole text; when several stop
//! strings match at that same start (one is then a prefix of the other), the shortest,
//! since it is the one the stream completes first; among equal strings, the lowest index.
//! The verdict therefore depends only on the text, never on how it was split into pieces.
//! It can take a few more pieces to reach: with stops `"abcd"` and `"bc"`, the text `"abc"`
//! holds a complete `"bc"`, but an `"abcd"` starting earlier may still follow.
//!
//! Hidden stops (OpenAI) emit the text before the match and drop the match; visible stops
//! (SGLang's `no_stop_trim`) emit the match too. Either way, the generation is over.
//!
//! Each stop string is followed with a Knuth–Morris–Pratt automaton, so a byte costs
//! amortised O(number of stops) whatever the strings (no quadratic blow-up on inputs like
//! `"aaaa…"`), and bytes that cannot open any stop are skipped with one table look-up
//! while nothing is pending. With no stop strings, `push` is a plain append.
//!
//! Bounded: at most [`MAX_STOPS`] strings of at most [`MAX_STOP_BYTES`] bytes each;
//! the held text is always shorter than the longest stop string.

use std::fmt;

/// Most stop strings one matcher takes (OpenAI allows 4; SGLang and vLLM, any number).
pub const MAX_STOPS: usize = 16;

/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;

/// Why a list of stop strings was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopsError {
    /// More than [`MAX_STOPS`] non-empty strings.
    TooMany { count: usize },
    /// The string at `index` (of the list as given) is longer than [`MAX_STOP_BYTES`].
    TooLong { index: usize, len: usize },
}

impl fmt::Display for StopsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopsError::TooMany { count } => {
                write!(f, "{count} stop strings, at most {MAX_STOPS} allowed")
            }
            StopsError::TooLong { index, len } => write!(
                f,
                "stop string {index} is {len} bytes long, at most {MAX_STOP_BYTES} allowed"
            ),
        }
    }
}

impl std::error::Error for StopsError {}

/// What a push (or the end of the stream) decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No stop string has matched (yet).
    Continue,
    /// The stop string at `stop_index` (an index into the list given to
    /// [`StopMatcher::new`], empty strings included) matched; the generation is over.
    Stopped { stop_index: usize },
}

/// One stop string and its automaton.
#[derive(Debug)]
struct Stop {
    text: Box<[u8]>,
    /// `fail[i]`: the length of the longest proper prefix of `text[..=i]` that is also
    /// its suffix (the KMP prefix function).
    fail: Box<[u16]>,
    /// How many bytes of `text` the end of the stream matches (always `< text.len()`).
    matched: u16,
    /// Position in the caller's list.
    index: usize,
}

impl Stop {
    fn new(text: &str, index: usize) -> Stop {
        let bytes = text.as_bytes();
        let mut fail = vec![0u16; bytes.len()];
        let mut k = 0usize;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = usize::from(fail[k - 1]);
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            fail[i] = k as u16;
        }
        Stop {
            text: bytes.into(),
            fail: fail.into(),
            matched: 0,
            index,
        }
    }

    /// Feeds one byte; returns whether the whole string now ends the stream.
    fn step(&mut self, byte: u8) -> bool {
        let mut k = usize::from(self.matched);
        while k > 0 && self.text[k] != byte {
            k = usize::from(self.fail[k - 1]);
        }
        if self.text[k] == byte {
            k += 1;
        }
        let complete = k == self.text.len();
        if complete {
            // The state stays a proper prefix: fall back to the longest border, so an
            // overlapping occurrence is still followed.
            k = usize::from(self.fail[k - 1]);
        }
        self.matched = k as u16;
        complete
    }
}

/// A complete match found while an earlier-starting partial one is still open.
#[derive(Debug, Clone, Copy)]
struct Found {
    /// Offset in `held`.
    start: usize,
    len: usize,
    index: usize,
}

/// Matches stop strings on one generation's text stream.
#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<Stop>,
    visible: bool,
    /// Bytes that begin some stop string.
    opens: [bool; 256],
    /// Text not yet emitted: it starts where the earliest open partial match starts.
    held: String,
    /// The best complete match so far, waiting on an earlier partial one.
    found: Option<Found>,
    stopped: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored (they would match everywhere).
    /// `visible`: the matched stop string is emitted too.
    pub fn new(stops: &[String], visible: bool) -> Result<StopMatcher, StopsError> {
        let mut kept = Vec::new();
        let mut opens = [false; 256];
        for (index, text) in stops.iter().enumerate() {
            if text.is_empty() {
                continue;
            }
            if text.len() > MAX_STOP_BYTES {
                return Err(StopsError::TooLong {
                    index,
                    len: text.len(),
                });
            }
            opens[usize::from(text.as_bytes()[0])] = true;
            kept.push(Stop::new(text, index));
        }
        if kept.len() > MAX_STOPS {
            return Err(StopsError::TooMany { count: kept.len() });
        }
        Ok(StopMatcher {
            stops: kept,
            visible,
            opens,
            held: String::new(),
            found: None,
            stopped: None,
        })
    }

    /// A matcher without stop strings: every push is an append.
    pub fn none() -> StopMatcher {
        StopMatcher {
            stops: Vec::new(),
            visible: false,
            opens: [false; 256],
            held: String::new(),
            found: None,
            stopped: None,
        }
    }

    /// Whether the stream has stopped.
    pub fn stopped(&self) -> Option<usize> {
        self.stopped
    }

    /// Feeds the next piece of text; appends to `out` the text now known to be safe (and,
    /// on a visible stop, the stop string). After a stop, appends nothing and keeps
    /// answering [`Verdict::Stopped`].
    pub fn push(&mut self, text: &str, out: &mut String) -> Verdict {
        if self.stops.is_empty() {
            out.push_str(text);
            return Verdict::Continue;
        }
        if let Some(stop_index) = self.stopped {
            return Verdict::Stopped { stop_index };
        }
        let from = if self.held.is_empty() {
            // Nothing open: the text up to the first byte that can open a stop is safe.
            let opens = &self.opens;
            let Some(first) = text.bytes().position(|b| opens[usize::from(b)]) else {
                out.push_str(text);
                return Verdict::Continue;
            };
            out.push_str(&text[..first]);
            self.held.push_str(&text[first..]);
            0
        } else {
            let from = self.held.len();
            self.held.push_str(text);
            from
        };
        self.scan(from, out)
    }

    /// Runs the automata over `held[from..]`, then emits what is safe or stops.
    fn scan(&mut self, from: usize, out: &mut String) -> Verdict {
        let bytes = self.held.as_bytes();
        let mut pos = from;
        while pos < bytes.len() {
            if self.found.is_none() && self.stops.iter().all(|s| s.matched == 0) {
                // Idle: skip the bytes that cannot open a stop string.
                let opens = &self.opens;
                match bytes[pos..].iter().position(|&b| opens[usize::from(b)]) {
                    Some(skip) => pos += skip,
                    None => break,
                }
            }
            let byte = bytes[pos];
            pos += 1;
            for stop in &mut self.stops {
                if stop.step(byte) {
                    let len = stop.text.len();
                    let candidate = Found {
                        start: pos - len,
                        len,
                        index: stop.index,
                    };
                    let better = match self.found {
                        None => true,
                        Some(f) => (candidate.start, candidate.len) < (f.start, f.len),
                    };
                    if better {
                        self.found = Some(candidate);
                    }
                }
            }
            if let Some(found) = self.found {
                if open_start(&self.stops, pos) >= found.start {
                    return self.stop(found, out);
                }
            }
        }
        // Everything before the earliest open partial match is safe. It starts with the
        // first byte of a stop string, so it is a character boundary.
        let safe = open_start(&self.stops, self.held.len());
        let safe = floor_boundary(&self.held, safe);
        out.push_str(&self.held[..safe]);
        self.held.drain(..safe);
        if let Some(found) = &mut self.found {
            found.start -= safe;
        }
        Verdict::Continue
    }

    fn stop(&mut self, found: Found, out: &mut String) -> Verdict {
        let end = if self.visible {
            found.start + found.len
        } else {
            found.start
        };
        out.push_str(&self.held[..floor_boundary(&self.held, end)]);
        self.held = String::new();
        self.found = None;
        self.stopped = Some(found.index);
        Verdict::Stopped {
            stop_index: found.index,
        }
    }

    /// End of the stream: open partial matches can no longer complete, so a waiting
    /// complete match now wins, or else the held text is released. A push after `finish`
    /// starts matching afresh (no match spans a `finish`).
    pub fn finish(&mut self, out: &mut String) -> Verdict {
        if let Some(stop_index) = self.stopped {
            return Verdict::Stopped { stop_index };
        }
        for stop in &mut self.stops {
            stop.matched = 0;
        }
        if let Some(found) = self.found {
            return self.stop(found, out);
        }
        out.push_str(&self.held);
        self.held.clear();
        Verdict::Continue
    }
}

/// Where the earliest open partial match starts, for a stream whose held text is `len`
/// bytes long (`len` when none is open).
fn open_start(stops: &[Stop], len: usize) -> usize {
    let longest = stops.iter().map(|s| usize::from(s.matched)).max();
    len - longest.unwrap_or(0).min(len)
}

/// `at`, or the closest character boundary below it (always `at` in practice: matches and
/// partial matches start with the first byte of a valid UTF-8 string).
fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests;
