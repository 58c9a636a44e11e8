//! The black-box suite, one test binary: every file beside this one is a module of it, so
//! the gateway's library and dependencies are linked once, not once per file (sixty test
//! binaries took 3.9 GB of disk, more than a CI machine had to spare).
//!
//! Each module starts the real `tollgate` binary and the bundled workers on 127.0.0.1 and
//! speaks real HTTP to them (`common`). Run one file's tests with its module path as the
//! filter: `cargo test --test integration edge::`.

mod common;
mod grpc_client;
mod oidc;
mod support;

/// The cargo-fuzz targets' checks, replayed on stable by `fuzz_regressions`.
#[path = "../fuzz/checks/mod.rs"]
mod checks;

mod admin_fanout;
mod admission;
mod adversarial;
mod auth;
mod bounds;
mod chat_template;
mod cli;
mod connections;
mod conversations;
mod dp_aware;
mod edge;
mod engine_load;
mod errors;
mod fuzz_regressions;
mod grpc;
mod grpc_admin;
mod grpc_choices;
mod grpc_engine;
mod grpc_hostile;
mod grpc_messages;
mod grpc_parsers;
mod grpc_pd;
mod grpc_responses;
mod grpc_services;
mod grpc_tls;
mod grpc_tokenizer_stream;
mod grpc_transcripts;
mod grpc_vllm;
mod headers;
mod history_hostile;
mod history_store;
mod http_pool;
mod http_semantics;
mod igw;
mod messages_http;
mod messages_provider;
mod metrics;
mod overload;
mod parse_routes;
mod pd_http;
mod plain_h1;
mod policies;
mod provider_responses;
mod providers;
mod relay_floor;
mod request_body;
mod resilience;
mod responses_durable;
mod responses_validation;
mod routes;
mod shutdown;
mod stream_hygiene;
mod streaming;
mod tls_listener;
mod tls_workers;
mod tokenizer_cache;
mod tokenizers;
mod upstream_h1;
mod worker_registration;
mod workers;
mod zmq;
