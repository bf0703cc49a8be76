//! Extension `subscribe.gapless` over the real binary (docs/extensions.md):
//! a subscriber that stops reading is never dropped; it catches up from the
//! store, every event once and in order, through a real socket that stops
//! draining. A replay longer than the lag limit and plain readers next to
//! extension drivers are tested in-process in `engine/tests/gapless_flows.rs`.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::Server;

/// One `session.subagent.*` event carrying `detail` of `size` bytes.
fn report(server: &Server, f: &Fixture, n: usize, size: usize) {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &f.a.session_key,
        "session.reportLocalSubagent",
        json!({"state": "running", "subagent_id": format!("sba_{n}"), "harness": "h",
               "model": "m", "detail": "x".repeat(size)}),
    );
    assert!(t.get("result").is_some(), "{t}");
}

#[test]
fn a_stalled_gapless_subscriber_drains_ten_thousand_events_in_order() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let request = |ext: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
               "params": {"extensions": ext}})
    };
    let mut gapless = RawStream::open(
        &server,
        &f.session_id,
        &f.a.session_key,
        &request(json!(["subscribe.gapless", "subscribe.replay_complete"])),
    );
    // The control: a plain subscriber that stops reading is cut off.
    let mut plain = subscribe(&server, &f.session_id, &f.a.session_key, json!({}));
    // ~22 MB of events: far more than socket buffers hold.
    const N: usize = 10_000;
    for n in 0..N {
        report(&server, &f, n, 2048);
    }
    let (frames, terminal) = plain.collect_until_terminal(Duration::from_secs(60));
    let lagged = terminal
        .or_else(|| frames.last().cloned())
        .expect("a last frame");
    assert_eq!(
        lagged["error"]["message"], "lagged; reconnect with since_event_id",
        "{lagged:.300}"
    );
    assert!(frames.len() < N, "cut off early");
    // The gapless one reads it all: the marker (nothing replayed), then
    // every event once, in log order, then live ones.
    let first = gapless.next_frame().unwrap();
    assert_eq!(first["method"], "session.replay_complete", "{first}");
    let mut seen = Vec::with_capacity(N);
    while seen.len() < N {
        let frame = gapless.next_frame().expect("stream still open");
        assert_eq!(frame["method"], "session.event", "{frame:.300}");
        seen.push(frame["params"]["id"].as_str().unwrap().to_string());
    }
    let log: Vec<String> = events(&server, &f.session_id, &f.a.session_key)
        .iter()
        .filter(|e| e["event_type"] == "session.subagent.running")
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(log.len(), N);
    assert_eq!(seen, log, "every event once, in order");
    report(&server, &f, N, 10);
    let live = gapless.next_frame().unwrap();
    assert_eq!(live["params"]["payload"]["subagent_id"], format!("sba_{N}"));
}
