//! Extension `turn.steer` over the real binary (docs/extensions.md):
//! guidance added to a running turn lands at its next provider round trip,
//! after the tool results, and is logged there, as both provider wire
//! formats carry it. The refusals and a steer outliving a failed turn are
//! tested in-process in `engine/tests/steer_flows.rs`.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

fn register_ext(server: &Server, f: &Fixture, c: &Client, ext: &[&str]) {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.registerDriver",
        json!({"extensions": ext}),
    );
    assert_eq!(t["result"]["registered"], true, "{t}");
}

fn steer(server: &Server, f: &Fixture, c: &Client, text: &str) -> Value {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.steerTurn",
        json!({"message": {"role": "user", "content": text}}),
    )
    .1
}

/// A session whose creator opted into steering, on a `kind` provider.
fn setup(kind: &str) -> (MockProvider, Server, Fixture) {
    let mock = MockProvider::start();
    let config = testkit::fixtures::provider_toml(&[("main", kind, &mock.base_url, "m", "tok")]);
    let server = Server::start(opts(&config));
    let f = open(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    register_ext(&server, &f, &f.a, &["turn.steer"]);
    (mock, server, f)
}

fn server_tool_round(kind: &str) -> Reply {
    match kind {
        "anthropic" => Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}),
        ]),
        _ => Reply::openai_tool_call("tu_m", "lookup_db", "{}"),
    }
}

#[test]
fn a_steer_lands_after_the_tool_results_of_the_round_it_follows() {
    for kind in ["anthropic", "openai"] {
        let (mock, server, f) = setup(kind);
        // Round 1 (slow) asks for a server tool; round 2 answers.
        mock.push(server_tool_round(kind).delayed(Duration::from_millis(600)));
        mock.push(Reply::text("done"));
        let mut turn = send_stream(&server, &f.session_id, &f.a, json!("go"));
        mock.wait_requests(1, WAIT);
        // Answered once applied, i.e. when round 2 is sent.
        let t = steer(&server, &f, &f.a, "prefer the cache");
        let event_id = t["result"]["event_id"]
            .as_str()
            .expect("applied")
            .to_string();
        assert_eq!(t["result"]["steered"], true, "{t}");
        let (_, terminal) = turn.collect_until_terminal(WAIT);
        let terminal = terminal.unwrap();
        assert_eq!(terminal["result"]["message"]["content"][0]["text"], "done");
        // Logged where it was applied, and part of the turn's result.
        let evs = events(&server, &f.session_id, &f.a.session_key);
        let tail: Vec<String> = types(&evs).into_iter().rev().take(5).rev().collect();
        assert_eq!(
            tail,
            [
                "tool.result",
                "client.message.send",
                "provider.request",
                "provider.response",
                "server.message.send",
            ]
        );
        let steer_ev = evs.iter().find(|e| e["id"] == event_id.as_str()).unwrap();
        assert_eq!(steer_ev["event_type"], "client.message.send");
        assert_eq!(
            steer_ev["payload"],
            json!({"role": "user", "content": "prefer the cache"})
        );
        let pos = |id: &str| evs.iter().position(|e| e["id"] == id).unwrap();
        let result_pos = evs
            .iter()
            .rposition(|e| e["event_type"] == "tool.result")
            .unwrap();
        let second_request = evs
            .iter()
            .rposition(|e| e["event_type"] == "provider.request")
            .unwrap();
        assert!(result_pos < pos(&event_id) && pos(&event_id) < second_request);
        assert!(result_events(&terminal)
            .iter()
            .any(|e| e["id"] == event_id.as_str()));
        // Round 2 carries it after the tool result.
        let round2 = mock.requests()[1].body["messages"].clone();
        let text = round2.to_string();
        let result_at = text.find("tu_m\"").map(|_| text.rfind("tu_m").unwrap());
        let steer_at = text.find("prefer the cache").expect("steer sent");
        assert!(result_at.unwrap() < steer_at, "{round2}");
        let last = round2.as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "user", "{round2}");
        assert!(last.to_string().contains("prefer the cache"));
        // The next turn's history keeps it, right after the turn's input.
        mock.push(Reply::text("again"));
        send(&server, &f.session_id, &f.a, json!("next"));
        let round3 = mock.requests()[2].body["messages"].to_string();
        let go = round3.find("\"go\"").unwrap();
        let steer_at = round3.find("prefer the cache").unwrap();
        let done = round3.find("done").unwrap();
        assert!(go < steer_at && steer_at < done, "{round3}");
    }
}
