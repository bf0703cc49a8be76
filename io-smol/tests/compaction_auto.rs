//! Automatic compaction over the real binary (spec 07 §3; checklist
//! C-179): the inline compaction after a turn on the mock provider's wire.
//! Thresholds, backoff, a crossing parked with a pause and missing usage
//! (C-180…C-182, C-184, C-186) are tested in-process in
//! `engine/tests/compaction_auto_flows.rs`.

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
