//! The fuzz targets' checks, one module a target, each a `check(data)` that panics on a
//! finding. The cargo-fuzz targets in `fuzz/fuzz_targets/` include one module each; the stable
//! test `tests/fuzz_regressions.rs` includes this file to replay committed inputs.

pub mod bpe_parity;
pub mod cache_tree;
pub mod chat_template;
pub mod conversation_body;
pub mod detokenize_stops;
pub mod dp_pin;
pub mod flags;
pub mod grpc_request;
pub mod h1_framing;
pub mod h1_response;
pub mod json_peek;
pub mod jwt_claims;
pub mod messages_validate;
pub mod pd_body;
pub mod pieces;
pub mod plain_h1;
pub mod prom_text;
pub mod provider_message;
pub mod reads;
pub mod reasoning_parsers;
pub mod responses_upstream;
pub mod responses_validate;
pub mod route_match;
pub mod sse;
pub mod tool_parsers;
pub mod worker_spec;
pub mod zmq_wire;

/// The check of the target named `name` (a `[[bin]]` of `fuzz/Cargo.toml`).
pub fn by_target(name: &str) -> Option<fn(&[u8])> {
    Some(match name {
        "bpe_parity" => bpe_parity::check,
        "cache_tree" => cache_tree::check,
        "chat_template" => chat_template::check,
        "conversation_body" => conversation_body::check,
        "detokenize_stops" => detokenize_stops::check,
        "dp_pin" => dp_pin::check,
        "flags" => flags::check,
        "grpc_request" => grpc_request::check,
        "h1_framing" => h1_framing::check,
        "h1_response" => h1_response::check,
        "json_peek" => json_peek::check,
        "jwt_claims" => jwt_claims::check,
        "messages_validate" => messages_validate::check,
        "pd_body" => pd_body::check,
        "plain_h1" => plain_h1::check,
        "prom_text" => prom_text::check,
        "provider_message" => provider_message::check,
        "reasoning_parsers" => reasoning_parsers::check,
        "responses_upstream" => responses_upstream::check,
        "responses_validate" => responses_validate::check,
        "route_match" => route_match::check,
        "sse" => sse::check,
        "tool_parsers" => tool_parsers::check,
        "worker_spec" => worker_spec::check,
        "zmq_wire" => zmq_wire::check,
        _ => return None,
    })
}
