//! A gRPC client for the black-box tests (`mod grpc_client;`): tonic's generated SGLang
//! scheduler client over hyper's HTTP/2 client (tonic is built without a transport).

#![allow(dead_code, unused_imports)]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tollgate::engine::grpc::sglang::sglang_scheduler_client::SglangSchedulerClient;

pub use tollgate::engine::grpc::sglang::generate_complete::MatchedStop;
pub use tollgate::engine::grpc::sglang::generate_response::Response;
pub use tollgate::engine::grpc::sglang::*;

/// One HTTP/2 connection as the tower service tonic's client calls.
#[derive(Clone)]
pub struct Channel(SendRequest<tonic::body::Body>);

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Channel {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

pub type Client = SglangSchedulerClient<Channel>;

/// A fresh h2c connection to `addr` and its origin, for any service's generated client.
pub async fn channel(addr: SocketAddr) -> (Channel, http::Uri) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the gRPC engine");
    // gRPC writes a request's HEADERS and DATA frames apart: without this, Nagle holds the
    // DATA back for the peer's delayed ACK (about 40 ms a call).
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(connection);
    let origin = format!("http://{addr}").parse().expect("origin");
    (Channel(sender), origin)
}

/// An SGLang client on a fresh h2c connection to `addr`.
pub async fn connect(addr: SocketAddr) -> Client {
    let (channel, origin) = channel(addr).await;
    SglangSchedulerClient::with_origin(channel, origin)
}

/// Greedy-ish SGLang sampling params with every numeric field set, as a gateway sends them.
pub fn params(max_new_tokens: Option<i32>) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        top_p: 1.0,
        top_k: -1,
        min_p: 0.0,
        repetition_penalty: 1.0,
        max_new_tokens,
        ..Default::default()
    }
}

pub fn request(
    id: &str,
    input_ids: &[u32],
    params: SamplingParams,
    stream: bool,
) -> GenerateRequest {
    GenerateRequest {
        request_id: id.to_string(),
        tokenized: Some(TokenizedInput {
            original_text: String::new(),
            input_ids: input_ids.to_vec(),
        }),
        sampling_params: Some(params),
        stream,
        ..Default::default()
    }
}

/// A whole generation: the chunks' ids and how it ended.
#[derive(Debug)]
pub struct Generation {
    pub chunks: Vec<GenerateStreamChunk>,
    pub end: End,
}

#[derive(Debug)]
pub enum End {
    Complete(GenerateComplete),
    Error(GenerateError),
    Status(tonic::Status),
}

impl Generation {
    /// Every id: a streamed generation's chunks' (its complete repeats the last chunk, as
    /// SGLang's servicer sends it), else the one complete's.
    pub fn ids(&self) -> Vec<u32> {
        if !self.chunks.is_empty() {
            return self
                .chunks
                .iter()
                .flat_map(|c| c.token_ids.clone())
                .collect();
        }
        match &self.end {
            End::Complete(done) => done.output_ids.clone(),
            _ => Vec::new(),
        }
    }

    pub fn complete(&self) -> &GenerateComplete {
        match &self.end {
            End::Complete(done) => done,
            other => panic!("expected a complete, got {other:?}"),
        }
    }
}

/// Runs one Generate to its end.
pub async fn generate(client: &mut Client, request: GenerateRequest) -> Generation {
    let mut stream = match client.generate(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return Generation {
                chunks: Vec::new(),
                end: End::Status(status),
            }
        }
    };
    let mut chunks = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(message)) => match message.response {
                Some(Response::Chunk(chunk)) => chunks.push(chunk),
                Some(Response::Complete(done)) => {
                    return Generation {
                        chunks,
                        end: End::Complete(done),
                    }
                }
                Some(Response::Error(error)) => {
                    return Generation {
                        chunks,
                        end: End::Error(error),
                    }
                }
                None => panic!("a response without a body"),
            },
            Ok(None) => panic!("the stream ended without a complete or an error"),
            Err(status) => {
                return Generation {
                    chunks,
                    end: End::Status(status),
                }
            }
        }
    }
}
