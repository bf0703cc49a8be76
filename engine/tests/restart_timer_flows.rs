//! Restarts and timers through the in-process harness: history and a
//! parked pause rebuilt after a restart, durable driver registrations, a
//! legacy admin digest upgraded once, and the pause-abandonment timer (spec
//! 01 §8, §10). Split from `engine_flows.rs`.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

fn types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

/// Another client key on the profile of the first key listed.
fn second_client_key(h: &mut Harness) -> String {
    let (_, keys) = h.admin("GET", "/admin/v1/keys", None);
    let profile_id = keys["items"][0]["profile_id"].clone();
    let (s, k) = h.admin(
        "POST",
        "/admin/v1/keys",
        Some(&json!({"name": "second", "profile_id": profile_id})),
    );
    assert_eq!(s, 201);
    k["key"].as_str().unwrap().to_string()
}

fn send(h: &mut Harness, sid: &str, key: &str, content: Value) -> Vec<Value> {
    h.rpc(sid, key, &json!({"jsonrpc": "2.0", "id": 5, "method": "session.sendMessage", "params": {"message": {"content": content}}}))
}

/// After a restart, history is rebuilt from several store reads. A failure
/// at any of them fails the waiting request as a failed read always did;
/// the next request loads it again, bounded by the compaction and with the
/// usage of the newest non-compaction response.
#[test]
fn history_reload_after_restart_fails_cleanly_then_recovers() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(
        &[],
        json!({"compaction": {"mode": "client", "prompt": "keep TODOs"}}),
    );
    h.register_driver(&sid, &skey);
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "first answer"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 100, "output_tokens": 20}
    });
    h.replies.push_back(engine::ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    });
    send(&mut h, &sid, &skey, json!("first"));
    h.replies.push_back(anthropic_text("the summary"));
    let compact = json!({"jsonrpc": "2.0", "id": 7, "method": "session.compact", "params": {}});
    let frames = h.rpc(&sid, &skey, &compact);
    assert_eq!(frames[0]["params"]["payload"]["token_count"], 120);

    h.restart(config());
    h.register_driver(&sid, &skey);
    let failing: [fn(&engine::StoreRead) -> bool; 3] = [
        |r| matches!(r, engine::StoreRead::LatestOfType { .. }),
        |r| matches!(r, engine::StoreRead::EventById { .. }),
        |r| {
            matches!(
                r,
                engine::StoreRead::LatestOfType {
                    event_type: engine::store::EventType::ProviderResponse,
                    ..
                }
            )
        },
    ];
    for fail in failing {
        h.fail_read = Some(fail);
        let frames = send(&mut h, &sid, &skey, json!("lost"));
        let last = frames.last().unwrap();
        assert_eq!(last["error"]["message"], "session loop failed", "{last}");
        assert!(h.calls.is_empty(), "no provider call");
    }
    h.fail_read = None;
    // The newest non-compaction response is the first turn's (the summary
    // call's usage does not count).
    h.replies.push_back(anthropic_text("the second summary"));
    let frames = h.rpc(&sid, &skey, &compact);
    assert_eq!(frames[0]["params"]["payload"]["token_count"], 120);
    // History: preamble + summary (the failed requests recorded nothing).
    let req = &frames[1]["params"]["payload"];
    assert_eq!(req["messages"].as_array().unwrap().len(), 3, "{req}");
}

#[test]
fn paused_turn_survives_restart_and_owner_resumes() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&["t"], json!({"tools": [{"name": "t"}]}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "t", "input": {}},
        {"type": "tool_use", "id": "tu_2", "name": "srv", "input": {}}
    ])));
    send(&mut h, &sid, &skey, json!("go"));
    h.restart(config());
    // Registrations are in memory by default (spec 01 §4.3): register again.
    let (_, parts) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/participants"),
        &skey,
        None,
    );
    assert_eq!(parts["drivers"], json!([]));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("done"));
    let f = send(
        &mut h,
        &sid,
        &skey,
        json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"}]),
    );
    let r = &f.last().unwrap()["result"];
    assert_eq!(r["message"]["content"][0]["text"], "done", "{r}");
    let merged = &r["events"][0]["payload"]["content"];
    assert_eq!(
        merged[1]["tool_use_id"], "tu_2",
        "server result restored from the log"
    );
}

#[test]
fn waiter_retires_expired_pause_by_timer_c121() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&["t"], json!({"tools": [{"name": "t"}]}));
    let key = second_client_key(&mut h);
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &key,
        Some(&json!({})),
    );
    let skey2 = j["session_key"].as_str().unwrap().to_string();
    h.register_driver(&sid, &skey);
    h.register_driver(&sid, &skey2);
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_1", "name": "t", "input": {}}]),
    ));
    send(&mut h, &sid, &skey, json!("go"));
    let b = h.rpc_start(&sid, &skey2, &json!({"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": {"message": {"content": "mine"}}}));
    assert!(h.frames(b).is_empty());
    h.replies.push_back(anthropic_text("hi b"));
    h.advance(119_000);
    assert!(h.frames(b).is_empty(), "still within the owner's timeout");
    h.advance(2_000);
    let f = h.frames(b);
    let r = &f.last().unwrap()["result"];
    assert_eq!(r["message"]["content"][0]["text"], "hi b");
    assert!(
        !types(&r["events"]).contains(&"session.error".to_string()),
        "C-122: abandonment not in the reclaimer's events"
    );
    let first = &r["events"][0]["payload"]["content"][0];
    assert_eq!(first["is_error"], true);
}

#[test]
fn durable_driver_registrations_are_opt_in() {
    let mut cfg = config();
    cfg.durable_drivers = true;
    let mut h = Harness::new(cfg.clone());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    h.restart(cfg);
    let (_, parts) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/participants"),
        &skey,
        None,
    );
    assert_eq!(parts["drivers"].as_array().unwrap().len(), 1);
    h.replies.push_back(anthropic_text("still driving"));
    let f = send(&mut h, &sid, &skey, json!("hi"));
    assert_eq!(
        f.last().unwrap()["result"]["message"]["content"][0]["text"],
        "still driving"
    );
}

#[test]
fn legacy_argon2id_admin_hash_verifies_once_then_upgrades_c236() {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let token = "bae_admin_111111111111111111111111111111111111111111111111";
    let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    let phc = argon2::Argon2::default()
        .hash_password(token.as_bytes(), &salt)
        .unwrap()
        .to_string();
    let mut h = Harness::new(config());
    h.store
        .apply(&engine::StoreWrite::InsertKey(engine::store::KeyRow {
            id: "key_legacy".into(),
            name: "provisioned-admin".into(),
            key_hash: phc,
            key_prefix: token[..14].into(),
            role: engine::store::KeyRole::Admin,
            profile_id: None,
            client_id: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            last_used_at: None,
            deleted_at: None,
        }));
    h.restart(config());
    let wrong = "bae_admin_111111111111111111111111111111111111111111111112";
    let (s, _) = h.request(
        Listener::Admin,
        "GET",
        "/admin/v1/profiles",
        Some(wrong),
        None,
    );
    assert_eq!(s, 401);
    h.advance(1_500);
    let (s, _) = h.request(
        Listener::Admin,
        "GET",
        "/admin/v1/profiles",
        Some(token),
        None,
    );
    assert_eq!(s, 200);
    let row = h.store.keys.iter().find(|k| k.id == "key_legacy").unwrap();
    assert_eq!(
        row.key_hash,
        engine::key_digest_hex(token),
        "upgraded to SHA-256 on first use"
    );
    let (s, _) = h.request(
        Listener::Admin,
        "GET",
        "/admin/v1/profiles",
        Some(token),
        None,
    );
    assert_eq!(s, 200);
}

/// The pause-abandonment timer (C-183) finds the one session with a waiter
/// among many live ones, admits the waiter without a new arrival, and is
/// disarmed once nobody waits (the gate timer looks only at sessions that
/// have queued waiters).
#[test]
fn gate_timer_admits_a_waiter_among_many_live_sessions_c183() {
    // Idle histories kept for good: no cache timer besides the gate's
    // (nor the residency's stalled-pass retry a zero budget would arm).
    let mut h = Harness::as_configured(engine::Config {
        history_cache: engine::history_cache::Limits {
            budget_bytes: usize::MAX,
            idle_ms: u64::MAX,
        },
        ..config()
    });
    let (_key, sid, skey) = h.open_session(&["t"], json!({"tools": [{"name": "t"}]}));
    // A second client (another key on the same profile) joins: it is not
    // the pause's owner, so it waits for the pause to time out.
    let (_, profiles) = h.admin("GET", "/admin/v1/profiles", None);
    let profile = profiles["items"].as_array().and_then(|d| d.last()).cloned();
    let profile_id = profile.map(|p| p["id"].clone()).unwrap_or_default();
    let (_, k2) = h.admin(
        "POST",
        "/admin/v1/keys",
        Some(&json!({"name": "second", "profile_id": profile_id})),
    );
    let key2 = k2["key"].as_str().expect("second key").to_string();
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &key2,
        Some(&json!({})),
    );
    let skey2 = j["session_key"].as_str().expect("joined").to_string();
    h.register_driver(&sid, &skey);
    h.register_driver(&sid, &skey2);
    // Other sessions with finished turns stay live (cached history).
    for i in 0..40 {
        let (_, other, okey) = h.open_session(&[], json!({}));
        h.register_driver(&other, &okey);
        h.replies.push_back(anthropic_text(&format!("answer {i}")));
        send(&mut h, &other, &okey, json!("hi"));
    }
    assert_eq!(h.engine.poll_timeout(), None, "nobody waits: no gate timer");
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_1", "name": "t", "input": {}}]),
    ));
    send(&mut h, &sid, &skey, json!("go"));
    assert_eq!(
        h.engine.poll_timeout(),
        None,
        "a pause alone needs no timer"
    );
    let waiter = h.rpc_start(&sid, &skey2, &json!({"jsonrpc": "2.0", "id": 7, "method": "session.sendMessage", "params": {"message": {"content": "me next"}}}));
    assert!(h.frames(waiter).is_empty(), "queued behind the pause");
    let deadline = h
        .engine
        .poll_timeout()
        .expect("the pause deadline is armed");
    assert!(deadline > h.now.mono);
    h.replies.push_back(anthropic_text("taken over"));
    h.advance(deadline.0 - h.now.mono.0);
    let frames = h.frames(waiter);
    let result = &frames.last().expect("the waiter ran")["result"];
    assert_eq!(result["message"]["content"][0]["text"], "taken over");
    assert_eq!(h.engine.poll_timeout(), None, "disarmed once nobody waits");
}
