//! A client's request body as the server hands it to the handler: streamed by hyper (h2,
//! and HTTP/1.1 requests the gateway leaves to hyper), or already whole, split off the
//! bytes the connection read with the head (plain HTTP/1.1 requests the server answers
//! itself, `server::plain_h1`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

#[derive(Debug)]
pub enum RequestBody {
    Hyper(Incoming),
    /// The whole body; `None` once handed out (or when there was none).
    Whole(Option<Bytes>),
}

impl RequestBody {
    /// A body that arrived whole with its head; an empty one is no frame at all.
    pub fn whole(bytes: Bytes) -> RequestBody {
        RequestBody::Whole((!bytes.is_empty()).then_some(bytes))
    }
}

impl From<Incoming> for RequestBody {
    fn from(body: Incoming) -> RequestBody {
        RequestBody::Hyper(body)
    }
}

/// A whole body never fails: only hyper's stream has errors to give.
impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Hyper(body) => Pin::new(body).poll_frame(cx),
            RequestBody::Whole(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(body) => body.is_end_stream(),
            RequestBody::Whole(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(body) => body.size_hint(),
            RequestBody::Whole(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_whole_body_is_one_frame_of_exact_size_then_the_end() {
        let body = RequestBody::whole(Bytes::from_static(b"{\"a\":1}"));
        assert_eq!(body.size_hint().exact(), Some(7));
        assert!(!body.is_end_stream());
        let got = body.collect().await.expect("a whole body never fails");
        assert_eq!(got.to_bytes(), Bytes::from_static(b"{\"a\":1}"));
        let empty = RequestBody::whole(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }
}
