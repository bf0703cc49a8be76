//! Sessions out of memory (`BAE_RESIDENT_SESSIONS`, engine::residency): an
//! idle session beyond the budget leaves the catalogue and the next
//! request naming it loads it back from the store. Everything a client or
//! an operator sees must be as if every session had stayed.

mod common;

use common::*;
use engine::store::SnapshotScope;
use engine::{Config, StoreRead};
use serde_json::{json, Value};

/// At most `n` idle sessions in memory, and no idle history cached (a
/// session with a cached history is in use).
fn keep(n: usize) -> Config {
    Config {
        resident_sessions: Some(n),
        history_cache: engine::history_cache::Limits {
            budget_bytes: 0,
            idle_ms: 0,
        },
        ..config()
    }
}

fn send(h: &mut Harness, sid: &str, key: &str, content: Value) -> Vec<Value> {
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "session.sendMessage",
                      "params": {"message": {"content": content}}});
    h.rpc(sid, key, &call)
}

fn loads(h: &Harness) -> usize {
    (h.reads_seen.iter())
        .filter(|r| matches!(r, StoreRead::LoadSession { .. }))
        .count()
}

fn drivers(h: &mut Harness, sid: &str, skey: &str) -> Value {
    let path = format!("/api/v1/sessions/{sid}/participants");
    let (status, body) = h.client("GET", &path, skey, None);
    assert_eq!(status, 200, "{body}");
    body["drivers"].clone()
}

fn gauge(h: &mut Harness, name: &str) -> u64 {
    let (status, body) = h.admin("GET", "/metrics", None);
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_string();
    (text.lines())
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn an_evicted_session_serves_turns_and_keeps_its_driver() {
    let mut h = Harness::new(keep(0));
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    let before = loads(&h);
    assert!(before >= 1, "the session left memory after its create");
    // The registration made by this process comes back with the session.
    let d = drivers(&mut h, &sid, &skey);
    assert_eq!(d.as_array().map(Vec::len), Some(1), "{d}");
    for i in 0..3 {
        h.replies.push_back(anthropic_text(&format!("answer {i}")));
        let f = send(&mut h, &sid, &skey, json!(format!("q {i}")));
        let r = &f.last().unwrap()["result"];
        assert_eq!(r["message"]["content"][0]["text"], format!("answer {i}"));
        // The idle session gives its cached history up on the next tick,
        // and leaves memory once an eviction pass comes round again.
        h.advance(engine::residency::RETRY_MS);
    }
    assert!(loads(&h) > before + 3, "every request loaded the session");
    // The provider saw the whole history, rebuilt from the log each time.
    let last = h
        .store
        .events
        .values()
        .rev()
        .find(|e| e.event_type == "provider.request");
    let payload: Value = serde_json::from_str(&last.unwrap().payload).unwrap();
    assert_eq!(payload["messages"].as_array().map(Vec::len), Some(5));
}

#[test]
fn within_the_budget_nothing_is_read_back() {
    let mut h = Harness::new(keep(16));
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("hi"));
    send(&mut h, &sid, &skey, json!("hello"));
    assert_eq!(loads(&h), 0);
}

#[test]
fn unknown_sessions_answer_as_before() {
    let mut h = Harness::new(keep(0));
    let (key, _sid, _skey) = h.open_session(&[], json!({}));
    let ghost = "ses_00000000000000000000000000000000";
    let (s, _) = h.client(
        "GET",
        &format!("/api/v1/sessions/{ghost}/participants"),
        "bae_ses_x",
        None,
    );
    assert_eq!(s, 401);
    let (s, body) = h.client(
        "POST",
        &format!("/api/v1/sessions/{ghost}/join"),
        &key,
        Some(&json!({})),
    );
    assert_eq!(s, 404, "{body}");
    let (s, _) = h.admin("GET", &format!("/admin/v1/sessions/{ghost}/events"), None);
    assert_eq!(s, 404);
    // A request without a usable bearer costs no read.
    let n = loads(&h);
    let (s, _) = h.request(
        engine::Listener::Client,
        "GET",
        &format!("/api/v1/sessions/{ghost}/participants"),
        None,
        None,
    );
    assert_eq!(s, 401);
    assert_eq!(loads(&h), n);
}

#[test]
fn an_open_subscription_keeps_its_session_in_memory() {
    let mut h = Harness::new(keep(0));
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    let sub = h.rpc_start(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "session.subscribe"}),
    );
    let n = loads(&h);
    h.replies.push_back(anthropic_text("streamed"));
    send(&mut h, &sid, &skey, json!("go"));
    assert_eq!(loads(&h), n, "a session with a stream stays resident");
    let frames = h.frames(sub);
    let types: Vec<&str> = (frames.iter())
        .filter_map(|f| f["params"]["event_type"].as_str())
        .collect();
    assert!(types.contains(&"server.message.send"), "{types:?}");
}

#[test]
fn revoking_a_client_key_closes_its_evicted_sessions() {
    let mut h = Harness::new(keep(0));
    let (key, sid, skey) = h.open_session(&[], json!({}));
    let (s, other) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201);
    let key_id = (h.store.keys.iter())
        .find(|k| k.role == engine::store::KeyRole::Client && k.name == "k")
        .map(|k| k.id.clone())
        .unwrap();
    let (s, _) = h.admin("DELETE", &format!("/admin/v1/keys/{key_id}"), None);
    assert_eq!(s, 204);
    for id in [sid.as_str(), other["session_id"].as_str().unwrap()] {
        let row = h.store.sessions.iter().find(|r| r.id == id).unwrap();
        assert_eq!(row.state, engine::store::SessionState::Closed, "{id}");
        let close = (h.store.events.values())
            .find(|e| e.session_id == id && e.event_type == "session.close")
            .expect("a session.close event");
        assert!(
            close.payload.contains("client_key_revoked"),
            "{}",
            close.payload
        );
    }
    let (s, _) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/participants"),
        &skey,
        None,
    );
    assert_eq!(s, 401, "the session key went with its client key");
    let (s, _) = h.admin("DELETE", &format!("/admin/v1/keys/{key_id}"), None);
    assert_eq!(s, 404);
}

#[test]
fn the_admin_listing_pages_through_every_stored_session() {
    let mut h = Harness::new(keep(1));
    let mut opened = Vec::new();
    let (key, sid, _) = h.open_session(&[], json!({}));
    opened.push(sid);
    for _ in 0..4 {
        let (s, o) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
        assert_eq!(s, 201);
        opened.push(o["session_id"].as_str().unwrap().to_string());
    }
    let (mut listed, mut cursor) = (Vec::new(), String::new());
    loop {
        let (s, page) = h.admin(
            "GET",
            &format!("/admin/v1/sessions?limit=2&cursor={cursor}"),
            None,
        );
        assert_eq!(s, 200, "{page}");
        for item in page["items"].as_array().unwrap() {
            assert_eq!(item["state"], "open");
            listed.push(item["id"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(listed, opened, "every session, in creation order");
    let (_, closed) = h.admin("GET", "/admin/v1/sessions?state=closed", None);
    assert_eq!(closed["items"], json!([]));
}

#[test]
fn gauges_count_sessions_and_drivers_out_of_memory() {
    let mut counts = Vec::new();
    for budget in [None, Some(0)] {
        let mut h = Harness::new(Config {
            resident_sessions: budget,
            ..keep(0)
        });
        let (key, sid, skey) = h.open_session(&[], json!({}));
        h.register_driver(&sid, &skey);
        let (_, o) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
        let other = o["session_id"].as_str().unwrap().to_string();
        let close = h.client(
            "DELETE",
            &format!("/api/v1/sessions/{other}"),
            o["session_key"].as_str().unwrap(),
            None,
        );
        assert_eq!(close.0, 200, "{}", close.1);
        counts.push((
            gauge(&mut h, "bae_sessions_open"),
            gauge(&mut h, "bae_sessions_total"),
            gauge(&mut h, "bae_drivers_registered"),
        ));
    }
    assert_eq!(counts[0], (1, 2, 1));
    assert_eq!(
        counts[1], counts[0],
        "the same figures whatever is in memory"
    );
}

#[test]
fn a_lazy_restart_reads_sessions_on_first_use() {
    let mut h = Harness::new(keep(0));
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("before"));
    send(&mut h, &sid, &skey, json!("one"));
    h.restart_from(keep(0), SnapshotScope::Lazy);
    assert_eq!(gauge(&mut h, "bae_sessions_open"), 1);
    // Registrations are in memory by default: gone after the restart,
    // and one made now survives evictions.
    assert_eq!(drivers(&mut h, &sid, &skey), json!([]));
    h.register_driver(&sid, &skey);
    assert_eq!(
        drivers(&mut h, &sid, &skey).as_array().map(Vec::len),
        Some(1)
    );
    h.replies.push_back(anthropic_text("after"));
    let f = send(&mut h, &sid, &skey, json!("two"));
    assert_eq!(
        f.last().unwrap()["result"]["message"]["content"][0]["text"],
        "after"
    );
    // With durable registrations the one from before comes back.
    h.restart_from(
        Config {
            durable_drivers: true,
            ..keep(0)
        },
        SnapshotScope::Lazy,
    );
    assert_eq!(gauge(&mut h, "bae_drivers_registered"), 1);
    assert_eq!(
        drivers(&mut h, &sid, &skey).as_array().map(Vec::len),
        Some(1)
    );
}
