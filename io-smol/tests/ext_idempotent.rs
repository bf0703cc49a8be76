//! Extension `send.idempotent` over the real binary (docs/extensions.md):
//! a retried `sendMessage` with the same key never runs a second turn; it
//! gets the first answer (replayed from the log, or live while the first
//! request waits or runs), across `kill -9` too.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const REUSED: i64 = -32023;
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
fn a_retry_after_the_answer_replays_it_without_a_second_turn() {
    let (mock, server, f) = setup(&[]);
    mock.push(Reply::text("once"));
    let first = send_key(&server, &f, &f.a, "hi", "k-1");
    assert_eq!(first["result"]["message"]["content"][0]["text"], "once");
    let again = send_key(&server, &f, &f.a, "hi", "k-1");
    assert_eq!(again["result"], first["result"], "same message and events");
    assert_eq!(mock.request_count(), 1);
    assert_eq!(user_messages(&server, &f), 1);
    // The same key with another message changes nothing.
    let other = send_key(&server, &f, &f.a, "something else", "k-1");
    assert_rpc_error(
        &other,
        REUSED,
        "idempotency_key_reused: this key was used with a different message",
    );
    assert_eq!(mock.request_count(), 1);
    assert_eq!(user_messages(&server, &f), 1);
    // Keys are per client key: another driver's identical key is its own.
    let b = f.join_registered(&server, json!({}));
    register_ext(&server, &f, &b);
    mock.push(Reply::text("for b"));
    let t = send_key(&server, &f, &b, "hi", "k-1");
    assert_eq!(t["result"]["message"]["content"][0]["text"], "for b");
    // An error answer is what a retry gets too.
    mock.push(Reply::status(500, "boom"));
    let failed = send_key(&server, &f, &f.a, "fail", "k-2");
    assert_eq!(
        send_key(&server, &f, &f.a, "fail", "k-2")["result"],
        failed["result"]
    );
    assert_eq!(mock.request_count(), 3);
}

#[test]
fn retries_while_the_turn_runs_or_waits_attach_to_it() {
    let (mock, server, f) = setup(&[]);
    mock.push(Reply::text("slow").delayed(Duration::from_millis(800)));
    let mut first = send_key_stream(&server, &f, &f.a, "hi", "k-run");
    mock.wait_requests(1, WAIT);
    let mut retry = send_key_stream(&server, &f, &f.a, "hi", "k-run");
    // A queued request of another driver, and its retry.
    let b = f.join_registered(&server, json!({}));
    register_ext(&server, &f, &b);
    mock.push(Reply::text("for b"));
    let mut queued = send_key_stream(&server, &f, &b, "later", "k-q");
    std::thread::sleep(Duration::from_millis(100));
    let mut queued_retry = send_key_stream(&server, &f, &b, "later", "k-q");
    let (_, t1) = first.collect_until_terminal(WAIT);
    let (notes, t2) = retry.collect_until_terminal(WAIT);
    assert_eq!(
        t1.as_ref().unwrap()["result"],
        t2.as_ref().unwrap()["result"]
    );
    // The retry saw the rest of the turn's events live.
    assert!(
        types(&note_events(&notes)).contains(&"provider.response".to_string()),
        "{notes:?}"
    );
    let (_, q1) = queued.collect_until_terminal(WAIT);
    let (_, q2) = queued_retry.collect_until_terminal(WAIT);
    assert_eq!(
        q1.unwrap()["result"]["message"]["content"][0]["text"],
        "for b"
    );
    assert_eq!(
        q2.unwrap()["result"]["message"]["content"][0]["text"],
        "for b"
    );
    assert_eq!(mock.request_count(), 2);
    assert_eq!(user_messages(&server, &f), 2);
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

#[test]
fn keys_expire_after_the_retention_and_are_ignored_without_the_opt_in() {
    let (mock, server, f) = setup(&[("BAE_IDEMPOTENCY_RETENTION", "1")]);
    mock.set_default(Reply::text("again"));
    send_key(&server, &f, &f.a, "hi", "k-old");
    std::thread::sleep(Duration::from_millis(1200));
    send_key(&server, &f, &f.a, "hi", "k-old");
    assert_eq!(mock.request_count(), 2, "expired: a new turn");
    // A plain driver's key is just an unknown param (the reference wire).
    let plain = f.join_registered(&server, json!({}));
    send_key(&server, &f, &plain, "hi", "k-plain");
    send_key(&server, &f, &plain, "hi", "k-plain");
    assert_eq!(mock.request_count(), 4);
    // A malformed key is refused for an opted-in driver.
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.sendMessage",
        json!({"message": {"content": "x"}, "idempotency_key": 7}),
    );
    assert_rpc_error(
        &t,
        -32602,
        "Invalid params: \"idempotency_key\" must be a non-empty string of at most 255 characters",
    );
}
