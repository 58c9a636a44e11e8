//! A worker's HTTP/1.1 response through the gateway's own client parsers: the head parser
//! never panics, gives the same head however the bytes arrive, and reads a final head as
//! httparse itself does (its own plain path takes the common shape without httparse, so
//! the two are compared field by field); the chunked framing
//! check gives the same payload, end and verdict for every split of the body, and never
//! hands out more payload than the body carried. The first byte seeds the read sizes and
//! picks the request method (HEAD changes the framing); the rest is the response.

use bytes::BytesMut;
use http::Method;
use tollgate::http::h1::chunked::{decode_split, ChunkError};
use tollgate::http::h1::head::{parse_response, HeadError, RespFraming, ResponseHead};

type Parsed = Result<Option<(u16, usize, RespFraming, bool)>, HeadError>;

fn summary(parsed: Result<Option<ResponseHead>, HeadError>) -> Parsed {
    parsed.map(|head| head.map(|h| (h.status.as_u16(), h.headers.len(), h.framing, h.reusable)))
}

/// Parses the head as a client would, growing the buffer read by read, until a verdict.
fn incremental(reads: &[&[u8]], method: &Method) -> Parsed {
    let mut buf = BytesMut::new();
    let mut last = Ok(None);
    for read in reads {
        buf.extend_from_slice(read);
        last = summary(parse_response(&mut buf, method));
        if !matches!(last, Ok(None)) {
            break;
        }
    }
    last
}

/// The gateway's head against httparse's reading of the same bytes: httparse reads a
/// complete head at the front too, and unless that one is interim (1xx, which the gateway
/// skips), the same length and the same fields.
fn agrees_with_httparse(stream: &[u8], head: &ResponseHead, rest: &[u8]) {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(len)) = parsed.parse(stream) else {
        panic!("a head httparse does not read whole");
    };
    if parsed.code.is_some_and(|code| code < 200) {
        return;
    }
    assert_eq!(rest, &stream[len..], "head length");
    let mut theirs: Vec<(Vec<u8>, Vec<u8>)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase().into_bytes(), h.value.to_vec()))
        .collect();
    let mut ours: Vec<(Vec<u8>, Vec<u8>)> = head
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect();
    theirs.sort();
    ours.sort();
    assert_eq!(ours, theirs, "fields");
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let method = if seed & 1 == 0 {
        Method::POST
    } else {
        Method::HEAD
    };

    let mut whole_buf = BytesMut::from(stream);
    let parsed = parse_response(&mut whole_buf, &method);
    if let Ok(Some(head)) = &parsed {
        agrees_with_httparse(stream, head, &whole_buf);
    }
    let whole = summary(parsed);
    let reads = super::reads::random_reads(seed, stream);
    let split = incremental(&reads, &method);
    // A head complete in the whole input may still be incomplete after a prefix the reads
    // stopped at; every verdict reached must agree with the whole one.
    if let (Ok(Some(_)) | Err(_), Ok(Some(_)) | Err(_)) = (&whole, &split) {
        assert_eq!(split, whole, "split reads");
    }

    // The rest after a chunked head, or the whole input as a chunked body.
    let body: &[u8] = match &whole {
        Ok(Some((_, _, RespFraming::Chunked, _))) => &whole_buf,
        _ => stream,
    };
    let (payload, done, verdict) = decode_split(body, &[body.len().max(1)]);
    assert!(payload.len() <= body.len());
    if done {
        assert!(matches!(verdict, None | Some(ChunkError::AfterEnd)));
    }
    let sizes: Vec<usize> = super::reads::random_reads(seed, body)
        .iter()
        .map(|read| read.len())
        .collect();
    assert_eq!(
        decode_split(body, &sizes),
        (payload.clone(), done, verdict),
        "split reads"
    );
    assert_eq!(
        decode_split(body, &[1]),
        (payload, done, verdict),
        "byte at a time"
    );
}
