//! Forks and rewinds in-process (docs/extensions.md, "Forks, exports and
//! imports"): after a tool round trip and after a compaction, on both
//! provider kinds, the fork's next provider request is byte for byte its
//! parent's; a point inside a paused turn is refused; parent and fork go
//! their own ways; rewind hands a message back to edit. Moved from
//! `io-smol/tests/transfer_fork.rs`, which keeps a fork after a text turn
//! on the mock provider's wire, the admin fork and family tree, and a
//! reader behaving like the reference SDKs.

mod common;

use common::*;
use engine::{ProviderEntry, ProviderReply};
use proto::provider::Kind;
use serde_json::{json, Value};

/// `main` (Anthropic, `claude-x`) and `oai` (OpenAI, `gpt-x`).
fn registry() -> engine::Config {
    let base = config().providers.remove(0);
    engine::Config {
        providers: vec![
            ProviderEntry {
                name: "main".into(),
                model: "claude-x".into(),
                ..base.clone()
            },
            ProviderEntry {
                name: "oai".into(),
                kind: Kind::Openai,
                model: "gpt-x".into(),
                ..base
            },
        ],
        ..config()
    }
}

const KINDS: [&str; 2] = ["main", "oai"];

fn http(body: Value) -> ProviderReply {
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

/// A text answer in `kind`'s wire format.
fn text(kind: &str, t: &str) -> ProviderReply {
    match kind {
        "main" => anthropic_text(t),
        _ => http(
            json!({"id": "c1", "object": "chat.completion", "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
        ),
    }
}

/// A `get_time` call `tu_1` in `kind`'s wire format.
fn get_time_call(kind: &str) -> ProviderReply {
    match kind {
        "main" => anthropic_tool_use(
            json!([{"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}]),
        ),
        _ => http(
            json!({"id": "c2", "object": "chat.completion", "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "tu_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
        ),
    }
}

fn with_tool(h: &mut Harness, primary: &str) -> Live {
    h.open_driver(
        primary,
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    )
}

/// POST `/api/v1/sessions/{sid}/{route}` with `key`.
fn client_fork(h: &mut Harness, sid: &str, key: &str, route: &str, body: Value) -> (u16, Value) {
    h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/{route}"),
        key,
        Some(&body),
    )
}

/// Forks with the creator's key; the fork's id and session key, registered.
fn fork(h: &mut Harness, f: &Live, body: Value) -> (String, String, Value) {
    let (s, answer) = client_fork(h, &f.sid, &f.a.session_key, "fork", body);
    assert_eq!(s, 201, "{answer}");
    let sid = answer["session_id"].as_str().unwrap().to_string();
    let key = answer["session_key"].as_str().unwrap().to_string();
    h.register_driver(&sid, &key);
    (sid, key, answer)
}

/// The next text turn's provider body on `sid`.
fn next_request(h: &mut Harness, kind: &str, sid: &str, key: &str) -> Vec<u8> {
    h.replies.push_back(text(kind, "the next answer"));
    let (_, t) = h.send(sid, key, json!("and then?"));
    assert!(t["result"].is_object(), "{t}");
    h.call_bodies.last().unwrap().clone()
}

#[test]
fn a_fork_after_a_tool_round_trip_sends_the_parents_next_request() {
    let mut h = Harness::new(registry());
    for kind in KINDS {
        let f = with_tool(&mut h, kind);
        h.replies.push_back(get_time_call(kind));
        let (_, paused) = h.send(&f.sid, &f.a.session_key, json!("time?"));
        assert_eq!(
            paused["result"]["message"]["content"][0]["dispatch"],
            "client"
        );
        h.replies.push_back(text(kind, "it is noon"));
        h.send(
            &f.sid,
            &f.a.session_key,
            json!([tool_result("tu_1", "12:00")]),
        );
        let (fid, fkey, _) = fork(&mut h, &f, json!({}));
        let from_fork = next_request(&mut h, kind, &fid, &fkey);
        let from_parent = next_request(&mut h, kind, &f.sid, &f.a.session_key);
        assert_eq!(from_fork, from_parent, "{kind}");
        let text = String::from_utf8_lossy(&from_fork).into_owned();
        assert!(text.contains("tu_1") && text.contains("12:00"), "{text}");
    }
}

#[test]
fn a_fork_after_a_compaction_starts_from_its_summary() {
    let mut h = Harness::new(registry());
    for kind in KINDS {
        let f = with_tool(&mut h, kind);
        h.replies.push_back(text(kind, "first answer"));
        h.send(&f.sid, &f.a.session_key, json!("first"));
        h.replies.push_back(text(kind, "the summary"));
        let conn = h.rpc_start(
            &f.sid,
            &f.a.session_key,
            &call(2, "session.compact", json!({})),
        );
        let done = h.finished(conn).1;
        assert_eq!(
            done["result"]["event_type"], "session.compaction.completed",
            "{done}"
        );
        let (fid, fkey, _) = fork(&mut h, &f, json!({}));
        let from_fork = next_request(&mut h, kind, &fid, &fkey);
        let from_parent = next_request(&mut h, kind, &f.sid, &f.a.session_key);
        assert_eq!(from_fork, from_parent, "{kind}");
        let sent: Value = serde_json::from_slice(&from_fork).unwrap();
        let text = sent["messages"].to_string();
        assert!(
            text.contains("the summary") && !text.contains("first answer"),
            "{text}"
        );
    }
}

#[test]
fn no_fork_inside_a_paused_turn_and_the_parent_is_untouched() {
    let mut h = Harness::new(registry());
    let f = with_tool(&mut h, "main");
    h.replies.push_back(anthropic_text("hello"));
    h.send(&f.sid, &f.a.session_key, json!("hi"));
    h.replies.push_back(get_time_call("main"));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    let before = h.admin_events(&f.sid);
    let (s, p) = client_fork(&mut h, &f.sid, &f.a.session_key, "fork", json!({}));
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete")),
        "{p}"
    );
    assert!(p["detail"].as_str().unwrap().contains("paused"), "{p}");
    let paused_at = before.last().unwrap()["id"].clone();
    let path = format!("/admin/v1/sessions/{}/fork", f.sid);
    let (s, p) = h.admin("POST", &path, Some(&json!({"event_id": paused_at})));
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete"))
    );
    // The turn before it is a complete point.
    let path = format!("/admin/v1/sessions/{}/rewind", f.sid);
    let (s, answer) = h.admin("POST", &path, Some(&json!({"after_turn": 1})));
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["client_key_id"], f.a.key_id.as_str());
    // The paused turn's five events stay out.
    assert_eq!(answer["events"], before.len() - 5);
    assert_eq!(h.admin_events(&f.sid), before, "the parent never changes");
    // The paused turn goes on in the parent.
    h.replies.push_back(anthropic_text("noon"));
    let (_, t) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "noon");
}

#[test]
fn parent_and_fork_diverge_and_only_the_creator_may_fork() {
    let mut h = Harness::new(registry());
    let f = with_tool(&mut h, "main");
    h.replies.push_back(anthropic_text("hello"));
    h.send(&f.sid, &f.a.session_key, json!("hi"));
    let joiner = h.join_driver(&f, json!({}));
    let (s, p) = client_fork(&mut h, &f.sid, &joiner.session_key, "fork", json!({}));
    assert_eq!((s, p["type"].as_str()), (403, Some("fork_not_allowed")));
    let before = h.admin_events(&f.sid);
    let (fid, fkey, _) = fork(&mut h, &f, json!({}));
    h.replies.push_back(anthropic_text("fork says A"));
    h.send(&fid, &fkey, json!("take path A"));
    h.replies.push_back(anthropic_text("parent says B"));
    h.send(&f.sid, &f.a.session_key, json!("take path B"));
    let (a, b) = (h.admin_events(&fid), h.admin_events(&f.sid));
    // The fork's own registration is one more event.
    assert_eq!(a.len(), b.len() + 1);
    assert_eq!(
        &b[..before.len()],
        &before[..],
        "the parent's past never changes"
    );
    assert!(a.iter().all(|e| e["session_id"] == fid.as_str()));
    let said = |evs: &[Value]| text_of(&evs.last().unwrap()["payload"]);
    assert_eq!(
        (said(&a), said(&b)),
        ("fork says A".into(), "parent says B".into())
    );
    // The fork's own key does not open the parent.
    let path = format!("/api/v1/sessions/{}/events", f.sid);
    assert_eq!(h.client("GET", &path, &fkey, None).0, 401);
}

#[test]
fn rewind_hands_the_message_back_to_edit_and_resend() {
    let mut h = Harness::new(registry());
    let f = with_tool(&mut h, "main");
    for (q, a) in [("first", "one"), ("second", "two")] {
        h.replies.push_back(anthropic_text(a));
        h.send(&f.sid, &f.a.session_key, json!(q));
    }
    let parent = h.admin_events(&f.sid);
    let second = of_type(&parent, "client.message.send")[1]["id"].clone();
    let key = f.a.session_key.clone();
    let (s, answer) = client_fork(
        &mut h,
        &f.sid,
        &key,
        "rewind",
        json!({"before_message": second}),
    );
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["message"]["content"], "second");
    let fid = answer["session_id"].as_str().unwrap().to_string();
    let fkey = answer["session_key"].as_str().unwrap().to_string();
    h.register_driver(&fid, &fkey);
    h.replies.push_back(anthropic_text("two, edited"));
    h.send(&fid, &fkey, json!("second, edited"));
    let sent: Value = serde_json::from_slice(h.call_bodies.last().unwrap()).unwrap();
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{sent}");
    assert_eq!(msgs[2]["content"], "second, edited");
    // Rewinding by turn number: after turn 1 is the same point.
    let (s, by_turn) = client_fork(&mut h, &f.sid, &key, "rewind", json!({"after_turn": 1}));
    assert_eq!(s, 201);
    assert_eq!(by_turn["parent"]["event_id"], answer["parent"]["event_id"]);
    let (s, p) = client_fork(&mut h, &f.sid, &key, "rewind", json!({"after_turn": 7}));
    assert_eq!((s, p["type"].as_str()), (404, Some("not_found")));
    let (s, p) = client_fork(&mut h, &f.sid, &key, "rewind", json!({}));
    assert_eq!((s, p["type"].as_str()), (400, Some("bad_request")));
}
