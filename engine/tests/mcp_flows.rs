//! MCP through the whole engine, in process: the create waits for its
//! servers, a tool round parks on an MCP call without holding the engine,
//! and close tears everything down (spec 06 §4.1; C-099).

mod common;

use common::*;
use engine::mcp::{McpCommand, McpConnId, McpEvent, McpServerSpec, McpTransport};
use engine::{Config, Listener};
use serde_json::{json, Value};

fn mcp_config() -> Config {
    let spec = |name: &str| McpServerSpec {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: "srv".into(),
            args: vec![],
        },
        reconnect: false,
    };
    Config {
        mcp_servers: vec![spec("a"), spec("b")],
        ..config()
    }
}

fn line(v: Value) -> McpEvent {
    McpEvent::Line(v.to_string().into_bytes())
}

fn mcp(h: &mut Harness, conn: McpConnId, event: McpEvent) {
    h.input(engine::Input::Mcp { conn, event });
}

fn handshake(h: &mut Harness, conn: McpConnId, tools: &[&str]) {
    let tools: Vec<Value> = tools.iter().map(|n| json!({"name": n})).collect();
    mcp(h, conn, McpEvent::Opened);
    mcp(
        h,
        conn,
        line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
    );
    mcp(
        h,
        conn,
        line(json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": tools}})),
    );
}

/// A profile listing `servers`, a key, and a create request left waiting.
fn start_create(h: &mut Harness, servers: &[&str]) -> engine::ConnId {
    let (s, p) = h.admin(
        "POST",
        "/admin/v1/profiles",
        Some(&json!({"name": "p", "primary_provider": "main", "mcp_servers": servers})),
    );
    assert_eq!(s, 201, "{p}");
    let (s, k) = h.admin(
        "POST",
        "/admin/v1/keys",
        Some(&json!({"name": "k", "profile_id": p["id"]})),
    );
    assert_eq!(s, 201);
    let key = k["key"].as_str().unwrap().to_string();
    let conn = h.connect(Listener::Client);
    h.send_bytes(
        conn,
        &build_request("POST", "/api/v1/sessions", Some(&key), Some(&json!({}))),
    );
    conn
}

fn created(h: &mut Harness, conn: engine::ConnId) -> (String, String) {
    let (status, body) = parse_response(&h.take(conn));
    assert_eq!(status, 201);
    let v: Value = serde_json::from_slice(&body).unwrap();
    (
        v["session_id"].as_str().unwrap().into(),
        v["session_key"].as_str().unwrap().into(),
    )
}

#[test]
fn the_201_waits_for_every_server_and_unknown_names_are_skipped() {
    let mut h = Harness::new(mcp_config());
    let conn = start_create(&mut h, &["a", "missing", "b"]);
    let opens: Vec<String> = h
        .mcp
        .drain(..)
        .filter_map(|c| match c {
            McpCommand::Open { server, .. } => Some(server.name),
            _ => None,
        })
        .collect();
    assert_eq!(opens, ["a", "b"], "both at once, the unknown name skipped");
    assert!(
        h.take(conn).is_empty(),
        "no answer before the servers are ready"
    );
    handshake(&mut h, McpConnId(1), &["x"]);
    assert!(h.take(conn).is_empty());
    mcp(
        &mut h,
        McpConnId(2),
        McpEvent::OpenFailed("spawn failed".into()),
    );
    let (sid, _) = created(&mut h, conn);
    assert!(sid.starts_with("ses_"));
}

#[test]
fn a_profile_without_known_servers_answers_at_once() {
    let mut h = Harness::new(mcp_config());
    let conn = start_create(&mut h, &["missing"]);
    assert!(h.mcp.is_empty());
    created(&mut h, conn);
}

#[test]
fn c099_an_mcp_round_parks_the_turn_and_resumes_on_the_answer() {
    let mut h = Harness::new(mcp_config());
    let conn = start_create(&mut h, &["a"]);
    handshake(&mut h, McpConnId(1), &["lookup"]);
    let (sid, skey) = created(&mut h, conn);
    let reg = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver", "params": {}});
    h.rpc(&sid, &skey, &reg);
    h.mcp.clear();
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": 1}}
    ])));
    let send = json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage",
                      "params": {"message": {"role": "user", "content": "go"}}});
    let turn = h.rpc_start(&sid, &skey, &send);
    // The round waits on tools/call; the provider was offered the MCP tool.
    let call = h.calls.back().cloned();
    assert!(call.is_none(), "the first provider call was answered");
    let sent: Vec<Value> = h
        .mcp
        .drain(..)
        .filter_map(|c| match c {
            McpCommand::Send { message, .. } => Some(serde_json::from_slice(&message).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "tools/call");
    assert_eq!(
        sent[0]["params"],
        json!({"name": "lookup", "arguments": {"q": 1}})
    );
    let id = sent[0]["id"].as_u64().unwrap();
    // Other sessions are served meanwhile (the engine is not blocked).
    let (s, _) = h.request(Listener::Client, "GET", "/healthz", None, None);
    assert_eq!(s, 200);
    h.replies.push_back(anthropic_text("done"));
    mcp(
        &mut h,
        McpConnId(1),
        line(
            json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "42"}]}}),
        ),
    );
    let frames = h.frames(turn);
    let terminal = frames.last().unwrap();
    let events = terminal["result"]["events"].as_array().unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "client.message.send",
            "provider.request",
            "provider.response",
            "tool.call",
            "mcp.request",
            "mcp.response",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(events[1]["payload"]["tools"][0]["name"], "lookup");
    assert_eq!(events[3]["payload"]["server_name"], "a");
    assert_eq!(
        events[6]["payload"]["content"],
        json!([{"type": "text", "text": "42"}])
    );
}

#[test]
fn closing_the_session_mid_call_drops_the_turn_and_closes_the_server() {
    let mut h = Harness::new(mcp_config());
    let conn = start_create(&mut h, &["a"]);
    handshake(&mut h, McpConnId(1), &["lookup"]);
    let (sid, skey) = created(&mut h, conn);
    let reg = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver", "params": {}});
    h.rpc(&sid, &skey, &reg);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {}}
    ])));
    let send = json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage",
                      "params": {"message": {"role": "user", "content": "go"}}});
    h.rpc_start(&sid, &skey, &send);
    h.mcp.clear();
    let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &skey, None);
    assert_eq!(s, 200);
    assert_eq!(
        h.mcp.drain(..).collect::<Vec<_>>(),
        vec![McpCommand::Close {
            conn: McpConnId(1),
            session_id: None
        }]
    );
    // A late answer changes nothing and nothing more is logged.
    let before = h.store.events.len();
    mcp(
        &mut h,
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {}})),
    );
    assert_eq!(h.store.events.len(), before);
    assert!(h.calls.is_empty());
}

/// A session created by this process connected its MCP servers at open; a
/// later turn does not connect them again, also after its idle history was
/// dropped and read back (the reconnect-after-restart path is only for
/// sessions from before a start).
#[test]
fn a_dropped_history_does_not_reconnect_a_fresh_sessions_servers() {
    let mut config = mcp_config();
    for s in &mut config.mcp_servers {
        s.reconnect = true;
    }
    config.history_cache = engine::history_cache::Limits {
        budget_bytes: 0,
        idle_ms: 0,
    };
    let mut h = Harness::new(config);
    let conn = start_create(&mut h, &["a"]);
    mcp(
        &mut h,
        McpConnId(1),
        McpEvent::OpenFailed("spawn failed".into()),
    );
    let (sid, skey) = created(&mut h, conn);
    h.mcp.clear();
    h.register_driver(&sid, &skey);
    for (i, text) in ["one", "two"].into_iter().enumerate() {
        h.replies.push_back(anthropic_text(&format!("answer {i}")));
        let send = json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage", "params": {"message": {"content": text}}});
        let frames = h.rpc(&sid, &skey, &send);
        let last = frames.last().cloned().unwrap_or(Value::Null);
        assert_eq!(
            last["result"]["message"]["content"][0]["text"],
            format!("answer {i}")
        );
    }
    let opens = h
        .mcp
        .iter()
        .filter(|c| matches!(c, McpCommand::Open { .. }))
        .count();
    assert_eq!(opens, 0, "{:?}", h.mcp);
    let loads = h
        .reads_seen
        .iter()
        .filter(|r| matches!(r, engine::StoreRead::LatestOfType { .. }))
        .count();
    assert!(loads >= 1, "the second turn read its history back");
}
