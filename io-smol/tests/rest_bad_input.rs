//! Bad input on both ports over the real binary: malformed JSON, wrong
//! content types, oversized bodies, unknown fields, wrong id shapes,
//! revoked keys and deleted profiles. Every rejection is a clear RFC 7807
//! error and stores nothing (checked through the admin session list and
//! event log). Spec 01 §3–§4, 03 §3–§4, 08 §4.3; C-017, C-020, C-030,
//! C-034, C-192, C-196, C-198, C-199.

mod rest_support;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, unique_name};
use testkit::Server;

/// Everything a rejected request must not change.
fn stored(s: &Server) -> Value {
    let mut sessions = Vec::new();
    for row in admin_sessions(s) {
        let sid = row["id"].as_str().unwrap().to_string();
        sessions.push(json!({"row": row, "events": admin_events(s, &sid)}));
    }
    json!({
        "profiles": all_pages(&s.admin(), "/admin/v1/profiles"),
        "keys": all_pages(&s.admin(), "/admin/v1/keys")
            .into_iter()
            .map(|mut k| { k["last_used_at"] = Value::Null; k })
            .collect::<Vec<_>>(),
        "sessions": sessions,
    })
}

const MALFORMED: [&[u8]; 9] = [
    b"{",
    b"{\"tools\": [}",
    b"{'single': 'quotes'}",
    b"{\"a\":1,}",
    b"nul\x00l",
    b"{\"client_version\": \"1\"} trailing",
    b"\xef\xbb\xbf{}",
    b"NaN",
    b"",
];

#[test]
fn malformed_json_is_400_everywhere_and_stores_nothing() {
    let s = start();
    let f = fix(&s, &[]);
    let before = stored(&s);
    let c = s.client();
    for body in MALFORMED {
        for path in [
            "/api/v1/sessions".to_string(),
            format!("/api/v1/sessions/{}/join", f.sid),
        ] {
            let r = post_raw(&c, &path, &f.client_key, Some("application/json"), body);
            assert_problem(&r, 400, "bad_request");
        }
        let admin = s.admin();
        for (method, path) in [
            ("POST", "/admin/v1/profiles".to_string()),
            ("PUT", format!("/admin/v1/profiles/{}", f.profile)),
            ("POST", "/admin/v1/keys".to_string()),
        ] {
            let r = admin.request(method, &path, &[("content-type", "application/json")], body);
            assert_problem(&r, 400, "bad_request");
        }
    }
    assert_eq!(stored(&s), before);
}

#[test]
fn wrong_content_type_on_create_and_join_is_400() {
    let s = start();
    let f = fix(&s, &[]);
    let before = stored(&s);
    let c = s.client();
    for ct in [
        None,
        Some(""),
        Some("text/plain"),
        Some("application/jsonx"),
        Some("application/x-ndjson"),
        Some("multipart/form-data; boundary=x"),
    ] {
        for path in [
            "/api/v1/sessions".to_string(),
            format!("/api/v1/sessions/{}/join", f.sid),
        ] {
            let r = post_raw(&c, &path, &f.client_key, ct, b"{}");
            assert_problem(&r, 400, "bad_request");
        }
    }
    assert_eq!(stored(&s), before);
    // Parameters and case are fine.
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let r = post_raw(&c, "/api/v1/sessions", &f.client_key, Some(ct), b"{}");
        r.assert_status(201);
    }
    // The /rpc endpoint does not inspect the request content type.
    let r = post_raw(
        &c,
        &format!("/api/v1/sessions/{}/rpc", f.sid),
        &f.skey,
        Some("text/plain"),
        br#"{"jsonrpc":"2.0","id":3,"method":"session.registerDriver"}"#,
    );
    r.assert_status(200);
    assert!(r.text().contains("\"registered\":true"), "{}", r.text());
}

#[test]
fn oversized_create_and_join_are_413_and_store_nothing() {
    let s = start();
    let f = fix(&s, &[]);
    let before = stored(&s);
    let mut body = b"{\"client_version\":\"".to_vec();
    body.resize(1024 * 1024 + 10, b'x');
    body.extend_from_slice(b"\"}");
    for path in [
        "/api/v1/sessions".to_string(),
        format!("/api/v1/sessions/{}/join", f.sid),
    ] {
        let r = post_raw(
            &s.client(),
            &path,
            &f.client_key,
            Some("application/json"),
            &body,
        );
        assert_problem(&r, 413, "payload_too_large");
    }
    let r = post_raw(
        &testkit::HttpClient::new(s.admin_addr),
        "/admin/v1/profiles",
        &s.admin_key,
        Some("application/json"),
        &body,
    );
    assert_problem(&r, 413, "payload_too_large");
    assert_eq!(stored(&s), before);
}

#[test]
fn unknown_fields_are_ignored_on_every_body() {
    let s = start();
    let name = unique_name("unk");
    let r = s.admin().post_json(
        "/admin/v1/profiles",
        &json!({"name": name, "primary_provider": PROVIDER, "system_prompt": "x", "nested": {"a": [1]}}),
    );
    r.assert_status(201);
    let pid = r.json()["id"].as_str().unwrap().to_string();
    let p = s.admin().get(&format!("/admin/v1/profiles/{pid}")).json();
    assert!(p.get("system_prompt").is_none());
    let r = s.admin().post_json(
        "/admin/v1/keys",
        &json!({"name": "k", "profile_id": pid, "role": "admin", "key": "bae_chosen"}),
    );
    r.assert_status(201);
    let v = r.json();
    // A chosen key or role in the body is ignored: a fresh client key.
    let ck = v["key"].as_str().unwrap().to_string();
    assert_ne!(ck, "bae_chosen");
    assert!(is_prefixed_hex(&ck, "bae_", 48));
    let r = s.client().bearer(&ck).post_json(
        "/api/v1/sessions",
        &json!({"session_id": "ses_chosen", "state": "closed", "profile_id": "pro_other", "x": 1}),
    );
    r.assert_status(201);
    let v = r.json();
    assert_ne!(v["session_id"], "ses_chosen");
    assert_eq!(v["profile"]["id"], pid.as_str());
    let sid = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(admin_session(&s, &sid)["state"], "open");
    let r = s.client().bearer(&ck).post_json(
        &format!("/api/v1/sessions/{sid}/join"),
        &json!({"unknown": true, "session_key": "bae_ses_chosen"}),
    );
    r.assert_status(201);
    assert_ne!(r.json()["session_key"], "bae_ses_chosen");
    // Unknown members inside a tool declaration are tolerated too.
    let r = s.client().bearer(&ck).post_json(
        "/api/v1/sessions",
        &json!({"sandbox_tools": [{"name": "sb", "extra": 1, "input_schema": {"type": "object"}}]}),
    );
    r.assert_status(201);
}

#[test]
fn wrong_id_shapes_get_clear_errors() {
    let s = start();
    let f = fix(&s, &[]);
    let before = stored(&s);
    let c = s.client().bearer(&f.skey);
    let odd_ids = [
        "ses_",
        "ses_ZZZZ",
        "SES_0123456789ABCDEF0123456789ABCDEF",
        "pro_0123456789abcdef0123456789abcdef",
        "key_0123456789abcdef0123456789abcdef",
        "%2e%2e",
        "..",
        &f.sid.to_uppercase(),
        &format!("{}0", f.sid),
        &f.sid[..f.sid.len() - 1],
    ];
    for id in odd_ids {
        // Session-key routes: 401 (the key cannot match an unknown id).
        for path in [
            format!("/api/v1/sessions/{id}/events"),
            format!("/api/v1/sessions/{id}/participants"),
        ] {
            assert_problem(&c.get(&path), 401, "unauthorized");
        }
        assert_problem(
            &c.delete(&format!("/api/v1/sessions/{id}")),
            401,
            "unauthorized",
        );
        // Join: 404 not_found.
        let r = s
            .client()
            .bearer(&f.client_key)
            .post_json(&format!("/api/v1/sessions/{id}/join"), &json!({}));
        assert_problem(&r, 404, "not_found");
        // Admin: 404 everywhere an id is looked up.
        for (method, path) in [
            ("GET", format!("/admin/v1/profiles/{id}")),
            ("DELETE", format!("/admin/v1/profiles/{id}")),
            ("DELETE", format!("/admin/v1/keys/{id}")),
            ("GET", format!("/admin/v1/sessions/{id}/events")),
        ] {
            let r = s.admin().request(method, &path, &[], b"");
            assert_problem(&r, 404, "not_found");
        }
    }
    // Extra path segments and empty ids are no route: a 404 problem.
    for path in [
        format!("/api/v1/sessions/{}/events/extra", f.sid),
        "/api/v1/sessions//events".to_string(),
        format!("/api/v1/sessions/{}/nope", f.sid),
        "/api/v2/sessions".to_string(),
    ] {
        let r = c.get(&path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert_problem(&r, 404, "not_found");
    }
    for path in [
        "/admin/v1/profiles/a/b",
        "/admin/v1/sessions/x",
        "/admin/v1/keys/",
    ] {
        let r = s.admin().get(path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    // Query strings do not confuse routing.
    c.get(&format!("/api/v1/sessions/{}/events?x=1&limit=5", f.sid))
        .assert_status(200);
    assert_eq!(stored(&s), before);
}

#[test]
fn wrong_methods_are_rejected_without_side_effects() {
    let s = start();
    let f = fix(&s, &[]);
    let before = stored(&s);
    let c = s.client().bearer(&f.skey);
    for (method, path) in [
        ("GET", "/api/v1/sessions".to_string()),
        ("PUT", format!("/api/v1/sessions/{}", f.sid)),
        ("POST", format!("/api/v1/sessions/{}/events", f.sid)),
        ("DELETE", format!("/api/v1/sessions/{}/events", f.sid)),
        ("GET", format!("/api/v1/sessions/{}/rpc", f.sid)),
        ("POST", "/healthz".to_string()),
    ] {
        let r = c.request(
            method,
            &path,
            &[("content-type", "application/json")],
            b"{}",
        );
        assert!(
            (400..500).contains(&r.status),
            "{method} {path}: {}",
            r.status
        );
    }
    for (method, path) in [
        ("PATCH", format!("/admin/v1/profiles/{}", f.profile)),
        ("PUT", "/admin/v1/keys".to_string()),
        ("POST", "/admin/v1/sessions".to_string()),
        ("DELETE", "/admin/v1/config".to_string()),
    ] {
        let r = s.admin().request(
            method,
            &path,
            &[("content-type", "application/json")],
            b"{}",
        );
        assert!(
            (400..500).contains(&r.status),
            "{method} {path}: {}",
            r.status
        );
    }
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
    assert_eq!(stored(&s), before);
}

#[test]
fn revoked_client_key_and_its_session_keys_are_rejected() {
    let s = start();
    let f = fix(&s, &[]);
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    // A session owned only by the second key.
    let (solo, solo_key) = fixtures::open_session(&s, &ck2, json!({}));
    s.admin()
        .delete(&format!("/admin/v1/keys/{kid2}"))
        .assert_status(204);
    let before = stored(&s);
    for (method, path, bearer) in [
        ("POST", "/api/v1/sessions".to_string(), &ck2),
        ("POST", format!("/api/v1/sessions/{}/join", f.sid), &ck2),
        ("GET", format!("/api/v1/sessions/{}/events", f.sid), &k2),
        (
            "GET",
            format!("/api/v1/sessions/{}/participants", f.sid),
            &k2,
        ),
        ("DELETE", format!("/api/v1/sessions/{}", f.sid), &k2),
        ("GET", format!("/api/v1/sessions/{solo}/events"), &solo_key),
        ("DELETE", format!("/api/v1/sessions/{solo}"), &solo_key),
    ] {
        let r = s.client().bearer(bearer.as_str()).request(
            method,
            &path,
            &[("content-type", "application/json")],
            b"{}",
        );
        assert_problem(&r, 401, "unauthorized");
    }
    assert_eq!(stored(&s), before, "a revoked key changed state");
    // C-198: the orphaned session was closed by the revocation; C-199: the
    // shared one stays open for the creator.
    assert_eq!(admin_session(&s, &solo)["state"], "closed");
    let last = admin_events(&s, &solo).pop().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_key_revoked"}));
    assert_eq!(last["client_key_id"], kid2.as_str());
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
    assert!(!types(&admin_events(&s, &f.sid)).contains(&"session.close".to_string()));
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
}

#[test]
fn deleted_profiles_are_gone_for_writes_but_history_stays() {
    let s = start();
    let f = fix(&s, &[]);
    s.client()
        .bearer(&f.skey)
        .delete(&format!("/api/v1/sessions/{}", f.sid))
        .assert_status(200);
    s.admin()
        .delete(&format!("/admin/v1/keys/{}", f.key_id))
        .assert_status(204);
    let name = s
        .admin()
        .get(&format!("/admin/v1/profiles/{}", f.profile))
        .json()["name"]
        .as_str()
        .unwrap()
        .to_string();
    s.admin()
        .delete(&format!("/admin/v1/profiles/{}", f.profile))
        .assert_status(204);
    let before = stored(&s);
    assert_problem(
        &s.admin().get(&format!("/admin/v1/profiles/{}", f.profile)),
        404,
        "not_found",
    );
    assert_problem(
        &s.admin().put_json(
            &format!("/admin/v1/profiles/{}", f.profile),
            &json!({"name": unique_name("n"), "primary_provider": PROVIDER}),
        ),
        404,
        "not_found",
    );
    assert_problem(
        &s.admin().post_json(
            "/admin/v1/keys",
            &json!({"name": "k", "profile_id": f.profile}),
        ),
        422,
        "profile_unavailable",
    );
    assert_problem(
        &s.admin().post_json(
            "/admin/v1/profiles",
            &json!({"name": name, "primary_provider": PROVIDER}),
        ),
        409,
        "duplicate_name",
    );
    assert_eq!(stored(&s), before);
    // The session history of the deleted profile stays readable by the
    // admin (its session keys were revoked with the client key).
    let evts = admin_events(&s, &f.sid);
    assert_eq!(types(&evts), ["session.open", "session.close"]);
    assert_eq!(admin_session(&s, &f.sid)["profile_id"], f.profile.as_str());
}

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
