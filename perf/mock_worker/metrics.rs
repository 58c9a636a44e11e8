//! Prometheus exposition of the simulated engine state, named like SGLang
//! or vLLM so the gateway's metric scrapers can be tested against either.

use std::fmt::{Display, Write};

use crate::cli::MetricsStyle;
use crate::state::{LoadSnapshot, MAX_TOTAL_NUM_TOKENS};

/// Inputs of one scrape.
pub struct Scrape<'a> {
    pub model: &'a str,
    pub load: LoadSnapshot,
    pub requests_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
}

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn render(style: MetricsStyle, scrape: &Scrape) -> String {
    let mut out = Writer {
        text: String::with_capacity(2048),
        label: format!("model_name=\"{}\"", escape_label(scrape.model)),
    };
    let load = &scrape.load;
    match style {
        MetricsStyle::Sglang => {
            out.gauge(
                "sglang:num_running_reqs",
                "The number of running requests.",
                load.running,
            );
            out.gauge(
                "sglang:num_queue_reqs",
                "The number of requests in the waiting queue.",
                load.waiting,
            );
            out.gauge("sglang:token_usage", "The token usage.", load.token_usage);
            out.gauge(
                "sglang:gen_throughput",
                "The generation throughput (token/s).",
                load.gen_throughput,
            );
            out.gauge(
                "sglang:cache_hit_rate",
                "The prefix cache hit rate.",
                load.cache_hit_rate,
            );
            out.gauge(
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens.",
                MAX_TOTAL_NUM_TOKENS,
            );
            out.counter(
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
                scrape.prompt_tokens_total,
            );
            out.counter(
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                scrape.generation_tokens_total,
            );
            out.counter(
                "sglang:num_requests_total",
                "Number of requests processed.",
                scrape.requests_total,
            );
        }
        MetricsStyle::Vllm => {
            out.gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                load.running,
            );
            out.gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                load.waiting,
            );
            out.gauge(
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.",
                load.token_usage,
            );
            out.gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                load.token_usage,
            );
            out.gauge(
                "vllm:gpu_prefix_cache_hit_rate",
                "GPU prefix cache block hit rate.",
                load.cache_hit_rate,
            );
            out.counter(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                scrape.prompt_tokens_total,
            );
            out.counter(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                scrape.generation_tokens_total,
            );
            out.counter(
                "vllm:request_success_total",
                "Count of processed requests.",
                scrape.requests_total,
            );
        }
    }
    out.text
}

struct Writer {
    text: String,
    label: String,
}

impl Writer {
    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, help, "gauge", value);
    }

    fn counter(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, help, "counter", value);
    }

    fn family(&mut self, name: &str, help: &str, kind: &str, value: impl Display) {
        // Writing into a String cannot fail.
        let _ = write!(
            self.text,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{}}} {value}\n",
            self.label
        );
    }
}

/// Escapes a label value per the text exposition format.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(model: &str) -> Scrape<'_> {
        Scrape {
            model,
            load: LoadSnapshot {
                running: 3,
                waiting: 2,
                token_usage: 0.25,
                gen_throughput: 10.0,
                cache_hit_rate: 0.5,
            },
            requests_total: 9,
            prompt_tokens_total: 100,
            generation_tokens_total: 40,
        }
    }

    /// Every sample line is `name{labels} number` and is preceded by
    /// HELP and TYPE lines of its family.
    fn assert_valid(text: &str) {
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().unwrap();
                assert!(matches!(parts.next(), Some("gauge" | "counter")));
                typed.insert(name.to_string());
            } else if line.starts_with("# HELP ") {
                continue;
            } else {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let name = series.split('{').next().unwrap();
                assert!(typed.contains(name), "untyped {name}");
                assert!(value.parse::<f64>().is_ok(), "bad value {value}");
            }
        }
    }

    #[test]
    fn sglang_names() {
        let text = render(MetricsStyle::Sglang, &scrape("m"));
        assert_valid(&text);
        assert!(text.contains("sglang:num_running_reqs{model_name=\"m\"} 3\n"));
        assert!(text.contains("sglang:num_queue_reqs{model_name=\"m\"} 2\n"));
        assert!(text.contains("sglang:token_usage{model_name=\"m\"} 0.25\n"));
        assert!(text.contains("sglang:cache_hit_rate{model_name=\"m\"} 0.5\n"));
        assert!(text.contains("# TYPE sglang:prompt_tokens_total counter\n"));
        assert!(text.contains("sglang:prompt_tokens_total{model_name=\"m\"} 100\n"));
    }

    #[test]
    fn vllm_names() {
        let text = render(MetricsStyle::Vllm, &scrape("m"));
        assert_valid(&text);
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\"} 3\n"));
        assert!(text.contains("vllm:num_requests_waiting{model_name=\"m\"} 2\n"));
        assert!(text.contains("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"));
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"));
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"m\"} 100\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        let text = render(MetricsStyle::Vllm, &scrape("a\"b\\c\nd"));
        assert!(text.contains("{model_name=\"a\\\"b\\\\c\\nd\"}"));
        assert_valid(&text);
    }
}
