use super::*;

fn parse_str(text: &str) -> Parsed {
    parse(&Bytes::copy_from_slice(text.as_bytes()))
}

fn plain(text: &str) -> (Request<RequestBody>, usize, bool) {
    match parse_str(text) {
        Parsed::Request { req, len, close } => (req, len, close),
        other => panic!("not a plain request: {other:?}"),
    }
}

#[test]
fn a_plain_request_is_parsed_with_its_body_and_nothing_after_it() {
    let text = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}GET /next";
    let (req, len, close) = plain(text);
    assert_eq!(len, text.len() - "GET /next".len());
    assert!(!close);
    assert_eq!(req.method(), Method::POST);
    assert_eq!(req.uri().path(), "/v1/chat/completions");
    assert_eq!(req.uri().query(), Some("x=1"));
    assert_eq!(req.version(), http::Version::HTTP_11);
    assert_eq!(req.headers()["content-type"], "application/json");
    assert_eq!(req.headers()["content-length"], "7");
    assert_eq!(req.body().size_hint().exact(), Some(7));
}

#[test]
fn a_request_without_a_length_has_an_empty_body() {
    let (req, len, _) = plain("GET /health HTTP/1.1\r\n\r\n");
    assert_eq!(len, 24);
    assert!(req.body().is_end_stream());
}

#[test]
fn incomplete_heads_ask_for_more_until_the_cap_and_incomplete_bodies_go_to_hyper() {
    assert!(matches!(parse_str("GET /health HT"), Parsed::Partial));
    assert!(matches!(
        parse_str("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345"),
        Parsed::Hyper
    ));
    let big = format!("POST / HTTP/1.1\r\nContent-Length: {MAX_PLAIN}\r\n\r\n");
    assert!(
        matches!(parse_str(&big), Parsed::Hyper),
        "past the cap: hyper streams it"
    );
    let long_head = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_PLAIN));
    assert!(matches!(parse_str(&long_head), Parsed::Hyper));
}

#[test]
fn connection_close_is_honoured_and_other_options_go_to_hyper() {
    assert!(plain("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").2);
    assert!(!plain("GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n").2);
    assert!(plain("GET / HTTP/1.1\r\nConnection: keep-alive, CLOSE\r\n\r\n").2);
    assert!(matches!(
        parse_str("GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        Parsed::Hyper
    ));
}

#[test]
fn framings_and_forms_hyper_owns_go_to_hyper() {
    for text in [
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
        "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx",
        "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nTE: trailers\r\n\r\n",
        "HEAD / HTTP/1.1\r\n\r\n",
        "CONNECT a:443 HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET http://a/ HTTP/1.1\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nbad header\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
        "G\u{0}T / HTTP/1.1\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        assert!(matches!(parse_str(text), Parsed::Hyper), "{text:?}");
    }
    let many: String = (0..MAX_FIELDS + 1)
        .map(|i| format!("x-{i}: v\r\n"))
        .collect();
    let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert!(
        matches!(parse_str(&text), Parsed::Hyper),
        "hyper answers 431 past its limit"
    );
}

fn head_of(resp: Response<RespBody>, mut close: bool) -> (String, Framing) {
    let (parts, body) = resp.into_parts();
    let mut out = Vec::new();
    let framing = encode_head(&parts, body.size_hint().exact(), &mut close, &mut out);
    (String::from_utf8(out).expect("ascii"), framing)
}

#[test]
fn an_answer_head_carries_the_length_or_chunks_a_date_and_a_close_when_asked() {
    let mut resp = Response::new(RespBody::full(Bytes::from_static(b"hello")));
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    let (head, framing) = head_of(resp, false);
    assert_eq!(framing, Framing::Length(5));
    assert!(head
        .starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\ndate: "));
    assert!(head.ends_with(" GMT\r\n\r\n"), "{head}");
    assert!(!head.contains("connection"));

    let (_tx, body) = RespBody::generated(1);
    let (head, framing) = head_of(Response::new(body), true);
    assert_eq!(framing, Framing::Chunked);
    assert!(head.contains("transfer-encoding: chunked\r\n"));
    assert!(head.contains("connection: close\r\n"));

    let mut resp = Response::new(RespBody::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp.headers_mut()
        .insert("content-length", HeaderValue::from_static("0"));
    let (head, framing) = head_of(resp, false);
    assert_eq!(framing, Framing::None);
    assert!(head.starts_with("HTTP/1.1 204 No Content\r\n"));
    assert!(!head.contains("content-length"), "{head}");
}

#[test]
fn a_handlers_connection_close_closes_the_connection_and_is_written_once() {
    let mut resp = Response::new(RespBody::full(Bytes::from_static(b"bye")));
    resp.headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    let (parts, body) = resp.into_parts();
    let mut close = false;
    let mut out = Vec::new();
    encode_head(&parts, body.size_hint().exact(), &mut close, &mut out);
    let head = String::from_utf8(out).expect("ascii");
    assert!(close, "the handler's close closes the connection");
    assert_eq!(head.matches("connection: close").count(), 1, "{head}");
}

/// A client side that takes at most `chunk` bytes a write, so the vectored pieces are
/// split at every boundary.
struct Trickle {
    got: Vec<u8>,
    chunk: usize,
    /// Whether it takes vectored writes (else the pieces come copied together).
    vectored: bool,
    writes: usize,
}

impl Write for Trickle {
    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.chunk);
        self.got.extend_from_slice(&buf[..n]);
        self.writes += 1;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.vectored {
            // As hyper's default: the first piece only.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return self.poll_write(cx, first);
        }
        let mut n = 0;
        for buf in bufs {
            let take = buf.len().min(self.chunk - n);
            self.got.extend_from_slice(&buf[..take]);
            n += take;
        }
        self.writes += 1;
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn deliver(resp: Response<RespBody>, chunk: usize) -> (String, io::Result<()>) {
    let (wire, ended, _) = deliver_to(resp, chunk, true);
    (wire, ended)
}

/// The wire, the end, and the number of writes it took.
fn deliver_to(
    resp: Response<RespBody>,
    chunk: usize,
    vectored: bool,
) -> (String, io::Result<()>, usize) {
    let answer: Answer = Box::pin(async move { resp });
    let mut exchange = Exchange::new(answer, false, Guard::new(()));
    let mut io = Trickle {
        got: Vec::new(),
        chunk,
        vectored,
        writes: 0,
    };
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let ended = match exchange.poll(&mut io, &mut cx) {
        Poll::Ready(ended) => ended,
        Poll::Pending => panic!("a ready answer stalled"),
    };
    (String::from_utf8(io.got).expect("ascii"), ended, io.writes)
}

#[tokio::test]
async fn a_whole_answer_is_written_whole_through_short_writes() {
    for chunk in [1, 3, 7, 4096] {
        let (wire, ended) = deliver(
            Response::new(RespBody::full(Bytes::from_static(b"{\"ok\":true}"))),
            chunk,
        );
        ended.expect("delivered");
        assert!(wire.starts_with("HTTP/1.1 200 OK\r\ncontent-length: 11\r\n"));
        assert!(wire.ends_with("\r\n\r\n{\"ok\":true}"), "{wire}");
    }
}

#[tokio::test]
async fn a_stream_is_chunked_frame_by_frame_and_ended() {
    let (tx, body) = RespBody::generated(4);
    tx.send(Bytes::from_static(b"data: 1\n\n"))
        .await
        .expect("room");
    tx.send(Bytes::from_static(b"data: [DONE]\n\n"))
        .await
        .expect("room");
    tx.finish().await;
    let (wire, ended) = deliver(Response::new(body), 5);
    ended.expect("delivered");
    let body = wire.split_once("\r\n\r\n").expect("a head").1;
    assert_eq!(
        body,
        "9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    );
}

#[tokio::test]
async fn a_body_short_of_its_declared_length_closes_the_connection() {
    let (tx, body) = RespBody::generated(2);
    tx.send(Bytes::from_static(b"abc")).await.expect("room");
    tx.finish().await;
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert("content-length", HeaderValue::from_static("10"));
    let (wire, ended) = deliver(resp, 4096);
    assert!(ended.is_err(), "the connection must not be reused");
    assert!(wire.contains("content-length: 10\r\n"));
}

#[tokio::test]
async fn an_io_without_vectored_writes_gets_head_and_body_in_one_write() {
    let body = Bytes::from_static(b"{\"ok\":true}");
    let (wire, ended, writes) =
        deliver_to(Response::new(RespBody::full(body.clone())), 4096, false);
    ended.expect("delivered");
    assert_eq!(writes, 1, "{wire}");
    assert!(wire.ends_with("\r\n\r\n{\"ok\":true}"));
    let (vectored, ..) = deliver_to(Response::new(RespBody::full(body)), 4096, true);
    assert_eq!(
        wire.split_once("date").map(|p| p.0),
        vectored.split_once("date").map(|p| p.0)
    );
}

#[tokio::test]
async fn frames_ready_together_leave_in_one_write_and_a_large_one_as_it_came() {
    let (tx, body) = RespBody::generated(8);
    for _ in 0..5 {
        tx.send(Bytes::from_static(b"data: {}\n\n"))
            .await
            .expect("room");
    }
    tx.finish().await;
    let (wire, ended, writes) = deliver_to(Response::new(body), 1 << 20, true);
    ended.expect("delivered");
    assert_eq!(writes, 1, "{wire}");
    assert!(wire.ends_with("a\r\ndata: {}\n\n\r\n0\r\n\r\n"), "{wire}");

    let large = Bytes::from(vec![b'x'; 4 * COPY_MAX]);
    let (tx, body) = RespBody::generated(4);
    tx.send(large.clone()).await.expect("room");
    tx.finish().await;
    let (wire, ended, _) = deliver_to(Response::new(body), 1 << 20, true);
    ended.expect("delivered");
    let body = wire.split_once("\r\n\r\n").expect("a head").1;
    assert_eq!(
        body,
        format!("1000\r\n{}\r\n0\r\n\r\n", "x".repeat(4 * COPY_MAX))
    );
}
