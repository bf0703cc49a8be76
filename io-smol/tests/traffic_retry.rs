//! Provider retry policies over the real binary (docs/extensions.md,
//! "Provider traffic"): a 429 with `Retry-After` retried on the same entry
//! after the advised time, an advised wait past the maximum going to the
//! fallback at once, `Retry-After` as an HTTP date, and a cancel or a
//! session close ending a retry's wait at once.

mod live_support;

use std::time::{Duration, Instant};

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
fn an_advised_wait_past_the_maximum_goes_to_the_fallback_at_once() {
    let (mock, server) = server("max_wait_ms = 2000");
    let f = open_registered(&server, "main", &["backup"], &[], json!({}));
    mock.push_all([Reply::rate_limited("30"), Reply::text("from backup")]);
    let started = Instant::now();
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert!(started.elapsed() < Duration::from_secs(5), "no wait");
    assert_eq!(text_of(&t["result"]["message"]), "from backup");
    let evs = result_events(&t);
    let reqs = payloads(&evs, "provider.request");
    assert_eq!(reqs[1]["kind"], "fallback");
    assert_eq!(reqs[1]["model"], "b");
    let err = error_with_reason(&evs, "provider_call_failed").expect("provider_call_failed");
    assert_eq!(err["payload"]["detail"], "provider returned HTTP 429");
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

/// A failed attempt whose retry waits 30 s.
fn waiting_turn(server: &Server, mock: &MockProvider, f: &Fixture) -> testkit::RpcStream {
    mock.push(Reply::rate_limited("30"));
    let s = send_stream(server, &f.session_id, &f.a, json!("hi"));
    mock.wait_requests(1, WAIT);
    // The failure is logged before the wait starts.
    assert!(wait_until(WAIT, || {
        let evs = events(server, &f.session_id, &f.a.session_key);
        !of_type(&evs, "provider.response").is_empty()
    }));
    s
}

#[test]
fn a_cancel_during_a_retry_wait_ends_it_at_once() {
    let (mock, server) = server("max_wait_ms = 60000");
    let f = open(&server, "main", &[], &[], json!({}));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.registerDriver",
        json!({"extensions": ["turn.cancel"]}),
    );
    assert_eq!(t["result"]["registered"], true);
    let mut s = waiting_turn(&server, &mock, &f);
    let started = Instant::now();
    let (_, c) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.cancelTurn",
        json!({}),
    );
    assert_eq!(c["result"], json!({"cancelled": true, "state": "running"}));
    let (_, terminal) = s.collect_until_terminal(WAIT);
    let terminal = terminal.expect("the turn's stream ends");
    assert_eq!(terminal["error"]["code"], -32021, "{terminal}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The gate is free and the retry never goes.
    mock.push(Reply::text("next"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("again"));
    assert_eq!(text_of(&t["result"]["message"]), "next");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn closing_the_session_during_a_retry_wait_ends_it_at_once() {
    let (mock, server) = server("max_wait_ms = 60000");
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let mut s = waiting_turn(&server, &mock, &f);
    let started = Instant::now();
    let r = server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        s.wait_closed(Duration::from_secs(3)),
        "the turn's stream ends"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mock.request_count(), 1, "the retry never goes");
    let evs = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(of_type(&evs, "provider.request").len(), 1);
}
