//! Content blocks (seed "Content blocks"; C-093, C-102) and events
//! (spec 02 §1.1, §4; C-234).

use proto::wire::content::*;
use proto::wire::event::*;
use serde_json::{json, Value};

#[test]
fn classify_seed_blocks() {
    let text = json!({"type": "text", "text": "hi"});
    let tu = json!({"type": "tool_use", "id": "tu_abc123", "name": "get_current_time", "input": {}, "dispatch": "client"});
    let tr = json!({"type": "tool_result", "tool_use_id": "tu_abc123", "content": "2026-07-06T18:26:10Z"});
    let tr_err = json!({"type": "tool_result", "tool_use_id": "x", "content": [{"type":"text","text":"e"}], "is_error": true});
    assert_eq!(Block::classify(&text), Block::Text("hi"));
    assert_eq!(
        Block::classify(&tu),
        Block::ToolUse {
            id: "tu_abc123",
            name: "get_current_time",
            input: &json!({})
        }
    );
    assert_eq!(
        Block::classify(&tr),
        Block::ToolResult {
            tool_use_id: "tu_abc123",
            content: &json!("2026-07-06T18:26:10Z"),
            is_error: false
        }
    );
    assert!(matches!(
        Block::classify(&tr_err),
        Block::ToolResult { is_error: true, .. }
    ));
    for other in [
        json!({"type":"image","source":{}}),
        json!({"type":"text"}),
        json!({"type":"tool_use","name":"x"}),
        json!({"type":"tool_result"}),
        json!("str"),
        json!(null),
        json!({"text":"no type"}),
    ] {
        assert_eq!(Block::classify(&other), Block::Other, "{other}");
    }
    assert!(matches!(
        Block::classify(&json!({"type":"tool_use","id":"a","name":"b"})),
        Block::ToolUse {
            input: Value::Null,
            ..
        }
    ));
    assert!(is_tool_use(&tu) && !is_tool_use(&tr) && is_tool_result(&tr) && is_text(&text));
}

#[test]
fn ids_and_predicates() {
    let content = json!([
        {"type": "tool_use", "id": "tu_abc123", "name": "get_current_time", "input": {}, "dispatch": "client"},
        {"type": "text", "text": "between"},
        {"type": "tool_use", "id": "tu_xyz789", "name": "list_directory", "input": {"path": "/data"}, "dispatch": "mcp"},
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "r"}
    ]);
    assert_eq!(tool_use_ids(&content), vec!["tu_abc123", "tu_xyz789"]);
    assert_eq!(tool_result_ids(&content), vec!["tu_1"]);
    assert!(has_tool_result(&content) && has_tool_use(&content));
    assert!(tool_use_ids(&json!("plain")).is_empty());
    assert!(!has_tool_result(&json!("plain")));
    assert!(!has_tool_result(&json!([])));
    assert_eq!(blocks(&json!({"a":1})).len(), 0);
}

#[test]
fn c093_strip_internal_removes_dispatch_and_caller_only_from_tool_use() {
    let mut tu = json!({"type":"tool_use","id":"tu_1","name":"n","input":{"dispatch":"keep"},"dispatch":"client","caller":{"x":1}});
    strip_internal(&mut tu);
    assert_eq!(
        serde_json::to_string(&tu).unwrap(),
        r#"{"type":"tool_use","id":"tu_1","name":"n","input":{"dispatch":"keep"}}"#
    );
    let mut other = json!({"type":"text","text":"t","dispatch":"client"});
    strip_internal(&mut other);
    assert_eq!(other["dispatch"], "client");
    let mut messages = vec![
        json!({"role":"user","content":"hi"}),
        json!({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"b","input":{},"dispatch":"mcp"}]}),
    ];
    strip_internal_messages(&mut messages);
    assert!(messages[1]["content"][0].get("dispatch").is_none());
    assert_eq!(messages[0]["content"], "hi");
}

#[test]
fn c102_set_dispatch_and_builders() {
    let mut tu = json!({"type":"tool_use","id":"tu_1","name":"n","input":{}});
    set_dispatch(&mut tu, Dispatch::Sandbox);
    assert_eq!(
        serde_json::to_string(&tu).unwrap(),
        r#"{"type":"tool_use","id":"tu_1","name":"n","input":{},"dispatch":"sandbox"}"#
    );
    set_dispatch(&mut tu, Dispatch::Client);
    assert_eq!(tu["dispatch"], "client");
    for d in [
        Dispatch::Client,
        Dispatch::Sandbox,
        Dispatch::Subagent,
        Dispatch::Mcp,
    ] {
        assert_eq!(Dispatch::parse(d.as_str()), Some(d));
    }
    assert_eq!(
        serde_json::to_string(&text_block("x")).unwrap(),
        r#"{"type":"text","text":"x"}"#
    );
    assert_eq!(
        serde_json::to_string(&tool_result_block(
            "tu_1",
            json!("Client tool call was abandoned before returning a result."),
            true
        ))
        .unwrap(),
        r#"{"type":"tool_result","tool_use_id":"tu_1","content":"Client tool call was abandoned before returning a result.","is_error":true}"#
    );
    assert_eq!(
        serde_json::to_string(&message("user", json!("hi"))).unwrap(),
        r#"{"role":"user","content":"hi"}"#
    );
    assert_eq!(into_blocks(json!("hi")), vec![text_block("hi")]);
    assert!(into_blocks(json!("")).is_empty());
    assert_eq!(into_blocks(json!([1])), vec![json!(1)]);
    assert_eq!(
        joined_text(
            &json!([{"type":"text","text":"a"},{"type":"tool_use","id":"x","name":"y"},{"type":"text","text":"b"}])
        ),
        "ab"
    );
    assert_eq!(joined_text(&json!("s")), "s");
    assert_eq!(joined_text(&json!(5)), "");
}

#[test]
fn event_catalogue_is_closed_at_28() {
    assert_eq!(EventType::ALL.len(), 28);
    let expected = [
        "client.message.send",
        "server.message.send",
        "provider.request",
        "provider.response",
        "tool.call",
        "tool.result",
        "mcp.request",
        "mcp.response",
        "sandbox.request",
        "sandbox.response",
        "session.open",
        "session.join",
        "session.close",
        "session.error",
        "session.driver.register",
        "session.sandbox.available",
        "session.sandbox.start",
        "session.sandbox.running",
        "session.sandbox.stop",
        "session.sandbox.stopped",
        "session.sandbox.error",
        "session.subagent.start",
        "session.subagent.running",
        "session.subagent.completed",
        "session.subagent.failed",
        "session.subagent.cancelled",
        "session.compaction.started",
        "session.compaction.completed",
    ];
    for (t, s) in EventType::ALL.iter().zip(expected) {
        assert_eq!(t.as_str(), s);
        assert_eq!(EventType::parse(s), Some(*t));
        assert_eq!(serde_json::to_string(t).unwrap(), format!("\"{s}\""));
        assert_eq!(
            serde_json::from_str::<EventType>(&format!("\"{s}\"")).unwrap(),
            *t
        );
    }
    assert_eq!(EventType::parse("session.compaction"), None, "retired type");
    assert!(serde_json::from_str::<EventType>("\"nope\"").is_err());
}

#[test]
fn event_view_member_order_and_fast_path_equals_serde() {
    let ev = EventView {
        id: "evt_3f9c0d1e2a4b5c6d7e8f9a0b1c2d3e4f".into(),
        session_id: "ses_8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d".into(),
        client_key_id: Some("key_11223344556677889900aabbccddeeff".into()),
        event_type: "session.open".into(),
        payload: json!({"client_version": "1.0.0", "tools": ["get_current_time"], "z": {"b": 1, "a": "x\"\n"}}),
        created_at: "2026-07-06T18:26:01.000Z".into(),
    };
    let serde_out = serde_json::to_string(&ev).unwrap();
    assert_eq!(ev.to_json(), serde_out);
    let v: Value = serde_json::from_str(&serde_out).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec![
            "id",
            "session_id",
            "client_key_id",
            "event_type",
            "payload",
            "created_at"
        ]
    );
    assert_eq!(ev.kind(), Some(EventType::SessionOpen));
    let fast = event_view_json(
        &ev.id,
        &ev.session_id,
        ev.client_key_id.as_deref(),
        &ev.event_type,
        &serde_json::to_string(&ev.payload).unwrap(),
        &ev.created_at,
    );
    assert_eq!(fast, serde_out);
    let back: EventView = serde_json::from_str(&fast).unwrap();
    assert_eq!(back, ev);
}

#[test]
fn event_view_null_client_key_and_escaping() {
    let ev = EventView {
        id: "evt_\u{1}\"\\".into(),
        session_id: "ses_é/\u{7f}".into(),
        client_key_id: None,
        event_type: "session.error".into(),
        payload: json!({}),
        created_at: "t".into(),
    };
    assert_eq!(ev.to_json(), serde_json::to_string(&ev).unwrap());
    assert!(ev.to_json().contains("\"client_key_id\":null"));
}
