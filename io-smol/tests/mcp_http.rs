//! MCP over streamable HTTP against real servers (spec 06 §4.4): the
//! official Python SDK fixture (SSE and JSON answers), the npm reference
//! server, and a raw server that checks `mcp-session-id` handling or
//! misbehaves (HTML, error statuses).

mod live_support;
mod mcp_support;

use live_support::*;
use mcp_support::*;
use serde_json::{json, Value};
use testkit::mcp::{http_toml, HttpServer};

#[test]
fn sdk_streamable_http_with_sse_answers() {
    let mcp = HttpServer::sdk("web", &[]);
    let (mock, server) = server(&http_toml("web", "http", &mcp.url("/mcp"), &[]), &[]);
    let f = open_mcp(&server, &["web"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    assert_eq!(
        advertised_names(&mock),
        ["echo", "add", "fail", "slow", "crash"]
    );
    let result = only(&evs, "tool.result")["payload"].clone();
    assert_eq!(result["server_name"], "web");
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "web: hi"}])
    );
    // The SDK rejects requests without the session id it handed out, so a
    // second call proves `mcp-session-id` is echoed.
    let evs = one_call(&server, &mock, &f, "add", json!({"a": 1, "b": 2}));
    assert_eq!(
        only(&evs, "mcp.response")["payload"]["result"]["structuredContent"],
        json!({"sum": 3})
    );
}

#[test]
fn sdk_streamable_http_with_json_answers_and_the_sse_transport_name() {
    let mcp = HttpServer::sdk("web", &["--json"]);
    let (mock, server) = server(&http_toml("web", "sse", &mcp.url("/mcp"), &[]), &[]);
    let f = open_mcp(&server, &["web"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "fail", json!({"message": "nope"}));
    let resp = only(&evs, "mcp.response")["payload"].clone();
    assert_eq!(resp["ok"], false);
    assert_eq!(resp["result"]["isError"], true);
}

#[test]
fn sse_bodies_with_noise_and_required_session_ids() {
    let mcp = HttpServer::raw(&["sse"]);
    let (mock, server) = server(&http_toml("raw", "http", &mcp.url("/mcp"), &[]), &[]);
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    for text in ["one", "two"] {
        let evs = one_call(&server, &mock, &f, "echo", json!({"text": text}));
        assert_eq!(
            only(&evs, "tool.result")["payload"]["content"],
            json!([{"type": "text", "text": format!("rawhttp: {text}")}]),
        );
    }
}

#[test]
fn an_html_endpoint_or_an_error_status_skips_the_server() {
    let html = HttpServer::raw(&["html"]);
    let failing = HttpServer::raw(&["status", "503"]);
    let toml = format!(
        "{}{}",
        http_toml("html", "http", &html.url("/"), &[]),
        http_toml("failing", "http", &failing.url("/"), &[])
    );
    let (mock, server) = server(&toml, &[]);
    let f = open_mcp(&server, &["html", "failing"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    let log = server.stderr_log();
    assert!(log.contains("MCP server returned HTTP 503"), "{log}");
    assert!(log.contains("not a matching JSON-RPC object"), "{log}");
}

#[test]
fn a_session_expired_by_the_server_fails_the_call_with_its_status() {
    let mcp = HttpServer::raw(&["expire"]);
    let (mock, server) = server(&http_toml("raw", "http", &mcp.url("/mcp"), &[]), &[]);
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "a"}));
    assert_eq!(only(&evs, "tool.result")["payload"]["is_error"], false);
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "b"}));
    assert_eq!(
        only(&evs, "mcp.response")["payload"]["error"],
        "MCP transport error: MCP server returned HTTP 404"
    );
}

#[test]
fn an_unreachable_endpoint_is_skipped_at_create() {
    let (mock, server) = server(
        &http_toml("gone", "http", "http://127.0.0.1:9/mcp", &[]),
        &[],
    );
    let f = open_mcp(&server, &["gone"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    assert!(server.stderr_log().contains("gone"));
}

#[test]
fn header_templates_are_resolved_and_never_logged() {
    let mcp = HttpServer::sdk("web", &[]);
    let toml = http_toml(
        "web",
        "http",
        &mcp.url("/mcp"),
        &[("X-Api-Token", "Bearer ${MCP_SECRET_TOKEN}")],
    );
    let (mock, server) = server(
        &toml,
        &[
            ("MCP_SECRET_TOKEN", "s3cr3t-value-xyz"),
            ("BAE_LOG", "trace"),
        ],
    );
    let f = open_mcp(&server, &["web"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    assert_eq!(only(&evs, "tool.result")["payload"]["is_error"], false);
    let all = events(&server, &f.session_id, &f.a.session_key);
    assert!(!serde_json::to_string(&all)
        .unwrap()
        .contains("s3cr3t-value-xyz"));
    assert!(!server.stderr_log().contains("s3cr3t-value-xyz"));
    assert!(!server.stdout_log().contains("s3cr3t-value-xyz"));
    // An unset header variable skips the server (logged by name).
    let (mock2, server2) = mcp_support::server(
        &http_toml(
            "web",
            "http",
            &mcp.url("/mcp"),
            &[("A", "${MCP_UNSET_HDR}")],
        ),
        &[],
    );
    let f = open_mcp(&server2, &["web"], &[], json!({}));
    let evs = one_call(&server2, &mock2, &f, "echo", json!({}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    assert!(server2.stderr_log().contains("MCP_UNSET_HDR"));
}

#[test]
fn the_npm_reference_server_over_streamable_http() {
    let mcp = HttpServer::everything();
    let (mock, server) = server(&http_toml("ev", "http", &mcp.url("/mcp"), &[]), &[]);
    let f = open_mcp(&server, &["ev"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "get-sum", json!({"a": 2, "b": 3}));
    assert_eq!(advertised_names(&mock).len(), 13);
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": "The sum of 2 and 3 is 5."}])
    );
}
