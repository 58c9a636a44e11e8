//! `gw_mcp_*` (spec 3): the tool calls the gateway runs on MCP servers for a client.
//!
//! Tool names come from MCP servers that clients name, so they are capped like models:
//! the first 1,024 distinct names keep their own series, later ones are `other`.

use std::sync::Arc;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::ModelLabels;
use super::{histograms, Counters, Histograms};

/// The MCP families.
pub struct McpMetrics {
    tool_calls: Counters<3>,
    tool_duration: Histograms<2>,
    servers_active: Gauge,
    iterations: Counters<1>,
    tool_names: ModelLabels,
}

impl McpMetrics {
    pub(super) fn new(buckets: Arc<[f64]>) -> McpMetrics {
        McpMetrics {
            tool_calls: Family::default(),
            tool_duration: histograms(buckets),
            servers_active: Gauge::default(),
            iterations: Family::default(),
            tool_names: ModelLabels::default(),
        }
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "gw_mcp_tool_calls",
            "MCP invocations",
            self.tool_calls.clone(),
        );
        registry.register(
            "gw_mcp_tool_duration_seconds",
            "Tool duration",
            self.tool_duration.clone(),
        );
        registry.register(
            "gw_mcp_servers_active",
            "Connected MCP servers",
            self.servers_active.clone(),
        );
        registry.register(
            "gw_mcp_tool_iterations",
            "Tool-loop iterations",
            self.iterations.clone(),
        );
    }
}

impl super::Metrics {
    /// One tool call of `model`'s request: its outcome and how long it took.
    pub fn mcp_tool_call(&self, model: &str, tool: &str, ok: bool, seconds: f64) {
        let model = self.models.get(model);
        let tool = self.mcp.tool_names.get(tool);
        let result = if ok { "success" } else { "error" };
        self.mcp
            .tool_calls
            .get_or_create(&[
                ("model", model.clone()),
                ("tool_name", tool.clone()),
                ("result", result.into()),
            ])
            .inc();
        self.mcp
            .tool_duration
            .get_or_create(&[("model", model), ("tool_name", tool)])
            .observe(seconds);
    }

    /// A tool-loop round of `model`'s request.
    pub fn mcp_iteration(&self, model: &str) {
        let model = self.models.get(model);
        self.mcp.iterations.get_or_create(&[("model", model)]).inc();
    }

    /// MCP sessions opened (`opened` > 0) or closed (< 0).
    pub fn mcp_servers_active(&self, change: i64) {
        self.mcp.servers_active.inc_by(change);
    }
}
