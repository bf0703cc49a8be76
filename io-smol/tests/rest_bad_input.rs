//! Bad input over the real binary that needs the store: a profile
//! soft-deleted in SQLite behind the server's back (spec 01 §4.1 step 4,
//! §4.2 step 7, §6.5). Malformed JSON, content types, oversized bodies,
//! unknown fields, id shapes, methods, revoked keys and deleted profiles
//! through the API (C-017, C-020, C-030, C-034, C-192, C-196, C-198,
//! C-199) are tested in-process in `engine/tests/bad_input_flows.rs`.

mod rest_support;

use rest_support::*;
use serde_json::json;
use testkit::fixtures;

/// A profile soft-deleted behind the server's back (the admin API cannot
/// delete a profile with active keys): create and join answer
/// `422 profile_unavailable` with an audit row, and a turn on an existing
/// session fails with `-32000 profile_unavailable: …` (spec 01 §4.1 step
/// 4, §4.2 step 7, §6.5).
#[test]
fn profile_deleted_under_active_keys_is_profile_unavailable() {
    let mut s = start();
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    s.stop();
    execute(
        &s,
        &format!(
            "UPDATE profiles SET deleted_at = '2026-01-01T00:00:00.000Z' WHERE id = '{}'",
            f.profile
        ),
    );
    s.restart();
    let n = admin_sessions(&s).len();
    let r = s
        .client()
        .bearer(&f.client_key)
        .post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 422, "profile_unavailable");
    let r = s
        .client()
        .bearer(&f.client_key)
        .post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({}));
    assert_problem(&r, 422, "profile_unavailable");
    let rows = admin_sessions(&s);
    assert_eq!(rows.len(), n + 2, "one audit row per failure");
    for row in &rows[n..] {
        assert_eq!(row["state"], "error");
        let ev = admin_events(&s, row["id"].as_str().unwrap());
        assert_eq!(
            ev[0]["payload"],
            json!({"reason": "profile_unavailable", "profile_id": f.profile})
        );
    }
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
    register(&s, &f.sid, &f.skey);
    let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!("hi"));
    assert_eq!(t["error"]["code"], -32000, "{t}");
    assert!(
        t["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("profile_unavailable: "),
        "{t}"
    );
    assert_eq!(admin_session(&s, &f.sid)["state"], "error");
    let last = admin_events(&s, &f.sid).pop().unwrap();
    assert_eq!(last["event_type"], "session.error");
    assert_eq!(last["payload"]["reason"], "profile_unavailable");
}
