//! Opt-in turn control over the real binary (docs/extensions.md):
//! `session.cancelTurn`, `session.queue` positions, the
//! `session.replay_complete` marker, the admin cancel; and the reference
//! wire for every client that did not opt in. Here: cancelling a call in
//! flight to a real HTTP provider in both wire formats; the rest is tested
//! in-process in `engine/tests/turn_control_flows.rs`.

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
