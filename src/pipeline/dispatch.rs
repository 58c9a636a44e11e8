//! How one request is dispatched, decided once: from the flags (prefill/decode pairs,
//! a provider backend) and one read of the fleet snapshot (token engines, an encode stage).
//! The phases read this decision instead of deriving it again each from its own inputs.

use super::Pipeline;
use crate::http::route::Route;

/// Where a request goes and how it is carried, as far as every phase needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Dispatch {
    /// To a prefill/decode pair (`--pd-disaggregation` without `--enable-igw`), except
    /// count_tokens, which goes to one prefill worker.
    pub pairs: bool,
    /// To one prefill worker: count_tokens under prefill/decode.
    pub prefill_only: bool,
    /// The regular workers are all token engines: the gateway reads every JSON body whole
    /// to tokenize it.
    pub token_engines: bool,
    /// The fleet has an encode stage of gRPC engines (EPD).
    pub encode: bool,
    /// `--backend` names an external provider: HTTP workers are reached through it.
    pub provider: bool,
}

impl Pipeline {
    /// The dispatch of one request matched as `route`.
    pub(super) fn dispatch(&self, route: Route) -> Dispatch {
        let disaggregated = self.pd.is_some();
        let counting = route == Route::MessagesCountTokens;
        let shape = self.registry.shape();
        Dispatch {
            pairs: disaggregated && !counting,
            prefill_only: disaggregated && counting,
            token_engines: shape.all_grpc,
            encode: shape.grpc_encode,
            provider: self.modes.backend.is_provider(),
        }
    }
}
