//! Client-port transport and authentication over the real binary
//! (README checklist C-001–C-014; spec 01 §1–§3).

mod rest_support;

use rest_support::*;
use serde_json::json;
use testkit::fixtures;

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

#[test]
fn c001_healthz_is_200_empty_without_auth() {
    let s = start();
    let r = s.client().get("/healthz");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "body {:?}", r.text());
    // An Authorization header (even a bad one) changes nothing.
    let r = s.client().bearer("garbage").get("/healthz");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

/// Holds the store's write lock from outside (SQLite `BEGIN EXCLUSIVE`, or
/// a PostgreSQL table lock) until dropped, so the server's next commit
/// waits.
enum StoreLock {
    Sqlite(sqlite::Connection),
    Postgres(Box<postgres::Client>),
}

impl StoreLock {
    fn take(s: &testkit::Server) -> StoreLock {
        match s.database_url() {
            Some(url) => {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.batch_execute("BEGIN; LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
                    .unwrap();
                StoreLock::Postgres(Box::new(c))
            }
            None => {
                let c = sqlite::open(s.db_path()).unwrap();
                c.execute("BEGIN EXCLUSIVE").unwrap();
                StoreLock::Sqlite(c)
            }
        }
    }

    fn release(self) {
        match self {
            StoreLock::Sqlite(c) => c.execute("ROLLBACK").unwrap(),
            StoreLock::Postgres(mut c) => c.batch_execute("ROLLBACK").unwrap(),
        }
    }
}

/// C-001, C-002: `/healthz` and `/api/v1/meta` reveal nothing stored, so
/// they are answered while another client's response still waits for its
/// commit (a liveness probe never queues behind the store).
#[test]
fn c001_healthz_and_meta_do_not_wait_for_other_clients_commits() {
    let s = start();
    let p = profile(&s, &[]);
    let (_, client_key) = key(&s, &p);
    let lock = StoreLock::take(&s);
    let client = s.client().bearer(client_key);
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = opened.clone();
    let open = std::thread::spawn(move || {
        let r = client.post_json("/api/v1/sessions", &json!({}));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    });
    // The open's answer is held until its commit, which the lock blocks.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let probe = s.client().timeout(std::time::Duration::from_secs(5));
    assert_eq!(probe.get("/healthz").status, 200);
    assert_eq!(probe.get("/api/v1/meta").status, 200);
    assert!(
        !opened.load(std::sync::atomic::Ordering::SeqCst),
        "the session open was answered before its commit could happen"
    );
    lock.release();
    open.join().unwrap().assert_status(201);
}

#[test]
fn c002_meta_without_auth() {
    let s = start();
    let r = s.client().get("/api/v1/meta");
    r.assert_status(200);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("application/json"));
    let v = r.json();
    assert_eq!(v["api_versions"], json!(["v1"]));
    assert!(v["version"].as_str().is_some_and(|x| !x.is_empty()), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
}

#[test]
fn c003_missing_authorization_is_401_problem() {
    let s = start();
    let c = s.client();
    let r = c.post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 401, "unauthorized");
    let f = fix(&s, &[]);
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(method, &path, &[], &body);
        assert_problem(&r, 401, "unauthorized");
    }
    let r = c.post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({}));
    assert_problem(&r, 401, "unauthorized");
}

#[test]
fn c004_lowercase_bearer_prefix_is_accepted() {
    let s = start();
    let p = profile(&s, &[]);
    let (_, ck) = key(&s, &p);
    let auth = format!("bearer {ck}");
    let r = s.client().request(
        "POST",
        "/api/v1/sessions",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    r.assert_status(201);
    let v = r.json();
    let sid = v["session_id"].as_str().unwrap();
    let skey = v["session_key"].as_str().unwrap();
    let auth = format!("bearer {skey}");
    let r = s.client().request(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &[("authorization", auth.as_str())],
        b"",
    );
    r.assert_status(200);
}

#[test]
fn c005_empty_bearer_token_is_401() {
    let s = start();
    let f = fix(&s, &[]);
    for value in ["Bearer ", "Bearer", "bearer ", ""] {
        let r = s.client().request(
            "POST",
            "/api/v1/sessions",
            &[
                ("authorization", value),
                ("content-type", "application/json"),
            ],
            b"{}",
        );
        assert_problem(&r, 401, "unauthorized");
        let r = s.client().request(
            "GET",
            &format!("/api/v1/sessions/{}/events", f.sid),
            &[("authorization", value)],
            b"",
        );
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c006_non_bearer_schemes_are_401() {
    let s = start();
    let f = fix(&s, &[]);
    let values = [
        format!("Basic {}", f.client_key),
        format!("BEARER {}", f.client_key),
        format!("Token {}", f.client_key),
        format!("Bearer\t{}", f.client_key),
        f.client_key.clone(),
    ];
    for value in &values {
        let r = s.client().request(
            "POST",
            "/api/v1/sessions",
            &[
                ("authorization", value.as_str()),
                ("content-type", "application/json"),
            ],
            b"{}",
        );
        assert_problem(&r, 401, "unauthorized");
    }
    let skey_values = [format!("Basic {}", f.skey), format!("BEARER {}", f.skey)];
    for value in &skey_values {
        let r = s.client().request(
            "GET",
            &format!("/api/v1/sessions/{}/events", f.sid),
            &[("authorization", value.as_str())],
            b"",
        );
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c007_session_key_on_create_is_401() {
    let s = start();
    let f = fix(&s, &[]);
    let before = admin_sessions(&s).len();
    let r = s
        .client()
        .bearer(&f.skey)
        .post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 401, "unauthorized");
    // …and on join (also a client-key route).
    let r = s
        .client()
        .bearer(&f.skey)
        .post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({}));
    assert_problem(&r, 401, "unauthorized");
    assert_eq!(admin_sessions(&s).len(), before);
    assert_eq!(types(&events(&s, &f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c008_client_key_on_session_routes_is_401() {
    let s = start();
    let f = fix(&s, &[]);
    let c = s.client().bearer(&f.client_key);
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(method, &path, &[], &body);
        assert_problem(&r, 401, "unauthorized");
    }
    // The session is untouched (the DELETE above did not close it).
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
}

#[test]
fn c009_session_key_of_a_is_401_on_every_route_of_b() {
    let s = start();
    let a = fix(&s, &[]);
    let (b_sid, b_key) = fixtures::open_session(&s, &a.client_key, json!({}));
    let c = s.client().bearer(&a.skey);
    for (method, path, body) in session_routes(&b_sid) {
        let r = c.request(method, &path, &[], &body);
        assert_problem(&r, 401, "unauthorized");
    }
    assert_eq!(admin_session(&s, &b_sid)["state"], "open");
    assert_eq!(types(&events(&s, &b_sid, &b_key)), ["session.open"]);
    // A still works on A.
    c.get(&format!("/api/v1/sessions/{}/participants", a.sid))
        .assert_status(200);
}

#[test]
fn c010_unknown_session_id_on_session_key_routes_is_401_not_404() {
    let s = start();
    let f = fix(&s, &[]);
    let c = s.client().bearer(&f.skey);
    for sid in [
        "ses_00000000000000000000000000000000",
        "ses_ffffffffffffffffffffffffffffffff",
        "not-a-session-id",
        "ses_",
    ] {
        for (method, path, body) in session_routes(sid) {
            let r = c.request(method, &path, &[], &body);
            assert_problem(&r, 401, "unauthorized");
        }
    }
}

#[test]
fn c011_bad_key_wins_over_malformed_body() {
    let s = start();
    let f = fix(&s, &[]);
    let c = s.client();
    let bad_bodies: [&[u8]; 4] = [b"{not json", b"[1,2", b"\xff\xfe", b"{\"tools\":5}"];
    for body in bad_bodies {
        for bearer in ["bae_000000000000000000000000000000000000000000000000", ""] {
            let r = post_raw(
                &c,
                "/api/v1/sessions",
                bearer,
                Some("application/json"),
                body,
            );
            assert_problem(&r, 401, "unauthorized");
            let r = post_raw(
                &c,
                &format!("/api/v1/sessions/{}/join", f.sid),
                bearer,
                Some("application/json"),
                body,
            );
            assert_problem(&r, 401, "unauthorized");
        }
        // Wrong content type too: auth first.
        let r = post_raw(&c, "/api/v1/sessions", "bae_nope", Some("text/plain"), body);
        assert_problem(&r, 401, "unauthorized");
    }
}

#[test]
fn c012_client_key_authentication_stamps_last_used_at() {
    let s = start();
    let p = profile(&s, &[]);
    let (kid, ck) = key(&s, &p);
    let row = |s: &testkit::Server| {
        all_pages(&s.admin(), "/admin/v1/keys")
            .into_iter()
            .find(|k| k["id"] == kid.as_str())
            .expect("key listed")
    };
    assert!(row(&s)["last_used_at"].is_null());
    fixtures::open_session(&s, &ck, json!({}));
    let used = row(&s)["last_used_at"].clone();
    let used = used.as_str().expect("last_used_at set after first use");
    assert!(is_timestamp(used), "{used}");
    // A later use moves it forward (or keeps it equal within a millisecond).
    std::thread::sleep(std::time::Duration::from_millis(15));
    fixtures::open_session(&s, &ck, json!({}));
    let later = row(&s)["last_used_at"].as_str().unwrap().to_string();
    assert!(later.as_str() > used, "{later} vs {used}");
}

#[test]
fn c013_admin_key_never_authenticates_on_the_client_port() {
    let s = start();
    assert!(s.admin_key.starts_with("bae_admin_"), "{}", s.admin_key);
    let f = fix(&s, &[]);
    let c = s.client().bearer(&s.admin_key);
    let r = c.post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 401, "unauthorized");
    let r = c.post_json(&format!("/api/v1/sessions/{}/join", f.sid), &json!({}));
    assert_problem(&r, 401, "unauthorized");
    for (method, path, body) in session_routes(&f.sid) {
        let r = c.request(method, &path, &[], &body);
        assert_problem(&r, 401, "unauthorized");
    }
    // And no admin route exists on the client port.
    let r = c.get("/admin/v1/profiles");
    assert_ne!(r.status, 200);
}

#[test]
fn c014_error_bodies_are_exact_rfc7807() {
    let s = start();
    let f = fix(&s, &[]);
    // 401, 400, 403, 404, 409, 422: each through `assert_problem`, which
    // checks exactly type/title/status/detail and application/json.
    assert_problem(
        &s.client().post_json("/api/v1/sessions", &json!({})),
        401,
        "unauthorized",
    );
    let c = s.client().bearer(&f.client_key);
    assert_problem(
        &post_raw(
            &s.client(),
            "/api/v1/sessions",
            &f.client_key,
            Some("application/json"),
            b"nope",
        ),
        400,
        "bad_request",
    );
    assert_problem(
        &c.post_json("/api/v1/sessions", &json!({"tools": [tool("x")]})),
        403,
        "tool_not_allowed",
    );
    assert_problem(
        &c.post_json(
            "/api/v1/sessions/ses_00000000000000000000000000000000/join",
            &json!({}),
        ),
        404,
        "not_found",
    );
    s.client()
        .bearer(&f.skey)
        .delete(&format!("/api/v1/sessions/{}", f.sid))
        .assert_status(200);
    assert_problem(
        &s.client()
            .bearer(&f.skey)
            .delete(&format!("/api/v1/sessions/{}", f.sid)),
        409,
        "session_closed",
    );
    assert_problem(
        &c.post_json(
            "/api/v1/sessions",
            &json!({"tools": [tool("remote_subagent_status")]}),
        ),
        422,
        "reserved_tool_name",
    );
}
