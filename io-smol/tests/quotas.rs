//! Quotas over the real binary (docs/extensions.md "Quotas"): a client
//! key over its request rate gets `429` with `Retry-After` and the
//! documented body while other keys go on; the JSON-RPC error and its
//! `data`; a key over its token budget cannot start a turn (the mock
//! reports the usage) while another key can; the open-session limit;
//! quotas and consumption survive a restart; bad values are `400`;
//! `baectl quotas`; `/metrics`; and two processes on one PostgreSQL
//! database hold a key's quota.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{fixtures, MockProvider, Reply, Server};

fn server() -> (MockProvider, Server) {
    anthropic_server(&[])
}

fn put(server: &Server, path: &str, body: Value) -> testkit::http::Response {
    server.admin().put_json(path, &body)
}

fn create(server: &Server, client_key: &str) -> testkit::http::Response {
    server
        .client()
        .bearer(client_key)
        .post_json("/api/v1/sessions", &json!({}))
}

/// Runs `baectl` against `server` (authenticated by its key file).
fn baectl(server: &Server, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_baectl"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("BAE_ADMIN_ADDR", server.admin_addr.to_string())
        .env("BAE_ADMIN_KEY_FILE", server.admin_key_file())
        .args(args)
        .output()
        .expect("run baectl")
}

#[test]
fn a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not() {
    let (_mock, server) = server();
    let profile = fixtures::create_profile(&server, "p-rate", "main", &[], &[]);
    let (k1, t1) = fixtures::create_key(&server, &profile);
    let (_k2, t2) = fixtures::create_key(&server, &profile);
    let r = put(
        &server,
        &format!("/admin/v1/keys/{k1}/quota"),
        json!({"requests_per_second": 1, "burst": 3}),
    );
    r.assert_status(200);
    assert_eq!(r.json()["quota"]["requests_per_second"], 1);
    // The bucket holds 3 and refills one a second: a fast loop meets a
    // refusal within a few requests however slow the machine is.
    let mut refused = None;
    for _ in 0..30 {
        let r = create(&server, &t1);
        match r.status {
            201 => continue,
            _ => {
                refused = Some(r);
                break;
            }
        }
    }
    let r = refused.expect("a 429 within 30 requests at 1/s");
    assert_eq!(r.status, 429, "{}", r.text());
    let secs: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert_eq!(secs, 1, "whole seconds, at least one");
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let body = r.json();
    assert_eq!(body["type"], "quota_exceeded");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["quota"], "requests_per_second");
    assert_eq!(body["scope"], "key");
    assert_eq!(body["id"], k1.as_str());
    assert_eq!(body["limit"], 1);
    assert_eq!(body["window"], "1s");
    let wait = body["retry_after_ms"].as_u64().unwrap();
    assert!((1..=1000).contains(&wait), "{body}");
    assert!(body["detail"].as_str().unwrap().contains(&k1), "{body}");
    // Another key of the same profile is not limited.
    for _ in 0..10 {
        create(&server, &t2).assert_status(201);
    }
    // After the advised wait the key is served again.
    std::thread::sleep(std::time::Duration::from_millis(wait + 50));
    create(&server, &t1).assert_status(201);
    // `/metrics` counts the refusal by kind.
    let text = server.admin().get("/metrics").text();
    let line = text
        .lines()
        .find(|l| l.starts_with("bae_quota_refused_total{kind=\"requests_per_second\"}"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with(" 1"), "{line}");
}

#[test]
fn json_rpc_requests_over_the_rate_get_error_32025_with_data() {
    let (_mock, server) = server();
    let f = open(&server, "main", &[], &[], json!({}));
    put(
        &server,
        &format!("/admin/v1/keys/{}/quota", f.a.key_id),
        json!({"requests_per_second": 1, "burst": 2}),
    )
    .assert_status(200);
    let mut error = None;
    for _ in 0..30 {
        let (_, t) = rpc(
            &server,
            &f.session_id,
            &f.a.session_key,
            "session.registerDriver",
            json!({}),
        );
        if t.get("error").is_some() {
            error = Some(t);
            break;
        }
    }
    let t = error.expect("a refusal within 30 calls at 1/s");
    let e = &t["error"];
    assert_eq!(e["code"], -32025, "{t}");
    assert!(
        e["message"].as_str().unwrap().starts_with("quota_exceeded"),
        "{t}"
    );
    let d = &e["data"];
    assert!(
        (1..=1000).contains(&d["retry_after_ms"].as_u64().unwrap()),
        "{t}"
    );
    assert_eq!(d["limit"], 1);
    assert_eq!(d["window"], "1s");
    assert_eq!(d["quota"], "requests_per_second");
}

#[test]
fn a_key_over_its_token_budget_cannot_start_a_turn_another_can_and_quotas_survive_a_restart() {
    let (mock, mut server) = server();
    let a = open_registered(&server, "main", &[], &[], json!({}));
    let b = open_registered(&server, "main", &[], &[], json!({}));
    let path = format!("/admin/v1/keys/{}/quota", a.a.key_id);
    // The mock reports 10 input and 5 output tokens a reply.
    put(&server, &path, json!({"token_budget": 15, "window": "1d"})).assert_status(200);
    mock.push(Reply::anthropic_text("one"));
    let (_, t) = send(&server, &a.session_id, &a.a, json!("hi"));
    assert!(t["result"].is_object(), "{t}");
    let calls = mock.request_count();
    let (_, t) = send(&server, &a.session_id, &a.a, json!("again"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    let d = &t["error"]["data"];
    assert_eq!(d["quota"], "token_budget");
    assert_eq!(d["limit"], 15);
    assert_eq!(d["window"], "1d");
    assert!(d["retry_after_ms"].as_u64().unwrap() <= 86_400_000);
    assert_eq!(
        mock.request_count(),
        calls,
        "refused before any provider call"
    );
    // The refused turn left nothing in the log.
    let evs = events(&server, &a.session_id, &a.a.session_key);
    assert_eq!(of_type(&evs, "client.message.send").len(), 1);
    // Another key goes on.
    mock.push(Reply::anthropic_text("two"));
    let (_, t) = send(&server, &b.session_id, &b.a, json!("hi"));
    assert!(t["result"].is_object(), "{t}");
    let q = server.admin().get(&path).json();
    assert_eq!(q["usage"]["tokens_used"], 15, "{q}");
    // A restart keeps the quota and reads the window's usage back.
    server.restart();
    let q = server.admin().get(&path);
    q.assert_status(200);
    let q = q.json();
    assert_eq!(q["quota"]["token_budget"], 15);
    assert_eq!(q["usage"]["tokens_used"], 15, "{q}");
    fixtures::register_driver(&server, &a.session_id, &a.a.session_key);
    let (_, t) = send(&server, &a.session_id, &a.a, json!("after the restart"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    // baectl reads and changes it: a larger budget lets the turn start.
    let out = baectl(&server, &["--json", "quotas", "get", "key", &a.a.key_id]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, q);
    let out = baectl(
        &server,
        &[
            "quotas",
            "set",
            "key",
            &a.a.key_id,
            "--token-budget",
            "100",
            "--window",
            "1d",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("15/100"), "{text}");
    mock.push(Reply::anthropic_text("three"));
    let (_, t) = send(&server, &a.session_id, &a.a, json!("more"));
    assert!(t["result"].is_object(), "{t}");
    let out = baectl(&server, &["quotas", "list"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&a.a.key_id) && text.contains("30/100"),
        "{text}"
    );
    // Refusals are counted since the process started.
    assert!(text.contains("token_budget=1"), "{text}");
    let out = baectl(&server, &["quotas", "delete", "key", &a.a.key_id]);
    assert!(out.status.success(), "{out:?}");
    server.admin().get(&path).assert_status(404);
    let bad = baectl(
        &server,
        &["quotas", "set", "key", &a.a.key_id, "--window", "1d"],
    );
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("token_budget and window"), "{err}");
}

#[test]
fn open_sessions_past_the_limit_are_refused_until_one_closes_and_after_a_restart() {
    let (_mock, mut server) = server();
    let profile = fixtures::create_profile(&server, "p-open", "main", &[], &[]);
    let (k1, t1) = fixtures::create_key(&server, &profile);
    put(
        &server,
        &format!("/admin/v1/keys/{k1}/quota"),
        json!({"max_open_sessions": 2}),
    )
    .assert_status(200);
    let (s1, key1) = fixtures::open_session(&server, &t1, json!({}));
    fixtures::open_session(&server, &t1, json!({}));
    let r = create(&server, &t1);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), None);
    let body = r.json();
    assert_eq!(body["type"], "quota_exceeded");
    assert_eq!(body["quota"], "max_open_sessions");
    assert_eq!(body["limit"], 2);
    assert_eq!(body["retry_after_ms"], Value::Null);
    // Another key is not limited.
    let (_k2, t2) = fixtures::create_key(&server, &profile);
    create(&server, &t2).assert_status(201);
    server
        .client()
        .bearer(&key1)
        .delete(&format!("/api/v1/sessions/{s1}"))
        .assert_status(200);
    create(&server, &t1).assert_status(201);
    // The store's open sessions count after a restart.
    server.restart();
    assert_eq!(create(&server, &t1).status, 429);
    let q = server
        .admin()
        .get(&format!("/admin/v1/keys/{k1}/quota"))
        .json();
    assert_eq!(q["usage"]["open_sessions"], 2, "{q}");
}

#[test]
fn bad_quota_values_are_refused_with_the_field_and_range() {
    let (_mock, server) = server();
    let profile = fixtures::create_profile(&server, "p-bad", "main", &[], &[]);
    let (k, _) = fixtures::create_key(&server, &profile);
    let path = format!("/admin/v1/keys/{k}/quota");
    for (body, want) in [
        (
            json!({"requests_per_second": 0}),
            "requests_per_second: expected an integer from 1 to",
        ),
        (
            json!({"max_open_sessions": 1.5}),
            "max_open_sessions: expected an integer",
        ),
        (
            json!({"token_budget": 10}),
            "token_budget and window: set both or neither",
        ),
        (
            json!({"token_budget": 10, "window": "10s"}),
            "window: expected a duration from 1m to 366d",
        ),
        (json!({"burst": 4}), "burst: needs requests_per_second"),
        (json!({"rate": 4}), "rate: unknown field"),
        (json!({}), "set at least one of"),
    ] {
        let r = put(&server, &path, body.clone());
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let p = r.json();
        assert_eq!(p["type"], "bad_request");
        assert!(
            p["detail"].as_str().unwrap().starts_with(want),
            "{body}: {p}"
        );
    }
    let r = server.admin().put_json(&path, &json!("x"));
    assert_eq!(r.status, 400);
    put(
        &server,
        "/admin/v1/keys/key_none/quota",
        json!({"max_open_sessions": 1}),
    )
    .assert_status(404);
    put(
        &server,
        "/admin/v1/profiles/pro_none/quota",
        json!({"max_open_sessions": 1}),
    )
    .assert_status(404);
    server.admin().get(&path).assert_status(404);
    server.admin().delete(&path).assert_status(404);
}

/// Two processes on one PostgreSQL database: a quota set through one is
/// read by the other; a budget used up through one refuses a turn through
/// the other once it reads the store (at its start or on the quota's
/// `GET`); each counts open sessions from the store at its start.
#[test]
fn two_processes_on_postgresql_hold_a_keys_quota() {
    let cluster = testkit::pg::PgCluster::start();
    let url = cluster.app_url(&cluster.create_database());
    let mock = MockProvider::start();
    let config = testkit::fixtures::provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "tok",
    )]);
    let one = Server::start(opts(&config).env("BAE_DATABASE_URL", &url));
    let a = open_registered(&one, "main", &[], &[], json!({}));
    let path = format!("/admin/v1/keys/{}/quota", a.a.key_id);
    put(
        &one,
        &path,
        json!({"token_budget": 15, "window": "1d", "max_open_sessions": 1}),
    )
    .assert_status(200);
    mock.push(Reply::anthropic_text("one"));
    let (_, t) = send(&one, &a.session_id, &a.a, json!("hi"));
    assert!(t["result"].is_object(), "{t}");
    let two = Server::start(opts(&config).env("BAE_DATABASE_URL", &url));
    let admin = testkit::HttpClient::new(two.admin_addr).bearer(one.admin_key.clone());
    let q = admin.get(&path);
    q.assert_status(200);
    let q = q.json();
    assert_eq!(q["quota"]["token_budget"], 15, "{q}");
    assert_eq!(q["usage"]["tokens_used"], 15, "{q}");
    assert_eq!(q["usage"]["open_sessions"], 1, "{q}");
    let r = testkit::HttpClient::new(two.client_addr)
        .bearer(a.a.client_key.clone())
        .post_json("/api/v1/sessions", &json!({}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["quota"], "max_open_sessions");
}
