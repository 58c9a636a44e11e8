//! Overload protection: a worker whose engine reports too long a queue or too full a KV
//! cache leaves routing until a report shows it below both thresholds (spec 1 `overload`,
//! spec 3 `gw_workers_overloaded`, `gw_worker_overload_shed_total`).
//!
//! The verdict is taken once per load report, on the control runtime, and kept in one
//! atomic flag on the worker; selection only reads the flag.

use super::engine_load::EngineLoad;
use super::spec::OverloadOverrides;

/// The gateway-wide flags (`--worker-overload-*`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OverloadDefaults {
    /// `--worker-overload-protection`: on, with a KV usage threshold of 0.9 unless set.
    pub protection: bool,
    /// `--worker-overload-waiting-requests`.
    pub waiting_requests: Option<u64>,
    /// `--worker-overload-token-usage`.
    pub token_usage: Option<f64>,
}

/// KV usage threshold that `--worker-overload-protection` implies.
pub const DEFAULT_TOKEN_USAGE: f64 = 0.9;

impl OverloadDefaults {
    /// Whether the flags turn protection on for every worker (spec 3).
    pub fn on(&self) -> bool {
        self.protection || self.waiting_requests.is_some() || self.token_usage.is_some()
    }
}

/// One worker's thresholds; a worker without them is never flagged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Waiting requests summed across DP ranks at or above which the worker is overloaded.
    pub waiting_requests: Option<u64>,
    /// Mean KV usage across DP ranks at or above which the worker is overloaded.
    pub token_usage: Option<f64>,
}

impl Thresholds {
    /// The thresholds of a worker: its spec's `overload` block over the gateway flags;
    /// `None` when neither turns protection on.
    pub fn resolve(defaults: &OverloadDefaults, spec: &OverloadOverrides) -> Option<Thresholds> {
        if !defaults.on() && !spec.is_set() {
            return None;
        }
        let token_usage = defaults
            .token_usage
            .or(defaults.protection.then_some(DEFAULT_TOKEN_USAGE));
        Some(Thresholds {
            waiting_requests: spec.waiting_requests.or(defaults.waiting_requests),
            token_usage: spec.token_usage.or(token_usage),
        })
    }

    /// Whether `report` puts the worker at or over a threshold. A report without ranks
    /// says nothing, so it clears the flag.
    pub fn exceeded(&self, report: &EngineLoad) -> bool {
        if report.loads.is_empty() {
            return false;
        }
        let waiting: u64 = report.loads.iter().map(|r| r.num_waiting_reqs).sum();
        let usage =
            report.loads.iter().map(|r| r.token_usage).sum::<f64>() / report.loads.len() as f64;
        self.waiting_requests.is_some_and(|t| waiting >= t)
            || self.token_usage.is_some_and(|t| usage >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engine_load::{RankLoad, Source};

    fn report(ranks: &[(u64, f64)]) -> EngineLoad {
        EngineLoad {
            timestamp: String::new(),
            source: Source::LoadsApi,
            loads: ranks
                .iter()
                .enumerate()
                .map(|(i, &(waiting, usage))| RankLoad {
                    dp_rank: i as u32,
                    num_waiting_reqs: waiting,
                    token_usage: usage,
                    ..RankLoad::default()
                })
                .collect(),
        }
    }

    #[test]
    fn protection_turns_on_from_any_flag_or_the_spec() {
        let off = OverloadDefaults::default();
        let none = OverloadOverrides::default();
        assert_eq!(Thresholds::resolve(&off, &none), None);
        let on = OverloadDefaults {
            protection: true,
            ..off
        };
        assert_eq!(
            Thresholds::resolve(&on, &none),
            Some(Thresholds {
                waiting_requests: None,
                token_usage: Some(0.9)
            })
        );
        let waiting_only = OverloadDefaults {
            waiting_requests: Some(8),
            ..off
        };
        assert_eq!(
            Thresholds::resolve(&waiting_only, &none),
            Some(Thresholds {
                waiting_requests: Some(8),
                token_usage: None
            })
        );
        let spec = OverloadOverrides {
            waiting_requests: None,
            token_usage: Some(0.5),
        };
        assert_eq!(
            Thresholds::resolve(&waiting_only, &spec),
            Some(Thresholds {
                waiting_requests: Some(8),
                token_usage: Some(0.5)
            })
        );
        assert_eq!(
            Thresholds::resolve(&off, &spec),
            Some(Thresholds {
                waiting_requests: None,
                token_usage: Some(0.5)
            })
        );
    }

    #[test]
    fn waiting_sums_and_usage_averages_across_ranks() {
        let t = Thresholds {
            waiting_requests: Some(10),
            token_usage: Some(0.8),
        };
        assert!(!t.exceeded(&report(&[(4, 0.5), (5, 0.5)])));
        assert!(t.exceeded(&report(&[(4, 0.5), (6, 0.5)])));
        assert!(!t.exceeded(&report(&[(0, 0.9), (0, 0.69)])));
        assert!(t.exceeded(&report(&[(0, 0.9), (0, 0.7)])));
        assert!(!t.exceeded(&report(&[])));
        let usage_only = Thresholds {
            waiting_requests: None,
            token_usage: Some(0.8),
        };
        assert!(!usage_only.exceeded(&report(&[(1000, 0.1)])));
    }
}
