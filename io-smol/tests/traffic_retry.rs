//! Provider retry policies over the real binary (docs/extensions.md,
//! "Provider traffic"): a real 429's `Retry-After` (seconds and HTTP date)
//! read by the driver and waited for on the same entry. A wait past the
//! maximum, and a cancel or a session close ending a retry's wait, are
//! tested in-process in `engine/tests/retry_flows.rs`.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::mock_provider::http_date_in;
use testkit::{MockProvider, Reply, Server};

/// `main` (with `retry`) and `backup`, both on one mock.
fn server(retry: &str) -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let mut config = provider_toml(&[
        ("main", "anthropic", &mock.base_url, "m", "tok"),
        ("backup", "anthropic", &mock.base_url, "b", "tok"),
    ]);
    // The `retry` table belongs to the first entry: insert it before the
    // second `[[providers.entries]]`.
    let second = config.rfind("[[providers.entries]]").unwrap();
    config.insert_str(second, &format!("[providers.entries.retry]\n{retry}\n\n"));
    (mock, Server::start(opts(&config)))
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
fn a_429_with_retry_after_1_is_retried_once_and_the_turn_completes() {
    let (mock, server) = server("max_retries = 2\nmax_wait_ms = 5000");
    let f = open_registered(&server, "main", &["backup"], &[], json!({}));
    mock.push_all([Reply::rate_limited("1"), Reply::text("after the wait")]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert_eq!(text_of(&t["result"]["message"]), "after the wait");
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
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
    // Not before the advised second, counted from the reply's arrival,
    // which is a moment before its `provider.response` is stamped.
    let failed_at = created_ms(&of_type(&evs, "provider.response")[0]);
    let retried_at = created_ms(&of_type(&evs, "provider.request")[1]);
    assert!(retried_at - failed_at >= 950, "{failed_at} → {retried_at}");
    assert_eq!(mock.request_count(), 2);
    // The stored log ends with the same events.
    let stored = events(&server, &f.session_id, &f.a.session_key);
    let stored = types(&stored);
    assert_eq!(stored[stored.len() - evs.len()..], types(&evs));
}

#[test]
fn retry_after_as_an_http_date_is_waited_for() {
    let (mock, server) = server("max_wait_ms = 10000");
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let date = http_date_in(Duration::from_secs(1));
    mock.push_all([Reply::rate_limited(&date), Reply::text("later")]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert_eq!(text_of(&t["result"]["message"]), "later");
    let evs = result_events(&t);
    let failed_at = created_ms(&of_type(&evs, "provider.response")[0]);
    let retried_at = created_ms(&of_type(&evs, "provider.request")[1]);
    // The date is whole seconds, at least a second ahead.
    assert!(retried_at - failed_at >= 900, "{failed_at} → {retried_at}");
    assert!(retried_at - failed_at <= 4000, "{failed_at} → {retried_at}");
}
