//! Idle sessions give their cached provider-facing history back
//! (`BAE_HISTORY_CACHE_BYTES`, `BAE_HISTORY_IDLE`): the next turn rebuilds
//! it from the log, and nothing a client sees changes. Each test runs the
//! same timeline with the cache kept and with it dropped, and compares what
//! the provider was sent.
//!
//! Every test runs with the configured residency ([`Harness::as_configured`],
//! not `BAE_TEST_RESIDENT_SESSIONS`): they count the history loads and
//! timers of sessions that stay in memory, and an evicted session drops its
//! cached history by design (it is read back on its next turn, which
//! `residency_flows.rs` covers) and arms the eviction pass's retry timer.

mod common;

use common::*;
use engine::history_cache::Limits;
use engine::{Config, StoreRead};
use proto::wire::EventType;
use serde_json::{json, Value};

fn with_cache(budget_bytes: usize, idle_ms: u64) -> Config {
    Config {
        history_cache: Limits {
            budget_bytes,
            idle_ms,
        },
        ..config()
    }
}

/// A cache that never drops anything within a test's timeline.
fn kept() -> Config {
    with_cache(usize::MAX, u64::MAX)
}

/// History loads the engine has started: each begins by asking for the
/// newest compaction.
fn history_loads(h: &Harness) -> usize {
    h.reads_seen
        .iter()
        .filter(|r| {
            matches!(
                r,
                StoreRead::LatestOfType {
                    event_type: EventType::SessionCompactionCompleted,
                    ..
                }
            )
        })
        .count()
}

fn send(h: &mut Harness, sid: &str, key: &str, content: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "session.sendMessage", "params": {"message": {"content": content}}});
    let frames = h.rpc(sid, key, &call);
    frames.last().cloned().unwrap_or(Value::Null)
}

/// The `provider.request` payloads of a terminal result's events.
fn requests(result: &Value) -> Vec<Value> {
    (result["result"]["events"].as_array().into_iter().flatten())
        .filter(|e| e["event_type"] == "provider.request")
        .map(|e| e["payload"].clone())
        .collect()
}

/// Three text turns with `gap_ms` of quiet between them; the provider
/// requests of each, and how many history loads the engine made.
fn three_turns(config: Config, gap_ms: u64) -> (Vec<Value>, usize) {
    let mut h = Harness::as_configured(config);
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    let mut sent = Vec::new();
    for (i, text) in ["first", "second", "third"].into_iter().enumerate() {
        if i > 0 {
            h.advance(gap_ms);
        }
        h.replies.push_back(anthropic_text(&format!("answer {i}")));
        let done = send(&mut h, &sid, &skey, json!(text));
        assert!(done["result"].is_object(), "{done}");
        sent.extend(requests(&done));
    }
    (sent, history_loads(&h))
}

#[test]
fn an_idle_sessions_history_is_read_back_and_the_provider_sees_the_same() {
    let (warm, warm_loads) = three_turns(kept(), 60_000);
    assert_eq!(
        warm_loads, 0,
        "a new session's history starts empty, no read"
    );
    let (cold, cold_loads) = three_turns(with_cache(usize::MAX, 10_000), 10_001);
    assert_eq!(cold_loads, 2, "idle 10 s: turns two and three read history");
    assert_eq!(cold, warm);
    let last = &cold[2]["messages"];
    assert_eq!(last.as_array().map(Vec::len), Some(5), "{last}");
    assert_eq!(last[4]["content"], "third");
}

#[test]
fn before_the_idle_time_the_cache_is_kept() {
    let (_, loads) = three_turns(with_cache(usize::MAX, 10_000), 9_999);
    assert_eq!(loads, 0);
}

#[test]
fn over_budget_an_idle_history_goes_at_once() {
    let (warm, _) = three_turns(kept(), 1);
    let (cold, loads) = three_turns(with_cache(0, u64::MAX), 1);
    assert_eq!(loads, 2);
    assert_eq!(cold, warm);
}

#[test]
fn a_paused_turn_keeps_its_history_however_long_it_waits() {
    let mut h = Harness::as_configured(with_cache(0, 0));
    let (_key, sid, skey) = h.open_session(
        &["get_time"],
        json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]}),
    );
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}
    ])));
    let paused = send(&mut h, &sid, &skey, json!("time?"));
    assert_eq!(
        paused["result"]["message"]["content"][0]["dispatch"],
        "client"
    );
    h.advance(60_000);
    h.replies.push_back(anthropic_text("noon"));
    let done = send(
        &mut h,
        &sid,
        &skey,
        json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}]),
    );
    assert_eq!(done["result"]["message"]["content"][0]["text"], "noon");
    assert_eq!(history_loads(&h), 0, "the paused turn's history stayed");
    let msgs = &requests(&done)[0]["messages"];
    assert_eq!(msgs.as_array().map(Vec::len), Some(3), "{msgs}");
    // Once the turn is over the session is idle, and the budget of 0
    // drops it: the next turn reads it back, whole.
    h.replies.push_back(anthropic_text("later"));
    let next = send(&mut h, &sid, &skey, json!("and now?"));
    assert_eq!(history_loads(&h), 1);
    let msgs = &requests(&next)[0]["messages"];
    assert_eq!(msgs.as_array().map(Vec::len), Some(5), "{msgs}");
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "tu_1");
}

/// The manual compaction's `token_count` is the newest usage, which a
/// dropped cache must read back too; and the turn after a compaction
/// starts from the preamble and summary, as after a restart.
#[test]
fn compaction_bound_and_newest_usage_survive_a_dropped_cache() {
    let run = |config: Config| {
        let mut h = Harness::as_configured(config);
        let (_key, sid, skey) = h.open_session(
            &[],
            json!({"compaction": {"mode": "client", "prompt": "keep"}}),
        );
        h.register_driver(&sid, &skey);
        h.replies.push_back(anthropic_text("first answer"));
        send(&mut h, &sid, &skey, json!("first"));
        h.advance(20_000);
        h.replies.push_back(anthropic_text("the summary"));
        let frames = h.rpc(
            &sid,
            &skey,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "session.compact", "params": {}}),
        );
        let started = frames[0]["params"]["payload"].clone();
        h.advance(20_000);
        h.replies.push_back(anthropic_text("after"));
        let next = send(&mut h, &sid, &skey, json!("next"));
        (started, requests(&next), history_loads(&h))
    };
    let (warm_started, warm, warm_loads) = run(kept());
    let (cold_started, cold, cold_loads) = run(with_cache(usize::MAX, 10_000));
    assert_eq!((warm_loads, cold_loads), (0, 2));
    assert_eq!(cold_started, warm_started);
    assert_eq!(cold_started["token_count"], 15);
    assert_eq!(cold, warm);
    assert_eq!(cold[0]["messages"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_closed_session_leaves_nothing_cached() {
    let mut h = Harness::as_configured(with_cache(usize::MAX, 10_000));
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("hi"));
    send(&mut h, &sid, &skey, json!("hello"));
    let (status, _) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &skey, None);
    assert!((200..300).contains(&status), "{status}");
    // No idle timer is left for the closed session.
    assert_eq!(h.engine.poll_timeout(), None);
}
