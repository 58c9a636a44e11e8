//! The routing policy's gauges, read at scrape time from the figures its last upkeep pass
//! left (spec 3: cache tree gauges refresh after each eviction pass).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::labels::{Label, Labels};
use crate::routing::{Policy, TreeGauge};

/// Model trees reported at most (the `model` label bound of spec 3).
const MAX_TREES: usize = 1024;

pub struct PolicyCollector {
    policy: Arc<dyn Policy>,
}

impl std::fmt::Debug for PolicyCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCollector")
            .field("policy", &self.policy.name())
            .finish()
    }
}

impl PolicyCollector {
    pub fn new(policy: Arc<dyn Policy>) -> PolicyCollector {
        PolicyCollector { policy }
    }
}

impl Collector for PolicyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges = self.policy.gauges();
        // The model-less tree is reported only once it holds something.
        let trees: Vec<_> = gauges
            .trees
            .iter()
            .filter(|t| t.model.is_some() || t.stats.chars > 0)
            .take(MAX_TREES)
            .collect();
        if !trees.is_empty() {
            let model = |t: &TreeGauge| match &t.model {
                Some(m) => Label::Shared(m.clone()),
                None => Label::Static("unknown"),
            };
            let mut chars = encoder.encode_descriptor(
                "gw_cache_tree_chars",
                "Characters in the string tree, summed across tenants",
                None,
                MetricType::Gauge,
            )?;
            for t in &trees {
                let labels: Labels<1> = [("model", model(t))];
                ConstGauge::new(t.stats.chars as i64).encode(chars.encode_family(&labels)?)?;
            }
            let mut tenants = encoder.encode_descriptor(
                "gw_cache_tree_tenants",
                "Tenants in each tree",
                None,
                MetricType::Gauge,
            )?;
            for t in &trees {
                let labels: Labels<2> = [("model", model(t)), ("tree", "string".into())];
                ConstGauge::new(t.stats.tenants as i64).encode(tenants.encode_family(&labels)?)?;
            }
        }
        if let Some(entries) = gauges.manual_entries {
            let metric = encoder.encode_descriptor(
                "gw_manual_policy_cache_entries",
                "Routing-key map entries",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(entries as i64).encode(metric)?;
        }
        Ok(())
    }
}
