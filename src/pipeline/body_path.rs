//! Whether a request body is read before dispatch or streamed through unread.
//!
//! Reading costs memory and the time until the last byte arrives, so the body is read
//! only when something needs it: routing that looks inside (the model under
//! `--enable-igw`, the prompt text for prefix policies), or a retry that must replay it.
//! The decision and its reason are the labels of `gw_router_request_body_path_total`
//! (spec 3).
//!
//! How much is held depends on why ([`Inputs::hold_limit`]):
//! - The model under `--enable-igw`, the `--dp-aware` rewrite, the media budget and the
//!   checks of a Responses request need the whole body (a cut-off JSON body names no model and cannot be rewritten): it is
//!   read up to `--max-payload-size`, and refused with 503 `request_buffer_budget_full`
//!   when the gateway-wide budget cannot hold it.
//! - Everything else (replay on retry, the prompt text of prefix policies, a `rid` routing
//!   key) is an optimisation: at most `--max-buffered-request-bytes` is held, whether or
//!   not the client declared a length. A body that turns out longer (a chunked upload), or
//!   that finds the budget full, streams on (the held prefix, then the rest), is not
//!   retried, and is routed without the text or key (the policy's fallback). The
//!   decision is counted once the read has ended, so the label says what happened:
//!   `streamed`/`retry_forfeited` past the limit, `streamed`/`buffer_budget_full` past
//!   the budget.

/// Why a body is read whole before dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferReason {
    /// The regular workers are gRPC engines: the gateway's own chat pipeline reads the
    /// whole request (spec 3's router family name, `grpc`).
    Grpc,
    /// Prefill/decode dispatch (spec 3's router family name, `pd`): the pair's bodies are
    /// made from the whole request (bootstrap fields, vLLM's two legs).
    Pd,
    /// Several models behind the gateway: the body names the model.
    ModelSelection,
    /// The routing policy needs the prompt text.
    PolicyNeedsText,
    /// The routing key may come from the body's `rid`.
    RoutingKeyOverride,
    /// The gateway rewrites the body for the chosen worker (`--dp-aware` sets
    /// `data_parallel_rank`), so it must hold it.
    WorkerMutatesBody,
    /// Kept for replay on retry (within `--max-buffered-request-bytes`).
    Retryable,
    /// Retries are on and the size is unknown until the body has arrived.
    NoContentLength,
    /// `--multimodal-max-inflight-bytes`: the body is looked at for media parts. (Not a
    /// reason spec 3 lists: its gateway has no media budget on the HTTP router.)
    MultimodalBudget,
    /// The gateway checks the request before routing, whatever the backend (spec 2: a
    /// `/v1/responses` body breaking a rule gets its 400 before reaching a worker). (Not a
    /// reason spec 3 lists: its gateway reads Responses bodies outside this decision.)
    Validation,
}

/// Why a body streams through unread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamReason {
    /// Larger than `--max-buffered-request-bytes`: sent once, not retried.
    RetryForfeited,
    /// Retries are off and nothing needs the body.
    PureForward,
    /// `--max-buffered-request-total-bytes` was reached while the body was read: sent on
    /// as it arrives, not retried. (Not a reason spec 3 lists: its gateway has no such
    /// budget.)
    BudgetFull,
}

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPath {
    Buffered(BufferReason),
    Streamed(StreamReason),
}

impl BodyPath {
    /// The metric's `path` label.
    pub fn path(self) -> &'static str {
        match self {
            BodyPath::Buffered(_) => "buffered",
            BodyPath::Streamed(_) => "streamed",
        }
    }

    /// The metric's `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            BodyPath::Buffered(BufferReason::Grpc) => "grpc",
            BodyPath::Buffered(BufferReason::Pd) => "pd",
            BodyPath::Buffered(BufferReason::ModelSelection) => "model_selection",
            BodyPath::Buffered(BufferReason::PolicyNeedsText) => "policy_needs_text",
            BodyPath::Buffered(BufferReason::RoutingKeyOverride) => "routing_key_override",
            BodyPath::Buffered(BufferReason::WorkerMutatesBody) => "worker_mutates_body",
            BodyPath::Buffered(BufferReason::Retryable) => "retryable",
            BodyPath::Buffered(BufferReason::NoContentLength) => "no_content_length",
            BodyPath::Buffered(BufferReason::MultimodalBudget) => "multimodal_budget",
            BodyPath::Buffered(BufferReason::Validation) => "validation",
            BodyPath::Streamed(StreamReason::RetryForfeited) => "retry_forfeited",
            BodyPath::Streamed(StreamReason::PureForward) => "pure_forward",
            BodyPath::Streamed(StreamReason::BudgetFull) => "buffer_budget_full",
        }
    }

    /// How many decisions there are (the metric's label pairs).
    pub const COUNT: usize = 13;

    /// A dense index in `0..COUNT`, for pre-resolved metric handles.
    pub fn index(self) -> usize {
        match self {
            BodyPath::Buffered(BufferReason::ModelSelection) => 0,
            BodyPath::Buffered(BufferReason::PolicyNeedsText) => 1,
            BodyPath::Buffered(BufferReason::RoutingKeyOverride) => 2,
            BodyPath::Buffered(BufferReason::Retryable) => 3,
            BodyPath::Buffered(BufferReason::NoContentLength) => 4,
            BodyPath::Buffered(BufferReason::MultimodalBudget) => 5,
            BodyPath::Streamed(StreamReason::RetryForfeited) => 6,
            BodyPath::Streamed(StreamReason::PureForward) => 7,
            BodyPath::Buffered(BufferReason::WorkerMutatesBody) => 8,
            BodyPath::Streamed(StreamReason::BudgetFull) => 9,
            BodyPath::Buffered(BufferReason::Grpc) => 10,
            BodyPath::Buffered(BufferReason::Pd) => 11,
            BodyPath::Buffered(BufferReason::Validation) => 12,
        }
    }

    pub fn is_buffered(self) -> bool {
        matches!(self, BodyPath::Buffered(_))
    }
}

/// What the decision depends on.
#[derive(Clone, Copy, Debug)]
pub struct Inputs {
    /// `--enable-igw` on a JSON route.
    pub needs_model: bool,
    /// The policy reads the prompt text.
    pub needs_text: bool,
    /// The policy's routing key may come from the body and the request carries no header.
    pub needs_rid: bool,
    /// The chosen worker may need the body rewritten (`--dp-aware` on a JSON route).
    pub mutates_body: bool,
    /// A media budget is set and the route carries JSON.
    pub needs_media: bool,
    /// Every regular worker is a gRPC engine and the route carries JSON: the gateway
    /// parses, renders and tokenizes the request itself.
    pub grpc: bool,
    /// Prefill/decode dispatch: the pair's bodies are made from the whole request.
    pub pd: bool,
    /// The route's body is checked before routing (`/v1/responses`).
    pub validates: bool,
    pub retries: bool,
    /// The client's `Content-Length`, if it sent one.
    pub declared_len: Option<u64>,
    pub max_buffered: u64,
}

impl Inputs {
    /// Whether correctness needs the whole body (see the module docs).
    fn must_hold_whole(&self) -> bool {
        self.needs_model
            || self.mutates_body
            || self.needs_media
            || self.grpc
            || self.pd
            || self.validates
    }

    /// The most a buffered body may hold before it streams on instead; `None` when it
    /// must be held whole (within `--max-payload-size`).
    pub fn hold_limit(&self) -> Option<u64> {
        (!self.must_hold_whole()).then_some(self.max_buffered)
    }
}

/// Decides the body path: routing needs first, then retries.
pub fn decide(inputs: Inputs) -> BodyPath {
    let too_long = inputs
        .declared_len
        .is_some_and(|len| len > inputs.max_buffered);
    if too_long && !inputs.must_hold_whole() {
        return if inputs.retries || inputs.needs_text || inputs.needs_rid {
            BodyPath::Streamed(StreamReason::RetryForfeited)
        } else {
            BodyPath::Streamed(StreamReason::PureForward)
        };
    }
    if inputs.grpc {
        return BodyPath::Buffered(BufferReason::Grpc);
    }
    if inputs.pd {
        return BodyPath::Buffered(BufferReason::Pd);
    }
    if inputs.needs_model {
        return BodyPath::Buffered(BufferReason::ModelSelection);
    }
    if inputs.needs_text {
        return BodyPath::Buffered(BufferReason::PolicyNeedsText);
    }
    if inputs.needs_rid {
        return BodyPath::Buffered(BufferReason::RoutingKeyOverride);
    }
    if inputs.mutates_body {
        return BodyPath::Buffered(BufferReason::WorkerMutatesBody);
    }
    if inputs.needs_media {
        return BodyPath::Buffered(BufferReason::MultimodalBudget);
    }
    if inputs.validates {
        return BodyPath::Buffered(BufferReason::Validation);
    }
    if !inputs.retries {
        return BodyPath::Streamed(StreamReason::PureForward);
    }
    match inputs.declared_len {
        None => BodyPath::Buffered(BufferReason::NoContentLength),
        Some(len) if len <= inputs.max_buffered => BodyPath::Buffered(BufferReason::Retryable),
        Some(_) => BodyPath::Streamed(StreamReason::RetryForfeited),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            needs_model: false,
            needs_text: false,
            needs_rid: false,
            mutates_body: false,
            needs_media: false,
            grpc: false,
            pd: false,
            validates: false,
            retries: true,
            declared_len: Some(100),
            max_buffered: 1000,
        }
    }

    fn labels(p: BodyPath) -> (&'static str, &'static str) {
        (p.path(), p.reason())
    }

    #[test]
    fn routing_needs_come_before_retries() {
        let grpc = Inputs {
            grpc: true,
            needs_model: true,
            retries: false,
            declared_len: Some(u64::MAX),
            ..inputs()
        };
        assert_eq!(labels(decide(grpc)), ("buffered", "grpc"));
        assert_eq!(
            grpc.hold_limit(),
            None,
            "the gRPC pipeline needs the whole body"
        );
        let all = Inputs {
            needs_model: true,
            needs_text: true,
            needs_rid: true,
            mutates_body: true,
            needs_media: true,
            retries: false,
            declared_len: Some(u64::MAX),
            ..inputs()
        };
        assert_eq!(labels(decide(all)), ("buffered", "model_selection"));
        let text = Inputs {
            needs_model: false,
            ..all
        };
        assert_eq!(labels(decide(text)), ("buffered", "policy_needs_text"));
        let rid = Inputs {
            needs_text: false,
            ..text
        };
        assert_eq!(labels(decide(rid)), ("buffered", "routing_key_override"));
        let mutates = Inputs {
            needs_rid: false,
            ..rid
        };
        assert_eq!(labels(decide(mutates)), ("buffered", "worker_mutates_body"));
        let media = Inputs {
            mutates_body: false,
            ..mutates
        };
        assert_eq!(labels(decide(media)), ("buffered", "multimodal_budget"));
        let validates = Inputs {
            needs_media: false,
            validates: true,
            ..media
        };
        assert_eq!(labels(decide(validates)), ("buffered", "validation"));
        assert_eq!(validates.hold_limit(), None, "a checked body is held whole");
    }

    #[test]
    fn every_decision_has_its_own_index() {
        let all = [
            BodyPath::Buffered(BufferReason::Grpc),
            BodyPath::Buffered(BufferReason::ModelSelection),
            BodyPath::Buffered(BufferReason::PolicyNeedsText),
            BodyPath::Buffered(BufferReason::RoutingKeyOverride),
            BodyPath::Buffered(BufferReason::Retryable),
            BodyPath::Buffered(BufferReason::NoContentLength),
            BodyPath::Buffered(BufferReason::MultimodalBudget),
            BodyPath::Streamed(StreamReason::RetryForfeited),
            BodyPath::Streamed(StreamReason::PureForward),
            BodyPath::Buffered(BufferReason::WorkerMutatesBody),
            BodyPath::Streamed(StreamReason::BudgetFull),
            BodyPath::Buffered(BufferReason::Pd),
            BodyPath::Buffered(BufferReason::Validation),
        ];
        let mut seen: Vec<usize> = all.iter().map(|p| p.index()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..BodyPath::COUNT).collect::<Vec<_>>());
    }

    #[test]
    fn retries_buffer_within_the_limit_only() {
        assert_eq!(labels(decide(inputs())), ("buffered", "retryable"));
        let at_limit = Inputs {
            declared_len: Some(1000),
            ..inputs()
        };
        assert_eq!(labels(decide(at_limit)), ("buffered", "retryable"));
        let over = Inputs {
            declared_len: Some(1001),
            ..inputs()
        };
        assert_eq!(labels(decide(over)), ("streamed", "retry_forfeited"));
        let chunked = Inputs {
            declared_len: None,
            ..inputs()
        };
        assert_eq!(labels(decide(chunked)), ("buffered", "no_content_length"));
        let off = Inputs {
            retries: false,
            ..inputs()
        };
        assert_eq!(labels(decide(off)), ("streamed", "pure_forward"));
        assert!(!decide(off).is_buffered());
    }

    #[test]
    fn only_correctness_holds_a_long_body_whole() {
        let long = Inputs {
            declared_len: Some(1001),
            ..inputs()
        };
        for optional in [
            Inputs {
                needs_text: true,
                ..long
            },
            Inputs {
                needs_rid: true,
                retries: false,
                ..long
            },
        ] {
            assert_eq!(labels(decide(optional)), ("streamed", "retry_forfeited"));
            assert_eq!(optional.hold_limit(), Some(1000));
        }
        for needed in [
            Inputs {
                needs_model: true,
                ..long
            },
            Inputs {
                mutates_body: true,
                needs_text: true,
                ..long
            },
            Inputs {
                needs_media: true,
                ..long
            },
        ] {
            assert!(decide(needed).is_buffered());
            assert_eq!(needed.hold_limit(), None);
        }
    }

    #[test]
    fn prefill_decode_holds_the_whole_body() {
        let pd = Inputs {
            pd: true,
            retries: false,
            declared_len: Some(u64::MAX),
            ..inputs()
        };
        assert_eq!(labels(decide(pd)), ("buffered", "pd"));
        assert_eq!(pd.hold_limit(), None);
        assert_eq!(
            BodyPath::Buffered(BufferReason::Validation).index(),
            BodyPath::COUNT - 1
        );
    }
}
