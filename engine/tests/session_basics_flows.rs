//! Driver registration and plain `session.sendMessage` turns in-process
//! (spec 01 §6.2, §6.5, §7; spec 05 §5, §7; checklist C-064…C-082).
//! Moved from `io-smol/tests/live_session_basics.rs`, which keeps a plain
//! turn against the mock provider's real wire and registrations across
//! real restarts (kill -9, SQLite).

mod common;

use common::*;
use engine::ProviderReply;
use serde_json::{json, Value};

fn participants(h: &mut Harness, sid: &str, key: &str) -> Value {
    let (s, v) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/participants"),
        key,
        None,
    );
    assert_eq!(s, 200, "{v}");
    v
}

fn register(h: &mut Harness, sid: &str, key: &str, params: Value) -> (Vec<Value>, Value) {
    let conn = h.rpc_start(sid, key, &call(1, "session.registerDriver", params));
    h.finished(conn)
}

fn rpc(h: &mut Harness, sid: &str, key: &str, method: &str, params: Value) -> Value {
    let conn = h.rpc_start(sid, key, &call(1, method, params));
    h.finished(conn).1
}

fn anthropic_json(body: Value) -> ProviderReply {
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

const UNREGISTERED: &str = "call session.registerDriver before session.sendMessage";

#[test]
fn c064_c065_register_once_then_idempotent() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (sid, key) = (f.sid.as_str(), f.skey.as_str());
    assert_eq!(participants(&mut h, sid, key), json!({"drivers": []}));
    let (notes, t) = register(&mut h, sid, key, json!({}));
    assert!(notes.is_empty());
    assert_eq!(t["result"], json!({"registered": true}));
    let (_, t) = register(&mut h, sid, key, json!({"ignored": 1}));
    assert_eq!(t["result"], json!({"registered": true}));
    let evs = h.events(sid, key);
    let regs = of_type(&evs, "session.driver.register");
    assert_eq!(regs.len(), 1, "C-065: logged once: {evs:?}");
    assert_eq!(regs[0]["payload"], json!({}));
    assert_eq!(regs[0]["client_key_id"], json!(f.key_id));
    // No sandbox images on this profile: no session.sandbox.available (C-068).
    assert!(of_type(&evs, "session.sandbox.available").is_empty());
    // A joiner registering too: sorted participants (C-040).
    let (kid2, ck2) = h.key(&f.profile);
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &ck2,
        Some(&json!({})),
    );
    h.register_driver(sid, j["session_key"].as_str().unwrap());
    let mut expected = vec![f.key_id.clone(), kid2];
    expected.sort();
    assert_eq!(participants(&mut h, sid, key), json!({"drivers": expected}));
}

#[test]
fn c066_register_on_closed_session_fails() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    assert_eq!(
        h.client(
            "DELETE",
            &format!("/api/v1/sessions/{}", f.sid),
            &f.skey,
            None
        )
        .0,
        200
    );
    let (_, t) = register(&mut h, &f.sid, &f.skey, json!({}));
    assert_rpc_error(&t, -32000, "session is closed, not open");
    let evs = h.events(&f.sid, &f.skey);
    assert!(of_type(&evs, "session.driver.register").is_empty());
}

/// Default: the registry is in memory (spec 01 §6.2; spec 02 §4.15 "a
/// re-registration after a restart logs again").
#[test]
fn registration_does_not_survive_a_restart_by_default() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    h.restart(config());
    assert_eq!(participants(&mut h, &f.sid, &key), json!({"drivers": []}));
    let (_, t) = h.send(&f.sid, &key, json!("hello again"));
    assert_rpc_error(&t, -32001, UNREGISTERED);
    h.register_driver(&f.sid, &key);
    assert_eq!(
        participants(&mut h, &f.sid, &key),
        json!({"drivers": [f.a.key_id]})
    );
    let evs = h.events(&f.sid, &key);
    assert_eq!(of_type(&evs, "session.driver.register").len(), 2);
    h.replies.push_back(anthropic_text("after restart"));
    let (_, t) = h.send(&f.sid, &key, json!("hello again"));
    assert_eq!(text_of(&t["result"]["message"]), "after restart", "{t}");
}

#[test]
fn c069_unregistered_sender_is_rejected_before_any_other_check() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    // Missing message and unregistered: -32001 wins.
    let t = rpc(&mut h, &f.sid, &f.skey, "session.sendMessage", json!({}));
    assert_rpc_error(&t, -32001, UNREGISTERED);
    // Closed session and unregistered: -32001 still wins.
    assert_eq!(
        h.client(
            "DELETE",
            &format!("/api/v1/sessions/{}", f.sid),
            &f.skey,
            None
        )
        .0,
        200
    );
    let (_, t) = h.send(&f.sid, &f.skey, json!("x"));
    assert_rpc_error(&t, -32001, UNREGISTERED);
    assert!(h.call_bodies.is_empty());
    // Never auto-registered.
    let evs = h.events(&f.sid, &f.skey);
    assert!(of_type(&evs, "session.driver.register").is_empty());
}

#[test]
fn c070_missing_message_is_invalid_params() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.as_str();
    let t = rpc(&mut h, &f.sid, key, "session.sendMessage", json!({}));
    assert_rpc_error(&t, -32602, "Invalid params: missing \"message\"");
    let t = rpc(
        &mut h,
        &f.sid,
        key,
        "session.sendMessage",
        json!({"message": "not an object"}),
    );
    assert_eq!(t["error"]["code"], -32602, "{t}");
    assert!(t["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid params: "));
    assert!(h.call_bodies.is_empty());
    assert_eq!(
        types_of(&h.events(&f.sid, key)),
        ["session.open", "session.driver.register"]
    );
}

#[test]
fn c071_error_session_rejects_send() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    h.replies.push_back(ProviderReply::Http {
        status: 500,
        body: b"boom".to_vec(),
        advice: Default::default(),
    });
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("again"));
    assert_rpc_error(&t, -32000, "session is error, not open");
    assert_eq!(h.call_bodies.len(), 1);
}

#[test]
fn c072_to_c078_c081_plain_turn() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    // The turn is driven by a joiner, so attribution is not the creator.
    let (kid2, ck2) = h.key(&f.profile);
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{}/join", f.sid),
        &ck2,
        Some(&json!({})),
    );
    let bkey = j["session_key"].as_str().unwrap().to_string();
    h.register_driver(&f.sid, &bkey);
    let observer = h.rpc_start(&f.sid, &f.skey, &call(1, "session.subscribe", json!({})));
    h.replies.push_back(anthropic_text("It is noon."));
    // C-076: no role; a string id.
    let body = json!({"jsonrpc": "2.0", "id": "turn-1", "method": "session.sendMessage",
                      "params": {"message": {"content": "What time is it?"}}});
    let conn = h.rpc_start(&f.sid, &bkey, &body);
    let (notes, t) = h.finished(conn);
    assert_eq!(t["id"], "turn-1");
    let result = &t["result"];
    let mut members: Vec<&String> = result.as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, ["events", "message"], "C-073");
    assert_eq!(
        result["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "It is noon."}]})
    );
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
            "client.message.send",
            "provider.request",
            "provider.response",
            "server.message.send"
        ],
        "C-072"
    );
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": "What time is it?"})
    );
    // C-074 the sender never sees its own client.message.send.
    let streamed = note_events(&notes);
    assert_eq!(ids(&streamed), ids(&evs[1..]));
    // C-075 the observer does.
    assert_eq!(ids(&note_events(&h.frames(observer))), ids(&evs));
    // C-077 provider.request members.
    let req = &evs[1]["payload"];
    assert_eq!(req["attempt"], 0);
    assert_eq!(req["kind"], "primary");
    assert_eq!(req["provider"], "anthropic");
    assert_eq!(req["base_url"], "http://127.0.0.1:9");
    assert_eq!(req["model"], "claude-test");
    assert_eq!(req["max_tokens"], 1024);
    assert_eq!(
        req["messages"],
        json!([{"role": "user", "content": "What time is it?"}])
    );
    assert_eq!(req["tools"], json!([]));
    assert!(req.get("normalized").is_none() && req.get("purpose").is_none());
    // C-078 provider.response.
    let resp = &evs[2]["payload"];
    assert_eq!(resp["ok"], true);
    assert_eq!(resp["status"], 200);
    assert_eq!(resp["attempt"], 0);
    assert_eq!(resp["kind"], "primary");
    assert_eq!(
        resp["usage"],
        json!({"input_tokens": 10, "output_tokens": 5})
    );
    assert_eq!(resp["body"]["stop_reason"], "end_turn");
    assert_eq!(resp["body"]["content"][0]["text"], "It is noon.");
    // The provider got exactly the logged messages.
    let sent: Value = serde_json::from_slice(&h.call_bodies[0]).unwrap();
    assert_eq!(sent["messages"], req["messages"]);
    // C-081 attribution to the acting driver.
    for e in &evs {
        assert_eq!(e["client_key_id"], json!(kid2), "{e}");
    }
}

#[test]
fn c079_c080_usage_accounting() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let body = |usage: Option<Value>| {
        let mut b = json!({"id": "msg_x", "type": "message", "role": "assistant", "model": "m",
               "content": [{"type": "text", "text": "t"}], "stop_reason": "end_turn"});
        if let Some(u) = usage {
            b["usage"] = u;
        }
        anthropic_json(b)
    };
    h.replies.extend([
        body(None),
        body(Some(json!({"input_tokens": 3}))),
        body(Some(json!({"output_tokens": 3}))),
        body(Some(json!({
            "input_tokens": 10, "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 2, "output_tokens": 4
        }))),
        body(Some(
            json!({"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 1}),
        )),
    ]);
    let mut usages = Vec::new();
    for i in 0..5 {
        let (_, t) = h.send(&f.sid, &f.a.session_key, json!(format!("m{i}")));
        let resp = of_type(&result_events(&t), "provider.response");
        assert_eq!(resp.len(), 1, "{t}");
        assert_eq!(resp[0]["payload"]["ok"], true);
        // Present (possibly null) on every success.
        assert!(resp[0]["payload"].get("usage").is_some());
        usages.push(resp[0]["payload"]["usage"].clone());
    }
    assert_eq!(
        usages,
        [
            Value::Null,
            Value::Null,
            Value::Null,
            json!({"input_tokens": 17, "output_tokens": 4}),
            json!({"input_tokens": 15, "output_tokens": 1}),
        ]
    );
}

#[test]
fn c082_send_without_id_streams_events_but_no_terminal() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    h.replies.push_back(anthropic_text("quiet"));
    let body = json!({"jsonrpc": "2.0", "method": "session.sendMessage",
                      "params": {"message": {"content": "notify"}}});
    let conn = h.rpc_start(&f.sid, &f.a.session_key, &body);
    let frames = h.frames(conn);
    assert!(
        h.sent[&conn].ends_with(b"0\r\n\r\n"),
        "the body ends after the turn"
    );
    assert!(frames.iter().all(|f| f.get("id").is_none()), "{frames:?}");
    assert_eq!(
        types_of(&note_events(&frames)),
        [
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    let evs = h.events(&f.sid, &f.a.session_key);
    assert_eq!(of_type(&evs, "server.message.send").len(), 1);
}
