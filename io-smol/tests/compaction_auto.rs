//! Automatic compaction over the real binary (spec 07 §3; checklist
//! C-179…C-182, C-184, C-186), including a crossing observed before a pause
//! (§3.2).

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{Reply, Server};

const PREAMBLE: &str = "The earlier part of this conversation was compacted. A summary follows.";
const COMPACTION_TRIO: [&str; 6] = [
    "session.compaction.started",
    "provider.request",
    "provider.response",
    "server.message.send",
    "server.message.send",
    "session.compaction.completed",
];

/// An auto session (`size` 1000) on the `main` Anthropic mock provider.
fn auto_session(server: &Server, allowed: &[&str], extra: Value) -> Fixture {
    let mut body = json!({"compaction": {"mode": "auto", "size": 1000}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            body[k] = v;
        }
    }
    open_registered(server, "main", &[], allowed, body)
}

/// The compaction part of a turn's events (after its server.message.send).
fn compaction_part(evs: &[Value]) -> Vec<Value> {
    match evs
        .iter()
        .position(|e| e["event_type"] == "session.compaction.started")
    {
        Some(i) => evs[i..].to_vec(),
        None => Vec::new(),
    }
}

#[test]
fn c179_usage_above_size_compacts_inline_after_the_turn() {
    let (mock, server) = anthropic_server(&[]);
    let f = auto_session(&server, &[], json!({}));
    mock.push_all([
        Reply::text("the answer").with_usage(990, 11),
        Reply::text("AUTO SUMMARY").with_usage(300, 40),
    ]);
    let (notes, t) = send(&server, &f.session_id, &f.a, json!("big question"));
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
        [
            &[
                "client.message.send",
                "provider.request",
                "provider.response",
                "server.message.send"
            ][..],
            &COMPACTION_TRIO[..]
        ]
        .concat()
    );
    // The turn's own answer is still the result message.
    assert_eq!(
        t["result"]["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "the answer"}]})
    );
    let part = compaction_part(&evs);
    assert_eq!(
        part[0]["payload"],
        json!({"trigger": "auto", "reason": "token_threshold", "token_count": 1001, "threshold_tokens": 1000})
    );
    assert_eq!(part[1]["payload"]["purpose"], "compaction");
    assert_eq!(part[1]["payload"]["max_tokens"], 4096);
    assert_eq!(part[1]["payload"]["tools"], json!([]));
    assert_eq!(part[3]["payload"]["synthetic"], "compaction_preamble");
    assert_eq!(part[4]["payload"]["content"][0]["text"], "AUTO SUMMARY");
    assert_eq!(part[5]["payload"]["compacted_message_count"], 2);
    assert_eq!(part[5]["payload"]["input_tokens"], 300);
    assert_eq!(part[5]["payload"]["summary_tokens"], 40);
    for e in &evs {
        assert_eq!(e["client_key_id"], json!(f.a.key_id));
    }
    // Everything was streamed too (minus the sender's own input).
    assert_eq!(ids(&note_events(&notes)), ids(&evs[1..]));

    // The next turn starts from the summary.
    let (_, t) = send(&server, &f.session_id, &f.a, json!("next"));
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"][0]["text"], PREAMBLE);
    assert_eq!(req["messages"][1]["content"][0]["text"], "AUTO SUMMARY");
    assert_eq!(req["messages"].as_array().unwrap().len(), 3);
    // Default usage (15) is below the threshold: no second compaction.
    assert!(compaction_part(&result_events(&t)).is_empty());
}

#[test]
fn c180_c181_exactly_at_size_or_missing_usage_does_not_trigger() {
    let (mock, server) = anthropic_server(&[]);
    let f = auto_session(&server, &[], json!({}));
    mock.push_all([
        Reply::text("equal").with_usage(995, 5),
        Reply::text("no usage").without_usage(),
        Reply::json(json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "half"}],
                           "stop_reason": "end_turn", "usage": {"input_tokens": 5000}})),
    ]);
    for msg in ["a", "b", "c"] {
        let (_, t) = send(&server, &f.session_id, &f.a, json!(msg));
        let evs = result_events(&t);
        assert_eq!(evs.len(), 4, "{:?}", types(&evs));
    }
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.started").is_empty());
    assert_eq!(mock.request_count(), 3);
}

#[test]
fn c182_c184_failed_auto_compaction_backs_off_then_retries_higher() {
    let (mock, server) = anthropic_server(&[]);
    let f = auto_session(&server, &[], json!({}));
    // Turn 1 crosses (1500); its compaction fails.
    mock.push_all([
        Reply::text("turn one").with_usage(1400, 100),
        Reply::status(500, "compaction provider down"),
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("one"));
    assert_eq!(
        text_of(&t["result"]["message"]),
        "turn one",
        "the turn result is intact"
    );
    let evs = result_events(&t);
    let part = compaction_part(&evs);
    assert_eq!(
        types(&part),
        vec![
            "session.compaction.started",
            "provider.request",
            "provider.response"
        ]
    );
    assert_eq!(part[0]["payload"]["reason"], "token_threshold");
    assert!(
        error_with_reason(&evs, "provider_call_failed").is_none(),
        "C-184"
    );
    assert_eq!(admin_state(&server, &f.session_id), "open");

    // Turn 2 with an equal count: suppressed.
    mock.push(Reply::text("turn two").with_usage(1400, 100));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("two"));
    assert!(
        compaction_part(&result_events(&t)).is_empty(),
        "equal count is suppressed"
    );
    // Turn 3 with a lower but still crossing count: suppressed.
    mock.push(Reply::text("turn three").with_usage(1200, 0));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("three"));
    assert!(compaction_part(&result_events(&t)).is_empty());
    // Turn 4 higher: retry_after_failure, and it succeeds.
    mock.push_all([
        Reply::text("turn four").with_usage(1600, 1),
        Reply::text("RETRIED SUMMARY"),
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("four"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(types(&part), COMPACTION_TRIO.to_vec());
    assert_eq!(
        part[0]["payload"],
        json!({"trigger": "auto", "reason": "retry_after_failure", "token_count": 1601, "threshold_tokens": 1000})
    );
    // Success cleared the backoff: the next crossing is a plain trigger,
    // even at a lower count.
    mock.push_all([
        Reply::text("turn five").with_usage(1001, 0),
        Reply::text("S"),
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("five"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(part[0]["payload"]["reason"], "token_threshold");
    assert_eq!(part[0]["payload"]["token_count"], 1001);
}

#[test]
fn c182_failed_auto_then_manual_compaction_clears_the_backoff() {
    let (mock, server) = anthropic_server(&[]);
    let f = auto_session(&server, &[], json!({}));
    mock.push_all([
        Reply::text("t1").with_usage(2000, 0),
        Reply::text("   "), // empty summary: auto attempt fails
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("one"));
    assert_eq!(types(&compaction_part(&result_events(&t))).len(), 3);
    // Manual compaction ignores the backoff and clears it on success.
    mock.push(Reply::text("MANUAL"));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.compact",
        json!({}),
    );
    assert_eq!(t["result"]["event_type"], "session.compaction.completed");
    mock.push_all([Reply::text("t2").with_usage(2000, 0), Reply::text("AUTO")]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("two"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(types(&part), COMPACTION_TRIO.to_vec());
    assert_eq!(part[0]["payload"]["reason"], "token_threshold");
}

/// Spec 07 §3.2: the crossing of the call that paused is parked with the
/// pause and honoured when the resumed turn completes, even though the
/// final call's usage is low.
#[test]
fn crossing_before_a_pause_is_honoured_after_the_resume() {
    let (mock, server) = anthropic_server(&[("BAE_TURN_TIMEOUT", "30")]);
    let f = auto_session(&server, &["get_time"], json!({"tools": [tool("get_time")]}));
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})).with_usage(1500, 20));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("time?"));
    assert!(
        compaction_part(&result_events(&t)).is_empty(),
        "never on a Paused outcome"
    );
    mock.push_all([
        Reply::text("noon").with_usage(10, 1),
        Reply::text("SUMMARY AFTER PAUSE"),
    ]);
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "noon");
    let part = compaction_part(&result_events(&t));
    assert_eq!(types(&part), COMPACTION_TRIO.to_vec());
    assert_eq!(
        part[0]["payload"],
        json!({"trigger": "auto", "reason": "token_threshold", "token_count": 1520, "threshold_tokens": 1000})
    );
    // The summary covered the whole exchange including the tool round.
    assert_eq!(part[5]["payload"]["compacted_message_count"], 4);
}

#[test]
fn c186_auto_summary_without_usage_commits_null_tokens() {
    let (mock, server) = anthropic_server(&[]);
    let f = auto_session(&server, &[], json!({}));
    mock.push_all([
        Reply::text("answer").with_usage(1000, 1),
        Reply::text("SUMMARY").without_usage(),
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("q"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(types(&part), COMPACTION_TRIO.to_vec());
    assert_eq!(part[5]["payload"]["input_tokens"], Value::Null);
    assert_eq!(part[5]["payload"]["summary_tokens"], Value::Null);
}
