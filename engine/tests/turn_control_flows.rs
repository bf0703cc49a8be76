//! Opt-in turn control in-process (docs/extensions.md):
//! `session.cancelTurn`, `session.queue` positions, the
//! `session.replay_complete` marker, the admin cancel; and the reference
//! wire for every client that did not opt in. Moved from
//! `io-smol/tests/ext_turn_control.rs`, which keeps the cancel of a call
//! in flight to a real HTTP provider (both wire formats).

mod common;

use common::*;
use engine::{ConnId, Input};
use serde_json::{json, Value};

const ALL: [&str; 3] = ["turn.cancel", "turn.queue", "subscribe.replay_complete"];

fn rpc(h: &mut Harness, sid: &str, key: &str, method: &str, params: Value) -> Value {
    let conn = h.rpc_start(sid, key, &call(4, method, params));
    h.finished(conn).1
}

fn register_ext(h: &mut Harness, sid: &str, key: &str, ext: &[&str]) -> Value {
    rpc(
        h,
        sid,
        key,
        "session.registerDriver",
        json!({"extensions": ext}),
    )
}

fn cancel(h: &mut Harness, sid: &str, key: &str) -> Value {
    rpc(h, sid, key, "session.cancelTurn", json!({}))
}

/// A session whose creator declares `get_time`, registered with `ext`.
fn session(h: &mut Harness, ext: &[&str]) -> Fix {
    let f = h.fix(&["get_time"]);
    let (_, o) = h.client(
        "POST",
        "/api/v1/sessions",
        &f.client_key,
        Some(&json!({"tools": [tool("get_time")]})),
    );
    let f = Fix {
        sid: o["session_id"].as_str().unwrap().into(),
        skey: o["session_key"].as_str().unwrap().into(),
        ..f
    };
    let t = register_ext(h, &f.sid, &f.skey, ext);
    assert_eq!(t["result"]["registered"], true, "{t}");
    f
}

/// A second client joined to `f`'s session: (key id, session key).
fn joiner(h: &mut Harness, f: &Fix) -> (String, String) {
    let (kid, ck) = h.key(&f.profile);
    let path = format!("/api/v1/sessions/{}/join", f.sid);
    let (s, j) = h.client("POST", &path, &ck, Some(&json!({})));
    assert_eq!(s, 201, "{j}");
    (kid, j["session_key"].as_str().unwrap().into())
}

#[test]
fn without_opt_in_the_wire_is_the_reference() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let t = rpc(&mut h, &f.sid, &f.skey, "session.registerDriver", json!({}));
    assert_eq!(t["result"], json!({"registered": true}));
    let t = cancel(&mut h, &f.sid, &f.skey);
    assert_eq!(
        t["error"],
        json!({"code": -32601, "message": "Method not found: session.cancelTurn"})
    );
    // Asking for extensions echoes what this server has; unknown names are
    // ignored, a wrong type is an error.
    let t = register_ext(
        &mut h,
        &f.sid,
        &f.skey,
        &["turn.cancel", "some.future.thing"],
    );
    assert_eq!(
        t["result"],
        json!({"registered": true, "extensions": ["turn.cancel"]})
    );
    let t = rpc(
        &mut h,
        &f.sid,
        &f.skey,
        "session.registerDriver",
        json!({"extensions": "turn.cancel"}),
    );
    assert_eq!(t["error"]["code"], -32602);
}

#[test]
fn cancel_a_running_turn_drops_the_late_reply_and_frees_the_gate() {
    let mut h = Harness::new(config());
    let f = session(&mut h, &ALL);
    let turn = h.send_start(&f.sid, &f.skey, json!("slow"));
    let call = h.calls.front().unwrap().id;
    let t = cancel(&mut h, &f.sid, &f.skey);
    assert_eq!(
        t["result"],
        json!({"cancelled": true, "state": "running"}),
        "{t}"
    );
    assert_eq!(h.aborted, [call], "the provider call is closed");
    let (_, terminal) = h.finished(turn);
    assert_eq!(
        terminal["error"],
        json!({"code": -32021, "message": "turn_cancelled: the turn was cancelled"})
    );
    assert_eq!(
        cancel(&mut h, &f.sid, &f.skey)["result"],
        json!({"cancelled": false})
    );
    // The gate is free at once; the next turn's request is valid.
    h.calls.clear();
    h.replies.push_back(anthropic_text("fresh"));
    let (_, t) = h.send(&f.sid, &f.skey, json!("next"));
    assert_eq!(t["result"]["message"]["content"][0]["text"], "fresh", "{t}");
    // The late reply of the cancelled call is dropped.
    h.input(Input::ProviderDone {
        call,
        reply: anthropic_text("late"),
    });
    let evs = h.events(&f.sid, &f.skey);
    assert_eq!(of_type(&evs, "provider.request").len(), 2);
    assert_eq!(of_type(&evs, "provider.response").len(), 1);
    let last: Value = serde_json::from_slice(h.call_bodies.last().unwrap()).unwrap();
    let roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user"],
        "consecutive user messages merged (anthropic)"
    );
}

#[test]
fn cancel_a_paused_mixed_turn_closes_every_open_tool_use() {
    let mut h = Harness::new(config());
    let f = session(&mut h, &ALL);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}},
        {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}},
    ])));
    let (_, t) = h.send(&f.sid, &f.skey, json!("go"));
    assert!(t["result"]["message"].is_object(), "paused: {t}");
    let t = cancel(&mut h, &f.sid, &f.skey);
    assert_eq!(t["result"], json!({"cancelled": true, "state": "paused"}));
    let evs = h.events(&f.sid, &f.skey);
    let err = error_with_reason(&evs, "driver_turn_abandoned").expect("abandonment logged");
    assert_eq!(err["payload"]["owner_client_key_id"], f.key_id.as_str());
    // The owner's next plain message is a fresh turn, and the provider sees
    // a result for each paused tool_use.
    h.replies.push_back(anthropic_text("ok"));
    let (_, t) = h.send(&f.sid, &f.skey, json!("something else"));
    assert_eq!(t["result"]["message"]["content"][0]["text"], "ok", "{t}");
    let body: Value = serde_json::from_slice(h.call_bodies.last().unwrap()).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    let ids: Vec<&str> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["tu_m", "tu_c"]);
    let evs = h.events(&f.sid, &f.skey);
    assert_eq!(
        of_type(&evs, "session.error").len(),
        1,
        "logged once, at the cancel"
    );
}

#[test]
fn queued_requests_hear_their_positions_and_can_be_cancelled() {
    let mut h = Harness::new(config());
    let f = session(&mut h, &ALL);
    let (_, b) = joiner(&mut h, &f);
    assert_eq!(
        register_ext(&mut h, &f.sid, &b, &ALL)["result"]["registered"],
        true
    );
    let (_, plain) = joiner(&mut h, &f);
    h.register_driver(&f.sid, &plain);
    let holder = h.send_start(&f.sid, &f.skey, json!("slow"));
    let mut waiters: Vec<ConnId> = (0..5)
        .map(|i| {
            let w = h.send_start(&f.sid, &b, json!(format!("w{i}")));
            assert_eq!(
                h.frames(w),
                [json!({"jsonrpc": "2.0", "method": "session.queue", "params": {"position": i + 1, "ahead": i}})]
            );
            w
        })
        .collect();
    // A plain driver queued behind them hears nothing.
    let silent = h.send_start(&f.sid, &plain, json!("plain"));
    h.advance(300);
    assert!(h.frames(silent).is_empty());
    // Waiter 2 leaves: the ones behind it move up.
    let gone = waiters.remove(1);
    h.input(Input::Closed { conn: gone });
    for (i, w) in waiters.iter().enumerate().skip(1) {
        let frames = h.frames(*w);
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(frames[1]["params"]["position"], i + 1);
    }
    // B cancels: all of its queued requests end; the plain one stays.
    let t = cancel(&mut h, &f.sid, &b);
    assert_eq!(
        t["result"],
        json!({"cancelled": true, "state": "queued", "requests": 4})
    );
    for w in waiters {
        let (_, terminal) = h.finished(w);
        assert_eq!(terminal["error"]["code"], -32021);
    }
    h.replies.push_back(anthropic_text("late"));
    h.replies.push_back(anthropic_text("for plain"));
    h.pump();
    assert!(h.finished(holder).1.get("result").is_some());
    let (notes, t) = h.finished(silent);
    assert_eq!(t["result"]["message"]["content"][0]["text"], "for plain");
    assert!(
        notes.iter().all(|n| n["method"] == "session.event"),
        "{notes:?}"
    );
}

#[test]
fn replay_complete_marks_the_end_of_the_replay_for_opted_in_subscribers_only() {
    let mut h = Harness::new(config());
    h.auto_flush = true;
    let f = session(&mut h, &ALL);
    h.replies.push_back(anthropic_text("one"));
    h.send(&f.sid, &f.skey, json!("hi"));
    let evs = h.events(&f.sid, &f.skey);
    let first = evs[0]["id"].clone();
    let last = evs.last().unwrap()["id"].clone();
    let params = json!({"since_event_id": first, "extensions": ["subscribe.replay_complete"]});
    let opted = h.rpc_start(&f.sid, &f.skey, &call(1, "session.subscribe", params));
    let frames = h.frames(opted);
    assert_eq!(
        frames.len(),
        evs.len(),
        "everything after since_event_id, then the marker"
    );
    assert!(frames[..evs.len() - 1]
        .iter()
        .all(|f| f["method"] == "session.event"));
    assert_eq!(
        frames.last().unwrap(),
        &json!({"jsonrpc": "2.0", "method": "session.replay_complete", "params": {"last_event_id": last}})
    );
    // A client that registered without extensions sees only events.
    let (_, other) = joiner(&mut h, &f);
    h.register_driver(&f.sid, &other);
    let plain = h.rpc_start(
        &f.sid,
        &other,
        &call(1, "session.subscribe", json!({"since_event_id": first})),
    );
    h.replies.push_back(anthropic_text("two"));
    h.send(&f.sid, &f.skey, json!("again"));
    let after = &h.frames(opted)[evs.len()..];
    assert!(!after.is_empty() && after.iter().all(|f| f["method"] == "session.event"));
    let plain_frames = h.frames(plain);
    // Replayed (all but the first), the join and registration, the turn.
    assert_eq!(
        plain_frames.len(),
        (evs.len() - 1) + 2 + 4,
        "{plain_frames:?}"
    );
    assert!(plain_frames.iter().all(|f| f["method"] == "session.event"));
    // Without a replay the marker comes first.
    let params = json!({"extensions": ["subscribe.replay_complete"]});
    let fresh = h.rpc_start(&f.sid, &f.skey, &call(1, "session.subscribe", params));
    assert_eq!(
        h.frames(fresh),
        [
            json!({"jsonrpc": "2.0", "method": "session.replay_complete", "params": {"last_event_id": null}})
        ]
    );
}

#[test]
fn an_operator_cancels_any_turn_through_the_admin_api() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let turn = h.send_start(&f.sid, &f.a.session_key, json!("slow"));
    let path = format!("/admin/v1/sessions/{}/cancel-turn", f.sid);
    let (s, v) = h.admin("POST", &path, Some(&json!({})));
    assert_eq!(
        (s, v),
        (200, json!({"cancelled": true, "state": "running"}))
    );
    assert_eq!(h.finished(turn).1["error"]["code"], -32021);
    let (_, v) = h.admin("POST", &path, Some(&json!({})));
    assert_eq!(v, json!({"cancelled": false}));
    let (s, _) = h.admin(
        "POST",
        "/admin/v1/sessions/ses_nope/cancel-turn",
        Some(&json!({})),
    );
    assert_eq!(s, 404);
}
