//! Provider retry policies in-process on virtual time (docs/extensions.md,
//! "Provider traffic"): an advised wait retried on the same entry, a wait
//! past the maximum going to the fallback at once, an HTTP-date advice,
//! and a cancel or a session close ending a retry's wait at once. Moved
//! from `io-smol/tests/traffic_retry.rs`, which keeps `Retry-After` read
//! from a real 429 (seconds and HTTP date).

mod common;

use common::*;
use engine::{ProviderEntry, ProviderReply, RetryPolicy};
use proto::provider::retry::RetryAdvice;
use serde_json::{json, Value};

/// `main` (with `retry`) and `backup`.
fn registry(retry: RetryPolicy) -> engine::Config {
    let base = config().providers.remove(0);
    engine::Config {
        providers: vec![
            ProviderEntry {
                name: "main".into(),
                model: "m".into(),
                retry: Some(retry),
                ..base.clone()
            },
            ProviderEntry {
                name: "backup".into(),
                model: "b".into(),
                ..base
            },
        ],
        ..config()
    }
}

fn policy(max_retries: u32, max_wait_ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        max_wait_ms,
        ..RetryPolicy::default()
    }
}

fn rate_limited(advice: RetryAdvice) -> ProviderReply {
    ProviderReply::Http {
        status: 429,
        body: br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
            .to_vec(),
        advice,
    }
}

fn payloads(evs: &[Value], event_type: &str) -> Vec<Value> {
    of_type(evs, event_type)
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect()
}

fn created_ms(e: &Value) -> u64 {
    proto::wire::time::parse_created_at(e["created_at"].as_str().unwrap()).unwrap()
}

#[test]
fn an_advised_wait_is_retried_on_the_same_entry_and_the_turn_completes() {
    let mut h = Harness::new(registry(policy(2, 5_000)));
    let f = h.open_driver("main", &["backup"], &[], json!({}));
    h.replies
        .push_back(rate_limited(RetryAdvice::AfterMs(1_000)));
    let turn = h.send_start(&f.sid, &f.a.session_key, json!("hi"));
    assert_eq!(h.call_bodies.len(), 1);
    h.advance(990);
    assert_eq!(h.call_bodies.len(), 1, "not before the advised second");
    h.replies.push_back(anthropic_text("after the wait"));
    h.advance(10);
    let (_, t) = h.finished(turn);
    assert_eq!(text_of(&t["result"]["message"]), "after the wait");
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
            "client.message.send",
            "provider.request",
            "provider.response",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    let reqs = payloads(&evs, "provider.request");
    assert!(reqs
        .iter()
        .all(|r| r["attempt"] == 0 && r["kind"] == "primary"));
    let resps = payloads(&evs, "provider.response");
    assert_eq!(resps[0]["status"], 429);
    assert_eq!(resps[0]["error"], "provider returned HTTP 429");
    assert_eq!(resps[1]["ok"], true);
    let failed_at = created_ms(&of_type(&evs, "provider.response")[0]);
    let retried_at = created_ms(&of_type(&evs, "provider.request")[1]);
    assert_eq!(retried_at - failed_at, 1_000);
    assert_eq!(h.call_bodies.len(), 2);
}

#[test]
fn an_advised_wait_past_the_maximum_goes_to_the_fallback_at_once() {
    let mut h = Harness::new(registry(policy(2, 2_000)));
    let f = h.open_driver("main", &["backup"], &[], json!({}));
    h.replies
        .push_back(rate_limited(RetryAdvice::AfterMs(30_000)));
    h.replies.push_back(anthropic_text("from backup"));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
    assert_eq!(text_of(&t["result"]["message"]), "from backup");
    let evs = result_events(&t);
    let reqs = payloads(&evs, "provider.request");
    assert_eq!(reqs[1]["kind"], "fallback");
    assert_eq!(reqs[1]["model"], "b");
    let err = error_with_reason(&evs, "provider_call_failed").expect("provider_call_failed");
    assert_eq!(err["payload"]["detail"], "provider returned HTTP 429");
}

#[test]
fn an_advised_instant_is_waited_for() {
    let mut h = Harness::new(registry(policy(2, 10_000)));
    let f = h.open_driver("main", &[], &[], json!({}));
    let at = h.now.unix.0 + 3_000;
    h.replies.push_back(rate_limited(RetryAdvice::AtUnixMs(at)));
    let turn = h.send_start(&f.sid, &f.a.session_key, json!("hi"));
    h.advance(2_900);
    assert_eq!(h.call_bodies.len(), 1, "still waiting for the instant");
    h.replies.push_back(anthropic_text("later"));
    h.advance(100);
    let (_, t) = h.finished(turn);
    assert_eq!(text_of(&t["result"]["message"]), "later");
    let evs = result_events(&t);
    assert_eq!(created_ms(&of_type(&evs, "provider.request")[1]), at);
}

/// A turn whose first attempt failed and whose retry waits 30 s.
fn waiting_turn(h: &mut Harness, sid: &str, key: &str) -> engine::ConnId {
    h.replies
        .push_back(rate_limited(RetryAdvice::AfterMs(30_000)));
    let conn = h.send_start(sid, key, json!("hi"));
    // The failure is logged before the wait starts.
    assert!(!of_type(&h.events(sid, key), "provider.response").is_empty());
    conn
}

#[test]
fn a_cancel_during_a_retry_wait_ends_it_at_once() {
    let mut h = Harness::new(registry(policy(2, 60_000)));
    let f = h.fix(&[]);
    let params = json!({"extensions": ["turn.cancel"]});
    let conn = h.rpc_start(&f.sid, &f.skey, &call(1, "session.registerDriver", params));
    assert_eq!(h.finished(conn).1["result"]["registered"], true);
    let turn = waiting_turn(&mut h, &f.sid, &f.skey);
    let conn = h.rpc_start(&f.sid, &f.skey, &call(2, "session.cancelTurn", json!({})));
    assert_eq!(
        h.finished(conn).1["result"],
        json!({"cancelled": true, "state": "running"})
    );
    let (_, terminal) = h.finished(turn);
    assert_eq!(terminal["error"]["code"], -32021, "{terminal}");
    // The gate is free and the retry never goes.
    h.replies.push_back(anthropic_text("next"));
    let (_, t) = h.send(&f.sid, &f.skey, json!("again"));
    assert_eq!(text_of(&t["result"]["message"]), "next");
    h.advance(60_000);
    assert_eq!(h.call_bodies.len(), 2);
}

#[test]
fn closing_the_session_during_a_retry_wait_ends_it_at_once() {
    let mut h = Harness::new(registry(policy(2, 60_000)));
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    let turn = waiting_turn(&mut h, &f.sid, &key);
    let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{}", f.sid), &key, None);
    assert_eq!(s, 200);
    assert!(
        h.sent[&turn].ends_with(b"0\r\n\r\n"),
        "the turn's stream ends"
    );
    h.replies.push_back(anthropic_text("never"));
    h.advance(60_000);
    assert_eq!(h.call_bodies.len(), 1, "the retry never goes");
    let evs = h.events(&f.sid, &key);
    assert_eq!(of_type(&evs, "provider.request").len(), 1);
}
