//! Shared helpers of the MCP end-to-end tests (`mcp_*.rs`): a server whose
//! registry holds real MCP servers, sessions on profiles that list them, and
//! one-tool turns through the mock provider.
#![allow(dead_code)]

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::{MockProvider, Reply, Server};

use super::live_support::{open_with_profile, opts, result_events, send, Fixture};

/// A mock provider of `kind` named `main` and a server with the given
/// `[[mcp.servers]]` tables; `env` is extra child environment.
pub fn server_with(kind: &str, mcp_toml: &str, env: &[(&str, &str)]) -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let mut config = provider_toml(&[("main", kind, &mock.base_url, "mock-model", "tok")]);
    config.push_str(mcp_toml);
    let mut o = opts(&config);
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    (mock, Server::start(o))
}

/// An Anthropic-backed server with `mcp_toml`.
pub fn server(mcp_toml: &str, env: &[(&str, &str)]) -> (MockProvider, Server) {
    server_with("anthropic", mcp_toml, env)
}

/// A profile listing `mcp_servers`, a key, a session opened with `body` and
/// its creator registered as driver.
pub fn open_mcp(server: &Server, mcp_servers: &[&str], allowed: &[&str], body: Value) -> Fixture {
    let profile = json!({
        "name": unique_name("profile"),
        "primary_provider": "main",
        "allowed_tools": allowed,
        "mcp_servers": mcp_servers,
    });
    let f = open_with_profile(server, &profile, body);
    fixtures::register_driver(server, &f.session_id, &f.a.session_key);
    f
}

/// One turn in which the model calls `tool` with `input` once, then answers
/// "done". Returns the terminal frame's `result.events`.
#[track_caller]
pub fn one_call(
    server: &Server,
    mock: &MockProvider,
    f: &Fixture,
    tool: &str,
    input: Value,
) -> Vec<Value> {
    mock.push(Reply::tool_use("tu_1", tool, input));
    mock.push(Reply::text("done"));
    let (_, t) = send(server, &f.session_id, &f.a, json!("go"));
    assert!(t.get("result").is_some(), "turn failed: {t}");
    result_events(&t)
}

/// The single event of `event_type` in `events`.
#[track_caller]
pub fn only(events: &[Value], event_type: &str) -> Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .collect();
    assert_eq!(found.len(), 1, "expected one {event_type} in {events:?}");
    found[0].clone()
}

/// Tool names of the first provider request's `tools` (Anthropic or OpenAI
/// shape, as the mock recorded the wire body).
pub fn advertised_names(mock: &MockProvider) -> Vec<String> {
    let reqs = mock.requests();
    reqs[0].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["name"]
                        .as_str()
                        .or_else(|| t["function"]["name"].as_str())
                        .unwrap_or("?")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}
