//! Which MCP tools the model sees (spec 2, "MCP tools on the provider backend"): an
//! `mcp_toolset` names a server; its `configs` (when present) list the tools exposed, each
//! enabled by its own `enabled` or else the toolset's `default_config.enabled` (default
//! true); `defer_loading` is copied onto the tools passed to the model.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::mcp::Tool;

/// The tools offered to the model and the server each MCP tool belongs to.
#[derive(Debug, Default, PartialEq)]
pub struct Exposed {
    /// Tool definitions in the Messages API's shape.
    pub tools: Vec<Value>,
    /// MCP tool name → index of its server.
    pub owners: HashMap<String, usize>,
}

/// The tools of the `toolsets` whose servers connected: `listed[i]` is server `i`'s name
/// and its tools, `None` when it did not connect. A name already taken (by the client's
/// own tools or an earlier server) keeps its first owner.
pub fn expose(
    toolsets: &[Value],
    listed: &[(String, Option<Vec<Tool>>)],
    client_tools: &[Value],
) -> Exposed {
    let mut exposed = Exposed::default();
    let taken = |name: &str, exposed: &Exposed| {
        exposed.owners.contains_key(name)
            || client_tools
                .iter()
                .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    };
    for toolset in toolsets {
        let Some(server_name) = toolset.get("mcp_server_name").and_then(Value::as_str) else {
            continue;
        };
        let Some((index, tools)) = listed
            .iter()
            .enumerate()
            .find(|(_, (name, _))| name == server_name)
            .and_then(|(i, (_, tools))| tools.as_ref().map(|t| (i, t)))
        else {
            continue;
        };
        let default = toolset.get("default_config");
        let configs = toolset.get("configs").and_then(Value::as_object);
        for tool in tools {
            let config = configs.and_then(|c| c.get(&tool.name));
            if configs.is_some() && config.is_none() {
                continue;
            }
            let enabled = setting(config, default, "enabled").unwrap_or(true);
            if !enabled || taken(&tool.name, &exposed) {
                continue;
            }
            let mut def = Map::new();
            def.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                def.insert("description".into(), json!(description));
            }
            def.insert("input_schema".into(), tool.input_schema.clone());
            if let Some(defer) = setting(config, default, "defer_loading") {
                def.insert("defer_loading".into(), json!(defer));
            }
            exposed.tools.push(Value::Object(def));
            exposed.owners.insert(tool.name.clone(), index);
        }
    }
    exposed
}

/// A boolean setting of a tool's config, else of the toolset's default config.
fn setting(config: Option<&Value>, default: Option<&Value>, key: &str) -> Option<bool> {
    config
        .and_then(|c| c.get(key))
        .and_then(Value::as_bool)
        .or_else(|| default.and_then(|d| d.get(key)).and_then(Value::as_bool))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        Tool {
            name: name.into(),
            description: Some(format!("{name} tool")),
            input_schema: json!({"type": "object"}),
        }
    }

    fn names(exposed: &Exposed) -> Vec<&str> {
        exposed
            .tools
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect()
    }

    #[test]
    fn every_tool_by_default_only_configured_ones_with_configs() {
        let listed = vec![
            (
                "a".to_owned(),
                Some(vec![tool("add"), tool("echo"), tool("slow")]),
            ),
            ("b".to_owned(), None),
        ];
        let all = expose(
            &[json!({"type": "mcp_toolset", "mcp_server_name": "a"})],
            &listed,
            &[],
        );
        assert_eq!(names(&all), ["add", "echo", "slow"]);
        assert_eq!(all.owners["echo"], 0);
        assert_eq!(all.tools[0]["description"], "add tool");

        let configured = expose(
            &[json!({"type": "mcp_toolset", "mcp_server_name": "a",
                "default_config": {"enabled": false, "defer_loading": true},
                "configs": {"add": {"enabled": true}, "echo": {}, "slow": {"enabled": true, "defer_loading": false}}})],
            &listed,
            &[],
        );
        assert_eq!(
            names(&configured),
            ["add", "slow"],
            "echo falls back to default false"
        );
        assert_eq!(configured.tools[0]["defer_loading"], true);
        assert_eq!(configured.tools[1]["defer_loading"], false);

        let off = expose(
            &[
                json!({"type": "mcp_toolset", "mcp_server_name": "a", "default_config": {"enabled": false}}),
            ],
            &listed,
            &[],
        );
        assert!(off.tools.is_empty());
        let dead = expose(
            &[json!({"type": "mcp_toolset", "mcp_server_name": "b"})],
            &listed,
            &[],
        );
        assert!(
            dead.tools.is_empty(),
            "a server that did not connect offers nothing"
        );
    }

    #[test]
    fn a_taken_name_keeps_its_first_owner() {
        let listed = vec![
            ("a".to_owned(), Some(vec![tool("x"), tool("y")])),
            ("b".to_owned(), Some(vec![tool("y"), tool("z")])),
        ];
        let exposed = expose(
            &[
                json!({"type": "mcp_toolset", "mcp_server_name": "a"}),
                json!({"type": "mcp_toolset", "mcp_server_name": "b"}),
            ],
            &listed,
            &[json!({"name": "x", "input_schema": {}})],
        );
        assert_eq!(names(&exposed), ["y", "z"]);
        assert_eq!(exposed.owners["y"], 0);
        assert_eq!(exposed.owners["z"], 1);
    }
}
