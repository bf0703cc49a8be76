//! The FIFO turn gate with paused turns over the real binary (spec 01 §7,
//! §8; checklist C-118…C-125), including the project decision that the
//! engine's own deadline timer admits a queued waiter behind an expired
//! pause (spec 01 §10 note 2).
//!
//! A first turn is held open with a delayed mock reply; pauses are expired
//! with a short `BAE_TURN_TIMEOUT`. These two prove the binary wires the
//! gate over real sockets and timers; the gate's other cases (owner
//! resume, retirement by arrival, late owner, errored/closed sessions,
//! malformed retirements, disconnected waiters, per-session gates) are
//! tested in-process in `engine/tests/gate_flows.rs`.

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use serde_json::{json, Value};
use testkit::{Reply, RpcStream};

const ABANDONED: &str = "Client tool call was abandoned before returning a result.";

/// Position of the event with `id` in `log`.
fn pos(log: &[Value], id: &Value) -> usize {
    log.iter()
        .position(|e| &e["id"] == id)
        .unwrap_or_else(|| panic!("event {id} not in the log"))
}

/// Asserts a queued stream has written no body bytes during `d`.
#[track_caller]
fn assert_silent(s: &mut RpcStream, d: Duration) {
    s.pump(d);
    assert_eq!(
        s.body_bytes_received(),
        0,
        "a queued request writes no body bytes while it waits"
    );
    assert!(!s.is_finished());
}

/// Terminal frame of a stream (panics on timeout).
#[track_caller]
fn finish(s: &mut RpcStream) -> (Vec<Value>, Value) {
    let (notes, t) = s.collect_until_terminal(WAIT);
    (notes, t.expect("terminal frame"))
}

#[test]
fn c118_c119_c124_queued_driver_is_silent_then_runs_in_fifo_order() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push_all([
        Reply::text("A done").delayed(Duration::from_millis(700)),
        Reply::text("B done"),
        Reply::text("C done"),
    ]);
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("A first"));
    assert_eq!(mock.wait_requests(1, WAIT).len(), 1, "A's turn is running");
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B second"));
    std::thread::sleep(Duration::from_millis(100));

    // C-124: join + registerDriver while A's turn is in flight.
    let started = Instant::now();
    let c = f.join_registered(&server, json!({}));
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "join/register never wait on the gate"
    );
    let mut sc = send_stream(&server, &f.session_id, &c, json!("C third"));

    // C-118: both queued streams stay silent while A runs.
    assert_silent(&mut sb, Duration::from_millis(200));
    assert_silent(&mut sc, Duration::from_millis(10));
    assert_eq!(mock.request_count(), 1);

    let (_, ta) = finish(&mut sa);
    let (nb, tb) = finish(&mut sb);
    let (_, tc) = finish(&mut sc);
    assert_eq!(text_of(&ta["result"]["message"]), "A done");
    assert_eq!(text_of(&tb["result"]["message"]), "B done");
    assert_eq!(text_of(&tc["result"]["message"]), "C done");

    // C-119: B's events all follow A's server.message.send; C's follow B's.
    let log = events(&server, &f.session_id, &f.a.session_key);
    let a_end = pos(&log, &result_events(&ta).last().unwrap()["id"]);
    let b_evs = result_events(&tb);
    let c_evs = result_events(&tc);
    assert_eq!(
        result_events(&ta).last().unwrap()["event_type"],
        "server.message.send"
    );
    assert!(b_evs.iter().all(|e| pos(&log, &e["id"]) > a_end));
    let b_end = pos(&log, &b_evs.last().unwrap()["id"]);
    assert!(c_evs.iter().all(|e| pos(&log, &e["id"]) > b_end));
    // B's stream carried only B's turn (not A's events).
    assert_eq!(
        ids(&note_events(&nb)),
        ids(&b_evs[1..]),
        "a queued stream subscribes only once it holds the gate"
    );
    // The provider saw B's history including A's completed exchange.
    let b_req = &mock.requests()[1];
    assert_eq!(b_req.messages().as_array().unwrap().len(), 3);
    assert_eq!(b_req.messages()[2]["content"], "B second");
}

/// Project decision (spec 01 §10 note 2): a waiter queued before the
/// deadline is admitted by the engine's own timer, without a new arrival,
/// and performs the retirement.
#[test]
fn c121_c122_engine_timer_admits_the_queued_waiter_at_the_deadline() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, b) = get_time_pair(&server, "main");
    let mut observer = subscribe(&server, &f.session_id, &b.session_key, json!({}));
    observer.wait_head(WAIT);
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let paused_at = Instant::now();

    mock.push(Reply::text("B after timeout"));
    let mut sb = send_stream(&server, &f.session_id, &b, json!("waiting"));
    assert_silent(&mut sb, Duration::from_millis(400));
    let (notes, t) = finish(&mut sb);
    let waited = paused_at.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "admitted at the deadline (~1 s), waited {waited:?}"
    );
    let evs = result_events(&t);
    assert_eq!(text_of(&t["result"]["message"]), "B after timeout");
    assert!(error_with_reason(&evs, "driver_turn_abandoned").is_none());
    assert!(error_with_reason(&note_events(&notes), "driver_turn_abandoned").is_none());
    assert_eq!(
        evs[0]["payload"]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "tu_1", "content": ABANDONED, "is_error": true},
            {"type": "text", "text": "waiting"}
        ])
    );
    let log = events(&server, &f.session_id, &f.a.session_key);
    let err = error_with_reason(&log, "driver_turn_abandoned").expect("logged");
    assert_eq!(err["client_key_id"], json!(f.a.key_id));
    assert_eq!(pos(&log, &err["id"]) + 1, pos(&log, &evs[0]["id"]));
    let seen = read_events_until(&mut observer, "session.error");
    assert_eq!(seen.last().unwrap()["id"], err["id"]);
}
