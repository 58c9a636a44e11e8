//! A client connection's IO as hyper sees it, with two additions that let an idle HTTP/1.1
//! connection give its hyper state back and wait for its next request holding no buffer:
//!
//! * bytes read before hyper took over (the first bytes that decided the protocol, or
//!   what hyper had read but not parsed when it let go) are handed to hyper first;
//! * once a park is requested ([`ConnState::request_park`]) and everything hyper wrote
//!   has been flushed, a read reports end of stream and the shutdown that follows does
//!   nothing, so hyper, idle, ends its connection as if the client had left, without
//!   touching the socket; its parts are then taken back intact. Until the flush, reads go
//!   on as usual (hyper would count an end of stream while its response is still going
//!   out as a broken message), and bytes from the client call the park off.
//!
//! Waiting for the next request reads into one per-thread scratch buffer ([`poll_fill`]),
//! so a parked connection holds the socket and a few words, not a read buffer.
//!
//! [`poll_fill`]: Parkable::poll_fill

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

use super::h1_framing::H2_PREFACE;
use super::ConnState;

/// The per-thread buffer a waiting connection reads into: large enough for the head of
/// any ordinary request in one read (hyper reads the rest itself).
const SCRATCH_LEN: usize = 8 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_LEN].into_boxed_slice());
}

pub struct Parkable<I> {
    io: I,
    /// Read from the client, not yet handed to hyper.
    prefix: Bytes,
    state: Arc<ConnState>,
    /// hyper has written since its last completed flush.
    unflushed: bool,
    /// A read reported end of stream for the park.
    parked: bool,
}

impl<I: Read + Write + Unpin> Parkable<I> {
    pub fn new(io: I, state: Arc<ConnState>) -> Parkable<I> {
        Parkable {
            io,
            prefix: Bytes::new(),
            state,
            unflushed: false,
            parked: false,
        }
    }

    /// Whether hyper's end was the park's doing.
    pub fn parked(&self) -> bool {
        self.parked
    }

    /// Whether bytes wait to be handed to hyper.
    pub fn has_prefix(&self) -> bool {
        !self.prefix.is_empty()
    }

    /// The bytes read and not yet served.
    pub fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    /// Drops the first `n` waiting bytes: a request the server answered itself.
    pub fn consume(&mut self, n: usize) {
        self.prefix.advance(n.min(self.prefix.len()));
    }

    /// The bytes waiting start with the HTTP/2 preface.
    pub fn starts_h2(&self) -> bool {
        self.prefix.starts_with(H2_PREFACE)
    }

    /// The bytes waiting are a beginning of the HTTP/2 preface, too short to tell.
    pub fn partial_preface(&self) -> bool {
        self.prefix.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&self.prefix)
    }

    /// Takes back a parked connection from hyper: `unread` is what hyper had read and not
    /// used, to be handed to the next connection first; reads and shutdown act again.
    pub fn unpark(&mut self, unread: Bytes) {
        self.append(&unread);
        self.parked = false;
        self.state.request_park(false);
    }

    /// Reads what the client sends next into the waiting bytes, through the per-thread
    /// scratch buffer. With `preface`, keeps reading while the bytes could still be the
    /// start of the HTTP/2 preface. Resolves to `false` at end of stream.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>, preface: bool) -> Poll<io::Result<bool>> {
        loop {
            let read = SCRATCH.with_borrow_mut(|scratch| {
                let got = ready!(read_into(&mut self.io, cx, scratch))?;
                self.append(got);
                Poll::Ready(Ok::<_, io::Error>(got.len()))
            });
            if ready!(read)? == 0 {
                return Poll::Ready(Ok(false));
            }
            if !(preface && self.partial_preface()) {
                return Poll::Ready(Ok(true));
            }
        }
    }

    fn append(&mut self, more: &[u8]) {
        if more.is_empty() {
            return;
        }
        if self.prefix.is_empty() {
            self.prefix = Bytes::copy_from_slice(more);
        } else {
            let mut joined = BytesMut::with_capacity(self.prefix.len() + more.len());
            joined.extend_from_slice(&self.prefix);
            joined.extend_from_slice(more);
            self.prefix = joined.freeze();
        }
    }
}

/// One read from `io` into `scratch`; the bytes read.
fn read_into<'s, I: Read + Unpin>(
    io: &mut I,
    cx: &mut Context<'_>,
    scratch: &'s mut [u8],
) -> Poll<io::Result<&'s [u8]>> {
    let mut buf = ReadBuf::new(scratch);
    ready!(Pin::new(io).poll_read(cx, buf.unfilled()))?;
    let n = buf.filled().len();
    Poll::Ready(Ok(&scratch[..n]))
}

impl<I: Read + Unpin> Read for Parkable<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        if !this.state.park_requested() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        if !this.unflushed {
            this.parked = true;
            return Poll::Ready(Ok(()));
        }
        // A park waits for the flush; the client's bytes call it off (they are hyper's
        // next request). Read through the scratch buffer to see whether any came.
        SCRATCH.with_borrow_mut(|scratch| {
            let room = buf.remaining().min(scratch.len());
            let got = ready!(read_into(&mut this.io, cx, &mut scratch[..room]))?;
            if !got.is_empty() {
                this.state.request_park(false);
            }
            buf.put_slice(got);
            Poll::Ready(Ok(()))
        })
    }
}

impl<I: Write + Unpin> Write for Parkable<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.unflushed = true;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.unflushed = true;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// hyper flushes the IO only once its own buffer is written out, so a completed flush
    /// means every byte it wrote has left.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        if this.unflushed {
            this.unflushed = false;
            if this.state.park_requested() {
                // The park waited for this: hyper must read once more to see it.
                cx.waker().wake_by_ref();
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parked {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted client: hands out its pieces one read at a time, then end of stream.
    struct Script(Vec<&'static [u8]>);

    impl Read for Script {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            mut buf: ReadBufCursor<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(piece) = self.0.first_mut() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                *piece = &piece[n..];
                if piece.is_empty() {
                    self.0.remove(0);
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    impl Write for Script {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn fill(p: &mut Parkable<Script>, preface: bool) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match p.poll_fill(&mut cx, preface) {
            Poll::Ready(Ok(more)) => more,
            other => panic!("fill: {other:?}"),
        }
    }

    fn read_all(p: &mut Parkable<Script>) -> Vec<u8> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        loop {
            let mut raw = [0u8; 7];
            let mut buf = ReadBuf::new(&mut raw);
            match Pin::new(&mut *p).poll_read(&mut cx, buf.unfilled()) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return out,
                Poll::Ready(Ok(())) => out.extend_from_slice(buf.filled()),
                other => panic!("read: {other:?}"),
            }
        }
    }

    #[test]
    fn a_preface_split_across_reads_is_gathered_before_deciding() {
        let state = Arc::new(ConnState::default());
        let script = Script(vec![b"PRI * HT", b"TP/2.0\r\n\r\nS", b"M\r\n\r\nframes"]);
        let mut p = Parkable::new(script, state);
        assert!(fill(&mut p, true));
        assert!(p.starts_h2());
        assert_eq!(read_all(&mut p), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nframes");
    }

    #[test]
    fn http1_is_decided_on_the_first_byte_that_differs() {
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![b"P", b"OST / HTTP/1.1\r\n"]), state);
        // "P" alone could still be the preface: the second read decides.
        assert!(fill(&mut p, true));
        assert!(!p.partial_preface() && !p.starts_h2());
        assert_eq!(read_all(&mut p), b"POST / HTTP/1.1\r\n");
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![b"GET /"]), state);
        assert!(fill(&mut p, true));
        assert!(!p.starts_h2() && !p.partial_preface());
    }

    #[test]
    fn end_of_stream_while_waiting_is_reported() {
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![b"PRI"]), state);
        assert!(!fill(&mut p, true), "a partial preface then end of stream");
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![]), state);
        assert!(!fill(&mut p, false));
    }

    fn write_and_flush(p: &mut Parkable<Script>, flush: bool) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut *p)
            .poll_write(&mut cx, b"response")
            .is_ready());
        if flush {
            assert!(Pin::new(&mut *p).poll_flush(&mut cx).is_ready());
        }
    }

    #[test]
    fn a_park_reads_as_end_of_stream_once_flushed_and_unparking_hands_back_what_hyper_kept() {
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![b"next"]), state.clone());
        write_and_flush(&mut p, true);
        state.request_park(true);
        assert!(read_all(&mut p).is_empty(), "a park reads as end of stream");
        assert!(p.parked());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            Pin::new(&mut p).poll_shutdown(&mut cx),
            Poll::Ready(Ok(()))
        ));
        p.unpark(Bytes::from_static(b"GET / HT"));
        assert!(!state.park_requested() && !p.parked());
        assert!(p.has_prefix());
        assert_eq!(read_all(&mut p), b"GET / HTnext");
    }

    #[test]
    fn a_park_waits_for_the_flush_and_the_clients_bytes_call_it_off() {
        let state = Arc::new(ConnState::default());
        let mut p = Parkable::new(Script(vec![b"GET /", b" HTTP/1.1"]), state.clone());
        write_and_flush(&mut p, false);
        state.request_park(true);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut raw = [0u8; 64];
        let mut buf = ReadBuf::new(&mut raw);
        assert!(Pin::new(&mut p)
            .poll_read(&mut cx, buf.unfilled())
            .is_ready());
        assert_eq!(buf.filled(), b"GET /", "unflushed: the read goes on");
        assert!(
            !state.park_requested(),
            "the client's bytes called the park off"
        );
        assert!(!p.parked());
        // Flushed, no park asked: reads go on.
        write_and_flush(&mut p, true);
        assert_eq!(read_all(&mut p), b" HTTP/1.1");
        assert!(!p.parked());
    }
}
