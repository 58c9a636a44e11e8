//! Registration of ZMQ workers (`ipc://`, spec 1): the gateway binds the worker's sockets
//! and waits for its engine ranks to dial in; nothing is asked of an engine, which may not
//! have started yet. What a gRPC engine would report comes from the worker's spec and the
//! gateway's flags instead: the model id (required) and the tokenizer. The worker is
//! `not_ready` until a rank has completed its handshake, and follows its ranks from then
//! on (health checks do not apply: the link itself sees a rank come and go).

use std::sync::Arc;

use crate::engine::grpc::service::ModelInfo;
use crate::engine::zmq::link::{Link, LinkSettings};
use crate::engine::zmq::{Engine, Protocol, Vocabulary};
use crate::fleet::spec::WorkerSpec;
use crate::fleet::{Discovered, LanguageRef, LinkRef, ParsersRef, RuntimeType, Transport};

use super::grpc::parsers;
use super::Control;

/// The ports default handshake addresses are drawn from (spec 1).
const HANDSHAKE_PORTS: std::ops::RangeInclusive<u16> = 20000..=29999;

/// Binds a ZMQ worker's link and loads its tokenizer. Fails when the worker has no model
/// id or tokenizer, or its handshake address is taken (by another ZMQ worker, say).
pub async fn discover(control: &Control, spec: &WorkerSpec) -> Result<Discovered, String> {
    let Transport::Zmq { path } = &spec.url.transport else {
        return Err("not a ZMQ worker".into());
    };
    let flags = &control.settings.language;
    let model = spec
        .models
        .first()
        .map(|card| card.id.clone())
        .or_else(|| spec.model_id().map(str::to_owned))
        .or_else(|| flags.model_path.as_ref().map(|p| p.display().to_string()))
        .filter(|id| !id.is_empty())
        .ok_or(
            "a ZMQ worker needs a model id: give it models, a model label (served_model_name, \
             model_id or model_path), or start the gateway with --model-path",
        )?;
    let language = control
        .grpc
        .named_language(spec, &ModelInfo::default(), flags, &model)
        .await?
        .ok_or(
            "no tokenizer for this ZMQ worker: give it a tokenizer_path or model_path label, \
             start the gateway with --model-path or --tokenizer-path, or register a \
             tokenizer named after the model through /v1/tokenizers",
        )?;
    let parsers = parsers(spec, flags, Some(&model))?;
    let runtime = spec.effective_runtime();
    let handshake = spec
        .zmq_handshake_address
        .clone()
        .unwrap_or_else(|| default_handshake(path));
    let dp_size = spec.dp_size.unwrap_or(1);
    let dp_size = u16::try_from(dp_size)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("dp_size {dp_size} is out of range for a ZMQ worker"))?;
    let link = Link::bind(LinkSettings {
        handshake,
        path: path.clone(),
        dp_size,
        protocol: match runtime {
            RuntimeType::Tokenspeed => Protocol::Tokenspeed,
            _ => Protocol::Vllm,
        },
        worker: spec.url.normalized.clone(),
    })?;
    let vocabulary = Vocabulary {
        size: u32::try_from(language.tokenizer.get_vocab_size(true)).unwrap_or(u32::MAX),
        eos_ids: Arc::from(language.eos_ids.as_slice()),
        tokenizer: Some(language.tokenizer.clone()),
    };
    Ok(Discovered {
        runtime,
        models: vec![model],
        language: Some(LanguageRef(language)),
        parsers: Some(ParsersRef(Arc::new(parsers))),
        zmq: Some(LinkRef(Engine::new(link, vocabulary))),
        ..Discovered::default()
    })
}

/// Spec 1's default handshake address: `tcp://127.0.0.1:<port>`, the port drawn from
/// 20000–29999 by the `ipc://` path (FNV-1a), so an engine can be pointed at it before
/// the worker registers.
pub fn default_handshake(path: &str) -> String {
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let span = u64::from(HANDSHAKE_PORTS.end() - HANDSHAKE_PORTS.start()) + 1;
    let port = u64::from(*HANDSHAKE_PORTS.start()) + hash % span;
    format!("tcp://127.0.0.1:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_handshake_ports_are_in_range_and_stable() {
        let a = default_handshake("/tmp/engine.sock");
        assert_eq!(a, default_handshake("/tmp/engine.sock"));
        for path in ["/tmp/engine.sock", "/a", "", "/var/run/vllm/rank-set-7"] {
            let addr = default_handshake(path);
            let port: u16 = addr
                .strip_prefix("tcp://127.0.0.1:")
                .unwrap()
                .parse()
                .unwrap();
            assert!(HANDSHAKE_PORTS.contains(&port), "{addr}");
        }
        assert_ne!(default_handshake("/tmp/a"), default_handshake("/tmp/b"));
    }
}
