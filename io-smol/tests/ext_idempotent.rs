//! Extension `send.idempotent` over the real binary (docs/extensions.md):
//! a retried `sendMessage` with the same key never runs a second turn; it
//! gets the first answer (replayed from the log, or live while the first
//! request waits or runs), across `kill -9` too. Here: concurrent retries
//! over real connections and keys surviving kill -9; replays, attaching
//! to a running or queued turn and retention are tested in-process in
//! `engine/tests/idempotent_flows.rs`.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const INTERRUPTED: i64 = -32024;

fn register_ext(server: &Server, f: &Fixture, c: &Client) {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.registerDriver",
        json!({"extensions": ["send.idempotent"]}),
    );
    assert_eq!(t["result"]["extensions"], json!(["send.idempotent"]), "{t}");
}

fn params(text: &str, key: &str) -> Value {
    json!({"message": {"role": "user", "content": text}, "idempotency_key": key})
}

fn send_key(server: &Server, f: &Fixture, c: &Client, text: &str, key: &str) -> Value {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.sendMessage",
        params(text, key),
    )
    .1
}

fn send_key_stream(
    server: &Server,
    f: &Fixture,
    c: &Client,
    text: &str,
    key: &str,
) -> testkit::RpcStream {
    stream(
        server,
        &f.session_id,
        &c.session_key,
        "session.sendMessage",
        params(text, key),
    )
}

fn setup(env: &[(&str, &str)]) -> (MockProvider, Server, Fixture) {
    let (mock, server) = anthropic_server(env);
    let f = open(&server, "main", &[], &[], json!({}));
    register_ext(&server, &f, &f.a);
    (mock, server, f)
}

fn user_messages(server: &Server, f: &Fixture) -> usize {
    of_type(
        &events(server, &f.session_id, &f.a.session_key),
        "client.message.send",
    )
    .len()
}

#[test]
fn twenty_concurrent_retries_of_one_key_run_one_turn() {
    let (mock, server, f) = setup(&[]);
    mock.push(Reply::text("only one").delayed(Duration::from_millis(300)));
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| s.spawn(|| send_key(&server, &f, &f.a, "hi", "k-many")))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(r["result"], results[0]["result"], "{r}");
    }
    assert_eq!(
        results[0]["result"]["message"]["content"][0]["text"],
        "only one"
    );
    assert_eq!(mock.request_count(), 1);
    assert_eq!(user_messages(&server, &f), 1);
}

#[test]
fn keys_survive_kill9_and_an_interrupted_turn_is_not_run_again() {
    let (mock, mut server, f) = setup(&[]);
    mock.push(Reply::text("before the crash"));
    let first = send_key(&server, &f, &f.a, "hi", "k-crash");
    mock.push(Reply::text("never seen").delayed(Duration::from_millis(3000)));
    let mut running = send_key_stream(&server, &f, &f.a, "slow", "k-mid");
    mock.wait_requests(2, WAIT);
    // The provider call is not gated on the commit that stores the key
    // (with the turn's client.message.send): a read is answered after every
    // earlier write, so once the event is read the key is durable.
    while !events(&server, &f.session_id, &f.a.session_key)
        .iter()
        .any(|e| e["payload"]["content"] == "slow")
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill9();
    drop(running.collect_until_terminal(Duration::from_millis(200)));
    server.restart();
    register_ext(&server, &f, &f.a);
    let again = send_key(&server, &f, &f.a, "hi", "k-crash");
    assert_eq!(again["result"], first["result"]);
    assert_rpc_error(
        &send_key(&server, &f, &f.a, "slow", "k-mid"),
        INTERRUPTED,
        "idempotent_turn_interrupted: the server restarted while this key's turn was running; its events are in the session log",
    );
    assert_eq!(mock.request_count(), 2, "nothing ran twice");
}
