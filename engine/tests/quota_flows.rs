//! Quotas per client key and per profile through the in-process harness
//! (virtual time, the in-memory store): request rates, open sessions and
//! token budgets refused as docs/extensions.md ("Quotas") says, set and
//! read on the admin port, kept over a restart.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

fn put_quota(h: &mut Harness, path: &str, body: Value) -> (u16, Value) {
    h.admin("PUT", path, Some(&body))
}

fn create(h: &mut Harness, key: &str) -> Reply {
    let c = h.connect(Listener::Client);
    let req = build_request("POST", "/api/v1/sessions", Some(key), Some(&json!({})));
    h.send_bytes(c, &req);
    Reply::parse(&h.take(c))
}

#[test]
fn a_key_over_its_rate_gets_429_with_retry_after_other_keys_do_not() {
    let mut h = Harness::new(config());
    let profile = h.profile(&[]);
    let (k1, t1) = h.key(&profile);
    let (_k2, t2) = h.key(&profile);
    let (s, q) = put_quota(
        &mut h,
        &format!("/admin/v1/keys/{k1}/quota"),
        json!({"requests_per_second": 1, "burst": 2}),
    );
    assert_eq!(s, 200, "{q}");
    assert_eq!(q["quota"]["burst"], 2);
    assert_eq!(q["usage"]["requests_available"], 2);
    assert_eq!(create(&mut h, &t1).status, 201);
    assert_eq!(create(&mut h, &t1).status, 201);
    let r = create(&mut h, &t1);
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json["type"], "quota_exceeded");
    assert_eq!(r.json["title"], "Too Many Requests");
    assert_eq!(r.json["status"], 429);
    assert_eq!(r.json["quota"], "requests_per_second");
    assert_eq!(r.json["scope"], "key");
    assert_eq!(r.json["id"], k1.as_str());
    assert_eq!(r.json["limit"], 1);
    assert_eq!(r.json["window"], "1s");
    assert_eq!(r.json["retry_after_ms"], 1000);
    // The other key of the same profile is not limited.
    for _ in 0..5 {
        assert_eq!(create(&mut h, &t2).status, 201);
    }
    h.advance(1000);
    assert_eq!(create(&mut h, &t1).status, 201);
    // Counted by kind on /admin/v1/quotas.
    let (s, all) = h.admin("GET", "/admin/v1/quotas", None);
    assert_eq!(s, 200);
    assert_eq!(all["refused"]["requests_per_second"], 1);
    assert_eq!(all["quotas"][0]["id"], k1.as_str());
}

#[test]
fn json_rpc_requests_over_the_rate_get_the_documented_error_with_data() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let path = format!("/admin/v1/keys/{}/quota", f.key_id);
    let (s, _) = put_quota(&mut h, &path, json!({"requests_per_second": 1}));
    assert_eq!(s, 200);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"});
    let ok = h.rpc(&f.sid, &f.skey, &call);
    assert_eq!(ok[0]["result"]["registered"], true, "{ok:?}");
    let refused = h.rpc(&f.sid, &f.skey, &call);
    let e = &refused[0]["error"];
    assert_eq!(e["code"], -32025, "{refused:?}");
    assert_eq!(e["data"]["retry_after_ms"], 1000);
    assert_eq!(e["data"]["limit"], 1);
    assert_eq!(e["data"]["window"], "1s");
    assert_eq!(e["data"]["quota"], "requests_per_second");
    assert!(e["message"].as_str().unwrap().starts_with("quota_exceeded"));
}

#[test]
fn open_sessions_past_the_limit_are_refused_until_one_closes() {
    let mut h = Harness::new(config());
    let profile = h.profile(&[]);
    let (k1, t1) = h.key(&profile);
    let (s, _) = put_quota(
        &mut h,
        &format!("/admin/v1/profiles/{profile}/quota"),
        json!({"max_open_sessions": 1}),
    );
    assert_eq!(s, 200);
    let (s, o) = h.client("POST", "/api/v1/sessions", &t1, Some(&json!({})));
    assert_eq!(s, 201);
    // Another key of the profile shares the profile's count.
    let (_k2, t2) = h.key(&profile);
    let r = create(&mut h, &t2);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.json["quota"], "max_open_sessions");
    assert_eq!(r.json["scope"], "profile");
    assert_eq!(r.json["retry_after_ms"], Value::Null);
    let (s, q) = h.admin("GET", &format!("/admin/v1/profiles/{profile}/quota"), None);
    assert_eq!((s, q["usage"]["open_sessions"].as_u64()), (200, Some(1)));
    let sid = o["session_id"].as_str().unwrap();
    let skey = o["session_key"].as_str().unwrap();
    let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), skey, None);
    assert_eq!(s, 200);
    assert_eq!(create(&mut h, &t2).status, 201);
    // After a restart the count comes from the store.
    h.restart(config());
    assert_eq!(create(&mut h, &t1).status, 429);
    let _ = k1;
}

#[test]
fn a_key_over_its_token_budget_cannot_start_a_turn_another_key_can_and_it_survives_a_restart() {
    let mut h = Harness::new(config());
    let a = h.open_driver("main", &[], &[], json!({}));
    let b = h.open_driver("main", &[], &[], json!({}));
    let path = format!("/admin/v1/keys/{}/quota", a.a.key_id);
    let (s, q) = put_quota(&mut h, &path, json!({"token_budget": 15, "window": "1h"}));
    assert_eq!(s, 200, "{q}");
    assert_eq!(q["usage"]["tokens_used"], 0);
    // The first turn runs (10 input + 5 output tokens reported).
    h.replies.push_back(anthropic_text("one"));
    let (_, t) = h.send(&a.sid, &a.a.session_key, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    let calls = h.call_bodies.len();
    let (_, t) = h.send(&a.sid, &a.a.session_key, json!("again"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    assert_eq!(t["error"]["data"]["quota"], "token_budget");
    assert_eq!(t["error"]["data"]["limit"], 15);
    assert_eq!(t["error"]["data"]["window"], "1h");
    assert!(t["error"]["data"]["retry_after_ms"].as_u64().unwrap() <= 3_600_000);
    assert_eq!(
        h.call_bodies.len(),
        calls,
        "refused before any provider call"
    );
    // Another key is not limited.
    h.replies.push_back(anthropic_text("two"));
    let (_, t) = h.send(&b.sid, &b.a.session_key, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    // The quota and the window's usage come back from the store.
    h.restart(config());
    let (s, q) = h.admin("GET", &path, None);
    assert_eq!(s, 200, "{q}");
    assert_eq!(q["usage"]["tokens_used"], 15);
    h.register_driver(&a.sid, &a.a.session_key);
    let (_, t) = h.send(&a.sid, &a.a.session_key, json!("after restart"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    // Raising the budget lets the key go on; deleting the quota too.
    let (s, _) = put_quota(&mut h, &path, json!({"token_budget": 100, "window": "1h"}));
    assert_eq!(s, 200);
    h.replies.push_back(anthropic_text("three"));
    let (_, t) = h.send(&a.sid, &a.a.session_key, json!("more"));
    assert!(t.get("result").is_some(), "{t}");
    assert_eq!(h.admin("DELETE", &path, None).0, 204);
    assert_eq!(h.admin("GET", &path, None).0, 404);
}

#[test]
fn bad_quota_values_are_refused_naming_the_field() {
    let mut h = Harness::new(config());
    let profile = h.profile(&[]);
    let (k, _) = h.key(&profile);
    let path = format!("/admin/v1/keys/{k}/quota");
    for (body, field) in [
        (json!({"requests_per_second": 0}), "requests_per_second"),
        (json!({"max_open_sessions": -2}), "max_open_sessions"),
        (json!({"token_budget": 10}), "token_budget"),
        (json!({"token_budget": 10, "window": "1y"}), "window"),
        (json!({"burst": 4}), "burst"),
        (json!({"bogus": 1}), "bogus"),
    ] {
        let (s, p) = put_quota(&mut h, &path, body.clone());
        assert_eq!(s, 400, "{body} → {p}");
        assert!(
            p["detail"].as_str().unwrap().starts_with(field),
            "{body} → {p}"
        );
    }
    let (s, _) = put_quota(
        &mut h,
        "/admin/v1/keys/key_nope/quota",
        json!({"max_open_sessions": 1}),
    );
    assert_eq!(s, 404);
    assert_eq!(h.admin("GET", &path, None).0, 404, "nothing was set");
}

/// An idempotent retry of a turn that was answered replays its answer
/// even once the budget is used up; a new key is refused.
#[test]
fn an_idempotent_retry_is_replayed_past_the_budget_a_new_turn_is_not() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let params = json!({"extensions": ["send.idempotent"]});
    let conn = h.rpc_start(&f.sid, &f.skey, &call(1, "session.registerDriver", params));
    assert_eq!(
        h.finished(conn).1["result"]["extensions"],
        json!(["send.idempotent"])
    );
    let path = format!("/admin/v1/keys/{}/quota", f.key_id);
    let (s, _) = put_quota(&mut h, &path, json!({"token_budget": 10, "window": "1d"}));
    assert_eq!(s, 200);
    let send = |h: &mut Harness, text: &str, ikey: &str| {
        let params = json!({"message": {"role": "user", "content": text}, "idempotency_key": ikey});
        let conn = h.rpc_start(&f.sid, &f.skey, &call(2, "session.sendMessage", params));
        h.finished(conn).1
    };
    h.replies.push_back(anthropic_text("one"));
    let first = send(&mut h, "hi", "k-1");
    assert!(first.get("result").is_some(), "{first}");
    let again = send(&mut h, "hi", "k-1");
    assert_eq!(again["result"], first["result"], "replayed, not refused");
    let refused = send(&mut h, "more", "k-2");
    assert_eq!(refused["error"]["code"], -32025, "{refused}");
}

/// Replica mode: a quota, and the sessions another replica opens, arrive
/// by catalogue notices; a budget's usage is re-read from the store every
/// second (docs/scaling.md, "Quotas").
#[test]
fn replicas_share_quotas_open_sessions_and_budgets() {
    use engine::replicas::ReplicaSettings;
    use engine::store::CatalogUpdate;
    let replica = |slot| engine::Config {
        replica: Some(ReplicaSettings { slot, lanes: 8 }),
        ..config()
    };
    let mut a = Harness::new(replica(3));
    let profile = a.profile(&[]);
    let (kid, key) = a.key(&profile);
    let path = format!("/admin/v1/keys/{kid}/quota");
    let q = json!({"max_open_sessions": 2, "token_budget": 15, "window": "1h"});
    assert_eq!(put_quota(&mut a, &path, q).0, 200);
    let mut b = Harness::new(replica(5));
    // Its own entropy: ids minted on B must not repeat A's.
    b.restart(replica(5));
    b.store = a.store.clone();
    let update = CatalogUpdate {
        profiles: a.store.profiles.clone(),
        keys: a.store.keys.clone(),
        quotas: a.store.quotas.values().cloned().collect(),
        ..CatalogUpdate::default()
    };
    b.input(engine::Input::Catalog(Box::new(update)));
    assert_eq!(b.admin("GET", &path, None).0, 200, "the quota arrived");
    // A session on each replica; A's reaches B by its notice.
    let (s, o) = a.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201);
    let (sa, ka) = (
        o["session_id"].as_str().unwrap().to_string(),
        o["session_key"].as_str().unwrap().to_string(),
    );
    let row = a
        .store
        .sessions
        .iter()
        .find(|r| r.id == sa)
        .cloned()
        .unwrap();
    b.store = a.store.clone();
    let update = CatalogUpdate {
        sessions: vec![row],
        ..CatalogUpdate::default()
    };
    b.input(engine::Input::Catalog(Box::new(update)));
    let (s, o) = b.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201);
    let (sb, kb) = (
        o["session_id"].as_str().unwrap().to_string(),
        o["session_key"].as_str().unwrap().to_string(),
    );
    let r = create(&mut b, &key);
    assert_eq!(r.status, 429, "two open, one on each replica: {}", r.text);
    // A's turn uses the budget; B reads the usage rows within a second.
    a.register_driver(&sa, &ka);
    a.replies.push_back(anthropic_text("one"));
    let (_, t) = a.send(&sa, &ka, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    b.store.usage = a.store.usage.clone();
    b.register_driver(&sb, &kb);
    b.advance(1000);
    let (_, all) = b.admin("GET", "/admin/v1/quotas", None);
    assert_eq!(all["quotas"][0]["usage"]["tokens_used"], 15, "{all}");
    let (_, t) = b.send(&sb, &kb, json!("refused"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    // Removed on A, removed on B by the notice.
    assert_eq!(a.admin("DELETE", &path, None).0, 204);
    let update = CatalogUpdate {
        quotas_removed: vec![engine::quotas::Scope::Key(kid.clone())],
        ..CatalogUpdate::default()
    };
    b.input(engine::Input::Catalog(Box::new(update)));
    assert_eq!(b.admin("GET", &path, None).0, 404);
}
