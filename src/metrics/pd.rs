//! `gw_pd_*` (spec 3): prefill/decode dispatch, over HTTP and to gRPC engines (the
//! KV-transfer window and the `pd_admission` stage are gRPC's). Created with the other
//! families so a scrape lists them before the first pair; labelled by model (capped like
//! every model label) and the prefill worker's runtime.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{histograms, Counters, Histograms, Labels};
use crate::fleet::Worker;

/// The prefill/decode families.
pub struct PdMetrics {
    ttft: Histograms<3>,
    prefill_duration: Histograms<3>,
    kv_transfer_duration: Histograms<3>,
    connector_mode: Counters<1>,
    bootstrap_failures: Counter,
    kv_transfer_failures: Counter,
    admission_waits: Counter,
    admission_sheds: Counter,
}

impl PdMetrics {
    pub(super) fn new(buckets: Arc<[f64]>) -> PdMetrics {
        PdMetrics {
            ttft: histograms(buckets.clone()),
            prefill_duration: histograms(buckets.clone()),
            kv_transfer_duration: histograms(buckets),
            connector_mode: Family::default(),
            bootstrap_failures: Counter::default(),
            kv_transfer_failures: Counter::default(),
            admission_waits: Counter::default(),
            admission_sheds: Counter::default(),
        }
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "gw_pd_ttft_seconds",
            "End-to-end TTFT from start of prefill",
            self.ttft.clone(),
        );
        registry.register(
            "gw_pd_prefill_duration_seconds",
            "Prefill leg",
            self.prefill_duration.clone(),
        );
        registry.register(
            "gw_pd_kv_transfer_duration_seconds",
            "KV-transfer window (sequential PD on gRPC)",
            self.kv_transfer_duration.clone(),
        );
        registry.register(
            "gw_pd_kv_connector_mode",
            "Connector mode chosen",
            self.connector_mode.clone(),
        );
        registry.register(
            "gw_pd_bootstrap_failures",
            "HTTP PD bodies that could not take bootstrap fields (not a JSON object)",
            self.bootstrap_failures.clone(),
        );
        registry.register(
            "gw_pd_kv_transfer_failures",
            "Prefill returned no kv_transfer_params; decode recomputes",
            self.kv_transfer_failures.clone(),
        );
        registry.register(
            "gw_pd_admission_waits",
            "gRPC PD dispatches that waited for decode room",
            self.admission_waits.clone(),
        );
        registry.register(
            "gw_pd_admission_sheds",
            "Dispatches shed with 503 worker_overload_protection_shed after \
             --pd-admission-wait-secs or because the request needs more rooms than the window",
            self.admission_sheds.clone(),
        );
    }
}

impl super::Metrics {
    /// A pair whose prefill leg succeeded after `prefill_secs`, and whose decode answered
    /// `ttft_secs` after the prefill started.
    pub fn pd_pair(
        &self,
        model: Option<&str>,
        prefill: &Worker,
        mode: &'static str,
        prefill_secs: f64,
        ttft_secs: f64,
    ) {
        let labels = self.pd_labels(model, prefill.runtime.as_str());
        self.pd
            .prefill_duration
            .get_or_create(&labels)
            .observe(prefill_secs);
        self.pd.ttft.get_or_create(&labels).observe(ttft_secs);
        self.pd
            .connector_mode
            .get_or_create(&[("mode", mode.into())])
            .inc();
    }

    /// A gRPC pair's KV-transfer window: from its prefill leg's end to decode's first
    /// message.
    pub fn pd_kv_transfer(&self, model: Option<&str>, runtime: &'static str, secs: f64) {
        let labels = self.pd_labels(model, runtime);
        self.pd
            .kv_transfer_duration
            .get_or_create(&labels)
            .observe(secs);
    }

    /// Both legs' figures of one model turn of a gateway-run Responses request on a gRPC
    /// pair.
    pub fn pd_legs(
        &self,
        model: Option<&str>,
        runtime: &'static str,
        prefill_secs: f64,
        kv_transfer_secs: f64,
    ) {
        let labels = self.pd_labels(model, runtime);
        self.pd
            .prefill_duration
            .get_or_create(&labels)
            .observe(prefill_secs);
        self.pd
            .kv_transfer_duration
            .get_or_create(&labels)
            .observe(kv_transfer_secs);
    }

    /// The labels of the pair histograms: the model and the prefill worker's runtime.
    fn pd_labels(&self, model: Option<&str>, runtime: &'static str) -> Labels<3> {
        [
            ("backend_type", "pd".into()),
            ("model", self.model(model)),
            ("runtime", runtime.into()),
        ]
    }

    /// A gRPC PD dispatch that found its decode worker's rooms taken and waited.
    pub fn pd_admission_wait(&self) {
        self.pd.admission_waits.inc();
    }

    /// A gRPC PD dispatch shed at the `pd_admission` stage (also counted as an overload
    /// shed of that stage).
    pub fn pd_admission_shed(&self) {
        self.pd.admission_sheds.inc();
        self.overload_shed("pd_admission");
    }

    /// A body that could not take the bootstrap fields.
    pub fn pd_bootstrap_failure(&self) {
        self.pd.bootstrap_failures.inc();
    }

    /// A KV-transfer prefill that returned no `kv_transfer_params`.
    pub fn pd_kv_transfer_failure(&self) {
        self.pd.kv_transfer_failures.inc();
    }

    /// A retry of a pair: counted for both roles (spec 3), its backoff observed once.
    pub fn pd_retry(
        &self,
        prefill: &Worker,
        decode: &Worker,
        endpoint: &'static str,
        attempt: u32,
        backoff: f64,
    ) {
        self.retry_backoff.observe(attempt, backoff);
        for worker in [prefill, decode] {
            self.retries
                .get_or_create(&[
                    ("worker_type", worker.worker_type.as_str().into()),
                    ("endpoint", endpoint.into()),
                ])
                .inc();
        }
    }
}
