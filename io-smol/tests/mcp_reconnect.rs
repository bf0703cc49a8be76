//! Extension `reconnect = true` in `[[mcp.servers]]` over the real binary
//! (docs/extensions.md): a dead server comes back on the next call, an
//! expired streamable-HTTP session is renewed, and sessions from before a
//! restart get their servers back on their first turn. Without the switch
//! the spec's behaviour stays (C-…: broken stays broken, no tools after a
//! restart).

mod live_support;
mod mcp_support;

use live_support::*;
use mcp_support::*;
use serde_json::{json, Value};
use testkit::mcp::{self, http_toml, sdk_stdio_toml, HttpServer};

fn with_reconnect(toml: &str) -> String {
    format!("{}\nreconnect = true\n\n", toml.trim_end())
}

#[test]
fn a_crashed_stdio_server_is_respawned_on_the_next_call() {
    let (mock, server) = server(&with_reconnect(&sdk_stdio_toml("fx", &[])), &[]);
    let pid = server.pid().unwrap();
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let first = mcp::children_of(pid).0;
    let evs = one_call(&server, &mock, &f, "crash", json!({}));
    // The call that died is not replayed: it fails.
    assert_eq!(
        only(&evs, "mcp.response")["payload"]["error"],
        "MCP transport error: MCP server closed the connection"
    );
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "back"}));
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": "fx: back"}])
    );
    let now = mcp::children_of(pid).0;
    assert_eq!(now.len(), 1);
    assert_ne!(now, first, "a new child serves the session");
}

#[test]
fn an_expired_http_session_is_renewed_and_the_call_goes_through() {
    let srv = HttpServer::raw(&["expire"]);
    let toml = with_reconnect(&http_toml("raw", "http", &srv.url("/mcp"), &[]));
    let (mock, server) = server(&toml, &[]);
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    for text in ["a", "b", "c"] {
        let evs = one_call(&server, &mock, &f, "echo", json!({"text": text}));
        let result = only(&evs, "tool.result")["payload"].clone();
        assert_eq!(result["is_error"], false, "{result}");
        assert_eq!(result["content"][0]["text"], format!("rawhttp: {text}"));
    }
}

#[test]
fn sessions_from_before_a_restart_get_reconnecting_servers_back() {
    let toml = format!(
        "{}{}",
        with_reconnect(&sdk_stdio_toml("back", &["--prefix", "b_"])),
        sdk_stdio_toml("gone", &["--prefix", "g_"])
    );
    let (mock, mut server) = server(&toml, &[]);
    let f = open_mcp(&server, &["back", "gone"], &[], json!({}));
    server.restart();
    reregister(&server, &f.session_id, &[&f.a]);
    let evs = one_call(&server, &mock, &f, "b_echo", json!({"text": "x"}));
    assert_eq!(only(&evs, "tool.result")["payload"]["server_name"], "back");
    // Only the reconnecting server is offered; the other stays gone, as the
    // spec says for a restart.
    let names = advertised_names(&mock);
    assert!(names.iter().all(|n| n.starts_with("b_")), "{names:?}");
    let evs = one_call(&server, &mock, &f, "g_echo", json!({"text": "x"}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
}

#[test]
fn without_the_switch_a_restart_leaves_the_session_without_mcp_tools() {
    let (mock, mut server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    server.restart();
    reregister(&server, &f.session_id, &[&f.a]);
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "x"}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    assert!(advertised_names(&mock).is_empty());
}

#[test]
fn the_switch_is_validated_and_shown_in_the_config_view_only_when_set() {
    let bad = "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\nreconnect = \"yes\"\n";
    let out = testkit::Server::run(opts(bad), WAIT);
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr.contains("reconnect"), "{}", out.stderr);
    let toml = format!(
        "{}{}",
        with_reconnect(&mcp::stdio_toml("on", "true", &[])),
        mcp::stdio_toml("off", "true", &[])
    );
    let (_mock, server) = server(&toml, &[]);
    let cfg = server.admin().get("/admin/v1/config").json();
    let servers = cfg["mcp"]["servers"].as_array().unwrap().clone();
    let off = servers.iter().find(|s| s["name"] == "off").unwrap();
    let on = servers.iter().find(|s| s["name"] == "on").unwrap();
    assert!(off.get("reconnect").is_none(), "{off}");
    assert_eq!(on["reconnect"], true);
}
