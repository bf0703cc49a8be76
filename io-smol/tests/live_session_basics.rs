//! Driver registration and plain `session.sendMessage` turns over the real
//! binary (spec 01 §6.2, §6.5, §7; spec 05 §5, §7; checklist C-064…C-066,
//! C-069…C-082), plus driver registrations across restarts: in-memory by
//! default (spec 01 §6.2, spec 02 §4.15), durable with the opt-in
//! `BAE_DURABLE_DRIVERS` extension. The registration rules, send-time
//! checks, usage accounting and id-less sends are tested in-process in
//! `engine/tests/session_basics_flows.rs`; here the plain turn runs
//! against the mock provider's real wire.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures;
use testkit::Reply;

fn participants(server: &testkit::Server, sid: &str, key: &str) -> Value {
    let resp = server
        .client()
        .bearer(key)
        .get(&format!("/api/v1/sessions/{sid}/participants"));
    resp.assert_status(200);
    resp.json()
}

/// Default: the registry is in memory (spec 01 §6.2 "It does not survive a
/// restart"; spec 02 §4.15 "a re-registration after a restart logs
/// again").
#[test]
fn registration_does_not_survive_a_restart_by_default() {
    let (mock, mut server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.clone(), f.a.session_key.clone());
    server.kill9();
    server.restart();
    assert_eq!(participants(&server, &sid, &key), json!({"drivers": []}));
    let (_, t) = send(&server, &sid, &f.a, json!("hello again"));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.sendMessage",
    );
    fixtures::register_driver(&server, &sid, &key);
    assert_eq!(
        participants(&server, &sid, &key),
        json!({"drivers": [f.a.key_id]})
    );
    assert_eq!(
        of_type(&events(&server, &sid, &key), "session.driver.register").len(),
        2,
        "re-registration after a restart logs again"
    );
    mock.push(Reply::text("after restart"));
    let (_, t) = send(&server, &sid, &f.a, json!("hello again"));
    assert_eq!(text_of(&t["result"]["message"]), "after restart", "{t}");
}

/// Opt-in `BAE_DURABLE_DRIVERS`: registrations are rebuilt from the log, so
/// after a restart (graceful or kill -9) the driver is still listed, may
/// send without registering again, and re-registering logs nothing new.
#[test]
fn durable_registration_survives_restart_and_kill9() {
    let (mock, mut server) = anthropic_server(&[DURABLE_DRIVERS]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.clone(), f.a.session_key.clone());
    let b = f.join(&server, json!({}));

    server.restart();
    assert_eq!(
        participants(&server, &sid, &key),
        json!({"drivers": [f.a.key_id]})
    );
    mock.push(Reply::text("after restart"));
    let (_, t) = send(&server, &sid, &f.a, json!("hello again"));
    assert_eq!(text_of(&t["result"]["message"]), "after restart", "{t}");
    // The joiner never registered: still gated.
    let (_, t) = send(&server, &sid, &b, json!("me too"));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.sendMessage",
    );

    server.kill9();
    server.restart();
    assert_eq!(
        participants(&server, &sid, &key),
        json!({"drivers": [f.a.key_id]})
    );
    let (_, t) = rpc(&server, &sid, &key, "session.registerDriver", json!({}));
    assert_eq!(t["result"], json!({"registered": true}));
    let evs = events(&server, &sid, &key);
    assert_eq!(
        of_type(&evs, "session.driver.register").len(),
        1,
        "re-registering a durable driver logs nothing: {:?}",
        types(&evs)
    );
    // The joiner registers after the restart: logged once.
    fixtures::register_driver(&server, &sid, &b.session_key);
    let mut expected = vec![f.a.key_id.clone(), b.key_id.clone()];
    expected.sort();
    assert_eq!(
        participants(&server, &sid, &key),
        json!({"drivers": expected})
    );
}

#[test]
fn c072_to_c078_c081_plain_turn() {
    let (mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    // The turn is driven by a joiner, so attribution is not the creator.
    let b = f.join_registered(&server, json!({}));
    let sid = f.session_id.as_str();
    let mut observer = subscribe(&server, sid, &f.a.session_key, json!({}));
    observer.wait_head(WAIT);
    std::thread::sleep(Duration::from_millis(50));

    mock.push(Reply::text("It is noon."));
    let (notes, t) = server.client().rpc(
        sid,
        &b.session_key,
        "session.sendMessage",
        json!({"message": {"content": "What time is it?"}}), // C-076: no role
        "turn-1",
    );
    assert_eq!(t["id"], "turn-1");
    let result = &t["result"];
    // C-073 {message, events}.
    let mut members: Vec<&String> = result.as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, vec!["events", "message"]);
    assert_eq!(
        result["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "It is noon."}]})
    );
    let evs = result_events(&t);
    // C-072 order.
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    // C-076 role defaulted.
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": "What time is it?"})
    );
    // C-074 the sender never sees its own client.message.send.
    let streamed = note_events(&notes);
    assert_eq!(
        types(&streamed),
        vec![
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(ids(&streamed), ids(&evs[1..]));
    // C-075 the observer does.
    let seen = read_events(&mut observer, 4);
    assert_eq!(ids(&seen), ids(&evs));
    // C-077 provider.request members.
    let req = &evs[1]["payload"];
    for m in [
        "attempt",
        "kind",
        "provider",
        "base_url",
        "model",
        "max_tokens",
        "messages",
        "tools",
    ] {
        assert!(req.get(m).is_some(), "provider.request lacks {m}: {req}");
    }
    assert_eq!(req["attempt"], 0);
    assert_eq!(req["kind"], "primary");
    assert_eq!(req["provider"], "anthropic");
    assert_eq!(req["base_url"], json!(mock.base_url));
    assert_eq!(req["model"], "mock-model");
    assert_eq!(req["max_tokens"], 4096);
    assert_eq!(
        req["messages"],
        json!([{"role": "user", "content": "What time is it?"}])
    );
    assert_eq!(req["tools"], json!([]));
    assert!(req.get("normalized").is_none());
    assert!(req.get("purpose").is_none());
    // C-078 provider.response.
    let resp = &evs[2]["payload"];
    assert_eq!(resp["ok"], true);
    assert_eq!(resp["status"], 200);
    assert_eq!(resp["attempt"], 0);
    assert_eq!(resp["kind"], "primary");
    assert_eq!(resp["provider"], "anthropic");
    assert_eq!(
        resp["usage"],
        json!({"input_tokens": 10, "output_tokens": 5})
    );
    let raw = &resp["body"];
    assert_eq!(raw["type"], "message");
    assert_eq!(raw["stop_reason"], "end_turn");
    assert!(raw["id"].as_str().unwrap().starts_with("msg_mock_"));
    assert_eq!(raw["content"][0]["text"], "It is noon.");
    // The provider got exactly the logged messages.
    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].messages(), &req["messages"]);
    // C-081 attribution to the acting driver.
    for e in &evs {
        assert_eq!(e["client_key_id"], json!(b.key_id), "{e}");
    }
    // The auth token never appears anywhere in the log (C-077, C-232).
    let all = events(&server, sid, &f.a.session_key);
    assert!(!serde_json::to_string(&all).unwrap().contains("tok-main"));
    assert_eq!(ids(&all[all.len() - 4..]), ids(&evs));
}
