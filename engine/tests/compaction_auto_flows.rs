//! Automatic compaction in-process (spec 07 §3; checklist C-179…C-182,
//! C-184, C-186), including a crossing observed before a pause (§3.2).
//! Moved from `io-smol/tests/compaction_auto.rs`, which keeps the inline
//! compaction after a turn on the mock provider's wire.

mod common;

use common::*;
use engine::ProviderReply;
use serde_json::{json, Value};

const PREAMBLE: &str = "The earlier part of this conversation was compacted. A summary follows.";
const COMPACTION_TRIO: [&str; 6] = [
    "session.compaction.started",
    "provider.request",
    "provider.response",
    "server.message.send",
    "server.message.send",
    "session.compaction.completed",
];

fn http(status: u16, body: Value) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

/// An Anthropic answer with `content` and `usage` (`Null`: none).
fn answer(content: Value, stop_reason: &str, usage: Value) -> ProviderReply {
    let mut b = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": content, "stop_reason": stop_reason});
    if !usage.is_null() {
        b["usage"] = usage;
    }
    http(200, b)
}

fn text(t: &str, input: u64, output: u64) -> ProviderReply {
    let usage = json!({"input_tokens": input, "output_tokens": output});
    answer(json!([{"type": "text", "text": t}]), "end_turn", usage)
}

fn text_without_usage(t: &str) -> ProviderReply {
    answer(
        json!([{"type": "text", "text": t}]),
        "end_turn",
        Value::Null,
    )
}

/// An auto session (`size` 1000) on `main`.
fn auto_session(h: &mut Harness, allowed: &[&str], extra: Value) -> Live {
    let mut body = json!({"compaction": {"mode": "auto", "size": 1000}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            body[k] = v;
        }
    }
    h.open_driver("main", &[], allowed, body)
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

fn send_with(h: &mut Harness, f: &Live, replies: Vec<ProviderReply>, content: Value) -> Value {
    h.replies.extend(replies);
    let (_, t) = h.send(&f.sid, &f.a.session_key, content);
    assert!(h.replies.is_empty(), "every scripted reply was used");
    t
}

#[test]
fn c179_usage_above_size_compacts_inline_after_the_turn() {
    let mut h = Harness::new(config());
    let f = auto_session(&mut h, &[], json!({}));
    h.replies.push_back(text("the answer", 990, 11));
    h.replies.push_back(text("AUTO SUMMARY", 300, 40));
    let (notes, t) = h.send(&f.sid, &f.a.session_key, json!("big question"));
    let evs = result_events(&t);
    let mut expected = vec![
        "client.message.send",
        "provider.request",
        "provider.response",
        "server.message.send",
    ];
    expected.extend(COMPACTION_TRIO);
    assert_eq!(types_of(&evs), expected);
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
    assert!(evs.iter().all(|e| e["client_key_id"] == json!(f.a.key_id)));
    assert_eq!(ids(&note_events(&notes)), ids(&evs[1..]));
    // The next turn starts from the summary; 15 tokens stay below.
    let t = send_with(&mut h, &f, vec![anthropic_text("ok")], json!("next"));
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"][0]["text"], PREAMBLE);
    assert_eq!(req["messages"][1]["content"][0]["text"], "AUTO SUMMARY");
    assert_eq!(req["messages"].as_array().unwrap().len(), 3);
    assert!(compaction_part(&result_events(&t)).is_empty());
}

#[test]
fn c180_c181_exactly_at_size_or_missing_usage_does_not_trigger() {
    let mut h = Harness::new(config());
    let f = auto_session(&mut h, &[], json!({}));
    let half = answer(
        json!([{"type": "text", "text": "half"}]),
        "end_turn",
        json!({"input_tokens": 5000}),
    );
    for (msg, reply) in [
        ("a", text("equal", 995, 5)),
        ("b", text_without_usage("no usage")),
        ("c", half),
    ] {
        let t = send_with(&mut h, &f, vec![reply], json!(msg));
        let evs = result_events(&t);
        assert_eq!(evs.len(), 4, "{:?}", types_of(&evs));
    }
    let log = h.events(&f.sid, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.started").is_empty());
    assert_eq!(h.call_bodies.len(), 3);
}

#[test]
fn c182_c184_failed_auto_compaction_backs_off_then_retries_higher() {
    let mut h = Harness::new(config());
    let f = auto_session(&mut h, &[], json!({}));
    // Turn 1 crosses (1500); its compaction fails.
    let down = http(500, json!({"error": "compaction provider down"}));
    let t = send_with(
        &mut h,
        &f,
        vec![text("turn one", 1400, 100), down],
        json!("one"),
    );
    assert_eq!(
        text_of(&t["result"]["message"]),
        "turn one",
        "the turn result is intact"
    );
    let evs = result_events(&t);
    let part = compaction_part(&evs);
    assert_eq!(
        types_of(&part),
        [
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
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    // An equal count, then a lower but still crossing one: suppressed.
    let t = send_with(&mut h, &f, vec![text("turn two", 1400, 100)], json!("two"));
    assert!(
        compaction_part(&result_events(&t)).is_empty(),
        "equal count is suppressed"
    );
    let t = send_with(
        &mut h,
        &f,
        vec![text("turn three", 1200, 0)],
        json!("three"),
    );
    assert!(compaction_part(&result_events(&t)).is_empty());
    // Higher: retry_after_failure, and it succeeds.
    let replies = vec![
        text("turn four", 1600, 1),
        anthropic_text("RETRIED SUMMARY"),
    ];
    let t = send_with(&mut h, &f, replies, json!("four"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(types_of(&part), COMPACTION_TRIO);
    assert_eq!(
        part[0]["payload"],
        json!({"trigger": "auto", "reason": "retry_after_failure", "token_count": 1601, "threshold_tokens": 1000})
    );
    // Success cleared the backoff: a plain trigger even at a lower count.
    let t = send_with(
        &mut h,
        &f,
        vec![text("turn five", 1001, 0), anthropic_text("S")],
        json!("five"),
    );
    let part = compaction_part(&result_events(&t));
    assert_eq!(part[0]["payload"]["reason"], "token_threshold");
    assert_eq!(part[0]["payload"]["token_count"], 1001);
}

#[test]
fn c182_failed_auto_then_manual_compaction_clears_the_backoff() {
    let mut h = Harness::new(config());
    let f = auto_session(&mut h, &[], json!({}));
    // An empty summary: the auto attempt fails.
    let t = send_with(
        &mut h,
        &f,
        vec![text("t1", 2000, 0), anthropic_text("   ")],
        json!("one"),
    );
    assert_eq!(compaction_part(&result_events(&t)).len(), 3);
    // Manual compaction ignores the backoff and clears it on success.
    h.replies.push_back(anthropic_text("MANUAL"));
    let conn = h.rpc_start(
        &f.sid,
        &f.a.session_key,
        &call(2, "session.compact", json!({})),
    );
    assert_eq!(
        h.finished(conn).1["result"]["event_type"],
        "session.compaction.completed"
    );
    let t = send_with(
        &mut h,
        &f,
        vec![text("t2", 2000, 0), anthropic_text("AUTO")],
        json!("two"),
    );
    let part = compaction_part(&result_events(&t));
    assert_eq!(types_of(&part), COMPACTION_TRIO);
    assert_eq!(part[0]["payload"]["reason"], "token_threshold");
}

/// Spec 07 §3.2: the crossing of the call that paused is parked with the
/// pause and honoured when the resumed turn completes, even though the
/// final call's usage is low.
#[test]
fn crossing_before_a_pause_is_honoured_after_the_resume() {
    let mut h = Harness::new(engine::Config {
        turn_timeout_ms: 30_000,
        ..config()
    });
    let f = auto_session(&mut h, &["get_time"], json!({"tools": [tool("get_time")]}));
    let pause = answer(
        json!([{"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}]),
        "tool_use",
        json!({"input_tokens": 1500, "output_tokens": 20}),
    );
    let t = send_with(&mut h, &f, vec![pause], json!("time?"));
    assert!(
        compaction_part(&result_events(&t)).is_empty(),
        "never on a Paused outcome"
    );
    let replies = vec![text("noon", 10, 1), anthropic_text("SUMMARY AFTER PAUSE")];
    let t = send_with(&mut h, &f, replies, json!([tool_result("tu_1", "12:00")]));
    assert_eq!(text_of(&t["result"]["message"]), "noon");
    let part = compaction_part(&result_events(&t));
    assert_eq!(types_of(&part), COMPACTION_TRIO);
    assert_eq!(
        part[0]["payload"],
        json!({"trigger": "auto", "reason": "token_threshold", "token_count": 1520, "threshold_tokens": 1000})
    );
    // The summary covered the whole exchange including the tool round.
    assert_eq!(part[5]["payload"]["compacted_message_count"], 4);
}

#[test]
fn c186_auto_summary_without_usage_commits_null_tokens() {
    let mut h = Harness::new(config());
    let f = auto_session(&mut h, &[], json!({}));
    let replies = vec![text("answer", 1000, 1), text_without_usage("SUMMARY")];
    let t = send_with(&mut h, &f, replies, json!("q"));
    let part = compaction_part(&result_events(&t));
    assert_eq!(types_of(&part), COMPACTION_TRIO);
    assert_eq!(part[5]["payload"]["input_tokens"], Value::Null);
    assert_eq!(part[5]["payload"]["summary_tokens"], Value::Null);
}
