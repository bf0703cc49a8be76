//! Admin read-only views of the startup configuration (spec 03 §4.4–§4.6).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::file::{FileConfig, McpServer, ProviderEntry};

/// The fixed redaction marker: U+2022 × 8.
pub const REDACTED: &str = "\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}";

fn redacted_map(m: &BTreeMap<String, String>) -> Value {
    // BTreeMap iteration is sorted by key.
    Value::Object(
        m.keys()
            .map(|k| (k.clone(), Value::String(REDACTED.to_string())))
            .collect::<Map<String, Value>>(),
    )
}

fn sorted_servers(cfg: &FileConfig) -> Vec<&McpServer> {
    let mut v: Vec<&McpServer> = cfg.mcp.servers.iter().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn sorted_providers(cfg: &FileConfig) -> Vec<&ProviderEntry> {
    let mut v: Vec<&ProviderEntry> = cfg.providers.iter().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Body of `GET /admin/v1/config`: MCP servers and provider entries sorted
/// by name, header maps sorted by key, every MCP header value, provider
/// `auth_token` and `otlp_headers` value replaced by [`REDACTED`]
/// unconditionally; `command`, `args`, `url` in full; `base_url` effective;
/// telemetry always an object with defaults rendered.
pub fn redacted_config_json(cfg: &FileConfig) -> Value {
    let servers: Vec<Value> = sorted_servers(cfg)
        .into_iter()
        .map(|s| {
            let mut v = json!({
                "name": s.name,
                "transport": s.transport.as_str(),
                "command": s.command,
                "args": s.args,
                "url": s.url,
                "headers": redacted_map(&s.headers),
            });
            // Extension: shown only where the operator set it, so the
            // reference shape is unchanged otherwise.
            if s.reconnect {
                v["reconnect"] = json!(true);
            }
            v
        })
        .collect();
    let entries: Vec<Value> = sorted_providers(cfg)
        .into_iter()
        .map(|p| {
            let mut v = json!({
                "name": p.name,
                "provider": p.kind.as_str(),
                "model": p.model,
                "base_url": p.effective_base_url(),
                "auth_token": REDACTED,
            });
            // Extension: only where the operator turned streaming on.
            if let Some(s) = p.stream {
                v["stream"] = json!(true);
                v["stream_first_byte_timeout"] = json!(s.first_byte_timeout_secs);
                v["stream_idle_timeout"] = json!(s.idle_timeout_secs);
                v["stream_max_bytes"] = json!(s.max_bytes);
            }
            v
        })
        .collect();
    let t = &cfg.telemetry;
    json!({
        "mcp": { "servers": servers },
        "providers": { "entries": entries },
        "telemetry": {
            "enabled": t.enabled,
            "otlp_endpoint": t.otlp_endpoint,
            "otlp_headers": redacted_map(&t.otlp_headers),
            "sample_ratio": finite_or_null(t.sample_ratio),
            "service_name": t.service_name,
            "traces": { "enabled": t.traces_enabled },
            "metrics": { "enabled": t.metrics_enabled, "disabled": t.metrics_disabled },
        }
    })
}

/// A disabled telemetry table may carry a non-finite ratio (not validated);
/// JSON cannot represent it, so it renders as `null`.
fn finite_or_null(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Body of `GET /admin/v1/providers`:
/// `{"items":[{"name","provider","model","base_url"}]}` sorted by name;
/// `base_url` effective; never `auth_token` or `max_tokens`.
pub fn providers_json(cfg: &FileConfig) -> Value {
    let items: Vec<Value> = sorted_providers(cfg)
        .into_iter()
        .map(|p| {
            json!({
                "name": p.name,
                "provider": p.kind.as_str(),
                "model": p.model,
                "base_url": p.effective_base_url(),
            })
        })
        .collect();
    json!({ "items": items })
}

/// Body of `GET /admin/v1/mcp-servers`: `{"items":[{"name","transport"}]}`
/// sorted by name.
pub fn mcp_servers_json(cfg: &FileConfig) -> Value {
    let items: Vec<Value> = sorted_servers(cfg)
        .into_iter()
        .map(|s| json!({ "name": s.name, "transport": s.transport.as_str() }))
        .collect();
    json!({ "items": items })
}

#[cfg(test)]
mod tests {
    use super::super::parse_file_str;
    use super::*;
    use std::path::Path;

    const CFG: &str = r#"
[[mcp.servers]]
name = "search"
transport = "sse"
url = "https://mcp.example.com/sse"
headers = { Authorization = "Bearer ${TOKEN}", "X-Empty" = "", "A-First" = "literal-secret" }

[[mcp.servers]]
name = "filesystem"
transport = "stdio"
command = "npx"
args = ["-y", "${PKG}"]

[[providers.entries]]
name = "z-openai"
provider = "openai"
model = "gpt-x"
auth_token = "sk-literal"
max_tokens = 99

[[providers.entries]]
name = "anthropic-sonnet"
provider = "anthropic"
model = "claude-sonnet-4-6"
auth_token = ""
base_url = "https://proxy.example.com/"

[telemetry]
otlp_headers = { "x-key" = "${OTEL}", "a-key" = "plain" }
"#;

    fn cfg() -> FileConfig {
        parse_file_str(CFG, Path::new("c.toml")).unwrap()
    }

    #[test]
    fn marker_is_eight_bullets() {
        assert_eq!(REDACTED.chars().count(), 8);
        assert!(REDACTED.chars().all(|c| c == '\u{2022}'));
        assert_eq!(REDACTED, "••••••••");
    }

    #[test]
    fn config_is_redacted_and_sorted_c205() {
        let v = redacted_config_json(&cfg());
        let text = v.to_string();
        for secret in [
            "TOKEN",
            "sk-literal",
            "literal-secret",
            "OTEL",
            "plain",
            "Bearer",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        let servers = v["mcp"]["servers"].as_array().unwrap();
        assert_eq!(servers[0]["name"], "filesystem");
        assert_eq!(servers[0]["command"], "npx");
        assert_eq!(servers[0]["args"], json!(["-y", "${PKG}"]));
        assert_eq!(servers[0]["url"], Value::Null);
        assert_eq!(servers[0]["headers"], json!({}));
        assert_eq!(servers[1]["name"], "search");
        assert_eq!(servers[1]["transport"], "sse");
        assert_eq!(servers[1]["command"], Value::Null);
        assert_eq!(servers[1]["url"], "https://mcp.example.com/sse");
        let keys: Vec<&String> = servers[1]["headers"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["A-First", "Authorization", "X-Empty"]);
        for (_, val) in servers[1]["headers"].as_object().unwrap() {
            assert_eq!(val, REDACTED);
        }

        let entries = v["providers"]["entries"].as_array().unwrap();
        assert_eq!(
            entries[0],
            json!({
                "name": "anthropic-sonnet",
                "provider": "anthropic",
                "model": "claude-sonnet-4-6",
                "base_url": "https://proxy.example.com/",
                "auth_token": REDACTED
            })
        );
        assert_eq!(entries[1]["name"], "z-openai");
        assert_eq!(entries[1]["base_url"], "https://api.openai.com");
        assert_eq!(entries[1]["auth_token"], REDACTED);
        assert!(entries[1].get("max_tokens").is_none());

        let t = &v["telemetry"];
        assert_eq!(
            t["otlp_headers"],
            json!({"a-key": REDACTED, "x-key": REDACTED})
        );
        let tkeys: Vec<&String> = t["otlp_headers"].as_object().unwrap().keys().collect();
        assert_eq!(tkeys, ["a-key", "x-key"]);
    }

    #[test]
    fn empty_config_c206() {
        let v = redacted_config_json(&FileConfig::default());
        assert_eq!(
            v,
            json!({
                "mcp": { "servers": [] },
                "providers": { "entries": [] },
                "telemetry": {
                    "enabled": false,
                    "otlp_endpoint": null,
                    "otlp_headers": {},
                    "sample_ratio": 1.0,
                    "service_name": "baesrv",
                    "traces": { "enabled": true },
                    "metrics": { "enabled": true, "disabled": [] }
                }
            })
        );
        // Member order follows the spec example.
        let keys: Vec<&String> = v["telemetry"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "enabled",
                "otlp_endpoint",
                "otlp_headers",
                "sample_ratio",
                "service_name",
                "traces",
                "metrics"
            ]
        );
        assert_eq!(v["telemetry"]["sample_ratio"].to_string(), "1.0");
        assert_eq!(
            mcp_servers_json(&FileConfig::default()),
            json!({"items": []})
        );
        assert_eq!(providers_json(&FileConfig::default()), json!({"items": []}));
    }

    #[test]
    fn non_finite_disabled_ratio_renders_null() {
        let cfg = parse_file_str("[telemetry]\nsample_ratio = nan\n", Path::new("c")).unwrap();
        assert_eq!(
            redacted_config_json(&cfg)["telemetry"]["sample_ratio"],
            Value::Null
        );
    }

    #[test]
    fn registry_listings() {
        let c = cfg();
        assert_eq!(
            mcp_servers_json(&c),
            json!({"items": [
                {"name": "filesystem", "transport": "stdio"},
                {"name": "search", "transport": "sse"}
            ]})
        );
        assert_eq!(
            providers_json(&c),
            json!({"items": [
                {"name": "anthropic-sonnet", "provider": "anthropic", "model": "claude-sonnet-4-6",
                 "base_url": "https://proxy.example.com/"},
                {"name": "z-openai", "provider": "openai", "model": "gpt-x",
                 "base_url": "https://api.openai.com"}
            ]})
        );
    }
}
