//! The FIFO turn gate with paused turns over the real binary (spec 01 §7,
//! §8; checklist C-118…C-125), including the project decision that the
//! engine's own deadline timer admits a queued waiter behind an expired
//! pause (spec 01 §10 note 2).
//!
//! A first turn is held open with a delayed mock reply; pauses are expired
//! with a short `BAE_TURN_TIMEOUT`.

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

#[test]
fn c120_owner_resumes_a_live_pause_while_another_driver_queues() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "30")]);
    let (f, b) = get_time_pair(&server, "main");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("time?"));
    assert_eq!(t["result"]["message"]["content"][0]["dispatch"], "client");

    // B arrives during the live pause: queued, silent.
    mock.push_all([Reply::text("noon"), Reply::text("hello B")]);
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B here"));
    assert_silent(&mut sb, Duration::from_millis(300));
    assert_eq!(mock.request_count(), 1);

    // The owner resumes without queuing behind B.
    let (_, ta) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&ta["result"]["message"]), "noon");
    assert!(error_with_reason(&result_events(&ta), "driver_turn_abandoned").is_none());
    let (_, tb) = finish(&mut sb);
    assert_eq!(text_of(&tb["result"]["message"]), "hello B");
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(error_with_reason(&log, "driver_turn_abandoned").is_none());
    let a_end = pos(&log, &result_events(&ta).last().unwrap()["id"]);
    assert!(result_events(&tb)
        .iter()
        .all(|e| pos(&log, &e["id"]) > a_end));
    // B's content is recorded as is (no synthetic results).
    assert_eq!(result_events(&tb)[0]["payload"]["content"], "B here");
}

#[test]
fn c121_c122_expired_pause_is_retired_by_the_next_arrival() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, b) = get_time_pair(&server, "main");
    let mut observer = subscribe(&server, &f.session_id, &b.session_key, json!({}));
    observer.wait_head(WAIT);
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_s", "name": "lookup", "input": {}}),
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let first_leg = read_events_until(&mut observer, "server.message.send");
    assert_eq!(
        first_leg.last().unwrap()["payload"]["content"][1]["dispatch"],
        "client"
    );

    std::thread::sleep(Duration::from_millis(1200));
    mock.push(Reply::text("B's answer"));
    let (notes, t) = send(&server, &f.session_id, &b, json!("taking over"));
    let evs = result_events(&t);
    // C-122: neither the reclaimer's stream nor its result.events carry it.
    assert!(error_with_reason(&evs, "driver_turn_abandoned").is_none());
    assert!(error_with_reason(&note_events(&notes), "driver_turn_abandoned").is_none());
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
    // C-121: synthetic results (server result kept) before B's content.
    let mcp_result = json!({"type": "tool_result", "tool_use_id": "tu_s", "is_error": true,
        "content": [{"type": "text", "text": "MCP error: no MCP server is configured for tool 'lookup'"}]});
    assert_eq!(
        evs[0]["payload"],
        json!({"role": "user", "content": [
            mcp_result,
            {"type": "tool_result", "tool_use_id": "tu_c", "content": ABANDONED, "is_error": true},
            {"type": "text", "text": "taking over"}
        ]})
    );
    assert_eq!(evs[0]["client_key_id"], json!(b.key_id));
    assert_eq!(evs[1]["payload"]["tool_use_id"], "tu_c");
    // The observer sees the abandonment, attributed to the owner, right
    // before B's turn.
    let seen = read_events_until(&mut observer, "server.message.send");
    assert_eq!(seen[0]["event_type"], "session.error");
    assert_eq!(
        seen[0]["payload"],
        json!({"reason": "driver_turn_abandoned", "owner_client_key_id": f.a.key_id})
    );
    assert_eq!(seen[0]["client_key_id"], json!(f.a.key_id));
    assert_eq!(ids(&seen[1..]), ids(&evs));
    assert_eq!(text_of(&t["result"]["message"]), "B's answer");
    assert_eq!(admin_state(&server, &f.session_id), "open");

    // The old owner's late results now find no pause.
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

#[test]
fn c123_late_owner_resumes_when_nobody_else_arrived() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, _b) = get_time_pair(&server, "main");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    std::thread::sleep(Duration::from_millis(1300));
    mock.push(Reply::text("late but fine"));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    let evs = result_events(&t);
    assert_eq!(text_of(&t["result"]["message"]), "late but fine");
    assert_eq!(
        evs[0]["payload"]["content"],
        json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}])
    );
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(error_with_reason(&log, "driver_turn_abandoned").is_none());
}

#[test]
fn c125_queued_send_fails_when_the_session_errored_meanwhile() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push(Reply::status(500, "down").delayed(Duration::from_millis(500)));
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("A"));
    mock.wait_requests(1, WAIT);
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B"));
    assert_silent(&mut sb, Duration::from_millis(150));
    let (_, ta) = finish(&mut sa);
    assert!(error_with_reason(&result_events(&ta), "all_providers_failed").is_some());
    let (notes, tb) = finish(&mut sb);
    assert!(notes.is_empty(), "{notes:?}");
    assert_rpc_error(&tb, -32000, "session is error, not open");
    assert_eq!(mock.request_count(), 1);
    // B recorded nothing.
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(of_type(&log, "client.message.send").len(), 1);
}

#[test]
fn queued_send_fails_when_the_session_is_closed_meanwhile() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push(Reply::text("A").delayed(Duration::from_millis(500)));
    // A holds the gate (its stream is kept open but not read here).
    let _sa = send_stream(&server, &f.session_id, &f.a, json!("A"));
    mock.wait_requests(1, WAIT);
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B"));
    assert_silent(&mut sb, Duration::from_millis(100));
    server
        .client()
        .bearer(&b.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    let (_, tb) = finish(&mut sb);
    assert_rpc_error(&tb, -32000, "session is closed, not open");
    assert_eq!(mock.request_count(), 1);
}

/// DELETE drops the session's broadcast channel, "ending every live
/// stream" (spec 01 §4.3 step 2, §5.4), which includes the gate holder's
/// `sendMessage` stream, and tears down the turn gate: the closed session
/// gains no events after its `session.close` (spec 02 §3: terminal).
#[test]
fn close_ends_the_in_flight_turn_stream_and_logs_nothing_after_close() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::text("too late").delayed(Duration::from_millis(500)));
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("A"));
    mock.wait_requests(1, WAIT);
    let before = read_events(&mut sa, 1);
    assert_eq!(before[0]["event_type"], "provider.request");
    server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    let (notes, terminal) = sa.collect_until_terminal(Duration::from_secs(2));
    // `session.close` itself is published before the channel is dropped
    // and may be forwarded; then the stream ends without a terminal frame.
    assert!(
        terminal.is_none()
            && types(&note_events(&notes))
                .iter()
                .all(|t| t == "session.close"),
        "the stream ends at close: notes {notes:?} terminal {terminal:?}"
    );
    assert!(sa.is_finished());
    std::thread::sleep(Duration::from_millis(700));
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(
        log.last().unwrap()["event_type"],
        "session.close",
        "nothing is logged after close: {:?}",
        types(&log)
    );
}

/// Spec 01 §8.4 step 4 / §10 note 7: a timeout retirement whose message
/// carries `tool_result` blocks, or content that is neither string nor
/// array, is merge-invalid and errors the whole session; an empty string
/// retires with the synthetic results only.
#[test]
fn malformed_retirement_messages_error_the_session() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "0")]);
    let cases: Vec<(Value, Option<&str>)> = vec![
        (
            json!([tool_result("tu_1", "mine")]),
            Some("timed-out replacement message must not contain tool_result blocks"),
        ),
        (
            json!(5),
            Some("abandonment message content must be a string or content-block array"),
        ),
        (json!(""), None),
    ];
    for (content, reason) in cases {
        let (f, b) = get_time_pair(&server, "main");
        mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
        send(&server, &f.session_id, &f.a, json!("time?"));
        let (_, t) = send(&server, &f.session_id, &b, content.clone());
        let log = events(&server, &f.session_id, &f.a.session_key);
        // The abandonment is logged either way (it precedes the merge).
        assert!(error_with_reason(&log, "driver_turn_abandoned").is_some());
        match reason {
            Some(reason) => {
                assert_rpc_error(&t, -32000, &format!("tool result merge invalid: {reason}"));
                let err = error_with_reason(&log, "tool_result_merge_invalid").unwrap();
                assert_eq!(err["payload"]["detail"], reason);
                assert_eq!(err["client_key_id"], json!(b.key_id));
                assert_eq!(admin_state(&server, &f.session_id), "error");
                assert!(of_type(&log, "client.message.send").len() == 1, "{content}");
            }
            None => {
                assert!(t.get("result").is_some(), "{t}");
                assert_eq!(
                    result_events(&t)[0]["payload"]["content"],
                    json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": ABANDONED, "is_error": true}])
                );
                assert_eq!(admin_state(&server, &f.session_id), "open");
            }
        }
    }
}

/// C-125 via a pause: a driver queued behind a live pause fails the
/// post-gate state check when the owner's continuation errors the session.
#[test]
fn c125_waiter_behind_a_pause_fails_when_the_resume_errors_the_session() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "30")]);
    let (f, b) = get_time_pair(&server, "main");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let mut sb = send_stream(&server, &f.session_id, &b, json!("B"));
    assert_silent(&mut sb, Duration::from_millis(200));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("nope", "x")]),
    );
    assert_eq!(t["error"]["code"], -32000, "{t}");
    let (notes, tb) = finish(&mut sb);
    assert!(notes.is_empty(), "{notes:?}");
    assert_rpc_error(&tb, -32000, "session is error, not open");
    assert_eq!(mock.request_count(), 1);
}

/// A queued waiter that disconnects is skipped; the next one is admitted.
#[test]
fn disconnected_waiter_is_skipped() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push_all([
        Reply::text("A").delayed(Duration::from_millis(400)),
        Reply::text("A again"),
    ]);
    let mut sa = send_stream(&server, &f.session_id, &f.a, json!("A"));
    mock.wait_requests(1, WAIT);
    let sb = send_stream(&server, &f.session_id, &b, json!("B never runs"));
    std::thread::sleep(Duration::from_millis(50));
    let mut sa2 = send_stream(&server, &f.session_id, &f.a, json!("A2"));
    std::thread::sleep(Duration::from_millis(50));
    sb.disconnect();
    finish(&mut sa);
    let (_, t) = finish(&mut sa2);
    assert_eq!(text_of(&t["result"]["message"]), "A again");
    let log = events(&server, &f.session_id, &f.a.session_key);
    let sent: Vec<Value> = of_type(&log, "client.message.send")
        .iter()
        .map(|e| e["payload"]["content"].clone())
        .collect();
    assert_eq!(
        sent,
        vec![json!("A"), json!("A2")],
        "B left the queue without a trace"
    );
}

/// The gate is per session: a turn held on one session does not delay
/// another session's turn.
#[test]
fn gates_are_per_session() {
    let (mock, server) = anthropic_server(&[]);
    let x = open_registered(&server, "main", &[], &[], json!({}));
    let y = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::text("slow X").delayed(Duration::from_millis(800)));
    let mut sx = send_stream(&server, &x.session_id, &x.a, json!("X"));
    mock.wait_requests(1, WAIT);
    let started = Instant::now();
    mock.push(Reply::text("fast Y"));
    let (_, t) = send(&server, &y.session_id, &y.a, json!("Y"));
    assert_eq!(text_of(&t["result"]["message"]), "fast Y");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    let (_, tx) = finish(&mut sx);
    assert_eq!(text_of(&tx["result"]["message"]), "slow X");
}
