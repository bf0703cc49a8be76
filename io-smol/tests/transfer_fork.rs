//! Forks and rewinds over the real binary (docs/extensions.md, "Forks,
//! exports and imports"): after a text turn, on both provider kinds, the
//! fork's next provider request as the mock provider receives it is byte
//! for byte the one its parent sends; the admin API forks under another
//! profile and shows the family tree; a reader that behaves like the
//! reference SDKs reads a fork without meeting anything unknown. Forks
//! after tool rounds and compactions, paused points, divergence and
//! rewinds are tested in-process in `engine/tests/fork_flows.rs`.

mod live_support;
mod transfer_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml};
use testkit::{MockProvider, Reply, Server};
use transfer_support::*;

/// One mock behind two registry entries: `main` (Anthropic) and `oai`
/// (OpenAI).
fn server() -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let config = provider_toml(&[
        ("main", "anthropic", &mock.base_url, "claude-x", "t1"),
        ("oai", "openai", &mock.base_url, "gpt-x", "t2"),
    ]);
    (mock, Server::start(opts(&config)))
}

const KINDS: [&str; 2] = ["main", "oai"];

fn with_tool(server: &Server, primary: &str) -> Fixture {
    open_registered(
        server,
        primary,
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    )
}

/// The next text turn on `sid` by `c`: the body the provider received.
#[track_caller]
fn next_request(mock: &MockProvider, server: &Server, sid: &str, c: &Client) -> Vec<u8> {
    mock.push(Reply::text("the next answer"));
    let (_, terminal) = send(server, sid, c, json!("and then?"));
    assert!(terminal["result"].is_object(), "{terminal}");
    last_request(mock)
}

/// Forks with the creator's key; the fork's client, after registerDriver.
#[track_caller]
fn fork(server: &Server, f: &Fixture, body: Value) -> (String, Client, Value) {
    let (s, answer) = client_fork(server, &f.session_id, &f.a.session_key, "fork", body);
    assert_eq!(s, 201, "{answer}");
    let (sid, c) = forked_client(server, &f.a, &answer);
    (sid, c, answer)
}

#[test]
fn a_fork_after_a_text_turn_sends_the_parents_next_request() {
    let (mock, server) = server();
    for kind in KINDS {
        let f = with_tool(&server, kind);
        mock.push(Reply::text("hello"));
        send(&server, &f.session_id, &f.a, json!("hi"));
        let (fid, fc, answer) = fork(&server, &f, json!({}));
        assert_eq!(answer["parent"]["session_id"], f.session_id.as_str());
        assert_eq!(
            answer["profile"]["provider"]["model"],
            if kind == "main" { "claude-x" } else { "gpt-x" }
        );
        let from_fork = next_request(&mock, &server, &fid, &fc);
        let from_parent = next_request(&mock, &server, &f.session_id, &f.a);
        assert_eq!(
            String::from_utf8_lossy(&from_fork),
            String::from_utf8_lossy(&from_parent),
            "{kind}"
        );
        assert!(String::from_utf8_lossy(&from_fork).contains("hello"));
    }
}

#[test]
fn the_admin_api_forks_under_another_profile_and_shows_the_family_tree() {
    let (mock, server) = server();
    let f = with_tool(&server, "main");
    mock.push(Reply::text("hello"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    let other = fixtures::create_profile_json(
        &server,
        &json!({"name": fixtures::unique_name("p"), "primary_provider": "oai", "allowed_tools": ["get_time"]}),
    );
    let (key_id, client_key) = fixtures::create_key(&server, &other);
    let (s, p) = admin_fork(&server, &f.session_id, "fork", json!({"profile_id": other}));
    assert_eq!(
        (s, p["type"].as_str()),
        (403, Some("profile_mismatch")),
        "the creator's key is of another profile"
    );
    let body = json!({"profile_id": other, "client_key_id": key_id});
    let (s, answer) = admin_fork(&server, &f.session_id, "fork", body);
    assert_eq!(s, 201, "{answer}");
    let me = Client {
        key_id,
        client_key,
        session_key: String::new(),
    };
    let (fid, fc) = forked_client(&server, &me, &answer);
    mock.push(Reply::text("from openai"));
    send(&server, &fid, &fc, json!("next"));
    assert!(mock
        .requests()
        .last()
        .unwrap()
        .path
        .ends_with("/v1/chat/completions"));
    let tree = server
        .admin()
        .get(&format!("/admin/v1/sessions/{}/lineage", f.session_id))
        .json();
    assert_eq!(tree["origin"], Value::Null);
    assert_eq!(tree["children"][0]["session_id"], fid.as_str());
    let tree = server
        .admin()
        .get(&format!("/admin/v1/sessions/{fid}/lineage"))
        .json();
    assert_eq!(tree["ancestors"], json!([f.session_id]));
    assert_eq!(
        tree["origin"]["parent_event_id"],
        answer["parent"]["event_id"]
    );
}

#[test]
fn a_reference_sdk_style_reader_reads_a_fork_without_unknown_frames() {
    let (mock, server) = server();
    let f = with_tool(&server, "main");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    mock.push(Reply::text("noon"));
    send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    let (fid, fc, _) = fork(&server, &f, json!({}));
    mock.push(Reply::text("later"));
    let mut s = send_stream(&server, &fid, &fc, json!("and now?"));
    let (events, terminal) = sdk_read_stream(&mut s);
    assert!(!events.is_empty());
    let terminal = terminal.expect("a terminal frame");
    for e in result_events(&terminal) {
        sdk_read_event(&e);
    }
    let all = sdk_read_session(&server, &fid, &fc.session_key);
    assert_eq!(all[0]["event_type"], "session.open");
    assert!(all.iter().all(|e| e["session_id"] == fid.as_str()));
}

/// Issue 38 (docs/extensions.md, "Forks and rewinds"): with
/// `BAE_DURABLE_DRIVERS` a restart rebuilds the registrations from the
/// log, and a fork's log holds its parent's; they must not come back as
/// the fork's drivers (C-040), its creator must register (C-069), and a
/// registration made in a fork is the fork's own and comes back. On
/// SQLite and on PostgreSQL.
#[test]
fn after_a_durable_restart_a_fork_has_none_of_its_parents_drivers() {
    let cluster = testkit::pg::PgCluster::start();
    let db = cluster.create_database();
    for url in [String::new(), cluster.app_url(&db)] {
        let mock = MockProvider::start();
        let config = provider_toml(&[("main", "anthropic", &mock.base_url, "claude-x", "t1")]);
        let mut server = Server::start(
            opts(&config)
                .env("BAE_DATABASE_URL", &url)
                .env(DURABLE_DRIVERS.0, DURABLE_DRIVERS.1),
        );
        let f = with_tool(&server, "main");
        let b = f.join_registered(&server, json!({}));
        mock.push(Reply::text("hello"));
        send(&server, &f.session_id, &f.a, json!("hi"));
        let (s, answer) = client_fork(&server, &f.session_id, &f.a.session_key, "fork", json!({}));
        assert_eq!(s, 201, "{answer}");
        let fid = answer["session_id"].as_str().unwrap().to_string();
        let fc = Client {
            session_key: answer["session_key"].as_str().unwrap().into(),
            ..f.a.clone()
        };
        let (gid, gc, _) = fork(&server, &f, json!({}));
        let copied = of_type(&admin_events(&server, &fid), "session.driver.register");
        assert_eq!(copied.len(), 2, "the fork's log is a faithful copy");

        server.restart();
        let mut both = vec![f.a.key_id.clone(), b.key_id.clone()];
        both.sort();
        let drivers = |sid: &str, c: &Client| {
            let r = server
                .client()
                .bearer(&c.session_key)
                .get(&format!("/api/v1/sessions/{sid}/participants"));
            r.assert_status(200);
            r.json()
        };
        assert_eq!(drivers(&f.session_id, &f.a), json!({"drivers": both}));
        assert_eq!(drivers(&fid, &fc), json!({"drivers": []}), "{url}");
        assert_eq!(drivers(&gid, &gc), json!({"drivers": [f.a.key_id]}));
        let (_, t) = send(&server, &fid, &fc, json!("not registered here"));
        assert_rpc_error(
            &t,
            -32001,
            "call session.registerDriver before session.sendMessage",
        );
        mock.push(Reply::text("fork answer"));
        let (_, t) = send(&server, &gid, &gc, json!("registered here"));
        assert!(t["result"].is_object(), "{t}");
    }
}
