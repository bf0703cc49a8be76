//! Tool dispatch, paused turns and per-driver tool scoping in-process
//! (spec 01 §8.4, §8.6; spec 06 §1–§3; checklist C-098…C-117). No MCP
//! server is configured, so an undeclared tool name is dispatched as `mcp`
//! with `server_name: null` (C-100). Moved from `io-smol/tests/live_tools.rs`,
//! which keeps a mixed round trip and per-driver tool lists as the mock
//! provider receives them.

mod common;

use common::*;
use engine::ProviderReply;
use serde_json::{json, Value};

const MCP_ERR: &str = "MCP error: no MCP server is configured for tool 'lookup_db'";
const ABANDONED: &str = "Client tool call was abandoned before returning a result.";

/// A session whose creator declares `get_time`, paused on a response with
/// an unknown (`mcp`) block `tu_m` then a client block `tu_c`.
fn paused_mixed(h: &mut Harness) -> (Live, Value) {
    let f = h.open_driver(
        "main",
        &[],
        &["get_time", "other"],
        json!({"tools": [tool("get_time")]}),
    );
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "text", "text": "let me look"},
        {"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {"q": 1}},
        {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}},
    ])));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("what now?"));
    (f, t)
}

fn tool_use(id: &str, name: &str) -> ProviderReply {
    anthropic_tool_use(json!([{"type": "tool_use", "id": id, "name": name, "input": {}}]))
}

fn rpc(h: &mut Harness, sid: &str, key: &str, method: &str, params: Value) -> (Vec<Value>, Value) {
    let conn = h.rpc_start(sid, key, &call(3, method, params));
    h.finished(conn)
}

fn state(h: &mut Harness, sid: &str) -> String {
    h.admin_session(sid)["state"].as_str().unwrap().to_string()
}

/// The tool names of the first `provider.request` of a turn.
fn names(t: &Value) -> Vec<String> {
    let req = &of_type(&result_events(t), "provider.request")[0]["payload"];
    req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn c098_to_c104_mixed_turn_round_trip() {
    let mut h = Harness::new(config());
    let (f, t) = paused_mixed(&mut h);
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
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
    assert_eq!(
        evs[5]["payload"],
        json!({"method": "tools/call", "server_name": null, "tool": "lookup_db", "input": {"q": 1}})
    );
    assert_eq!(evs[6]["payload"]["ok"], false);
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
        h.call_bodies.len(),
        1,
        "the mcp leg does not call the provider"
    );
    // Resume: a client result for the server id is dropped (C-105), extra
    // text follows the results (C-104).
    h.replies.push_back(anthropic_text("It is noon."));
    let (notes, t) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([
            {"type": "text", "text": "also: thanks"},
            tool_result("tu_c", "12:00"),
            tool_result("tu_m", "client forgery"),
        ]),
    );
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
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
    assert_eq!(evs[1]["payload"]["is_error"], false);
    assert_eq!(
        types_of(&note_events(&notes)),
        [
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    let req = &of_type(&evs, "provider.request")[0]["payload"];
    assert_eq!(req["messages"][2], evs[0]["payload"]);
    let wire: Value = serde_json::from_slice(&h.call_bodies[1]).unwrap();
    assert!(!wire["messages"].to_string().contains("dispatch"), "C-093");
    assert_eq!(state(&mut h, &f.sid), "open");
}

/// C-106…C-108 and the duplicate case: each rejection logs one
/// `session.error {tool_result_merge_invalid}`, answers -32000 and errors
/// the session.
#[test]
fn c106_c107_c108_invalid_resumes_error_the_session() {
    let mut h = Harness::new(config());
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
        let (f, _) = paused_mixed(&mut h);
        let key = f.a.session_key.clone();
        let before = h.events(&f.sid, &key).len();
        let params = json!({"message": {"role": role, "content": content}});
        let (notes, t) = rpc(&mut h, &f.sid, &key, "session.sendMessage", params);
        assert_rpc_error(&t, -32000, &format!("tool result merge invalid: {reason}"));
        // The error is streamed to the request holding the gate; nothing else.
        assert_eq!(
            types_of(&note_events(&notes)),
            ["session.error"],
            "{notes:?}"
        );
        let evs = h.events(&f.sid, &key);
        assert_eq!(
            evs.len(),
            before + 1,
            "only the error: {:?}",
            types_of(&evs)
        );
        let err = evs.last().unwrap();
        assert_eq!(
            err["payload"],
            json!({"reason": "tool_result_merge_invalid", "detail": reason})
        );
        assert_eq!(err["client_key_id"], json!(f.a.key_id));
        assert_eq!(state(&mut h, &f.sid), "error");
        let (_, t) = h.send(&f.sid, &key, json!("hello?"));
        assert_rpc_error(&t, -32000, "session is error, not open");
    }
}

#[test]
fn c109_plain_message_abandons_the_paused_turn() {
    let mut h = Harness::new(config());
    let (f, _) = paused_mixed(&mut h);
    let key = f.a.session_key.clone();
    h.replies.push_back(anthropic_text("fine, moving on"));
    let (_, t) = h.send(&f.sid, &key, json!("never mind"));
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
            "client.message.send",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_m", "content": [{"type": "text", "text": MCP_ERR}], "is_error": true},
            {"type": "tool_result", "tool_use_id": "tu_c", "content": ABANDONED, "is_error": true},
            {"type": "text", "text": "never mind"}
        ]})
    );
    assert_eq!(
        evs[1]["payload"],
        json!({"tool_use_id": "tu_c", "dispatch": "client", "server_name": null,
               "is_error": true, "content": ABANDONED})
    );
    assert_eq!(state(&mut h, &f.sid), "open");
    // The gate was released: a next ordinary turn works.
    h.replies.push_back(anthropic_text("next"));
    let (_, t) = h.send(&f.sid, &key, json!("next?"));
    assert_eq!(text_of(&t["result"]["message"]), "next");
}

#[test]
fn c110_tool_result_without_a_pause_is_rejected_and_records_nothing() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    let before = h.events(&f.sid, &key);
    let (notes, t) = h.send(&f.sid, &key, json!([tool_result("tu_1", "x")]));
    assert!(notes.is_empty());
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
    assert_eq!(h.events(&f.sid, &key), before);
    assert_eq!(state(&mut h, &f.sid), "open");
    assert!(h.call_bodies.is_empty());
    // And the gate is free again.
    h.replies.push_back(anthropic_text("ok"));
    let (_, t) = h.send(&f.sid, &key, json!("plain"));
    assert_eq!(text_of(&t["result"]["message"]), "ok");
}

#[test]
fn c111_c112_c117_tools_are_private_per_driver_and_replaceable() {
    let mut h = Harness::new(config());
    let f = h.open_driver(
        "main",
        &[],
        &["tool_a", "tool_b", "tool_c"],
        json!({"tools": [tool("tool_a")]}),
    );
    let b = h.join_driver(&f, json!({"tools": [tool("tool_b")]}));
    let a = f.a.session_key.clone();
    let turn = |h: &mut Harness, key: &str, text: &str| {
        h.replies.push_back(anthropic_text("ok"));
        h.send(&f.sid, key, json!(text)).1
    };
    let t = turn(&mut h, &b.session_key, "b speaks");
    assert_eq!(names(&t), ["tool_b"], "C-111");
    let wire: Value = serde_json::from_slice(&h.call_bodies[0]).unwrap();
    assert_eq!(wire["tools"].as_array().unwrap().len(), 1);
    assert_eq!(wire["tools"][0]["name"], "tool_b");
    assert_eq!(names(&turn(&mut h, &a, "a speaks")), ["tool_a"]);
    // B calling A's tool is not B's client tool: it is dispatched as mcp.
    h.replies.push_back(tool_use("tu_x", "tool_a"));
    h.replies.push_back(anthropic_text("ok"));
    let (_, t) = h.send(&f.sid, &b.session_key, json!("use tool_a"));
    assert_eq!(
        of_type(&result_events(&t), "tool.call")[0]["payload"]["dispatch"],
        "mcp"
    );
    // C-112/C-117: A replaces its list; only A is affected; nothing logged.
    let before = h.events(&f.sid, &a).len();
    let (notes, t) = rpc(
        &mut h,
        &f.sid,
        &a,
        "session.updateClientTools",
        json!({"tools": [tool("tool_c")]}),
    );
    assert!(notes.is_empty());
    assert_eq!(t["result"], json!({"updated": true}));
    assert_eq!(h.events(&f.sid, &a).len(), before);
    assert_eq!(names(&turn(&mut h, &a, "a again")), ["tool_c"]);
    assert_eq!(names(&turn(&mut h, &b.session_key, "b again")), ["tool_b"]);
    // An empty list is a valid full replacement.
    let (_, t) = rpc(
        &mut h,
        &f.sid,
        &a,
        "session.updateClientTools",
        json!({"tools": []}),
    );
    assert_eq!(t["result"], json!({"updated": true}));
    assert!(names(&turn(&mut h, &a, "a bare")).is_empty());
}

#[test]
fn c113_to_c116_update_client_tools_errors() {
    let mut h = Harness::new(config());
    let f = h.fix(&["tool_a", "remote_subagent_status"]);
    let (sid, key) = (f.sid.clone(), f.skey.clone());
    let call =
        |h: &mut Harness, params: Value| rpc(h, &sid, &key, "session.updateClientTools", params).1;
    let unregistered = "call session.registerDriver before session.updateClientTools";
    // C-116 before registration, even with bad params.
    assert_rpc_error(&call(&mut h, json!({})), -32001, unregistered);
    h.register_driver(&sid, &key);
    // C-113.
    assert_rpc_error(
        &call(
            &mut h,
            json!({"tools": [tool("tool_a"), tool("forbidden")]}),
        ),
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
            &call(&mut h, json!({ "tools": tools })),
            -32015,
            "tool_not_allowed: tool \"remote_subagent_status\" is not in the profile's allowlist",
        );
    }
    // C-115 (exact texts of spec 06 §3.2 steps 3–4).
    assert_rpc_error(
        &call(&mut h, json!({})),
        -32602,
        "Invalid params: missing \"tools\"",
    );
    assert_rpc_error(
        &call(&mut h, json!({"tools": [tool("tool_a"), {"name": ""}]})),
        -32602,
        "Invalid params: every tool requires a non-empty \"name\"",
    );
    for bad in [
        json!({"tools": [{"name": ""}]}),
        json!({"tools": [{"name": "   "}]}),
        json!({"tools": "tool_a"}),
    ] {
        let t = call(&mut h, bad.clone());
        assert_eq!(t["error"]["code"], -32602, "{bad} → {t}");
        assert!(t["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid params: "));
    }
    // Nothing logged by any of it beyond open + register.
    assert_eq!(
        types_of(&h.events(&sid, &key)),
        ["session.open", "session.driver.register"]
    );
    // After DELETE the registry is cleared (C-048): -32001 again.
    assert_eq!(
        h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &key, None)
            .0,
        200
    );
    assert_rpc_error(&call(&mut h, json!({"tools": []})), -32001, unregistered);
}

#[test]
fn update_client_tools_on_an_error_session_is_32000() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &["tool_a"], json!({}));
    h.replies.push_back(ProviderReply::Http {
        status: 500,
        body: b"down".to_vec(),
        advice: Default::default(),
    });
    h.send(&f.sid, &f.a.session_key, json!("hi"));
    assert_eq!(state(&mut h, &f.sid), "error");
    let params = json!({"tools": [tool("tool_a")]});
    let (_, t) = rpc(
        &mut h,
        &f.sid,
        &f.a.session_key,
        "session.updateClientTools",
        params,
    );
    assert_rpc_error(&t, -32000, "session is error, not open");
}

/// Spec 06 §7 note 1: tools given to `updateClientTools` are normalised to
/// the open/join stored form (`{name, description: null, input_schema:
/// {}}`); spec 01 §8.3: a queued request re-reads the declarations once
/// it holds the gate.
#[test]
fn updated_tools_are_normalised_and_picked_up_by_a_queued_turn() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &["tool_a", "tool_c"], json!({}));
    let b = h.join_driver(&f, json!({"tools": [tool("tool_a")]}));
    let sa = h.send_start(&f.sid, &f.a.session_key, json!("A"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("B"));
    let params = json!({"tools": [{"name": "tool_c"}]});
    let (_, t) = rpc(
        &mut h,
        &f.sid,
        &b.session_key,
        "session.updateClientTools",
        params,
    );
    assert_eq!(t["result"], json!({"updated": true}));
    h.replies.push_back(anthropic_text("A slow"));
    h.replies.push_back(anthropic_text("B"));
    h.pump();
    h.finished(sa);
    let (_, tb) = h.finished(sb);
    let req = &of_type(&result_events(&tb), "provider.request")[0]["payload"];
    assert_eq!(
        req["tools"],
        json!([{"name": "tool_c", "description": null, "input_schema": {}}])
    );
}

/// The seed (`session.updateClientTools`): "The update applies to the next
/// provider call", never to the list already sent. Spec 05 §9 step 3a: an
/// update landing while round 1 of an all-server loop is at the provider
/// shows up in round 2's `provider.request.tools`.
#[test]
fn update_during_an_all_server_loop_applies_to_the_next_provider_call() {
    let mut h = Harness::new(config());
    let f = h.open_driver(
        "main",
        &[],
        &["tool_a", "tool_c"],
        json!({"tools": [tool("tool_a")]}),
    );
    let key = f.a.session_key.clone();
    let sa = h.send_start(&f.sid, &key, json!("go"));
    let params = json!({"tools": [tool("tool_c")]});
    let (_, t) = rpc(&mut h, &f.sid, &key, "session.updateClientTools", params);
    assert_eq!(t["result"], json!({"updated": true}));
    h.replies.push_back(tool_use("tu_1", "lookup_db"));
    h.replies.push_back(anthropic_text("done"));
    h.pump();
    let (_, t) = h.finished(sa);
    let reqs = of_type(&result_events(&t), "provider.request");
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0]["payload"]["tools"][0]["name"], "tool_a");
    assert_eq!(
        reqs[1]["payload"]["tools"][0]["name"], "tool_c",
        "round 2 uses the update"
    );
    let wire: Value = serde_json::from_slice(&h.call_bodies[1]).unwrap();
    assert_eq!(wire["tools"][0]["name"], "tool_c");
}
