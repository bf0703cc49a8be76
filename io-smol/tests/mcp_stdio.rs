//! MCP over stdio against real servers (spec 06 §1, §2, §4; 02 §4.6–§4.8;
//! checklist C-098–C-101): the official Python SDK fixture, the npm
//! reference server and a deliberately misbehaving raw server.

mod live_support;
mod mcp_support;

use live_support::*;
use mcp_support::*;
use serde_json::{json, Value};
use testkit::mcp::{self, sdk_stdio_toml, stdio_toml};
use testkit::Reply;

#[test]
fn c099_sdk_stdio_tool_round_trip_is_logged_in_order_and_never_pauses() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "tool.call",
            "mcp.request",
            "mcp.response",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send",
        ]
    );
    assert_eq!(
        evs[3]["payload"],
        json!({"id": "tu_1", "name": "echo", "input": {"text": "hi"}, "dispatch": "mcp", "server_name": "fx"})
    );
    assert_eq!(
        evs[4]["payload"],
        json!({"method": "tools/call", "server_name": "fx", "tool": "echo", "input": {"text": "hi"}})
    );
    let resp = &evs[5]["payload"];
    assert_eq!(resp["server_name"], "fx");
    assert_eq!(resp["ok"], true);
    assert_eq!(
        resp["result"]["content"],
        json!([{"type": "text", "text": "fx: hi"}])
    );
    assert!(resp.get("error").is_none());
    assert_eq!(
        evs[6]["payload"],
        json!({"tool_use_id": "tu_1", "dispatch": "mcp", "server_name": "fx", "is_error": false,
               "content": [{"type": "text", "text": "fx: hi"}]})
    );
    // The provider got the server's result as the tool's output.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"][0],
        json!({"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "fx: hi"}], "is_error": false})
    );
    // The metrics endpoint saw the MCP dispatch and timed it.
    let metrics = server.admin().get("/metrics").text();
    for series in [
        "bae_tool_calls_total{dispatch=\"mcp\"} 1",
        "bae_tool_latency_milliseconds_count{dispatch=\"mcp\"} 1",
        "bae_mcp_sessions_live 1",
    ] {
        assert!(metrics.lines().any(|l| l == series), "{series}:\n{metrics}");
    }
}

#[test]
fn mcp_tools_are_advertised_in_anthropic_shape_after_the_drivers_own() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(
        &server,
        &["fx"],
        &["mine"],
        json!({"tools": [tool("mine")]}),
    );
    mock.push(Reply::text("hello"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    assert_eq!(
        advertised_names(&mock),
        ["mine", "echo", "add", "fail", "slow", "crash"]
    );
    let tools = mock.requests()[0].body["tools"].clone();
    assert_eq!(
        tools[1]["description"],
        "Echo text back, tagged with the server name."
    );
    assert_eq!(tools[1]["input_schema"]["required"], json!(["text"]));
    // The logged provider.request lists the same tools (spec 06 §1 row 4).
    let evs = result_events(&t);
    let logged = &evs[1]["payload"]["tools"];
    assert_eq!(logged[1]["name"], "echo");
    assert_eq!(logged[1]["input_schema"]["type"], "object");
}

#[test]
fn mcp_tools_are_advertised_as_openai_functions() {
    let (mock, server) = server_with("openai", &sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "add", json!({"a": 2, "b": 3}));
    let tools = mock.requests()[0].body["tools"].clone();
    assert_eq!(tools[1]["type"], "function");
    assert_eq!(tools[1]["function"]["name"], "add");
    assert_eq!(
        tools[1]["function"]["parameters"]["required"],
        json!(["a", "b"])
    );
    // A structured result: content is the MCP content array, verbatim.
    let result = only(&evs, "tool.result");
    assert_eq!(result["payload"]["is_error"], false);
    assert_eq!(
        result["payload"]["content"],
        json!([{"type": "text", "text": "{\n  \"sum\": 5\n}"}])
    );
    let resp = only(&evs, "mcp.response");
    assert_eq!(
        resp["payload"]["result"]["structuredContent"],
        json!({"sum": 5})
    );
}

#[test]
fn tool_error_result_is_ok_false_with_result_and_is_error_true() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "fail", json!({"message": "boom"}));
    let resp = only(&evs, "mcp.response")["payload"].clone();
    assert_eq!(resp["ok"], false);
    assert_eq!(resp["result"]["isError"], true);
    assert!(resp.get("error").is_none());
    let result = only(&evs, "tool.result")["payload"].clone();
    assert_eq!(result["is_error"], true);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "Error executing tool fail: boom"}])
    );
}

#[test]
fn later_server_wins_an_overlapping_name_and_it_is_advertised_once() {
    let toml = format!("{}{}", sdk_stdio_toml("a", &[]), sdk_stdio_toml("b", &[]));
    let (mock, server) = server(&toml, &[]);
    let f = open_mcp(&server, &["a", "b"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "x"}));
    assert_eq!(
        advertised_names(&mock),
        ["echo", "add", "fail", "slow", "crash"]
    );
    assert_eq!(only(&evs, "tool.call")["payload"]["server_name"], "b");
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": "b: x"}])
    );
}

#[test]
fn a_client_tool_shadows_an_mcp_tool_of_the_same_name() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(
        &server,
        &["fx"],
        &["echo"],
        json!({"tools": [tool("echo")]}),
    );
    mock.push(Reply::tool_use("tu_1", "echo", json!({"text": "x"})));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("go"));
    // Client dispatch wins (spec 06 §2): the turn pauses for the client.
    assert_eq!(
        advertised_names(&mock),
        ["echo", "add", "fail", "slow", "crash"]
    );
    let evs = result_events(&t);
    assert_eq!(only(&evs, "tool.call")["payload"]["dispatch"], "client");
    assert!(of_type(&evs, "mcp.request").is_empty());
}

#[test]
fn several_servers_each_route_their_own_tools() {
    let toml = format!(
        "{}{}",
        sdk_stdio_toml("a", &["--prefix", "a_"]),
        sdk_stdio_toml("b", &["--prefix", "b_"])
    );
    let (mock, server) = server(&toml, &[]);
    let f = open_mcp(&server, &["a", "b"], &[], json!({}));
    mock.push(Reply::tool_uses(vec![
        ("t1", "a_echo", json!({"text": "1"})),
        ("t2", "b_echo", json!({"text": "2"})),
    ]));
    mock.push(Reply::text("done"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("go"));
    let evs = result_events(&t);
    let results = of_type(&evs, "tool.result");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["payload"]["server_name"], "a");
    assert_eq!(results[0]["payload"]["content"][0]["text"], "a: 1");
    assert_eq!(results[1]["payload"]["server_name"], "b");
    assert_eq!(results[1]["payload"]["content"][0]["text"], "b: 2");
    // Order per block: call, call, then request/response/result for each.
    let kinds: Vec<String> = types(&evs)[3..11].to_vec();
    assert_eq!(
        kinds,
        [
            "tool.call",
            "tool.call",
            "mcp.request",
            "mcp.response",
            "tool.result",
            "mcp.request",
            "mcp.response",
            "tool.result"
        ]
    );
}

#[test]
fn unknown_or_failing_servers_are_skipped_and_create_still_succeeds() {
    let toml = format!(
        "{}{}",
        stdio_toml("broken", "/nonexistent/mcp-server", &[]),
        sdk_stdio_toml("fx", &[])
    );
    let (mock, server) = server(&toml, &[]);
    let f = open_mcp(&server, &["missing", "broken", "fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "ok"}));
    assert_eq!(only(&evs, "tool.result")["payload"]["server_name"], "fx");
    let log = server.stderr_log();
    assert!(log.contains("missing"), "unknown name is logged: {log}");
    assert!(log.contains("broken"), "failed connect is logged: {log}");
}

#[test]
fn c100_unrouted_tool_in_a_session_with_servers_keeps_the_null_server_result() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "nope", json!({}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": "MCP error: no MCP server is configured for tool 'nope'"}])
    );
}

#[test]
fn a_slow_tool_times_out_at_the_configured_bound_and_the_gate_moves_on() {
    let raw = mcp::fixture("raw_server.py");
    let (mock, server) = server(
        &stdio_toml("fx", "python3", &[&raw, "slow-first", "2600"]),
        &[("BAE_MCP_TIMEOUT", "2")],
    );
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "first"}));
    let resp = only(&evs, "mcp.response")["payload"].clone();
    let text = "MCP transport error: timed out awaiting tools/call response";
    assert_eq!(
        resp,
        json!({"server_name": "fx", "ok": false, "error": text})
    );
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": format!("MCP error: {text}")}])
    );
    // The connection survives a timeout: the late answer (old id) is
    // skipped and the next call gets its own.
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "again"}));
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"][0]["text"],
        "raw: again"
    );
}

#[test]
fn a_server_that_dies_mid_call_fails_that_call_and_later_ones_fast() {
    let (mock, server) = server(&sdk_stdio_toml("fx", &[]), &[]);
    let f = open_mcp(&server, &["fx"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "crash", json!({}));
    let closed = "MCP transport error: MCP server closed the connection";
    assert_eq!(only(&evs, "mcp.response")["payload"]["error"], closed);
    let started = std::time::Instant::now();
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "x"}));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(only(&evs, "mcp.response")["payload"]["error"], closed);
    // The dead child was reaped.
    let pid = server.pid().unwrap();
    assert!(mcp::eventually(WAIT, || mcp::children_of(pid).1.is_empty()));
}

#[test]
fn garbage_blank_lines_notifications_and_foreign_ids_are_skipped() {
    let raw = mcp::fixture("raw_server.py");
    let (mock, server) = server(&stdio_toml("raw", "python3", &[&raw, "garbage"]), &[]);
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"],
        json!([{"type": "text", "text": "raw: hi"}])
    );
}

#[test]
fn a_line_over_the_limit_fails_the_call_with_a_clear_error() {
    let raw = mcp::fixture("raw_server.py");
    let (mock, server) = server(
        &stdio_toml("raw", "python3", &[&raw, "huge-line", "200000"]),
        &[("BAE_MCP_MAX_MESSAGE_BYTES", "100000")],
    );
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    let err = only(&evs, "mcp.response")["payload"]["error"].clone();
    assert_eq!(
        err,
        "MCP transport error: MCP server sent a line over the 100000-byte limit"
    );
}

#[test]
fn a_silent_server_and_a_server_exiting_on_call_never_hang_the_turn() {
    let raw = mcp::fixture("raw_server.py");
    let toml = format!(
        "{}{}",
        stdio_toml("silent", "python3", &[&raw, "silent"]),
        stdio_toml("exits", "python3", &[&raw, "exit-on-call"]),
    );
    let (mock, server) = server(&toml, &[("BAE_MCP_TIMEOUT", "1")]);
    let f = open_mcp(&server, &["silent"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "hi"}));
    assert_eq!(
        only(&evs, "mcp.response")["payload"]["error"],
        "MCP transport error: timed out awaiting tools/call response"
    );
    let g = open_mcp(&server, &["exits"], &[], json!({}));
    let evs = one_call(&server, &mock, &g, "echo", json!({"text": "hi"}));
    assert_eq!(
        only(&evs, "mcp.response")["payload"]["error"],
        "MCP transport error: MCP server closed the connection"
    );
}

#[test]
fn a_huge_tools_list_is_advertised_whole() {
    let raw = mcp::fixture("raw_server.py");
    let (mock, server) = server(
        &stdio_toml("many", "python3", &[&raw, "many-tools", "2000"]),
        &[],
    );
    let f = open_mcp(&server, &["many"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "tool_1999", json!({"text": "last"}));
    assert_eq!(advertised_names(&mock).len(), 2000);
    assert_eq!(
        only(&evs, "tool.result")["payload"]["content"][0]["text"],
        "raw: last"
    );
}

#[test]
fn command_and_args_templates_are_resolved_at_connect() {
    let raw = mcp::fixture("raw_server.py");
    let (mock, server) = server(
        &stdio_toml("raw", "${MCP_PY}", &["${MCP_RAW}", "normal"]),
        &[("MCP_PY", "python3"), ("MCP_RAW", &raw)],
    );
    let f = open_mcp(&server, &["raw"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"text": "t"}));
    assert_eq!(only(&evs, "tool.result")["payload"]["server_name"], "raw");
    // An unset variable skips the server for the session (logged).
    let (mock2, server2) = mcp_support::server(&stdio_toml("raw", "${MCP_UNSET_VAR}", &[]), &[]);
    let f = open_mcp(&server2, &["raw"], &[], json!({}));
    let evs = one_call(&server2, &mock2, &f, "echo", json!({}));
    assert_eq!(
        only(&evs, "tool.call")["payload"]["server_name"],
        Value::Null
    );
    assert!(server2.stderr_log().contains("MCP_UNSET_VAR"));
}

#[test]
fn the_npm_reference_server_over_stdio() {
    mcp::require_everything();
    let (mock, server) = server(
        &stdio_toml("everything", "mcp-server-everything", &["stdio"]),
        &[],
    );
    let f = open_mcp(&server, &["everything"], &[], json!({}));
    let evs = one_call(&server, &mock, &f, "echo", json!({"message": "hi"}));
    let names = advertised_names(&mock);
    assert!(names.contains(&"get-sum".to_string()), "{names:?}");
    assert_eq!(names.len(), 13, "{names:?}");
    let result = only(&evs, "tool.result")["payload"].clone();
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "Echo: hi"}])
    );
}
