//! The tokenizer caches' families (spec 3), read at scrape time from the process-wide
//! counters the caches keep below this layer ([`crate::chat::encode_cache::counts`]). A
//! series appears once it has counted something.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::labels::{Label, Labels};
use crate::chat::encode_cache::{counts, Counts};

const LAYERS: [&str; 2] = ["l0", "l1"];

#[derive(Debug)]
pub struct TokenizerCacheCollector;

impl Collector for TokenizerCacheCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode(&counts(), encoder)
    }
}

fn encode(counts: &Counts, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let lookups: Vec<(Labels<2>, u64)> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| {
            [("hit", counts.hits[i]), ("miss", counts.misses[i])].map(|(result, n)| {
                let labels = [
                    ("layer", Label::Static(layer)),
                    ("result", Label::Static(result)),
                ];
                (labels, n)
            })
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    if !lookups.is_empty() {
        let mut metric = encoder.encode_descriptor(
            "gw_tokenizer_cache_lookups",
            "Tokenizer cache lookups",
            None,
            MetricType::Counter,
        )?;
        for (labels, n) in &lookups {
            ConstCounter::new(*n).encode(metric.encode_family(labels)?)?;
        }
    }
    let per_layer = [
        (
            "gw_tokenizer_cache_evictions",
            "Evictions",
            counts.evictions,
        ),
        (
            "gw_tokenizer_cache_reused_bytes",
            "UTF-8 input bytes served by hits",
            counts.reused_bytes,
        ),
    ];
    for (name, help, values) in per_layer {
        if values.iter().all(|n| *n == 0) {
            continue;
        }
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (layer, n) in LAYERS.iter().zip(values).filter(|(_, n)| *n > 0) {
            let labels: Labels<1> = [("layer", Label::Static(layer))];
            ConstCounter::new(n).encode(metric.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[derive(Debug)]
    struct Fixed(Counts);

    impl Collector for Fixed {
        fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            encode(&self.0, encoder)
        }
    }

    fn text(counts: Counts) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(counts)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn families_appear_with_their_first_count() {
        assert_eq!(text(Counts::default()), "# EOF\n");
        let out = text(Counts {
            hits: [2, 0],
            misses: [1, 3],
            evictions: [0, 4],
            reused_bytes: [100, 0],
        });
        for line in [
            "# TYPE gw_tokenizer_cache_lookups counter",
            r#"gw_tokenizer_cache_lookups_total{layer="l0",result="hit"} 2"#,
            r#"gw_tokenizer_cache_lookups_total{layer="l0",result="miss"} 1"#,
            r#"gw_tokenizer_cache_lookups_total{layer="l1",result="miss"} 3"#,
            r#"gw_tokenizer_cache_evictions_total{layer="l1"} 4"#,
            r#"gw_tokenizer_cache_reused_bytes_total{layer="l0"} 100"#,
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        assert!(!out.contains(r#"layer="l1",result="hit""#), "{out}");
        assert!(!out.contains(r#"evictions_total{layer="l0"}"#), "{out}");
        assert!(!out.contains(r#"reused_bytes_total{layer="l1"}"#), "{out}");
    }
}
