//! A paused turn survives `kill -9` + restart (project improvement over the
//! reference, spec 01 §10 note 3; architecture.md "Departures"): the server
//! rebuilds the pause from the log on first use — owner, expected ids and
//! the server results of a mixed turn — and the owner resumes with its tool
//! results; or, after `BAE_TURN_TIMEOUT`, another driver retires it
//! (C-104, C-121 across a restart).
//!
//! Drivers re-register after each restart (the default in-memory registry;
//! SDKs register on reconnect), except where the opt-in
//! `BAE_DURABLE_DRIVERS` extension is tested.

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const ABANDONED: &str = "Client tool call was abandoned before returning a result.";
const MCP_ERR: &str = "MCP error: no MCP server is configured for tool 'lookup_db'";

/// Pauses a mixed turn (mcp `tu_m`, client `tu_c`) owned by the creator,
/// with a registered joiner `b`, then kills the server with SIGKILL,
/// restarts it on the same database and (unless the registry is durable)
/// re-registers both drivers. Returns the log as it was before the crash.
fn pause_then_crash(mock: &MockProvider, server: &mut Server) -> (Fixture, Client, Vec<Value>) {
    let durable = server
        .options()
        .env
        .iter()
        .any(|(k, _)| k == DURABLE_DRIVERS.0);
    let f = open_registered(
        server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let b = f.join_registered(server, json!({}));
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}),
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    let (_, t) = send(server, &f.session_id, &f.a, json!("what time?"));
    assert_eq!(t["result"]["message"]["content"][1]["dispatch"], "client");
    let before = events(server, &f.session_id, &f.a.session_key);
    server.kill9();
    server.restart();
    if !durable {
        reregister(server, &f.session_id, &[&f.a, &b]);
    }
    (f, b, before)
}

fn mcp_result() -> Value {
    json!({"type": "tool_result", "tool_use_id": "tu_m", "is_error": true,
           "content": [{"type": "text", "text": MCP_ERR}]})
}

#[test]
fn owner_resumes_a_paused_mixed_turn_after_kill9() {
    let (mock, mut server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, _b, before) = pause_then_crash(&mock, &mut server);
    let after = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(after[..before.len()], before[..], "log intact");
    assert_eq!(
        types(&after[before.len()..]),
        vec!["session.driver.register", "session.driver.register"]
    );
    // Later than the (fresh) deadline: the owner still resumes (C-123).
    std::thread::sleep(Duration::from_millis(1100));

    mock.push(Reply::text("It is noon."));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "12:00")]),
    );
    assert!(t.get("result").is_some(), "{t}");
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    // The server result of the first leg was rebuilt from the log and
    // merged first, in the assistant's order (C-104), not re-logged (C-103).
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [mcp_result(), tool_result("tu_c", "12:00")]})
    );
    assert_eq!(evs[1]["payload"]["tool_use_id"], "tu_c");
    let req = &evs[2]["payload"];
    assert_eq!(
        req["messages"],
        json!([
            {"role": "user", "content": "what time?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}},
                {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}
            ]},
            {"role": "user", "content": [mcp_result(), tool_result("tu_c", "12:00")]}
        ])
    );
    assert_eq!(text_of(&t["result"]["message"]), "It is noon.");
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(error_with_reason(&log, "driver_turn_abandoned").is_none());
    assert_eq!(admin_state(&server, &f.session_id), "open");
}

#[test]
fn restored_pause_still_gates_other_drivers() {
    let (mock, mut server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "30")]);
    let (f, b, _) = pause_then_crash(&mock, &mut server);
    // Another driver queues behind the restored (live) pause.
    mock.push(Reply::text("answer for A"));
    mock.push(Reply::text("answer for B"));
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B waits"));
    sb.pump(Duration::from_millis(300));
    assert_eq!(
        sb.body_bytes_received(),
        0,
        "B is queued behind the restored pause"
    );
    // The owner's continuation must still answer every client id.
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "answer for A");
    let (_, tb) = sb.collect_until_terminal(WAIT);
    assert_eq!(text_of(&tb.unwrap()["result"]["message"]), "answer for B");
}

#[test]
fn another_driver_retires_a_restored_pause_after_the_timeout() {
    let (mock, mut server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, b, _) = pause_then_crash(&mock, &mut server);
    let mut observer = subscribe(&server, &f.session_id, &f.a.session_key, json!({}));
    observer.wait_head(WAIT);

    mock.push(Reply::text("B took over"));
    let started = Instant::now();
    // B's arrival restores the pause with a fresh deadline, queues, and is
    // admitted by the engine's timer when it expires.
    let (notes, t) = send(&server, &f.session_id, &b, json!("anyone?"));
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(t.get("result").is_some(), "{t}");
    let evs = result_events(&t);
    assert!(
        error_with_reason(&evs, "driver_turn_abandoned").is_none(),
        "C-122"
    );
    assert!(error_with_reason(&note_events(&notes), "driver_turn_abandoned").is_none());
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [
            mcp_result(),
            {"type": "tool_result", "tool_use_id": "tu_c", "content": ABANDONED, "is_error": true},
            {"type": "text", "text": "anyone?"}
        ]})
    );
    assert_eq!(evs[0]["client_key_id"], json!(b.key_id));
    assert_eq!(
        of_type(&evs, "tool.result").len(),
        1,
        "only the synthetic client result"
    );
    assert_eq!(text_of(&t["result"]["message"]), "B took over");
    let seen = read_events_until(&mut observer, "client.message.send");
    assert_eq!(
        seen[0]["payload"],
        json!({"reason": "driver_turn_abandoned", "owner_client_key_id": f.a.key_id})
    );
    assert_eq!(seen[0]["client_key_id"], json!(f.a.key_id));

    // The old owner's results are now rejected without recording anything.
    let before = events(&server, &f.session_id, &f.a.session_key).len();
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "12:00")]),
    );
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
    assert_eq!(
        events(&server, &f.session_id, &f.a.session_key).len(),
        before
    );
}

/// `session.compact` against a pause restored from the log: live → -32020;
/// once its (fresh) deadline passed → reclaimed and compacted.
#[test]
fn compact_against_a_restored_pause() {
    let (mock, mut server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, b, _) = pause_then_crash(&mock, &mut server);
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &b.session_key,
        "session.compact",
        json!({}),
    );
    assert_rpc_error(
        &t,
        -32020,
        "turn in progress: resolve the paused turn before compacting",
    );
    std::thread::sleep(Duration::from_millis(1200));
    mock.push(Reply::text("SUMMARY"));
    let (notes, t) = rpc(
        &server,
        &f.session_id,
        &b.session_key,
        "session.compact",
        json!({}),
    );
    assert_eq!(
        t["result"]["event_type"], "session.compaction.completed",
        "{t}"
    );
    let streamed = note_events(&notes);
    assert_eq!(
        types(&streamed[..3]),
        vec!["session.error", "server.message.send", "tool.result"]
    );
    assert_eq!(
        streamed[1]["payload"]["content"],
        json!([
            mcp_result(),
            {"type": "tool_result", "tool_use_id": "tu_c", "content": ABANDONED, "is_error": true}
        ])
    );
}

/// A crash in the middle of a provider call leaves a user message without
/// an answer; after the restart the gate is free and the next turn carries
/// both user messages (folded by the Anthropic normaliser, C-094).
#[test]
fn kill9_during_a_provider_call_leaves_a_usable_session() {
    let (mock, mut server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::Hang);
    let s = send_stream(&server, &f.session_id, &f.a, json!("lost question"));
    mock.wait_requests(1, WAIT);
    // Give the group commit a moment to make the user turn durable.
    std::thread::sleep(Duration::from_millis(100));
    server.kill9();
    drop(s);
    server.restart();
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(
        types(&log[log.len() - 2..]),
        vec!["client.message.send", "provider.request"]
    );
    reregister(&server, &f.session_id, &[&f.a]);
    mock.push(Reply::text("recovered"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("again"));
    assert_eq!(text_of(&t["result"]["message"]), "recovered");
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(req["normalized"], json!({"merged": [[0, 1]]}));
    assert_eq!(
        req["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "lost question"}, {"type": "text", "text": "again"}
        ]}])
    );
}

/// C-048 across a restart with `BAE_DURABLE_DRIVERS`: DELETE clears the
/// registry, and rebuilding the durable registry from the log must not
/// bring the drivers of a closed session back.
#[test]
fn c048_registry_of_a_closed_session_stays_cleared_after_restart() {
    let (_mock, mut server) = anthropic_server(&[DURABLE_DRIVERS]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    let parts = |server: &Server| {
        let r = server
            .client()
            .bearer(&f.a.session_key)
            .get(&format!("/api/v1/sessions/{}/participants", f.session_id));
        r.assert_status(200);
        r.json()
    };
    assert_eq!(parts(&server), json!({"drivers": []}));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.sendMessage",
    );
    server.restart();
    assert_eq!(parts(&server), json!({"drivers": []}));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.sendMessage",
    );
}

/// With the opt-in durable registry the owner resumes a restored pause
/// without registering again.
#[test]
fn durable_owner_resumes_a_restored_pause_without_registering() {
    let (mock, mut server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "30"), DURABLE_DRIVERS]);
    let (f, _b, before) = pause_then_crash(&mock, &mut server);
    assert_eq!(events(&server, &f.session_id, &f.a.session_key), before);
    mock.push(Reply::text("It is noon."));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "It is noon.", "{t}");
    assert_eq!(
        result_events(&t)[0]["payload"]["content"],
        json!([mcp_result(), tool_result("tu_c", "12:00")])
    );
}

/// An idle session's cached history dropped at once
/// (`BAE_HISTORY_CACHE_BYTES=0`, `BAE_HISTORY_IDLE=0`) is read back from the
/// log by the next turn, over the real binary: the provider gets the whole
/// history in order, across a client-tool pause (which keeps its history)
/// and plain turns (each of which reads it back).
#[test]
fn a_dropped_idle_history_is_read_back_whole_by_the_next_turn() {
    let (mock, server) =
        anthropic_server(&[("BAE_HISTORY_CACHE_BYTES", "0"), ("BAE_HISTORY_IDLE", "0")]);
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::text("first answer"));
    send(&server, &f.session_id, &f.a, json!("first"));
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("what time?"));
    assert_eq!(t["result"]["message"]["content"][0]["dispatch"], "client");
    mock.push(Reply::text("It is noon."));
    send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "12:00")]),
    );
    mock.push(Reply::text("bye"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("thanks"));
    assert_eq!(t["result"]["message"]["content"][0]["text"], "bye");
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    let texts = |r: &testkit::RecordedRequest| -> Vec<String> {
        (r.messages().as_array().into_iter().flatten())
            .map(|m| format!("{}:{}", m["role"].as_str().unwrap_or(""), m["content"]))
            .collect()
    };
    let last = texts(&requests[3]);
    assert_eq!(last.len(), 7, "{last:#?}");
    assert!(
        last[0].starts_with("user:") && last[0].contains("first"),
        "{last:#?}"
    );
    assert!(last[1].contains("first answer"), "{last:#?}");
    assert!(last[2].contains("what time?"), "{last:#?}");
    assert!(last[3].contains("tu_c"), "{last:#?}");
    assert!(last[4].contains("12:00"), "{last:#?}");
    assert!(last[5].contains("It is noon."), "{last:#?}");
    assert!(last[6].contains("thanks"), "{last:#?}");
    // Each request repeats the one before it, then adds to it.
    for w in requests.windows(2) {
        let (a, b) = (texts(&w[0]), texts(&w[1]));
        assert_eq!(b[..a.len()], a[..], "history grows by appending");
    }
}
