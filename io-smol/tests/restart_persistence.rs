//! Crash and restart over the real binary: everything acknowledged before a
//! SIGKILL is there after a restart, session keys and the admin key keep
//! working, and in-memory state (drivers) starts empty (spec 08 §1.1, §5).

mod rest_support;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures;
use testkit::{MockProvider, Reply, Server};

/// Everything observable through the admin port and the session keys.
fn observe(s: &Server, sessions: &[(String, String)]) -> Value {
    let mut per_session = Vec::new();
    for (sid, skey) in sessions {
        per_session.push(json!({
            "client": events(s, sid, skey),
            "admin": admin_events(s, sid),
        }));
    }
    json!({
        "profiles": all_pages(&s.admin(), "/admin/v1/profiles"),
        "keys": all_pages(&s.admin(), "/admin/v1/keys"),
        "sessions": admin_sessions(s),
        "events": per_session,
    })
}

#[test]
fn kill9_then_restart_keeps_profiles_keys_sessions_events() {
    let mock = MockProvider::start();
    let mut s = start_with_mock(&mock);
    let admin_key = s.admin_key.clone();
    let f = fix(&s, &["get_time"]);
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({"tools": [tool("get_time")]}));
    register(&s, &f.sid, &f.skey);
    register(&s, &f.sid, &k2);
    mock.push(Reply::text("the first answer"));
    let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!("remember the word zebra"));
    assert_eq!(
        t["result"]["message"]["content"][0]["text"], "the first answer",
        "{t}"
    );
    // A closed session, an audit row and a revoked key.
    let (sid2, skey2) = fixtures::open_session(&s, &f.client_key, json!({"client_version": "c2"}));
    s.client()
        .bearer(&skey2)
        .delete(&format!("/api/v1/sessions/{sid2}"))
        .assert_status(200);
    let (kid3, ck3) = key(&s, &f.profile);
    let (sid3, skey3) = fixtures::open_session(&s, &ck3, json!({}));
    s.admin()
        .delete(&format!("/admin/v1/keys/{kid3}"))
        .assert_status(204);
    let np = fixtures::create_profile(&s, &fixtures::unique_name("np"), "absent", &[], &[]);
    let (_, npk) = key(&s, &np);
    let r = s
        .client()
        .bearer(&npk)
        .post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    // The very last write before the crash: acknowledged means durable.
    let (sid4, skey4) = fixtures::open_session(&s, &ck2, json!({"client_version": "last"}));

    let sessions = vec![
        (f.sid.clone(), f.skey.clone()),
        (sid2.clone(), skey2.clone()),
        (sid4.clone(), skey4.clone()),
    ];
    let before = observe(&s, &sessions);
    assert_eq!(
        s.client()
            .bearer(&f.skey)
            .get(&format!("/api/v1/sessions/{}/participants", f.sid))
            .json()["drivers"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    s.kill9();
    assert!(!s.is_running());
    s.restart();

    // Same admin key, read from the untouched key file.
    assert_eq!(s.admin_key, admin_key);
    s.admin().get("/admin/v1/keys").assert_status(200);
    let after = observe(&s, &sessions);
    assert_eq!(after, before, "state changed across kill -9 + restart");

    // Session keys still work (the driver registry after a restart is
    // checked by `c040_participants_reset_after_restart`).
    let c = s.client().bearer(&f.skey);
    c.get(&format!("/api/v1/sessions/{}/participants", f.sid))
        .assert_status(200);
    s.client()
        .bearer(&k2)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
    // Revoked keys stay revoked.
    assert_problem(
        &s.client()
            .bearer(&skey3)
            .get(&format!("/api/v1/sessions/{sid3}/events")),
        401,
        "unauthorized",
    );
    assert_problem(
        &s.client()
            .bearer(&ck3)
            .post_json("/api/v1/sessions", &json!({})),
        401,
        "unauthorized",
    );
    // Closed stays closed.
    assert_problem(
        &s.client()
            .bearer(&skey2)
            .delete(&format!("/api/v1/sessions/{sid2}")),
        409,
        "session_closed",
    );
    // Client keys still create and join.
    let (sid5, _) = fixtures::open_session(&s, &f.client_key, json!({}));
    fixtures::join_session(&s, &sid5, &ck2, json!({}));
    // A turn after the restart sees the earlier conversation.
    register(&s, &f.sid, &f.skey);
    mock.clear_requests();
    mock.push(Reply::text("zebra"));
    let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!("what was the word?"));
    assert_eq!(t["result"]["message"]["content"][0]["text"], "zebra", "{t}");
    let req = &provider_requests(&mock)[0];
    let history = req.messages().to_string();
    assert!(history.contains("remember the word zebra"), "{history}");
    assert!(history.contains("the first answer"), "{history}");
    // Deleting after the restart logs the close once.
    s.client()
        .bearer(&k2)
        .delete(&format!("/api/v1/sessions/{}", f.sid))
        .assert_status(200);
    let t = types(&events(&s, &f.sid, &f.skey));
    assert_eq!(t.iter().filter(|x| *x == "session.close").count(), 1);
    // Last-used stamps survive too (the joiner's key was used above).
    let keys = all_pages(&s.admin(), "/admin/v1/keys");
    let k = keys.iter().find(|k| k["id"] == kid2.as_str()).unwrap();
    assert!(k["last_used_at"].is_string());
}

#[test]
fn graceful_restart_and_repeated_crashes_keep_everything() {
    let mut s = start();
    let f = fix(&s, &[]);
    let mut sessions = vec![(f.sid.clone(), f.skey.clone())];
    for round in 0..3 {
        let (sid, skey) = fixtures::open_session(
            &s,
            &f.client_key,
            json!({"client_version": format!("r{round}")}),
        );
        fixtures::join_session(&s, &sid, &f.client_key, json!({}));
        sessions.push((sid, skey));
        let before = observe(&s, &sessions);
        if round % 2 == 0 {
            s.kill9();
            s.restart();
        } else {
            s.restart();
        }
        assert_eq!(observe(&s, &sessions), before, "round {round}");
    }
    assert_serving(&mut s);
    // The database is still at its schema (SQLite: 9) with one active
    // admin row.
    let conn = db(&s);
    assert_eq!(
        query(&conn, "SELECT MAX(version) FROM schema_version")[0][0].as_deref(),
        Some(latest_schema_version(&s).as_str())
    );
    assert_eq!(
        query(
            &conn,
            "SELECT COUNT(*) FROM keys WHERE role = 'admin' AND deleted_at IS NULL"
        )[0][0]
            .as_deref(),
        Some("1")
    );
}

#[test]
fn acknowledged_writes_survive_an_immediate_kill() {
    let mut s = start();
    let p = profile(&s, &[]);
    for i in 0..5 {
        let (kid, ck) = key(&s, &p);
        let (sid, skey) = fixtures::open_session(&s, &ck, json!({}));
        // Kill right after the 201 arrived.
        s.kill9();
        s.restart();
        let evts = events(&s, &sid, &skey);
        assert_eq!(types(&evts), ["session.open"], "round {i}");
        assert_eq!(evts[0]["client_key_id"], kid.as_str());
        let keys = all_pages(&s.admin(), "/admin/v1/keys");
        assert!(keys.iter().any(|k| k["id"] == kid.as_str()), "round {i}");
    }
}

/// Seed ("GET …/participants": "live-only — it resets on server restart"),
/// spec 01 §4.3 ("empty after a restart") and 08 §5.1 (driver
/// registrations are in memory only).
#[test]
fn c040_participants_reset_after_restart() {
    let mut s = start();
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    assert_eq!(
        s.client().bearer(&f.skey).get(&path).json(),
        json!({"drivers": [f.key_id]})
    );
    s.kill9();
    s.restart();
    assert_eq!(
        s.client().bearer(&f.skey).get(&path).json(),
        json!({"drivers": []}),
        "driver registry survived a restart"
    );
    // A driver must register again before sending (C-069 after a restart).
    let (_, t) = rpc(
        &s,
        &f.sid,
        &f.skey,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": "hi"}}),
    );
    assert_eq!(t["error"]["code"], -32001, "{t}");
}

/// The opt-in extension `BAE_DURABLE_DRIVERS=1` keeps registrations across
/// a restart (off by default, see `c040_participants_reset_after_restart`).
#[test]
fn durable_drivers_extension_keeps_registrations_when_enabled() {
    let mut s = Server::start(
        opts()
            .config(provider_config(DEAD_URL))
            .env("BAE_DURABLE_DRIVERS", "1"),
    );
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    s.kill9();
    s.restart();
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    assert_eq!(
        s.client().bearer(&f.skey).get(&path).json(),
        json!({"drivers": [f.key_id]})
    );
}
