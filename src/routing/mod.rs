//! Worker selection policies.
//!
//! A policy declares what it needs from a request ([`Needs`]) so the handler knows whether
//! the body must be read at all; stateless policies need nothing and the body is forwarded
//! unread.

mod random;
mod round_robin;

use std::sync::Arc;

use crate::config::PolicyName;
use crate::workers::Worker;

pub use random::Random;
pub use round_robin::RoundRobin;

/// What a policy must see of a request before it can choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    Header,
    Model,
    PromptText,
}

/// What the handler extracted for the policy; empty for policies that need nothing.
#[derive(Debug, Default)]
pub struct RequestFacts<'a> {
    pub routing_key: Option<&'a str>,
    pub model: Option<&'a str>,
    pub text: Option<&'a str>,
}

/// A routing policy. Implementations are shared by every data-plane thread, so `select`
/// takes `&self` and keeps any state in atomics or per-thread storage.
pub trait Policy: Send + Sync {
    fn name(&self) -> &'static str;
    fn needs(&self) -> Needs;
    /// Picks one of `candidates` (all routable) or `None` when the slice is empty.
    fn select(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Option<usize>;
}

/// Builds the policy for a configured name. Policies that are not built yet fall back to
/// round robin; the caller logs that once at startup.
pub fn build(name: PolicyName) -> (Box<dyn Policy>, bool) {
    match name {
        PolicyName::Random => (Box::new(Random), true),
        PolicyName::RoundRobin => (Box::new(RoundRobin::default()), true),
        _ => (Box::new(RoundRobin::default()), false),
    }
}
