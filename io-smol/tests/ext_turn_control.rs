//! Opt-in turn control over the real binary (docs/extensions.md):
//! `session.cancelTurn`, `session.queue` positions, the
//! `session.replay_complete` marker, the admin cancel; and the reference
//! wire for every client that did not opt in.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const ALL: [&str; 3] = ["turn.cancel", "turn.queue", "subscribe.replay_complete"];

/// `registerDriver` with `extensions`.
fn register_ext(server: &Server, f: &Fixture, c: &Client, ext: &[&str]) -> Value {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.registerDriver",
        json!({"extensions": ext}),
    )
    .1
}

fn cancel(server: &Server, f: &Fixture, c: &Client) -> Value {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.cancelTurn",
        json!({}),
    )
    .1
}

/// A session whose creator declares `get_time`, registered with `ext`.
fn session(server: &Server, ext: &[&str]) -> Fixture {
    let f = open(
        server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let t = register_ext(server, &f, &f.a, ext);
    assert_eq!(t["result"]["registered"], true, "{t}");
    f
}

/// A turn of `c` whose provider call takes `delay`; returns once the
/// provider has the request.
fn slow_turn(
    server: &Server,
    mock: &MockProvider,
    f: &Fixture,
    c: &Client,
    delay: u64,
) -> testkit::RpcStream {
    let before = mock.request_count();
    mock.push(Reply::text("late").delayed(Duration::from_millis(delay)));
    let s = send_stream(server, &f.session_id, c, json!("slow"));
    mock.wait_requests(before + 1, WAIT);
    s
}

#[test]
fn without_opt_in_the_wire_is_the_reference() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.registerDriver",
        json!({}),
    );
    assert_eq!(t["result"], json!({"registered": true}));
    let t = cancel(&server, &f, &f.a);
    assert_eq!(
        t["error"],
        json!({"code": -32601, "message": "Method not found: session.cancelTurn"})
    );
    // Asking for extensions echoes what this server has; unknown names are
    // ignored, a wrong type is an error.
    let t = register_ext(&server, &f, &f.a, &["turn.cancel", "some.future.thing"]);
    assert_eq!(
        t["result"],
        json!({"registered": true, "extensions": ["turn.cancel"]})
    );
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.registerDriver",
        json!({"extensions": "turn.cancel"}),
    );
    assert_eq!(t["error"]["code"], -32602);
}

#[test]
fn cancel_a_running_turn_drops_the_late_reply_and_frees_the_gate() {
    for kind in ["anthropic", "openai"] {
        let mock = MockProvider::start();
        let config =
            testkit::fixtures::provider_toml(&[("main", kind, &mock.base_url, "m", "tok")]);
        let server = Server::start(opts(&config));
        let f = session(&server, &ALL);
        let mut turn = slow_turn(&server, &mock, &f, &f.a, 1500);
        let t = cancel(&server, &f, &f.a);
        assert_eq!(
            t["result"],
            json!({"cancelled": true, "state": "running"}),
            "{t}"
        );
        let (_, terminal) = turn.collect_until_terminal(WAIT);
        assert_eq!(
            terminal.unwrap()["error"],
            json!({"code": -32021, "message": "turn_cancelled: the turn was cancelled"})
        );
        // Idempotent: nothing left to cancel.
        assert_eq!(
            cancel(&server, &f, &f.a)["result"],
            json!({"cancelled": false})
        );
        // The gate is free at once; the next turn's request is valid.
        mock.push(Reply::text("fresh"));
        let (_, t) = send(&server, &f.session_id, &f.a, json!("next"));
        assert_eq!(t["result"]["message"]["content"][0]["text"], "fresh", "{t}");
        std::thread::sleep(Duration::from_millis(1800));
        let evs = events(&server, &f.session_id, &f.a.session_key);
        // The abandoned attempt never got a provider.response.
        assert_eq!(of_type(&evs, "provider.request").len(), 2);
        assert_eq!(of_type(&evs, "provider.response").len(), 1);
        let last = mock.requests().last().unwrap().body["messages"].clone();
        let roles: Vec<&str> = last
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        if kind == "anthropic" {
            assert_eq!(roles, ["user"], "consecutive user messages merged");
        } else {
            assert_eq!(roles, ["user", "user"]);
        }
    }
}

#[test]
fn cancel_a_paused_mixed_turn_closes_every_open_tool_use() {
    let (mock, server) = anthropic_server(&[]);
    let f = session(&server, &ALL);
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}),
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("go"));
    assert!(t["result"]["message"].is_object(), "paused: {t}");
    let t = cancel(&server, &f, &f.a);
    assert_eq!(t["result"], json!({"cancelled": true, "state": "paused"}));
    let evs = events(&server, &f.session_id, &f.a.session_key);
    let err = error_with_reason(&evs, "driver_turn_abandoned").expect("abandonment logged");
    assert_eq!(err["payload"]["owner_client_key_id"], f.a.key_id);
    // The owner's next plain message is a fresh turn, not a continuation,
    // and the provider sees a result for each paused tool_use.
    mock.push(Reply::text("ok"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("something else"));
    assert_eq!(t["result"]["message"]["content"][0]["text"], "ok", "{t}");
    let msgs = mock.requests().last().unwrap().body["messages"].clone();
    let last = msgs.as_array().unwrap().last().unwrap().clone();
    let ids: Vec<&str> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["tu_m", "tu_c"]);
    let evs = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(
        of_type(&evs, "session.error").len(),
        1,
        "logged once, at the cancel"
    );
}

#[test]
fn queued_requests_hear_their_positions_and_can_be_cancelled() {
    let (mock, server) = anthropic_server(&[]);
    let f = session(&server, &ALL);
    let b = f.join(&server, json!({}));
    assert_eq!(
        register_ext(&server, &f, &b, &ALL)["result"]["registered"],
        true
    );
    let plain = f.join_registered(&server, json!({}));
    let mut holder = slow_turn(&server, &mock, &f, &f.a, 1500);
    let mut waiters: Vec<testkit::RpcStream> = (0..5)
        .map(|i| {
            let mut s = send_stream(&server, &f.session_id, &b, json!(format!("w{i}")));
            let frame = s.next_frame(WAIT).expect("position frame");
            assert_eq!(
                frame,
                json!({"jsonrpc": "2.0", "method": "session.queue", "params": {"position": i + 1, "ahead": i}})
            );
            s
        })
        .collect();
    // A plain driver queued behind them hears nothing.
    let mut silent = send_stream(&server, &f.session_id, &plain, json!("plain"));
    assert!(silent.next_frame(Duration::from_millis(300)).is_none());
    // Waiter 2 leaves: the ones behind it move up.
    let gone = waiters.remove(1);
    gone.disconnect();
    for (i, w) in waiters.iter_mut().enumerate().skip(1) {
        let frame = w.next_frame(WAIT).expect("new position");
        assert_eq!(frame["params"]["position"], i + 1);
    }
    // B cancels: all of its queued requests end; the plain one stays.
    let t = cancel(&server, &f, &b);
    assert_eq!(
        t["result"],
        json!({"cancelled": true, "state": "queued", "requests": 4})
    );
    for mut w in waiters {
        let (_, terminal) = w.collect_until_terminal(WAIT);
        assert_eq!(terminal.unwrap()["error"]["code"], -32021);
    }
    mock.push(Reply::text("for plain"));
    let (_, t) = holder.collect_until_terminal(WAIT);
    assert!(t.unwrap().get("result").is_some());
    let (notes, t) = silent.collect_until_terminal(WAIT);
    assert_eq!(
        t.unwrap()["result"]["message"]["content"][0]["text"],
        "for plain"
    );
    assert!(
        notes.iter().all(|n| n["method"] == "session.event"),
        "{notes:?}"
    );
}

#[test]
fn replay_complete_marks_the_end_of_the_replay_for_opted_in_subscribers_only() {
    let (mock, server) = anthropic_server(&[]);
    let f = session(&server, &ALL);
    mock.push(Reply::text("one"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    let evs = events(&server, &f.session_id, &f.a.session_key);
    let first = evs[0]["id"].as_str().unwrap().to_string();
    let last = evs.last().unwrap()["id"].clone();
    let evs_len = evs.len();
    let mut opted = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"since_event_id": first, "extensions": ["subscribe.replay_complete"]}),
    );
    let mut seen = Vec::new();
    loop {
        let frame = opted.next_frame(WAIT).expect("frame");
        if frame["method"] == "session.replay_complete" {
            assert_eq!(frame["params"], json!({"last_event_id": last}));
            break;
        }
        seen.push(frame["params"]["id"].clone());
    }
    assert_eq!(
        seen.len(),
        evs.len() - 1,
        "everything after since_event_id, then the marker"
    );
    // A client that registered without extensions, once the replay above
    // is over (events logged during a replay may belong to it).
    let other = f.join_registered(&server, json!({}));
    let mut plain = subscribe(
        &server,
        &f.session_id,
        &other.session_key,
        json!({"since_event_id": first}),
    );
    // Live events follow the marker; the plain subscriber sees only events.
    mock.push(Reply::text("two"));
    send(&server, &f.session_id, &f.a, json!("again"));
    let next = opted.next_frame(WAIT).unwrap();
    assert_eq!(next["method"], "session.event", "{next}");
    plain.pump(Duration::from_millis(500));
    // Replayed (all but the first), the join and registration, the turn.
    for _ in 0..(evs_len - 1) + 2 + 4 {
        let frame = plain.next_frame(WAIT).expect("event");
        assert_eq!(frame["method"], "session.event");
    }
    // Without a replay the marker comes first.
    let mut fresh = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"extensions": ["subscribe.replay_complete"]}),
    );
    assert_eq!(
        fresh.next_frame(WAIT).unwrap(),
        json!({"jsonrpc": "2.0", "method": "session.replay_complete", "params": {"last_event_id": null}})
    );
}

#[test]
fn an_operator_cancels_any_turn_through_the_admin_api() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let mut turn = slow_turn(&server, &mock, &f, &f.a, 1500);
    let resp = server.admin().post_json(
        &format!("/admin/v1/sessions/{}/cancel-turn", f.session_id),
        &json!({}),
    );
    resp.assert_status(200);
    assert_eq!(resp.json(), json!({"cancelled": true, "state": "running"}));
    let (_, t) = turn.collect_until_terminal(WAIT);
    assert_eq!(t.unwrap()["error"]["code"], -32021);
    let resp = server.admin().post_json(
        &format!("/admin/v1/sessions/{}/cancel-turn", f.session_id),
        &json!({}),
    );
    assert_eq!(resp.json(), json!({"cancelled": false}));
    let resp = server
        .admin()
        .post_json("/admin/v1/sessions/ses_nope/cancel-turn", &json!({}));
    resp.assert_status(404);
}
