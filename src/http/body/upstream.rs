//! A worker's response body as the transports deliver it: from the gateway's own HTTP/1.1
//! client, or from hyper's (h2c and TLS workers).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::BoxError;
use crate::http::h1::H1Body;

#[derive(Debug)]
pub enum UpstreamBody {
    H1(H1Body),
    Hyper(Incoming),
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::H1(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            UpstreamBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(body) => body.is_end_stream(),
            UpstreamBody::Hyper(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1(body) => body.size_hint(),
            UpstreamBody::Hyper(body) => body.size_hint(),
        }
    }
}
