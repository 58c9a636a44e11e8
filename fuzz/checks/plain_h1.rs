//! The server's own HTTP/1.1 request parser never panics, and where it answers a request
//! itself, the smuggling guard's framing tracker (written apart from it, byte by byte)
//! agrees on where that request ends; a cut of it inside its head is still only a start,
//! and a cut inside its body is never answered here.
//! The whole input is the client's bytes.

use bytes::Bytes;
use http_body::Body;
use tollgate::server::h1_framing::{H1Framing, Phase, Verdict};
use tollgate::server::plain_h1::{parse, Parsed};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let buf = Bytes::copy_from_slice(data);
    let Parsed::Request { req, len, .. } = parse(&buf) else {
        return;
    };
    assert!(len <= data.len(), "a request past the bytes read");
    let declared = req.headers().get("content-length").map_or(0, |v| {
        v.to_str().expect("digits").parse::<u64>().expect("digits")
    });
    assert_eq!(
        req.body().size_hint().exact(),
        Some(declared),
        "body and its length"
    );

    let mut framing = H1Framing::new();
    assert_eq!(
        framing.feed(&data[..len]),
        Verdict::Continue,
        "the guard objects"
    );
    assert_eq!(
        framing.phase(),
        Phase::NoHead,
        "the guard sees the request unfinished"
    );

    match parse(&buf.slice(..len)) {
        Parsed::Request { len: alone, .. } => assert_eq!(alone, len, "alone"),
        other => panic!("the request alone is {other:?}"),
    }
    let step = (len / 256).max(1);
    for cut in (0..len).step_by(step).chain(len.checked_sub(1)) {
        match parse(&buf.slice(..cut)) {
            Parsed::Partial | Parsed::Hyper => {}
            Parsed::Request { .. } => panic!("{cut} of {len} bytes answered"),
        }
    }
}
