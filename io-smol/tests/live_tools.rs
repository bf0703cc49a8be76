//! Tool dispatch, paused turns and per-driver tool scoping over the real
//! binary (spec 01 §8.4, §8.6; spec 06 §1–§3; checklist C-098…C-117).
//!
//! No MCP server is configured, so an undeclared tool name is dispatched as
//! `mcp` with `server_name: null` (C-100) — the server-side leg of a mixed
//! turn. These two prove the wiring with the mock provider's real wire;
//! invalid resumes, abandonment, `updateClientTools` and its errors are
//! tested in-process in `engine/tests/tools_flows.rs`.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const MCP_ERR: &str = "MCP error: no MCP server is configured for tool 'lookup_db'";

/// A session whose creator declares the client tool `get_time`, paused on
/// a response with an unknown (`mcp`) block `tu_m` then a client block
/// `tu_c`. Returns the fixture and the first leg's terminal frame.
fn paused_mixed(server: &Server, mock: &MockProvider) -> (Fixture, Value) {
    let f = open_registered(
        server,
        "main",
        &[],
        &["get_time", "other"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "text", "text": "let me look"}),
        json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {"q": 1}}),
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    let (_, t) = send(server, &f.session_id, &f.a, json!("what now?"));
    (f, t)
}

#[test]
fn c098_to_c104_mixed_turn_round_trip() {
    let (mock, server) = anthropic_server(&[]);
    let (f, t) = paused_mixed(&server, &mock);
    let evs = result_events(&t);
    // C-098 all tool.call first, tagged; C-099/C-100 the mcp leg; C-102 pause.
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "tool.call",
            "tool.call",
            "mcp.request",
            "mcp.response",
            "tool.result",
            "server.message.send"
        ]
    );
    assert_eq!(
        evs[3]["payload"],
        json!({"id": "tu_m", "name": "lookup_db", "input": {"q": 1}, "dispatch": "mcp", "server_name": null})
    );
    assert_eq!(evs[4]["payload"]["dispatch"], "client");
    assert_eq!(evs[4]["payload"]["id"], "tu_c");
    assert!(evs[4]["payload"]["server_name"].is_null());
    assert_eq!(
        evs[5]["payload"],
        json!({"method": "tools/call", "server_name": null, "tool": "lookup_db", "input": {"q": 1}})
    );
    assert_eq!(evs[6]["payload"]["server_name"], Value::Null);
    assert_eq!(evs[6]["payload"]["ok"], false);
    assert!(evs[6]["payload"]["error"].is_string());
    assert_eq!(
        evs[7]["payload"],
        json!({"tool_use_id": "tu_m", "dispatch": "mcp", "server_name": null, "is_error": true,
               "content": [{"type": "text", "text": MCP_ERR}]})
    );
    let paused = json!({"role": "assistant", "content": [
        {"type": "text", "text": "let me look"},
        {"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {"q": 1}, "dispatch": "mcp"},
        {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}, "dispatch": "client"}
    ]});
    assert_eq!(evs[8]["payload"], paused);
    assert_eq!(t["result"]["message"], paused, "C-102");
    assert_eq!(
        mock.request_count(),
        1,
        "the mcp leg does not call the provider again"
    );

    // Resume: a client result for the server id is dropped (C-105), extra
    // text follows the results (C-104).
    mock.push(Reply::text("It is noon."));
    let (notes, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([
            {"type": "text", "text": "also: thanks"},
            tool_result("tu_c", "12:00"),
            tool_result("tu_m", "client forgery"),
        ]),
    );
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ],
        "C-103: the server result is not logged again"
    );
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_m", "content": [{"type": "text", "text": MCP_ERR}], "is_error": true},
            {"type": "tool_result", "tool_use_id": "tu_c", "content": "12:00"},
            {"type": "text", "text": "also: thanks"}
        ]})
    );
    assert_eq!(evs[1]["payload"]["tool_use_id"], "tu_c");
    assert_eq!(evs[1]["payload"]["dispatch"], "client");
    assert_eq!(evs[1]["payload"]["content"], "12:00");
    assert_eq!(evs[1]["payload"]["is_error"], false);
    // The sender's stream has neither its client.message.send nor its own
    // client tool.result (spec 01 §7).
    assert_eq!(
        types(&note_events(&notes)),
        vec![
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    // Provider-facing history: dispatch stripped, merged results.
    let req = &of_type(&evs, "provider.request")[0]["payload"];
    assert_eq!(req["messages"].as_array().unwrap().len(), 3);
    assert_eq!(req["messages"][2], evs[0]["payload"]);
    assert_eq!(text_of(&t["result"]["message"]), "It is noon.");
    assert_eq!(admin_state(&server, &f.session_id), "open");
}

#[test]
fn c111_c112_c117_tools_are_private_per_driver_and_replaceable() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(
        &server,
        "main",
        &[],
        &["tool_a", "tool_b", "tool_c"],
        json!({"tools": [tool("tool_a")]}),
    );
    let b = f.join_registered(&server, json!({"tools": [tool("tool_b")]}));
    let names = |t: &Value| -> Vec<String> {
        let req = &of_type(&result_events(t), "provider.request")[0]["payload"];
        req["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, t) = send(&server, &f.session_id, &b, json!("b speaks"));
    assert_eq!(names(&t), vec!["tool_b"], "C-111");
    let wire = mock.requests();
    assert_eq!(wire[0].body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(wire[0].body["tools"][0]["name"], "tool_b");
    let (_, t) = send(&server, &f.session_id, &f.a, json!("a speaks"));
    assert_eq!(names(&t), vec!["tool_a"]);

    // B calling A's tool is not B's client tool: it is dispatched as mcp.
    mock.push(Reply::tool_use("tu_x", "tool_a", json!({})));
    let (_, t) = send(&server, &f.session_id, &b, json!("use tool_a"));
    let call = &of_type(&result_events(&t), "tool.call")[0];
    assert_eq!(call["payload"]["dispatch"], "mcp");

    // C-112/C-117: A replaces its list; only A is affected; nothing logged.
    let before = events(&server, &f.session_id, &f.a.session_key).len();
    let (notes, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.updateClientTools",
        json!({"tools": [tool("tool_c")]}),
    );
    assert!(notes.is_empty());
    assert_eq!(t["result"], json!({"updated": true}));
    assert_eq!(
        events(&server, &f.session_id, &f.a.session_key).len(),
        before
    );
    let (_, t) = send(&server, &f.session_id, &f.a, json!("a again"));
    assert_eq!(names(&t), vec!["tool_c"]);
    let (_, t) = send(&server, &f.session_id, &b, json!("b again"));
    assert_eq!(names(&t), vec!["tool_b"]);
    // An empty list is a valid full replacement.
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.updateClientTools",
        json!({"tools": []}),
    );
    assert_eq!(t["result"], json!({"updated": true}));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("a bare"));
    assert!(names(&t).is_empty());
}
