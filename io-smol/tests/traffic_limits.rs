//! Shared provider limits and overload over the real binary
//! (docs/extensions.md, "Provider traffic" and "Overload"): fifty sessions
//! against an entry limited to four calls in flight (never more at the
//! mock, every turn completes, FIFO across sessions, the figures in
//! `/metrics` and `GET /admin/v1/traffic`), and `503 overloaded` with
//! `Retry-After` past the waiting bound while the probes answer.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::{MockProvider, Reply, Server};

fn traffic(server: &Server) -> Value {
    let r = server.admin().get("/admin/v1/traffic");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn entry<'a>(t: &'a Value, name: &str) -> &'a Value {
    (t["providers"].as_array().unwrap().iter())
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no entry {name} in {t}"))
}

/// Which of the fifty turns a recorded provider request carries.
fn turn_of(messages: &Value) -> usize {
    let text = messages.to_string();
    let at = text.find("turn-").expect("a turn marker") + "turn-".len();
    text[at..at + 2].parse().unwrap()
}

#[test]
fn fifty_sessions_share_four_slots_in_fifo_order_and_every_turn_completes() {
    const SESSIONS: usize = 50;
    let mock = MockProvider::start();
    // The mock refuses (429) whatever arrives above four in flight, so a
    // fifth call at once would fail its turn (no retry policy here).
    mock.limit_concurrency(4, "1");
    mock.set_default(Reply::text("done").delayed(Duration::from_millis(100)));
    let mut config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "tok")]);
    config.push_str("\n[providers.entries.limits]\nmax_concurrent = 4\nmax_wait_ms = 60000\n");
    let server = Server::start(opts(&config));
    let sessions: Vec<Fixture> = (0..SESSIONS)
        .map(|_| open_registered(&server, "main", &[], &[], json!({})))
        .collect();
    // One turn each, in order: each asks for its slot (admitted or queued)
    // before the next is sent, so the queue's order is the send order.
    let mut streams = Vec::new();
    for (i, f) in sessions.iter().enumerate() {
        streams.push(send_stream(
            &server,
            &f.session_id,
            &f.a,
            json!(format!("turn-{i:02}")),
        ));
        assert!(
            wait_until(WAIT, || {
                let e = entry(&traffic(&server), "main").clone();
                e["queued"].as_u64().unwrap() + e["admitted_total"].as_u64().unwrap()
                    == i as u64 + 1
            }),
            "turn {i} never asked for its slot"
        );
    }
    // When each call left: its `provider.request` is logged at admission.
    let mut left_at = Vec::new();
    for (i, mut s) in streams.into_iter().enumerate() {
        let (_, terminal) = s.collect_until_terminal(Duration::from_secs(60));
        let terminal = terminal.unwrap_or_else(|| panic!("turn {i} never ended"));
        assert_eq!(
            text_of(&terminal["result"]["message"]),
            "done",
            "turn {i}: {terminal}"
        );
        let evs = result_events(&terminal);
        let req = &of_type(&evs, "provider.request")[0];
        left_at.push(
            proto::wire::time::parse_created_at(req["created_at"].as_str().unwrap()).unwrap(),
        );
    }
    // FIFO across sessions: the calls left in the order they asked.
    assert!(left_at.windows(2).all(|w| w[0] <= w[1]), "{left_at:?}");
    let stats = mock.limit_stats();
    assert_eq!(stats.refused, 0, "{stats:?}");
    assert_eq!(stats.max_in_flight, 4, "{stats:?}");
    assert_eq!(stats.served, SESSIONS as u64);
    // The mock saw them in that order too, but for calls that left
    // together, which may overtake each other on the wire (baesrv-threads
    // sends each from its own thread): never by the window of four.
    let order: Vec<usize> = (mock.requests().iter())
        .map(|r| turn_of(r.messages()))
        .collect();
    assert_eq!(order.len(), SESSIONS);
    for (at, turn) in order.iter().enumerate() {
        assert!(turn.abs_diff(at) < 4, "{order:?}");
    }
    let t = traffic(&server);
    let e = entry(&t, "main");
    assert_eq!(e["limits"]["max_concurrent"], 4);
    assert_eq!(
        (e["in_flight"].as_u64(), e["queued"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(e["admitted_total"], SESSIONS);
    assert_eq!(e["expired_total"], 0);
    let metrics = server.admin().get("/metrics").text();
    assert!(
        metrics.contains(&format!(
            "bae_provider_admitted_total{{entry=\"main\"}} {SESSIONS}\n"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("bae_provider_in_flight{entry=\"main\"} 0\n"),
        "{metrics}"
    );
    // No overload bound configured: no overload series.
    assert!(!metrics.contains("bae_overload"), "{metrics}");
}

#[test]
fn an_entry_without_limits_or_retry_adds_nothing_to_metrics() {
    let (_mock, server) = anthropic_server(&[]);
    let metrics = server.admin().get("/metrics").text();
    for series in [
        "bae_provider_queue_waiting",
        "bae_provider_in_flight",
        "bae_provider_admitted_total",
        "bae_provider_retries_total",
    ] {
        assert!(!metrics.contains(series), "{series} in {metrics}");
    }
    assert!(!metrics.contains("bae_overload"), "{metrics}");
    let t = traffic(&server);
    assert_eq!(entry(&t, "main")["limits"], Value::Null);
    assert_eq!(entry(&t, "main")["retry"], Value::Null);
}

#[test]
fn past_the_waiting_bound_requests_get_503_with_retry_after_and_probes_answer() {
    let (mock, server) = anthropic_server(&[
        ("BAE_OVERLOAD_MAX_WAITING", "1"),
        ("BAE_OVERLOAD_RETRY_AFTER", "2"),
    ]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    // The first turn holds the session's gate for two seconds; the second
    // waits behind it.
    mock.push_all([
        Reply::text("one").delayed(Duration::from_secs(2)),
        Reply::text("two"),
    ]);
    let mut first = send_stream(&server, &f.session_id, &f.a, json!("first"));
    mock.wait_requests(1, WAIT);
    let mut second = send_stream(&server, &f.session_id, &f.a, json!("second"));
    let create = || {
        server
            .client()
            .bearer(&f.a.client_key)
            .post_json("/api/v1/sessions", &json!({}))
    };
    let mut refused = None;
    assert!(wait_until(WAIT, || {
        let r = create();
        let done = r.status == 503;
        refused = Some(r);
        done
    }));
    let r = refused.unwrap();
    assert_eq!(r.header("retry-after"), Some("2"));
    let body = r.json();
    assert_eq!(body["type"], "overloaded", "{body}");
    assert_eq!(body["status"], 503);
    assert_eq!(server.client().get("/healthz").status, 200);
    let metrics = server.admin().get("/metrics").text();
    assert!(
        !metrics.contains("bae_overload_refused_total{cause=\"turn_queue\"} 0\n"),
        "{metrics}"
    );
    // Both turns complete; then requests are served again.
    for (s, text) in [(&mut first, "one"), (&mut second, "two")] {
        let (_, terminal) = s.collect_until_terminal(WAIT);
        assert_eq!(text_of(&terminal.unwrap()["result"]["message"]), text);
    }
    assert_eq!(create().status, 201);
    let t = traffic(&server);
    assert_eq!(t["overload"]["max_waiting"], 1);
    assert!(t["overload"]["refused"]["turn_queue"].as_u64().unwrap() >= 1);
}
