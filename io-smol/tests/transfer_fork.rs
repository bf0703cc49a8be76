//! Forks and rewinds over the real binary (docs/extensions.md, "Forks,
//! exports and imports"): after a text turn, a tool round trip and a
//! compaction, on both provider kinds, the fork's next provider request is
//! byte for byte the one its parent would send at that point; a point
//! inside a paused turn is refused; parent and fork then go their own ways
//! and the parent never changes; rewind hands a message back to edit; a
//! reader that behaves like the reference SDKs reads a fork without
//! meeting anything unknown.

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
fn a_fork_after_a_tool_round_trip_sends_the_parents_next_request() {
    let (mock, server) = server();
    for kind in KINDS {
        let f = with_tool(&server, kind);
        mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
        let (_, paused) = send(&server, &f.session_id, &f.a, json!("time?"));
        assert_eq!(
            paused["result"]["message"]["content"][0]["dispatch"],
            "client"
        );
        mock.push(Reply::text("it is noon"));
        send(
            &server,
            &f.session_id,
            &f.a,
            json!([tool_result("tu_1", "12:00")]),
        );
        let (fid, fc, _) = fork(&server, &f, json!({}));
        let from_fork = next_request(&mock, &server, &fid, &fc);
        let from_parent = next_request(&mock, &server, &f.session_id, &f.a);
        assert_eq!(from_fork, from_parent, "{kind}");
        let text = String::from_utf8_lossy(&from_fork).into_owned();
        assert!(text.contains("tu_1") && text.contains("12:00"), "{text}");
    }
}

#[test]
fn a_fork_after_a_compaction_starts_from_its_summary() {
    let (mock, server) = server();
    for kind in KINDS {
        let f = with_tool(&server, kind);
        mock.push(Reply::text("first answer"));
        send(&server, &f.session_id, &f.a, json!("first"));
        mock.push(Reply::text("the summary"));
        let (_, done) = rpc(
            &server,
            &f.session_id,
            &f.a.session_key,
            "session.compact",
            json!({}),
        );
        assert_eq!(
            done["result"]["event_type"], "session.compaction.completed",
            "{done}"
        );
        let (fid, fc, _) = fork(&server, &f, json!({}));
        let from_fork = next_request(&mock, &server, &fid, &fc);
        let from_parent = next_request(&mock, &server, &f.session_id, &f.a);
        assert_eq!(from_fork, from_parent, "{kind}");
        let sent: Value = serde_json::from_slice(&from_fork).unwrap();
        let text = sent["messages"].to_string();
        assert!(
            text.contains("the summary") && !text.contains("first answer"),
            "{text}"
        );
    }
}

#[test]
fn no_fork_inside_a_paused_turn_and_the_parent_is_untouched() {
    let (mock, server) = server();
    let f = with_tool(&server, "main");
    mock.push(Reply::text("hello"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let before = admin_events(&server, &f.session_id);
    let (s, p) = client_fork(&server, &f.session_id, &f.a.session_key, "fork", json!({}));
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete")),
        "{p}"
    );
    assert!(p["detail"].as_str().unwrap().contains("paused"), "{p}");
    let paused_at = before.last().unwrap()["id"].clone();
    let (s, p) = admin_fork(
        &server,
        &f.session_id,
        "fork",
        json!({"event_id": paused_at}),
    );
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete"))
    );
    // The turn before it is a complete point.
    let (s, answer) = admin_fork(&server, &f.session_id, "rewind", json!({"after_turn": 1}));
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["client_key_id"], f.a.key_id.as_str());
    // The paused turn's five events stay out.
    assert_eq!(answer["events"], before.len() - 5);
    assert_eq!(
        admin_events(&server, &f.session_id),
        before,
        "the parent never changes"
    );
    // The paused turn goes on in the parent.
    mock.push(Reply::text("noon"));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "noon");
}

#[test]
fn parent_and_fork_diverge_and_only_the_creator_may_fork() {
    let (mock, server) = server();
    let f = with_tool(&server, "main");
    mock.push(Reply::text("hello"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    let joiner = f.join_registered(&server, json!({}));
    let (s, p) = client_fork(
        &server,
        &f.session_id,
        &joiner.session_key,
        "fork",
        json!({}),
    );
    assert_eq!((s, p["type"].as_str()), (403, Some("fork_not_allowed")));
    let before = admin_events(&server, &f.session_id);
    let (fid, fc, _) = fork(&server, &f, json!({}));
    mock.push(Reply::text("fork says A"));
    send(&server, &fid, &fc, json!("take path A"));
    mock.push(Reply::text("parent says B"));
    send(&server, &f.session_id, &f.a, json!("take path B"));
    let (a, b) = (
        admin_events(&server, &fid),
        admin_events(&server, &f.session_id),
    );
    // The fork's own registration is one more event.
    assert_eq!(a.len(), b.len() + 1);
    assert_eq!(
        &b[..before.len()],
        &before[..],
        "the parent's past never changes"
    );
    assert!(a.iter().all(|e| e["session_id"] == fid.as_str()));
    let said = |evs: &[Value]| text_of(&evs.last().unwrap()["payload"]);
    assert_eq!(
        (said(&a), said(&b)),
        ("fork says A".into(), "parent says B".into())
    );
    // The fork's own key does not open the parent, nor the parent's the fork.
    let r = server
        .client()
        .bearer(&fc.session_key)
        .get(&format!("/api/v1/sessions/{}/events", f.session_id));
    assert_eq!(r.status, 401);
}

#[test]
fn rewind_hands_the_message_back_to_edit_and_resend() {
    let (mock, server) = server();
    let f = with_tool(&server, "main");
    for (q, a) in [("first", "one"), ("second", "two")] {
        mock.push(Reply::text(a));
        send(&server, &f.session_id, &f.a, json!(q));
    }
    let parent = admin_events(&server, &f.session_id);
    let second = of_type(&parent, "client.message.send")[1]["id"].clone();
    let (s, answer) = client_fork(
        &server,
        &f.session_id,
        &f.a.session_key,
        "rewind",
        json!({"before_message": second}),
    );
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["message"]["content"], "second");
    let (fid, fc) = forked_client(&server, &f.a, &answer);
    mock.push(Reply::text("two, edited"));
    send(&server, &fid, &fc, json!("second, edited"));
    let sent: Value = serde_json::from_slice(&last_request(&mock)).unwrap();
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{sent}");
    assert_eq!(msgs[2]["content"], "second, edited");
    // Rewinding by turn number: after turn 1 is the same point.
    let (s, by_turn) = client_fork(
        &server,
        &f.session_id,
        &f.a.session_key,
        "rewind",
        json!({"after_turn": 1}),
    );
    assert_eq!(s, 201);
    assert_eq!(by_turn["parent"]["event_id"], answer["parent"]["event_id"]);
    let (s, p) = client_fork(
        &server,
        &f.session_id,
        &f.a.session_key,
        "rewind",
        json!({"after_turn": 7}),
    );
    assert_eq!((s, p["type"].as_str()), (404, Some("not_found")));
    let (s, p) = client_fork(
        &server,
        &f.session_id,
        &f.a.session_key,
        "rewind",
        json!({}),
    );
    assert_eq!((s, p["type"].as_str()), (400, Some("bad_request")));
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
