//! Refuses HTTP/1.1 requests that carry both `Content-Length` and `Transfer-Encoding`.
//!
//! hyper tolerates that combination (it drops Content-Length and closes afterwards), but
//! a gateway in front of other HTTP parsers must not: it is the classic request-smuggling
//! shape. hyper never shows the handler the dropped header, so the connection's IO adapter
//! feeds every byte read from the client through [`H1Framing`] and, on a conflict, withholds
//! the offending head from hyper, writes a `400` itself and ends the connection.

use super::h1_framing::{H1Framing, Phase, Verdict};

/// The whole answer to a conflicting request; the connection closes after it.
pub const CONFLICT_REPLY: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// One connection's guard against request smuggling: the framing it has seen, and the
/// refusal it is writing once a request's framing conflicts.
#[derive(Default)]
pub struct SmugglingGuard {
    framing: H1Framing,
    /// `Some(n)`: rejecting; `n` bytes of [`CONFLICT_REPLY`] written so far.
    rejecting: Option<usize>,
}

impl SmugglingGuard {
    /// Inspects bytes just read from the client. Returns `false` when they must not reach
    /// hyper; the caller then writes the rest of [`SmugglingGuard::pending_reply`].
    pub fn admit(&mut self, bytes: &[u8]) -> bool {
        if self.rejecting.is_some() {
            return false;
        }
        match self.framing.feed(bytes) {
            Verdict::Continue | Verdict::Disengaged => true,
            Verdict::Conflict => {
                tracing::debug!("request with both Content-Length and Transfer-Encoding refused");
                self.rejecting = Some(0);
                false
            }
        }
    }

    /// Where the stream stands for the connection's timers (see [`Phase`]).
    pub fn phase(&self) -> Phase {
        self.framing.phase()
    }

    pub fn is_rejecting(&self) -> bool {
        self.rejecting.is_some()
    }

    /// What is left to write of the 400 reply (empty once it is all out).
    pub fn pending_reply(&self) -> &'static [u8] {
        let sent = self.rejecting.unwrap_or(CONFLICT_REPLY.len());
        CONFLICT_REPLY.get(sent..).unwrap_or_default()
    }

    pub fn reply_written(&mut self, n: usize) {
        if let Some(sent) = self.rejecting.as_mut() {
            *sent += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withholds_conflicting_heads_and_replies() {
        let mut s = SmugglingGuard::default();
        assert!(s.admit(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi"));
        assert!(!s
            .admit(b"POST /a HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"));
        assert!(s.is_rejecting());
        assert_eq!(s.pending_reply(), CONFLICT_REPLY);
        s.reply_written(10);
        assert_eq!(s.pending_reply(), &CONFLICT_REPLY[10..]);
        s.reply_written(CONFLICT_REPLY.len() - 10);
        assert!(s.pending_reply().is_empty());
        assert!(!s.admit(b"more"));
    }
}
