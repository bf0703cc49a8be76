//! Bad input on both ports in-process: malformed JSON, wrong content
//! types, oversized bodies, unknown fields, wrong id shapes and methods,
//! revoked keys, deleted profiles. Every rejection is a clear RFC 7807
//! error and stores nothing (the whole `MemStore` is compared). Spec 01
//! §3–§4, 03 §3–§4, 08 §4.3; C-017, C-020, C-030, C-034, C-192, C-196,
//! C-198, C-199. Moved from `io-smol/tests/rest_bad_input.rs`, which keeps
//! a profile deleted in SQLite behind the server's back.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

/// Everything a rejected request must not change, as the admin API shows
/// it (`last_used_at` aside: authentication stamps it).
fn stored(h: &mut Harness) -> Value {
    let mut sessions = Vec::new();
    for row in h.admin_sessions() {
        let sid = row["id"].as_str().unwrap().to_string();
        sessions.push(json!({"row": row, "events": h.admin_events(&sid)}));
    }
    let keys: Vec<Value> = h
        .all_pages(Listener::Admin, "/admin/v1/keys", ADMIN_KEY)
        .into_iter()
        .map(|mut k| {
            k["last_used_at"] = Value::Null;
            k
        })
        .collect();
    json!({
        "profiles": h.all_pages(Listener::Admin, "/admin/v1/profiles", ADMIN_KEY),
        "keys": keys,
        "sessions": sessions,
        "store_events": h.store.events.len(),
        "store_keys": h.store.keys.len(),
    })
}

/// A request with exactly these headers on `listener`.
fn send(
    h: &mut Harness,
    listener: Listener,
    method: &str,
    path: &str,
    token: &str,
    body: &[u8],
) -> Reply {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    h.raw(listener, &bytes)
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
fn malformed_json_is_400_everywhere_and_stores_nothing_c017() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = stored(&mut h);
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    let put = format!("/admin/v1/profiles/{}", f.profile);
    for body in MALFORMED {
        for path in ["/api/v1/sessions", join.as_str()] {
            let r = send(&mut h, Listener::Client, "POST", path, &f.client_key, body);
            assert_problem(&r, 400, "bad_request");
        }
        for (method, path) in [
            ("POST", "/admin/v1/profiles"),
            ("PUT", put.as_str()),
            ("POST", "/admin/v1/keys"),
        ] {
            let r = send(&mut h, Listener::Admin, method, path, ADMIN_KEY, body);
            assert_problem(&r, 400, "bad_request");
        }
    }
    assert_eq!(stored(&mut h), before);
}

#[test]
fn wrong_content_type_on_create_and_join_is_400_c017() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = stored(&mut h);
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    for ct in [
        None,
        Some(""),
        Some("text/plain"),
        Some("application/jsonx"),
        Some("application/x-ndjson"),
        Some("multipart/form-data; boundary=x"),
    ] {
        for path in ["/api/v1/sessions", join.as_str()] {
            let r = h.post_raw(Listener::Client, path, &f.client_key, ct, b"{}");
            assert_problem(&r, 400, "bad_request");
        }
    }
    assert_eq!(stored(&mut h), before);
    // Parameters and case are fine.
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let r = h.post_raw(
            Listener::Client,
            "/api/v1/sessions",
            &f.client_key,
            Some(ct),
            b"{}",
        );
        assert_eq!(r.status, 201, "{ct}: {}", r.text);
    }
    // The /rpc endpoint does not inspect the request content type.
    let rpc = format!("/api/v1/sessions/{}/rpc", f.sid);
    let r = h.post_raw(
        Listener::Client,
        &rpc,
        &f.skey,
        Some("text/plain"),
        br#"{"jsonrpc":"2.0","id":3,"method":"session.registerDriver"}"#,
    );
    assert_eq!(r.status, 200);
    assert!(r.text.contains("\"registered\":true"), "{}", r.text);
}

#[test]
fn oversized_create_and_join_are_413_and_store_nothing() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = stored(&mut h);
    let mut body = b"{\"client_version\":\"".to_vec();
    body.resize(1024 * 1024 + 10, b'x');
    body.extend_from_slice(b"\"}");
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    for path in ["/api/v1/sessions", join.as_str()] {
        let r = send(&mut h, Listener::Client, "POST", path, &f.client_key, &body);
        assert_problem(&r, 413, "payload_too_large");
    }
    let r = send(
        &mut h,
        Listener::Admin,
        "POST",
        "/admin/v1/profiles",
        ADMIN_KEY,
        &body,
    );
    assert_problem(&r, 413, "payload_too_large");
    assert_eq!(stored(&mut h), before);
}

#[test]
fn unknown_fields_are_ignored_on_every_body_c030() {
    let mut h = Harness::new(config());
    let body = json!({"name": "unk", "primary_provider": "main", "system_prompt": "x", "nested": {"a": [1]}});
    let (s, p) = h.admin("POST", "/admin/v1/profiles", Some(&body));
    assert_eq!(s, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let (_, p) = h.admin("GET", &format!("/admin/v1/profiles/{pid}"), None);
    assert!(p.get("system_prompt").is_none(), "{p}");
    let body = json!({"name": "k", "profile_id": pid, "role": "admin", "key": "bae_chosen"});
    let (s, v) = h.admin("POST", "/admin/v1/keys", Some(&body));
    assert_eq!(s, 201, "{v}");
    // A chosen key or role in the body is ignored: a fresh client key.
    let ck = v["key"].as_str().unwrap().to_string();
    assert_ne!(ck, "bae_chosen");
    assert!(is_prefixed_hex(&ck, "bae_", 48));
    let body =
        json!({"session_id": "ses_chosen", "state": "closed", "profile_id": "pro_other", "x": 1});
    let (s, v) = h.client("POST", "/api/v1/sessions", &ck, Some(&body));
    assert_eq!(s, 201, "{v}");
    assert_ne!(v["session_id"], "ses_chosen");
    assert_eq!(v["profile"]["id"], pid.as_str());
    let sid = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(h.admin_session(&sid)["state"], "open");
    let body = json!({"unknown": true, "session_key": "bae_ses_chosen"});
    let (s, v) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &ck,
        Some(&body),
    );
    assert_eq!(s, 201, "{v}");
    assert_ne!(v["session_key"], "bae_ses_chosen");
    // Unknown members inside a tool declaration are tolerated too.
    let body =
        json!({"sandbox_tools": [{"name": "sb", "extra": 1, "input_schema": {"type": "object"}}]});
    assert_eq!(
        h.client("POST", "/api/v1/sessions", &ck, Some(&body)).0,
        201
    );
}

#[test]
fn wrong_id_shapes_get_clear_errors_c034() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = stored(&mut h);
    let odd_ids = [
        "ses_".to_string(),
        "ses_ZZZZ".into(),
        "SES_0123456789ABCDEF0123456789ABCDEF".into(),
        "pro_0123456789abcdef0123456789abcdef".into(),
        "key_0123456789abcdef0123456789abcdef".into(),
        "%2e%2e".into(),
        "..".into(),
        f.sid.to_uppercase(),
        format!("{}0", f.sid),
        f.sid[..f.sid.len() - 1].to_string(),
    ];
    for id in &odd_ids {
        // Session-key routes: 401 (the key cannot match an unknown id).
        for (method, path) in [
            ("GET", format!("/api/v1/sessions/{id}/events")),
            ("GET", format!("/api/v1/sessions/{id}/participants")),
            ("DELETE", format!("/api/v1/sessions/{id}")),
        ] {
            let r = h.reply(Listener::Client, method, &path, Some(&f.skey), None);
            assert_problem(&r, 401, "unauthorized");
        }
        let join = format!("/api/v1/sessions/{id}/join");
        let r = h.reply(
            Listener::Client,
            "POST",
            &join,
            Some(&f.client_key),
            Some(&json!({})),
        );
        assert_problem(&r, 404, "not_found");
        for (method, path) in [
            ("GET", format!("/admin/v1/profiles/{id}")),
            ("DELETE", format!("/admin/v1/profiles/{id}")),
            ("DELETE", format!("/admin/v1/keys/{id}")),
            ("GET", format!("/admin/v1/sessions/{id}/events")),
        ] {
            let r = h.reply(Listener::Admin, method, &path, Some(ADMIN_KEY), None);
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
        let r = h.reply(Listener::Client, "GET", &path, Some(&f.skey), None);
        assert_problem(&r, 404, "not_found");
    }
    for path in [
        "/admin/v1/profiles/a/b",
        "/admin/v1/sessions/x",
        "/admin/v1/keys/",
    ] {
        let r = h.reply(Listener::Admin, "GET", path, Some(ADMIN_KEY), None);
        assert_eq!(r.status, 404, "{path}: {}", r.text);
    }
    // Query strings do not confuse routing.
    let path = format!("/api/v1/sessions/{}/events?x=1&limit=5", f.sid);
    assert_eq!(h.client("GET", &path, &f.skey, None).0, 200);
    assert_eq!(stored(&mut h), before);
}

#[test]
fn wrong_methods_are_rejected_without_side_effects() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = stored(&mut h);
    for (method, path) in [
        ("GET", "/api/v1/sessions".to_string()),
        ("PUT", format!("/api/v1/sessions/{}", f.sid)),
        ("POST", format!("/api/v1/sessions/{}/events", f.sid)),
        ("DELETE", format!("/api/v1/sessions/{}/events", f.sid)),
        ("GET", format!("/api/v1/sessions/{}/rpc", f.sid)),
        ("POST", "/healthz".to_string()),
    ] {
        let r = send(&mut h, Listener::Client, method, &path, &f.skey, b"{}");
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
        let r = send(&mut h, Listener::Admin, method, &path, ADMIN_KEY, b"{}");
        assert!(
            (400..500).contains(&r.status),
            "{method} {path}: {}",
            r.status
        );
    }
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    assert_eq!(stored(&mut h), before);
}

#[test]
fn revoked_client_key_and_its_session_keys_are_rejected_c198_c199() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (kid2, ck2) = h.key(&f.profile);
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    let (s, j) = h.client("POST", &join, &ck2, Some(&json!({})));
    assert_eq!(s, 201);
    let k2 = j["session_key"].as_str().unwrap().to_string();
    // A session owned only by the second key.
    let (s, o) = h.client("POST", "/api/v1/sessions", &ck2, Some(&json!({})));
    assert_eq!(s, 201);
    let (solo, solo_key) = (
        o["session_id"].as_str().unwrap().to_string(),
        o["session_key"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        h.admin("DELETE", &format!("/admin/v1/keys/{kid2}"), None).0,
        204
    );
    let before = stored(&mut h);
    for (method, path, token) in [
        ("POST", "/api/v1/sessions".to_string(), &ck2),
        ("POST", join.clone(), &ck2),
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
        let r = send(&mut h, Listener::Client, method, &path, token, b"{}");
        assert_problem(&r, 401, "unauthorized");
    }
    assert_eq!(stored(&mut h), before, "a revoked key changed state");
    // C-198: the orphaned session was closed by the revocation; C-199: the
    // shared one stays open for the creator.
    assert_eq!(h.admin_session(&solo)["state"], "closed");
    let last = h.admin_events(&solo).pop().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_key_revoked"}));
    assert_eq!(last["client_key_id"], kid2.as_str());
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    assert!(!types_of(&h.admin_events(&f.sid)).contains(&"session.close".to_string()));
    let path = format!("/api/v1/sessions/{}/events", f.sid);
    assert_eq!(h.client("GET", &path, &f.skey, None).0, 200);
}

#[test]
fn deleted_profiles_are_gone_for_writes_but_history_stays_c192_c196() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &f.skey, None).0, 200);
    assert_eq!(
        h.admin("DELETE", &format!("/admin/v1/keys/{}", f.key_id), None)
            .0,
        204
    );
    let ppath = format!("/admin/v1/profiles/{}", f.profile);
    let name = h.admin("GET", &ppath, None).1["name"].clone();
    assert_eq!(h.admin("DELETE", &ppath, None).0, 204);
    let before = stored(&mut h);
    let r = h.reply(Listener::Admin, "GET", &ppath, Some(ADMIN_KEY), None);
    assert_problem(&r, 404, "not_found");
    let body = json!({"name": "n", "primary_provider": "main"});
    let r = h.reply(Listener::Admin, "PUT", &ppath, Some(ADMIN_KEY), Some(&body));
    assert_problem(&r, 404, "not_found");
    let body = json!({"name": "k", "profile_id": f.profile});
    let r = h.reply(
        Listener::Admin,
        "POST",
        "/admin/v1/keys",
        Some(ADMIN_KEY),
        Some(&body),
    );
    assert_problem(&r, 422, "profile_unavailable");
    let body = json!({"name": name, "primary_provider": "main"});
    let r = h.reply(
        Listener::Admin,
        "POST",
        "/admin/v1/profiles",
        Some(ADMIN_KEY),
        Some(&body),
    );
    assert_problem(&r, 409, "duplicate_name");
    assert_eq!(stored(&mut h), before);
    // The history of the deleted profile's session stays readable by the admin.
    let evts = h.admin_events(&f.sid);
    assert_eq!(types_of(&evts), ["session.open", "session.close"]);
    assert_eq!(h.admin_session(&f.sid)["profile_id"], f.profile.as_str());
}

/// A profile soft-deleted behind the engine's back (the admin API cannot
/// delete a profile with active keys), seen after a restart: create and
/// join answer `422 profile_unavailable` with an audit row each, and a
/// turn on an existing session fails with `-32000 profile_unavailable: …`
/// (spec 01 §4.1 step 4, §4.2 step 7, §6.5).
#[test]
fn profile_deleted_under_active_keys_is_profile_unavailable() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for p in h.store.profiles.iter_mut().filter(|p| p.id == f.profile) {
        p.deleted_at = Some("2026-01-01T00:00:00.000Z".into());
    }
    h.restart(config());
    let n = h.admin_sessions().len();
    let ck = Some(f.client_key.as_str());
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        ck,
        Some(&json!({})),
    );
    assert_problem(&r, 422, "profile_unavailable");
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    let r = h.reply(Listener::Client, "POST", &join, ck, Some(&json!({})));
    assert_problem(&r, 422, "profile_unavailable");
    let rows = h.admin_sessions();
    assert_eq!(rows.len(), n + 2, "one audit row per failure");
    for row in &rows[n..] {
        assert_eq!(row["state"], "error");
        let ev = h.admin_events(row["id"].as_str().unwrap());
        assert_eq!(
            ev[0]["payload"],
            json!({"reason": "profile_unavailable", "profile_id": f.profile})
        );
    }
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    h.register_driver(&f.sid, &f.skey);
    let msg = json!({"message": {"role": "user", "content": "hi"}});
    let frames = h.rpc(&f.sid, &f.skey, &call(2, "session.sendMessage", msg));
    let t = frames.last().unwrap();
    assert_eq!(t["error"]["code"], -32000, "{t}");
    let m = t["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("profile_unavailable: "), "{t}");
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
    let last = h.admin_events(&f.sid).pop().unwrap();
    assert_eq!(last["event_type"], "session.error");
    assert_eq!(last["payload"]["reason"], "profile_unavailable");
}
