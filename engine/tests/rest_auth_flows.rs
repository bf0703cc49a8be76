//! Client-port authentication in-process (checklist C-001, C-003–C-014;
//! spec 01 §1–§3): bearer parsing, key roles per route, check order
//! against bad bodies, `last_used_at`, exact RFC 7807 bodies. Moved from
//! `io-smol/tests/rest_auth.rs`, which keeps `/api/v1/meta` from the binary
//! and probes answered while the store is locked from outside.

mod common;

use common::*;
use engine::Listener;
use serde_json::json;

/// Every session-key route of `sid`: (method, path, body).
fn session_routes(sid: &str) -> Vec<(&'static str, String, Vec<u8>)> {
    vec![
        (
            "GET",
            format!("/api/v1/sessions/{sid}/participants"),
            vec![],
        ),
        ("GET", format!("/api/v1/sessions/{sid}/events"), vec![]),
        ("DELETE", format!("/api/v1/sessions/{sid}"), vec![]),
        (
            "POST",
            format!("/api/v1/sessions/{sid}/rpc"),
            br#"{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}"#.to_vec(),
        ),
    ]
}

/// A client-port request with exactly these headers (plus Host, framing).
fn send(h: &mut Harness, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    h.raw(Listener::Client, &bytes)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[test]
fn c001_healthz_is_200_empty_without_auth() {
    let mut h = Harness::new(config());
    let r = send(&mut h, "GET", "/healthz", &[], b"");
    assert_eq!((r.status, r.text.as_str()), (200, ""));
    // An Authorization header (even a bad one) changes nothing.
    let r = send(
        &mut h,
        "GET",
        "/healthz",
        &[("authorization", "Bearer garbage")],
        b"",
    );
    assert_eq!((r.status, r.text.as_str()), (200, ""));
}

#[test]
fn c003_missing_authorization_is_401_problem() {
    let mut h = Harness::new(config());
    let r = send(&mut h, "POST", "/api/v1/sessions", &[JSON], b"{}");
    assert_problem(&r, 401, "unauthorized");
    let f = h.fix(&[]);
    for (method, path, body) in session_routes(&f.sid) {
        let r = send(&mut h, method, &path, &[], &body);
        assert_problem(&r, 401, "unauthorized");
    }
    let r = send(
        &mut h,
        "POST",
        &format!("/api/v1/sessions/{}/join", f.sid),
        &[JSON],
        b"{}",
    );
    assert_problem(&r, 401, "unauthorized");
}

#[test]
fn c004_lowercase_bearer_prefix_is_accepted() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (_, ck) = h.key(&p);
    let auth = format!("bearer {ck}");
    let r = send(
        &mut h,
        "POST",
        "/api/v1/sessions",
        &[("authorization", &auth), JSON],
        b"{}",
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let sid = r.json["session_id"].as_str().unwrap();
    let auth = format!("bearer {}", r.json["session_key"].as_str().unwrap());
    let path = format!("/api/v1/sessions/{sid}/events");
    let r = send(&mut h, "GET", &path, &[("authorization", &auth)], b"");
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn c005_empty_bearer_token_is_401() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let events = format!("/api/v1/sessions/{}/events", f.sid);
    for value in ["Bearer ", "Bearer", "bearer ", ""] {
        let r = send(
            &mut h,
            "POST",
            "/api/v1/sessions",
            &[("authorization", value), JSON],
            b"{}",
        );
        assert_problem(&r, 401, "unauthorized");
        let r = send(&mut h, "GET", &events, &[("authorization", value)], b"");
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c006_non_bearer_schemes_are_401() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let values = [
        format!("Basic {}", f.client_key),
        format!("BEARER {}", f.client_key),
        format!("Token {}", f.client_key),
        format!("Bearer\t{}", f.client_key),
        f.client_key.clone(),
    ];
    for value in &values {
        let r = send(
            &mut h,
            "POST",
            "/api/v1/sessions",
            &[("authorization", value), JSON],
            b"{}",
        );
        assert_problem(&r, 401, "unauthorized");
    }
    let events = format!("/api/v1/sessions/{}/events", f.sid);
    for value in [format!("Basic {}", f.skey), format!("BEARER {}", f.skey)] {
        let r = send(&mut h, "GET", &events, &[("authorization", &value)], b"");
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c007_session_key_on_create_is_401() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = h.admin_sessions().len();
    let auth = bearer(&f.skey);
    let r = send(
        &mut h,
        "POST",
        "/api/v1/sessions",
        &[("authorization", &auth), JSON],
        b"{}",
    );
    assert_problem(&r, 401, "unauthorized");
    // …and on join (also a client-key route).
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    let r = send(
        &mut h,
        "POST",
        &join,
        &[("authorization", &auth), JSON],
        b"{}",
    );
    assert_problem(&r, 401, "unauthorized");
    assert_eq!(h.admin_sessions().len(), before);
    assert_eq!(types_of(&h.events(&f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c008_client_key_on_session_routes_is_401() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let auth = bearer(&f.client_key);
    for (method, path, body) in session_routes(&f.sid) {
        let r = send(
            &mut h,
            method,
            &path,
            &[("authorization", &auth), JSON],
            &body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    // The session is untouched (the DELETE above did not close it).
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
}

#[test]
fn c009_session_key_of_a_is_401_on_every_route_of_b() {
    let mut h = Harness::new(config());
    let a = h.fix(&[]);
    let (s, b) = h.client("POST", "/api/v1/sessions", &a.client_key, Some(&json!({})));
    assert_eq!(s, 201);
    let (b_sid, b_key) = (
        b["session_id"].as_str().unwrap(),
        b["session_key"].as_str().unwrap(),
    );
    let auth = bearer(&a.skey);
    for (method, path, body) in session_routes(b_sid) {
        let r = send(
            &mut h,
            method,
            &path,
            &[("authorization", &auth), JSON],
            &body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    assert_eq!(h.admin_session(b_sid)["state"], "open");
    assert_eq!(types_of(&h.events(b_sid, b_key)), ["session.open"]);
    // A still works on A.
    let path = format!("/api/v1/sessions/{}/participants", a.sid);
    assert_eq!(h.client("GET", &path, &a.skey, None).0, 200);
}

#[test]
fn c010_unknown_session_id_on_session_key_routes_is_401_not_404() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let auth = bearer(&f.skey);
    for sid in [
        "ses_00000000000000000000000000000000",
        "ses_ffffffffffffffffffffffffffffffff",
        "not-a-session-id",
        "ses_",
    ] {
        for (method, path, body) in session_routes(sid) {
            let r = send(
                &mut h,
                method,
                &path,
                &[("authorization", &auth), JSON],
                &body,
            );
            assert_problem(&r, 401, "unauthorized");
        }
    }
}

#[test]
fn c011_bad_key_wins_over_malformed_body() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let join = format!("/api/v1/sessions/{}/join", f.sid);
    let bad_bodies: [&[u8]; 4] = [b"{not json", b"[1,2", b"\xff\xfe", b"{\"tools\":5}"];
    for body in bad_bodies {
        for token in ["bae_000000000000000000000000000000000000000000000000", ""] {
            for path in ["/api/v1/sessions", join.as_str()] {
                let r = h.post_raw(
                    Listener::Client,
                    path,
                    token,
                    Some("application/json"),
                    body,
                );
                assert_problem(&r, 401, "unauthorized");
            }
        }
        // Wrong content type too: auth first.
        let r = h.post_raw(
            Listener::Client,
            "/api/v1/sessions",
            "bae_nope",
            Some("text/plain"),
            body,
        );
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c012_client_key_authentication_stamps_last_used_at() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (kid, ck) = h.key(&p);
    let row = |h: &mut Harness| {
        h.all_pages(Listener::Admin, "/admin/v1/keys", ADMIN_KEY)
            .into_iter()
            .find(|k| k["id"] == kid.as_str())
            .expect("key listed")
    };
    assert!(row(&mut h)["last_used_at"].is_null());
    assert_eq!(
        h.client("POST", "/api/v1/sessions", &ck, Some(&json!({})))
            .0,
        201
    );
    let used = row(&mut h)["last_used_at"]
        .as_str()
        .expect("set after first use")
        .to_string();
    assert!(is_timestamp(&used), "{used}");
    // A later use moves it forward.
    h.advance(15);
    assert_eq!(
        h.client("POST", "/api/v1/sessions", &ck, Some(&json!({})))
            .0,
        201
    );
    let later = row(&mut h)["last_used_at"].as_str().unwrap().to_string();
    assert!(later > used, "{later} vs {used}");
}

#[test]
fn c013_admin_key_never_authenticates_on_the_client_port() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let auth = bearer(ADMIN_KEY);
    let a = [("authorization", auth.as_str()), JSON];
    let r = send(&mut h, "POST", "/api/v1/sessions", &a, b"{}");
    assert_problem(&r, 401, "unauthorized");
    let r = send(
        &mut h,
        "POST",
        &format!("/api/v1/sessions/{}/join", f.sid),
        &a,
        b"{}",
    );
    assert_problem(&r, 401, "unauthorized");
    for (method, path, body) in session_routes(&f.sid) {
        let r = send(&mut h, method, &path, &a, &body);
        assert_problem(&r, 401, "unauthorized");
    }
    // And no admin route exists on the client port.
    let r = send(&mut h, "GET", "/admin/v1/profiles", &a, b"");
    assert_ne!(r.status, 200);
}

#[test]
fn c014_error_bodies_are_exact_rfc7807() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    // 401, 400, 403, 404, 409, 422 through `assert_problem` (exact members,
    // title, status and application/json).
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        None,
        Some(&json!({})),
    );
    assert_problem(&r, 401, "unauthorized");
    let r = h.post_raw(
        Listener::Client,
        "/api/v1/sessions",
        &f.client_key,
        Some("application/json"),
        b"nope",
    );
    assert_problem(&r, 400, "bad_request");
    let ck = Some(f.client_key.as_str());
    let body = json!({"tools": [tool("x")]});
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        ck,
        Some(&body),
    );
    assert_problem(&r, 403, "tool_not_allowed");
    let unknown = "/api/v1/sessions/ses_00000000000000000000000000000000/join";
    let r = h.reply(Listener::Client, "POST", unknown, ck, Some(&json!({})));
    assert_problem(&r, 404, "not_found");
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &f.skey, None).0, 200);
    let r = h.reply(Listener::Client, "DELETE", &path, Some(&f.skey), None);
    assert_problem(&r, 409, "session_closed");
    let body = json!({"tools": [tool("remote_subagent_status")]});
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        ck,
        Some(&body),
    );
    assert_problem(&r, 422, "reserved_tool_name");
}
