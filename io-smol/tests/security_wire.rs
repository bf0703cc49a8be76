//! Key roles and bindings over the real wire: every admin route against
//! missing, wrong, foreign and rotated-out admin keys; session keys used on
//! other sessions; client and session keys swapped; the admin listener's
//! loopback rule (spec 01 §2, 03 §1–§2, §5.2, 08 §7; C-007–C-010,
//! C-013, C-187, C-188, C-198, C-210, C-216).

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures;
use testkit::{HttpClient, Server};

const RPC_METHODS: [&str; 12] = [
    "session.registerDriver",
    "session.sendMessage",
    "session.subscribe",
    "session.unsubscribe",
    "session.updateClientTools",
    "session.compact",
    "session.startRemoteSandbox",
    "session.stopRemoteSandbox",
    "session.execRemoteSandbox",
    "session.reportLocalSandbox",
    "session.reportLocalSubagent",
    "session.cancelSubagent",
];

fn admin_routes(pro: &str, key_id: &str, sid: &str) -> Vec<(&'static str, String, Value)> {
    vec![
        ("GET", "/admin/v1/profiles".into(), Value::Null),
        (
            "POST",
            "/admin/v1/profiles".into(),
            json!({"name": "sec-new", "primary_provider": PROVIDER}),
        ),
        ("GET", format!("/admin/v1/profiles/{pro}"), Value::Null),
        (
            "PUT",
            format!("/admin/v1/profiles/{pro}"),
            json!({"name": "sec-renamed", "primary_provider": PROVIDER}),
        ),
        ("DELETE", format!("/admin/v1/profiles/{pro}"), Value::Null),
        (
            "POST",
            "/admin/v1/keys".into(),
            json!({"name": "n", "profile_id": pro}),
        ),
        ("GET", "/admin/v1/keys".into(), Value::Null),
        ("DELETE", format!("/admin/v1/keys/{key_id}"), Value::Null),
        ("GET", "/admin/v1/sessions".into(), Value::Null),
        ("GET", "/admin/v1/sessions?state=open".into(), Value::Null),
        (
            "GET",
            format!("/admin/v1/sessions/{sid}/events"),
            Value::Null,
        ),
        ("GET", "/admin/v1/mcp-servers".into(), Value::Null),
        ("GET", "/admin/v1/providers".into(), Value::Null),
        ("GET", "/admin/v1/config".into(), Value::Null),
        ("GET", "/admin/v1/sandbox-status".into(), Value::Null),
    ]
}

fn send(c: &HttpClient, method: &str, path: &str, body: &Value) -> testkit::Response {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    c.request(
        method,
        path,
        &[("content-type", "application/json")],
        &bytes,
    )
}

/// Every session-key route of `sid`, the rpc route once per method.
fn session_routes(sid: &str) -> Vec<(&'static str, String, Vec<u8>)> {
    let mut v = vec![
        (
            "GET",
            format!("/api/v1/sessions/{sid}/participants"),
            vec![],
        ),
        ("GET", format!("/api/v1/sessions/{sid}/events"), vec![]),
        (
            "GET",
            format!("/api/v1/sessions/{sid}/events?limit=1"),
            vec![],
        ),
        ("DELETE", format!("/api/v1/sessions/{sid}"), vec![]),
    ];
    for m in RPC_METHODS {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": m, "params": {
            "message": {"role": "user", "content": "x"}, "tools": [], "image": "img",
            "command": "id", "state": "running", "subagent_id": "sba_x", "harness": "h", "model": "m"
        }});
        v.push((
            "POST",
            format!("/api/v1/sessions/{sid}/rpc"),
            serde_json::to_vec(&body).unwrap(),
        ));
    }
    v
}

/// Admin-visible state, to prove rejected requests changed nothing.
fn admin_state(s: &Server) -> Value {
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

#[test]
fn every_admin_route_rejects_missing_wrong_foreign_and_rotated_keys() {
    let mut s = start();
    let f = fix(&s, &[]);
    let old_admin = s.admin_key.clone();
    s.restart_with(|o| o.args.push("--rotate-admin-key".into()));
    assert_ne!(s.admin_key, old_admin);
    let before = admin_state(&s);
    let anon = HttpClient::new(s.admin_addr);
    let mutated = {
        let mut k = s.admin_key.clone();
        let last = k.pop().unwrap();
        k.push(if last == '0' { '1' } else { '0' });
        k
    };
    let bearers: Vec<Option<String>> = vec![
        None,
        Some(String::new()),
        Some("garbage".into()),
        Some(old_admin.clone()),
        Some(mutated),
        Some(s.admin_key[..s.admin_key.len() - 1].to_string()),
        Some(format!("{}0", s.admin_key)),
        Some(s.admin_key.to_uppercase()),
        Some(f.client_key.clone()),
        Some(f.skey.clone()),
    ];
    for bearer in &bearers {
        let c = match bearer {
            None => anon.clone(),
            Some(b) => anon.clone().bearer(b.as_str()),
        };
        for (method, path, body) in admin_routes(&f.profile, &f.key_id, &f.sid) {
            let r = send(&c, method, &path, &body);
            assert_problem(&r, 401, "unauthorized");
        }
    }
    // Basic auth with the right key is still not Bearer.
    let auth = format!("Basic {}", s.admin_key);
    let r = anon.request(
        "GET",
        "/admin/v1/keys",
        &[("authorization", auth.as_str())],
        b"",
    );
    assert_problem(&r, 401, "unauthorized");
    assert_eq!(
        admin_state(&s),
        before,
        "a rejected admin request changed state"
    );
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
    assert_serving(&mut s);
}

#[test]
fn a_session_key_never_works_on_another_session() {
    let mut s = start();
    let a = fix(&s, &[]);
    let b = fix(&s, &[]);
    // Same client key, second session: still bound to its own session.
    let (a2, a2_key) = fixtures::open_session(&s, &a.client_key, json!({}));
    // Closed session's key, revoked session key.
    let (closed, closed_key) = fixtures::open_session(&s, &a.client_key, json!({}));
    s.client()
        .bearer(&closed_key)
        .delete(&format!("/api/v1/sessions/{closed}"))
        .assert_status(200);
    let before = admin_state(&s);
    for (key, target) in [
        (&a.skey, &b.sid),
        (&b.skey, &a.sid),
        (&a2_key, &a.sid),
        (&a.skey, &a2),
        (&closed_key, &a.sid),
        (&closed_key, &b.sid),
    ] {
        let c = s.client().bearer(key.as_str());
        for (method, path, body) in session_routes(target) {
            let r = c.request(
                method,
                &path,
                &[("content-type", "application/json")],
                &body,
            );
            assert_problem(&r, 401, "unauthorized");
        }
    }
    assert_eq!(admin_state(&s), before);
    assert_serving(&mut s);
}

#[test]
fn client_and_session_keys_are_not_interchangeable() {
    let mut s = start();
    let f = fix(&s, &[]);
    let before = admin_state(&s);
    // Client key where a session key is required.
    let c = s.client().bearer(&f.client_key);
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(
            method,
            &path,
            &[("content-type", "application/json")],
            &body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    // Session key where a client key is required.
    let c = s.client().bearer(&f.skey);
    assert_problem(
        &c.post_json("/api/v1/sessions", &json!({})),
        401,
        "unauthorized",
    );
    assert_problem(
        &c.post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({})),
        401,
        "unauthorized",
    );
    // Admin key anywhere on the client port.
    let c = s.client().bearer(&s.admin_key);
    assert_problem(
        &c.post_json("/api/v1/sessions", &json!({})),
        401,
        "unauthorized",
    );
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(
            method,
            &path,
            &[("content-type", "application/json")],
            &body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    // Near misses of real keys.
    for k in [
        format!("{}0", f.client_key),
        f.client_key[..f.client_key.len() - 1].to_string(),
        f.client_key.to_uppercase(),
        f.client_key.replacen("bae_", "bae_ses_", 1),
    ] {
        assert_problem(
            &s.client()
                .bearer(k.as_str())
                .post_json("/api/v1/sessions", &json!({})),
            401,
            "unauthorized",
        );
    }
    assert_eq!(admin_state(&s), before);
    assert_serving(&mut s);
}

#[test]
fn revoked_keys_and_their_sessions_fail_closed() {
    let mut s = start();
    let f = fix(&s, &[]);
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    register(&s, &f.sid, &k2);
    s.admin()
        .delete(&format!("/admin/v1/keys/{kid2}"))
        .assert_status(204);
    let before = admin_state(&s);
    let c = s.client().bearer(&k2);
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(
            method,
            &path,
            &[("content-type", "application/json")],
            &body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    assert_problem(
        &s.client()
            .bearer(&ck2)
            .post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({})),
        401,
        "unauthorized",
    );
    assert_eq!(admin_state(&s), before);
    // The revoked driver is not a driver for anybody else either: the
    // creator's registration is independent.
    let parts = s
        .client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/participants", f.sid))
        .json();
    assert!(!parts.to_string().contains(&f.key_id));
    assert_serving(&mut s);
}

#[test]
fn admin_listener_refuses_non_loopback_binds() {
    for addr in [
        "0.0.0.0:0",
        "[::]:0",
        "0.0.0.0:8081",
        "localhost:8081",
        "example.com:8081",
    ] {
        let out = Server::run(opts().env("BAE_ADMIN_ADDR", addr), Duration::from_secs(10));
        assert_eq!(out.code(), Some(2), "{addr}: {}", out.stderr);
        assert!(
            out.stderr.contains("BAE_ADMIN_ADDR"),
            "{addr}: {}",
            out.stderr
        );
        assert!(!out.dir.join("bae.db").exists(), "{addr}: DB opened");
        assert!(
            !out.dir.join("admin-key.pem").exists(),
            "{addr}: key written"
        );
    }
}
