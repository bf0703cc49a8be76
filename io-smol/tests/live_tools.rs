//! Tool dispatch, paused turns and per-driver tool scoping over the real
//! binary (spec 01 §8.4, §8.6; spec 06 §1–§3; checklist C-098…C-117).
//!
//! No MCP server is configured, so an undeclared tool name is dispatched as
//! `mcp` with `server_name: null` (C-100) — the server-side leg of a mixed
//! turn.

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

/// C-106…C-108 and the duplicate case: each rejection logs one
/// `session.error {tool_result_merge_invalid}`, answers -32000 and errors
/// the session.
#[test]
fn c106_c107_c108_invalid_resumes_error_the_session() {
    let (mock, server) = anthropic_server(&[]);
    let cases: Vec<(Value, Value, &str)> = vec![
        (
            json!("user"),
            json!([{"type": "text", "text": "no results"}, tool_result("tu_m", "x")]),
            "no tool_result for tool_use id \"tu_c\"",
        ),
        (
            json!("user"),
            json!([tool_result("tu_c", "a"), tool_result("tu_zzz", "b")]),
            "tool_result id \"tu_zzz\" is not in the paused assistant turn",
        ),
        (
            json!("user"),
            json!([tool_result("tu_c", "a"), tool_result("tu_c", "b")]),
            "client returned a duplicate tool_result for id \"tu_c\"",
        ),
        (
            json!("assistant"),
            json!([tool_result("tu_c", "a")]),
            "paused tool continuation must have role \"user\", got \"assistant\"",
        ),
        (
            json!("user"),
            json!([]),
            "no tool_result for tool_use id \"tu_c\"",
        ),
    ];
    for (role, content, reason) in cases {
        let (f, _) = paused_mixed(&server, &mock);
        let before = events(&server, &f.session_id, &f.a.session_key).len();
        let (notes, t) = server.client().rpc(
            &f.session_id,
            &f.a.session_key,
            "session.sendMessage",
            json!({"message": {"role": role, "content": content}}),
            5,
        );
        assert_rpc_error(&t, -32000, &format!("tool result merge invalid: {reason}"));
        // The error is recorded while the request holds the gate, so it is
        // streamed to it (spec 01 §7); nothing else is.
        assert_eq!(
            types(&note_events(&notes)),
            vec!["session.error"],
            "{notes:?}"
        );
        let evs = events(&server, &f.session_id, &f.a.session_key);
        assert_eq!(
            evs.len(),
            before + 1,
            "only the error is recorded: {:?}",
            types(&evs)
        );
        let err = evs.last().unwrap();
        assert_eq!(
            err["payload"],
            json!({"reason": "tool_result_merge_invalid", "detail": reason})
        );
        assert_eq!(err["client_key_id"], json!(f.a.key_id));
        assert_eq!(admin_state(&server, &f.session_id), "error");
        let (_, t) = send(&server, &f.session_id, &f.a, json!("hello?"));
        assert_rpc_error(&t, -32000, "session is error, not open");
    }
}

#[test]
fn c109_plain_message_abandons_the_paused_turn() {
    let (mock, server) = anthropic_server(&[]);
    let (f, _) = paused_mixed(&server, &mock);
    mock.push(Reply::text("fine, moving on"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("never mind"));
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    let abandoned = "Client tool call was abandoned before returning a result.";
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_m", "content": [{"type": "text", "text": MCP_ERR}], "is_error": true},
            {"type": "tool_result", "tool_use_id": "tu_c", "content": abandoned, "is_error": true},
            {"type": "text", "text": "never mind"}
        ]})
    );
    assert_eq!(
        evs[1]["payload"],
        json!({"tool_use_id": "tu_c", "dispatch": "client", "server_name": null,
               "is_error": true, "content": abandoned})
    );
    assert_eq!(admin_state(&server, &f.session_id), "open");
    // The gate was released: a next ordinary turn works.
    mock.push(Reply::text("next"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("next?"));
    assert_eq!(text_of(&t["result"]["message"]), "next");
}

#[test]
fn c110_tool_result_without_a_pause_is_rejected_and_records_nothing() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let before = events(&server, &f.session_id, &f.a.session_key);
    let (notes, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "x")]),
    );
    assert!(notes.is_empty());
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
    assert_eq!(events(&server, &f.session_id, &f.a.session_key), before);
    assert_eq!(admin_state(&server, &f.session_id), "open");
    assert_eq!(mock.request_count(), 0);
    // And the gate is free again.
    let (_, t) = send(&server, &f.session_id, &f.a, json!("plain"));
    assert_eq!(text_of(&t["result"]["message"]), "ok");
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

#[test]
fn c113_to_c116_update_client_tools_errors() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(
        &server,
        "main",
        &[],
        &["tool_a", "remote_subagent_status"],
        json!({}),
    );
    let (sid, key) = (f.session_id.as_str(), f.a.session_key.as_str());
    let call = |params: Value| rpc(&server, sid, key, "session.updateClientTools", params).1;
    // C-116 before registration, even with bad params.
    assert_rpc_error(
        &call(json!({})),
        -32001,
        "call session.registerDriver before session.updateClientTools",
    );
    testkit::fixtures::register_driver(&server, sid, key);
    // C-113.
    assert_rpc_error(
        &call(json!({"tools": [tool("tool_a"), tool("forbidden")]})),
        -32015,
        "tool_not_allowed: tool \"forbidden\" is not in the profile's allowlist",
    );
    // C-114: reserved even when allowlisted, and checked before the
    // allowlist (spec 06 §3.2 steps 6–7).
    for tools in [
        json!([tool("remote_subagent_status")]),
        json!([tool("forbidden"), tool("remote_subagent_status")]),
    ] {
        assert_rpc_error(
            &call(json!({ "tools": tools })),
            -32015,
            "tool_not_allowed: tool \"remote_subagent_status\" is not in the profile's allowlist",
        );
    }
    // C-115 (exact texts of spec 06 §3.2 steps 3–4).
    assert_rpc_error(
        &call(json!({})),
        -32602,
        "Invalid params: missing \"tools\"",
    );
    assert_rpc_error(
        &call(json!({"tools": [tool("tool_a"), {"name": ""}]})),
        -32602,
        "Invalid params: every tool requires a non-empty \"name\"",
    );
    for bad in [
        json!({}),
        json!({"tools": [{"name": ""}]}),
        json!({"tools": [{"name": "   "}]}),
        json!({"tools": "tool_a"}),
    ] {
        let t = call(bad.clone());
        assert_eq!(t["error"]["code"], -32602, "{bad} → {t}");
        assert!(t["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid params: "));
    }
    // Nothing logged by any of it beyond open + register.
    assert_eq!(
        types(&events(&server, sid, key)),
        vec!["session.open", "session.driver.register"]
    );
    // After DELETE the registry is cleared (C-048): -32001 again.
    server
        .client()
        .bearer(key)
        .delete(&format!("/api/v1/sessions/{sid}"))
        .assert_status(200);
    assert_rpc_error(
        &call(json!({"tools": []})),
        -32001,
        "call session.registerDriver before session.updateClientTools",
    );
}

#[test]
fn update_client_tools_on_an_error_session_is_32000() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &["tool_a"], json!({}));
    mock.push(Reply::status(500, "down"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    assert_eq!(admin_state(&server, &f.session_id), "error");
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.updateClientTools",
        json!({"tools": [tool("tool_a")]}),
    );
    assert_rpc_error(&t, -32000, "session is error, not open");
}

/// Spec 06 §7 note 1: tools given to `updateClientTools` are normalised to
/// the open/join stored form, so the provider sees `{name, description:
/// null, input_schema: {}}`; spec 01 §8.3: a queued request re-reads the
/// declarations once it holds the gate.
#[test]
fn updated_tools_are_normalised_and_picked_up_by_a_queued_turn() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &["tool_a", "tool_c"], json!({}));
    let b = f.join_registered(&server, json!({"tools": [tool("tool_a")]}));
    mock.push_all([
        Reply::text("A slow").delayed(std::time::Duration::from_millis(400)),
        Reply::text("B"),
    ]);
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("A"));
    mock.wait_requests(1, WAIT);
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B"));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &b.session_key,
        "session.updateClientTools",
        json!({"tools": [{"name": "tool_c"}]}),
    );
    assert_eq!(t["result"], json!({"updated": true}));
    sa.collect_until_terminal(WAIT).1.expect("A's terminal");
    let tb = sb.collect_until_terminal(WAIT).1.expect("B's terminal");
    let req = &of_type(&result_events(&tb), "provider.request")[0]["payload"];
    assert_eq!(
        req["tools"],
        json!([{"name": "tool_c", "description": null, "input_schema": {}}])
    );
}

/// The seed (`session.updateClientTools`): "The update applies to the next
/// provider call. A call racing an in-flight turn does not rewrite the tool
/// list already sent to that provider." Spec 05 §9 step 3a recomputes the
/// tool list for every iteration of the turn loop. So an update that lands
/// while round 1 of an all-server loop is at the provider shows up in round
/// 2's `provider.request.tools`, while round 1's logged list is unchanged.
#[test]
fn update_during_an_all_server_loop_applies_to_the_next_provider_call() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(
        &server,
        "main",
        &[],
        &["tool_a", "tool_c"],
        json!({"tools": [tool("tool_a")]}),
    );
    mock.push_all([
        Reply::tool_use("tu_1", "lookup_db", json!({}))
            .delayed(std::time::Duration::from_millis(400)),
        Reply::text("done"),
    ]);
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("go"));
    mock.wait_requests(1, WAIT);
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.updateClientTools",
        json!({"tools": [tool("tool_c")]}),
    );
    assert_eq!(t["result"], json!({"updated": true}));
    let t = sa.collect_until_terminal(WAIT).1.expect("terminal");
    let reqs = of_type(&result_events(&t), "provider.request");
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0]["payload"]["tools"][0]["name"], "tool_a");
    let second: Vec<&str> = reqs[1]["payload"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(second, vec!["tool_c"], "round 2 uses the updated list");
    assert_eq!(mock.requests()[1].body["tools"][0]["name"], "tool_c");
}
