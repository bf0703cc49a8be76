//! The FIFO turn gate with paused turns in-process (spec 01 §7, §8;
//! checklist C-118…C-125), on virtual time: a turn is held open by not
//! answering its provider call yet, pauses expire by `advance`. Moved from
//! `io-smol/tests/live_gate.rs`, which keeps the FIFO order over real
//! sockets and the driver's timer admitting a waiter at the deadline.

mod common;

use common::*;
use engine::Input;
use serde_json::{json, Value};

const ABANDONED: &str = "Client tool call was abandoned before returning a result.";

fn with_timeout(ms: u64) -> engine::Config {
    engine::Config {
        turn_timeout_ms: ms,
        ..config()
    }
}

/// Driver A (declaring the client tool `get_time`) and a second driver B.
fn get_time_pair(h: &mut Harness) -> (Live, Driver) {
    let f = h.open_driver(
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let b = h.join_driver(&f, json!({}));
    (f, b)
}

fn tool_use(id: &str, name: &str) -> engine::ProviderReply {
    anthropic_tool_use(json!([{"type": "tool_use", "id": id, "name": name, "input": {}}]))
}

fn provider_500() -> engine::ProviderReply {
    engine::ProviderReply::Http {
        status: 500,
        body: b"down".to_vec(),
        advice: Default::default(),
    }
}

/// Position of the event with `id` in `log`.
fn pos(log: &[Value], id: &Value) -> usize {
    log.iter()
        .position(|e| &e["id"] == id)
        .unwrap_or_else(|| panic!("event {id} not in the log"))
}

fn admin_state(h: &mut Harness, sid: &str) -> String {
    h.admin_session(sid)["state"].as_str().unwrap().to_string()
}

#[test]
fn c118_c119_c124_queued_drivers_are_silent_then_run_in_fifo_order() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let sa = h.send_start(&f.sid, &f.a.session_key, json!("A first"));
    assert_eq!(h.calls.len(), 1, "A's turn is running");
    let sb = h.send_start(&f.sid, &b.session_key, json!("B second"));
    // C-124: join + registerDriver answer while A's turn is in flight.
    let c = h.join_driver(&f, json!({}));
    let sc = h.send_start(&f.sid, &c.session_key, json!("C third"));
    h.advance(5_000);
    // C-118: both queued streams stay silent while A runs.
    assert!(h.frames(sb).is_empty() && h.frames(sc).is_empty());
    assert_eq!(h.calls.len(), 1);
    for t in ["A done", "B done", "C done"] {
        h.replies.push_back(anthropic_text(t));
    }
    h.pump();
    let (_, ta) = h.finished(sa);
    let (nb, tb) = h.finished(sb);
    let (_, tc) = h.finished(sc);
    assert_eq!(text_of(&ta["result"]["message"]), "A done");
    assert_eq!(text_of(&tb["result"]["message"]), "B done");
    assert_eq!(text_of(&tc["result"]["message"]), "C done");
    // C-119: B's events all follow A's server.message.send; C's follow B's.
    let log = h.events(&f.sid, &f.a.session_key);
    let a_evs = result_events(&ta);
    assert_eq!(a_evs.last().unwrap()["event_type"], "server.message.send");
    let a_end = pos(&log, &a_evs.last().unwrap()["id"]);
    let b_evs = result_events(&tb);
    assert!(b_evs.iter().all(|e| pos(&log, &e["id"]) > a_end));
    let b_end = pos(&log, &b_evs.last().unwrap()["id"]);
    assert!(result_events(&tc)
        .iter()
        .all(|e| pos(&log, &e["id"]) > b_end));
    // B's stream carried only B's turn (it subscribes once it holds the gate).
    assert_eq!(ids(&note_events(&nb)), ids(&b_evs[1..]));
    // The provider saw B's history including A's completed exchange.
    let body: Value = serde_json::from_slice(&h.call_bodies[1]).unwrap();
    assert_eq!(body["messages"].as_array().unwrap().len(), 3);
    assert_eq!(body["messages"][2]["content"], "B second");
}

#[test]
fn c120_owner_resumes_a_live_pause_while_another_driver_queues() {
    let mut h = Harness::new(with_timeout(30_000));
    let (f, b) = get_time_pair(&mut h);
    h.replies.push_back(tool_use("tu_1", "get_time"));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("time?"));
    assert_eq!(t["result"]["message"]["content"][0]["dispatch"], "client");
    // B arrives during the live pause: queued, silent.
    let sb = h.send_start(&f.sid, &b.session_key, json!("B here"));
    h.advance(300);
    assert!(h.frames(sb).is_empty());
    assert_eq!(h.call_bodies.len(), 1);
    // The owner resumes without queuing behind B.
    h.replies.push_back(anthropic_text("noon"));
    h.replies.push_back(anthropic_text("hello B"));
    let (_, ta) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&ta["result"]["message"]), "noon");
    assert!(error_with_reason(&result_events(&ta), "driver_turn_abandoned").is_none());
    let (_, tb) = h.finished(sb);
    assert_eq!(text_of(&tb["result"]["message"]), "hello B");
    let log = h.events(&f.sid, &f.a.session_key);
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
    let mut h = Harness::new(with_timeout(1_000));
    let (f, b) = get_time_pair(&mut h);
    let observer = h.rpc_start(
        &f.sid,
        &b.session_key,
        &call(1, "session.subscribe", json!({})),
    );
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_s", "name": "lookup", "input": {}},
        {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}},
    ])));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    let first_leg = note_events(&h.frames(observer));
    let last = first_leg.last().unwrap();
    assert_eq!(last["event_type"], "server.message.send");
    assert_eq!(last["payload"]["content"][1]["dispatch"], "client");
    h.advance(1_200);
    h.replies.push_back(anthropic_text("B's answer"));
    let (notes, t) = h.send(&f.sid, &b.session_key, json!("taking over"));
    let evs = result_events(&t);
    // C-122: neither the reclaimer's stream nor its result.events carry it.
    assert!(error_with_reason(&evs, "driver_turn_abandoned").is_none());
    assert!(error_with_reason(&note_events(&notes), "driver_turn_abandoned").is_none());
    assert_eq!(
        types_of(&evs),
        [
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
    let seen = note_events(&h.frames(observer)[first_leg.len()..]);
    assert_eq!(seen[0]["event_type"], "session.error");
    assert_eq!(
        seen[0]["payload"],
        json!({"reason": "driver_turn_abandoned", "owner_client_key_id": f.a.key_id})
    );
    assert_eq!(seen[0]["client_key_id"], json!(f.a.key_id));
    assert_eq!(ids(&seen[1..]), ids(&evs));
    assert_eq!(text_of(&t["result"]["message"]), "B's answer");
    assert_eq!(admin_state(&mut h, &f.sid), "open");
    // The old owner's late results now find no pause.
    let (_, t) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([tool_result("tu_c", "12:00")]),
    );
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
}

/// Project decision (spec 01 §10 note 2): a waiter queued before the
/// deadline is admitted by the engine's own timer and performs the
/// retirement; the abandonment is logged right before its turn.
#[test]
fn c121_c122_engine_timer_admits_the_queued_waiter_at_the_deadline() {
    let mut h = Harness::new(with_timeout(1_000));
    let (f, b) = get_time_pair(&mut h);
    let observer = h.rpc_start(
        &f.sid,
        &b.session_key,
        &call(1, "session.subscribe", json!({})),
    );
    h.replies.push_back(tool_use("tu_1", "get_time"));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    h.replies.push_back(anthropic_text("B after timeout"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("waiting"));
    h.advance(900);
    assert!(h.frames(sb).is_empty(), "still within the owner's timeout");
    h.advance(200);
    let (notes, t) = h.finished(sb);
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
    let log = h.events(&f.sid, &f.a.session_key);
    let err = error_with_reason(&log, "driver_turn_abandoned").expect("logged");
    assert_eq!(err["client_key_id"], json!(f.a.key_id));
    assert_eq!(pos(&log, &err["id"]) + 1, pos(&log, &evs[0]["id"]));
    let seen = note_events(&h.frames(observer));
    assert!(seen.iter().any(|e| e["id"] == err["id"]), "observer saw it");
}

#[test]
fn c123_late_owner_resumes_when_nobody_else_arrived() {
    let mut h = Harness::new(with_timeout(1_000));
    let (f, _b) = get_time_pair(&mut h);
    h.replies.push_back(tool_use("tu_1", "get_time"));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    h.advance(1_300);
    h.replies.push_back(anthropic_text("late but fine"));
    let (_, t) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "late but fine");
    assert_eq!(
        result_events(&t)[0]["payload"]["content"],
        json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}])
    );
    let log = h.events(&f.sid, &f.a.session_key);
    assert!(error_with_reason(&log, "driver_turn_abandoned").is_none());
}

#[test]
fn c125_queued_send_fails_when_the_session_errored_meanwhile() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let sa = h.send_start(&f.sid, &f.a.session_key, json!("A"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("B"));
    assert!(h.frames(sb).is_empty());
    h.replies.push_back(provider_500());
    h.pump();
    let (_, ta) = h.finished(sa);
    assert!(error_with_reason(&result_events(&ta), "all_providers_failed").is_some());
    let (notes, tb) = h.finished(sb);
    assert!(notes.is_empty(), "{notes:?}");
    assert_rpc_error(&tb, -32000, "session is error, not open");
    assert_eq!(h.call_bodies.len(), 1);
    let log = h.events(&f.sid, &f.a.session_key);
    assert_eq!(
        of_type(&log, "client.message.send").len(),
        1,
        "B recorded nothing"
    );
}

#[test]
fn queued_send_fails_when_the_session_is_closed_meanwhile() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let _sa = h.send_start(&f.sid, &f.a.session_key, json!("A"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("B"));
    assert!(h.frames(sb).is_empty());
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &b.session_key, None).0, 200);
    let (_, tb) = h.finished(sb);
    assert_rpc_error(&tb, -32000, "session is closed, not open");
    assert_eq!(h.call_bodies.len(), 1);
}

/// DELETE ends every live stream of the session, the gate holder's
/// `sendMessage` stream included, and the closed session gains no events
/// after its `session.close` (spec 01 §4.3 step 2, §5.4; spec 02 §3).
#[test]
fn close_ends_the_in_flight_turn_stream_and_logs_nothing_after_close() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let sa = h.send_start(&f.sid, &f.a.session_key, json!("A"));
    assert_eq!(
        note_events(&h.frames(sa))[0]["event_type"],
        "provider.request"
    );
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &f.a.session_key, None).0, 200);
    let frames = h.frames(sa);
    assert!(
        frames.iter().all(|f| f.get("id").is_none()),
        "no terminal: {frames:?}"
    );
    let after: Vec<String> = types_of(&note_events(&frames[1..]));
    assert!(after.iter().all(|t| t == "session.close"), "{after:?}");
    assert!(h.sent[&sa].ends_with(b"0\r\n\r\n"), "stream ended");
    // The provider answers late: nothing more is logged.
    h.replies.push_back(anthropic_text("too late"));
    h.pump();
    h.advance(700);
    let log = h.events(&f.sid, &f.a.session_key);
    assert_eq!(
        log.last().unwrap()["event_type"],
        "session.close",
        "{:?}",
        types_of(&log)
    );
}

/// Spec 01 §8.4 step 4 / §10 note 7: a timeout retirement whose message
/// carries `tool_result` blocks, or content that is neither string nor
/// array, is merge-invalid and errors the session; an empty string
/// retires with the synthetic results only.
#[test]
fn malformed_retirement_messages_error_the_session() {
    let mut h = Harness::new(with_timeout(0));
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
        let (f, b) = get_time_pair(&mut h);
        h.replies.push_back(tool_use("tu_1", "get_time"));
        h.send(&f.sid, &f.a.session_key, json!("time?"));
        h.advance(1);
        // The retirement's own provider call (when the merge is valid).
        h.replies.push_back(anthropic_text("ok"));
        let (_, t) = h.send(&f.sid, &b.session_key, content.clone());
        h.replies.clear();
        let log = h.events(&f.sid, &f.a.session_key);
        // The abandonment is logged either way (it precedes the merge).
        assert!(error_with_reason(&log, "driver_turn_abandoned").is_some());
        match reason {
            Some(reason) => {
                assert_rpc_error(&t, -32000, &format!("tool result merge invalid: {reason}"));
                let err = error_with_reason(&log, "tool_result_merge_invalid").unwrap();
                assert_eq!(err["payload"]["detail"], reason);
                assert_eq!(err["client_key_id"], json!(b.key_id));
                assert_eq!(admin_state(&mut h, &f.sid), "error");
                assert_eq!(of_type(&log, "client.message.send").len(), 1, "{content}");
            }
            None => {
                assert!(t.get("result").is_some(), "{t}");
                assert_eq!(
                    result_events(&t)[0]["payload"]["content"],
                    json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": ABANDONED, "is_error": true}])
                );
                assert_eq!(admin_state(&mut h, &f.sid), "open");
            }
        }
    }
}

/// C-125 via a pause: a driver queued behind a live pause fails the
/// post-gate state check when the owner's continuation errors the session.
#[test]
fn c125_waiter_behind_a_pause_fails_when_the_resume_errors_the_session() {
    let mut h = Harness::new(with_timeout(30_000));
    let (f, b) = get_time_pair(&mut h);
    h.replies.push_back(tool_use("tu_1", "get_time"));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("B"));
    h.advance(200);
    assert!(h.frames(sb).is_empty());
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!([tool_result("nope", "x")]));
    assert_eq!(t["error"]["code"], -32000, "{t}");
    let (notes, tb) = h.finished(sb);
    assert!(notes.is_empty(), "{notes:?}");
    assert_rpc_error(&tb, -32000, "session is error, not open");
    assert_eq!(h.call_bodies.len(), 1);
}

/// A queued waiter that disconnects is skipped; the next one is admitted.
#[test]
fn disconnected_waiter_is_skipped() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let sa = h.send_start(&f.sid, &f.a.session_key, json!("A"));
    let sb = h.send_start(&f.sid, &b.session_key, json!("B never runs"));
    let sa2 = h.send_start(&f.sid, &f.a.session_key, json!("A2"));
    h.input(Input::Closed { conn: sb });
    h.replies.push_back(anthropic_text("A"));
    h.replies.push_back(anthropic_text("A again"));
    h.pump();
    h.finished(sa);
    let (_, t) = h.finished(sa2);
    assert_eq!(text_of(&t["result"]["message"]), "A again");
    let log = h.events(&f.sid, &f.a.session_key);
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
    let mut h = Harness::new(config());
    let x = h.open_driver("main", &[], &[], json!({}));
    let y = h.open_driver("main", &[], &[], json!({}));
    let sx = h.send_start(&x.sid, &x.a.session_key, json!("X"));
    let sy = h.send_start(&y.sid, &y.a.session_key, json!("Y"));
    assert_eq!(h.calls.len(), 2, "both sessions called the provider");
    // Answer Y's call first: Y finishes while X still waits.
    let x_call = h.calls.pop_front().unwrap();
    h.replies.push_back(anthropic_text("fast Y"));
    h.pump();
    let (_, t) = h.finished(sy);
    assert_eq!(text_of(&t["result"]["message"]), "fast Y");
    assert!(h.frames(sx).iter().all(|f| f.get("id").is_none()));
    h.input(Input::ProviderDone {
        call: x_call.id,
        reply: anthropic_text("slow X"),
    });
    let (_, tx) = h.finished(sx);
    assert_eq!(text_of(&tx["result"]["message"]), "slow X");
}
