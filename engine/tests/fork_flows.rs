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
use engine::store::SnapshotScope;
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

/// `after_turn: 0` stops right before the first turn's message; in a log
/// that ended without a turn, right before its end, since no point at or
/// after the end is forkable (found by sim seeds 207 and 780: the whole
/// closed log was copied, its `session.close` included).
#[test]
fn after_turn_zero_of_a_session_closed_without_a_turn_stops_before_the_close() {
    let mut h = Harness::new(registry());
    let f = with_tool(&mut h, "main");
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &f.a.session_key, None).0, 200);
    let parent = h.admin_events(&f.sid);
    assert_eq!(parent.last().unwrap()["event_type"], "session.close");
    let before_close = &parent[parent.len() - 2];
    for route in ["fork", "rewind"] {
        let path = format!("/admin/v1/sessions/{}/{route}", f.sid);
        let (s, answer) = h.admin("POST", &path, Some(&json!({"after_turn": 0})));
        assert_eq!(s, 201, "{route}: {answer}");
        assert_eq!(answer["events"], parent.len() - 1, "{route}");
        assert_eq!(answer["parent"]["event_id"], before_close["id"], "{route}");
        let fid = answer["session_id"].as_str().unwrap().to_string();
        let copied = h.admin_events(&fid);
        assert!(of_type(&copied, "session.close").is_empty(), "{copied:?}");
        assert_eq!(h.admin_session(&fid)["state"], "open", "{route}");
    }
    // The end itself is still no fork point.
    let path = format!("/admin/v1/sessions/{}/fork", f.sid);
    let (s, p) = h.admin("POST", &path, Some(&json!({})));
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete"))
    );
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

/// `GET …/participants` of `sid` with `key`: its drivers (C-040).
fn drivers(h: &mut Harness, sid: &str, key: &str) -> Value {
    let path = format!("/api/v1/sessions/{sid}/participants");
    let (status, body) = h.client("GET", &path, key, None);
    assert_eq!(status, 200, "{body}");
    body["drivers"].clone()
}

/// The `bae_drivers_registered` gauge.
fn drivers_gauge(h: &mut Harness) -> u64 {
    let (status, body) = h.admin("GET", "/metrics", None);
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_string();
    (text.lines())
        .find_map(|l| l.strip_prefix("bae_drivers_registered "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no bae_drivers_registered in {text}"))
}

/// A parent with two registered drivers (its creator and a joiner) and a
/// text turn, and a fork of it by the creator that nobody registered in:
/// `(parent, joiner, fork id, fork session key)`.
fn parent_with_two_drivers_and_a_fork(h: &mut Harness) -> (Live, Driver, String, String) {
    let f = with_tool(h, "main");
    let joiner = h.join_driver(&f, json!({}));
    h.replies.push_back(anthropic_text("hello"));
    h.send(&f.sid, &f.a.session_key, json!("hi"));
    let (s, answer) = client_fork(h, &f.sid, &f.a.session_key, "fork", json!({}));
    assert_eq!(s, 201, "{answer}");
    let fid = answer["session_id"].as_str().unwrap().to_string();
    let fkey = answer["session_key"].as_str().unwrap().to_string();
    // The copy is faithful: both registrations are in the fork's log.
    let copied = of_type(&h.admin_events(&fid), "session.driver.register").len();
    assert_eq!(copied, 2);
    (f, joiner, fid, fkey)
}

/// Issue 38, C-040/C-064/C-069: a fork starts with no drivers, also once
/// it was evicted and read back from the store (`BAE_RESIDENT_SESSIONS=0`),
/// although its log holds its parent's registrations. Its creator must
/// register (logged, as a first registration is), and that registration,
/// the fork's own, comes back after the next eviction.
#[test]
fn an_evicted_fork_reloads_without_its_parents_drivers() {
    let mut h = Harness::as_configured(engine::Config {
        resident_sessions: Some(0),
        ..registry()
    });
    let (f, joiner, fid, fkey) = parent_with_two_drivers_and_a_fork(&mut h);
    let mut both = vec![f.a.key_id.clone(), joiner.key_id.clone()];
    both.sort();
    assert_eq!(drivers(&mut h, &f.sid, &f.a.session_key), json!(both));
    assert_eq!(drivers(&mut h, &fid, &fkey), json!([]));
    let (_, t) = h.send(&fid, &fkey, json!("not registered here"));
    assert_eq!(t["error"]["code"], -32001, "{t}");
    let before = h.admin_events(&fid).len();
    h.register_driver(&fid, &fkey);
    let after = h.admin_events(&fid);
    assert_eq!(after.len(), before + 1, "the fork's first registration");
    assert_eq!(drivers(&mut h, &fid, &fkey), json!([f.a.key_id]));
    h.replies.push_back(anthropic_text("fork answer"));
    let (_, t) = h.send(&fid, &fkey, json!("now registered"));
    assert!(t["result"].is_object(), "{t}");
    assert_eq!(drivers(&mut h, &fid, &fkey), json!([f.a.key_id]));
    assert_eq!(
        drivers_gauge(&mut h),
        3,
        "two on the parent, one on the fork"
    );
}

/// Issue 38 with `BAE_DURABLE_DRIVERS` (docs/extensions.md): a restart
/// rebuilds the registrations from the log, from a full snapshot or one
/// session at a time, and a fork's copied registrations are not among
/// them; its own are.
#[test]
fn durable_drivers_come_back_to_the_parent_not_to_its_forks() {
    for scope in [SnapshotScope::Full, SnapshotScope::Lazy] {
        let mut h = Harness::new(registry());
        let (f, joiner, fid, fkey) = parent_with_two_drivers_and_a_fork(&mut h);
        let (s, answer) = client_fork(&mut h, &f.sid, &f.a.session_key, "fork", json!({}));
        assert_eq!(s, 201, "{answer}");
        let gid = answer["session_id"].as_str().unwrap().to_string();
        let gkey = answer["session_key"].as_str().unwrap().to_string();
        h.register_driver(&gid, &gkey);
        let durable = engine::Config {
            durable_drivers: true,
            ..registry()
        };
        h.restart_from(durable, scope);
        let mut both = vec![f.a.key_id.clone(), joiner.key_id.clone()];
        both.sort();
        assert_eq!(drivers(&mut h, &f.sid, &f.a.session_key), json!(both));
        assert_eq!(drivers(&mut h, &fid, &fkey), json!([]), "{scope:?}");
        assert_eq!(drivers(&mut h, &gid, &gkey), json!([f.a.key_id]));
        assert_eq!(drivers_gauge(&mut h), 3, "{scope:?}");
        let (_, t) = h.send(&fid, &fkey, json!("not registered here"));
        assert_eq!(t["error"]["code"], -32001, "{t}");
    }
}
