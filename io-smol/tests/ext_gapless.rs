//! Extension `subscribe.gapless` over the real binary (docs/extensions.md):
//! a subscriber that stops reading is never dropped; it catches up from the
//! store, every event once and in order. And a session mixing extension
//! drivers with plain readers: the plain ones see the reference wire only.

mod live_support;

use std::collections::HashSet;
use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{Reply, Server};

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

#[test]
fn a_gapless_replay_longer_than_the_lag_limit_is_never_dropped() {
    let (_mock, server) = anthropic_server(&[("BAE_SUBSCRIBER_LAG_LIMIT", "8")]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    for n in 0..500 {
        report(&server, &f, n, 512);
    }
    let all = events(&server, &f.session_id, &f.a.session_key);
    let since = all[0]["id"].as_str().unwrap();
    let mut s = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"since_event_id": since, "extensions": ["subscribe.gapless"]}),
    );
    // Events keep arriving while it replays.
    for n in 500..700 {
        report(&server, &f, n, 512);
    }
    let mut ids = Vec::new();
    let want = events(&server, &f.session_id, &f.a.session_key).len() - 1;
    while ids.len() < want {
        let frame = s.next_frame(WAIT).expect("no lagged drop");
        assert_eq!(frame["method"], "session.event", "{frame}");
        ids.push(frame["params"]["id"].as_str().unwrap().to_string());
    }
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no duplicates");
    let log: Vec<String> = events(&server, &f.session_id, &f.a.session_key)[1..]
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, log);
}

/// A reference-SDK-style reader: every frame must be a `session.event` of a
/// known type, or its terminal.
fn assert_reference_frames(frames: &[Value]) {
    for f in frames {
        if f.get("id").is_some() {
            continue;
        }
        assert_eq!(f["method"], "session.event", "plain reader got {f}");
        let t = f["params"]["event_type"].as_str().unwrap();
        assert!(
            proto::wire::EventType::parse(t).is_some(),
            "unknown event type {t}"
        );
    }
}

#[test]
fn plain_readers_in_a_session_with_extension_drivers_see_the_reference_wire() {
    let (mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let all = [
        "turn.cancel",
        "turn.queue",
        "turn.steer",
        "send.idempotent",
        "subscribe.gapless",
        "subscribe.replay_complete",
    ];
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.registerDriver",
        json!({"extensions": all}),
    );
    assert_eq!(t["result"]["extensions"], json!(all));
    let plain = f.join_registered(&server, json!({}));
    let mut plain_sub = subscribe(&server, &f.session_id, &plain.session_key, json!({}));
    let mut ext_sub = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"extensions": ["subscribe.replay_complete"]}),
    );
    // The extension driver holds the gate; the plain driver queues behind
    // another queued extension request, which is cancelled.
    mock.push(
        Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}),
        ])
        .delayed(Duration::from_millis(500)),
    );
    mock.push(Reply::text("steered"));
    let mut holder = stream(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.sendMessage",
        json!({"message": {"content": "go"}, "idempotency_key": "k"}),
    );
    mock.wait_requests(1, WAIT);
    // Another extension driver queues, then cancels its queued request.
    let b = f.join(&server, json!({}));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &b.session_key,
        "session.registerDriver",
        json!({"extensions": ["turn.queue", "turn.cancel"]}),
    );
    assert_eq!(t["result"]["registered"], true);
    let mut queued = send_stream(&server, &f.session_id, &b, json!("queued"));
    assert_eq!(queued.next_frame(WAIT).unwrap()["method"], "session.queue");
    mock.push(Reply::text("for plain"));
    let mut plain_turn = send_stream(&server, &f.session_id, &plain, json!("plain"));
    std::thread::sleep(Duration::from_millis(100));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &b.session_key,
        "session.cancelTurn",
        json!({}),
    );
    assert_eq!(t["result"]["state"], "queued", "{t}");
    let (_, t) = queued.collect_until_terminal(WAIT);
    assert_eq!(t.unwrap()["error"]["code"], -32021);
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.steerTurn",
        json!({"message": {"content": "steer"}}),
    );
    assert_eq!(t["result"]["steered"], true, "{t}");
    let (_, t) = holder.collect_until_terminal(WAIT);
    assert!(t.unwrap().get("result").is_some());
    let (notes, t) = plain_turn.collect_until_terminal(WAIT);
    assert_eq!(
        t.unwrap()["result"]["message"]["content"][0]["text"],
        "for plain"
    );
    assert_reference_frames(&notes);
    rpc(
        &server,
        &f.session_id,
        &plain.session_key,
        "session.unsubscribe",
        json!({}),
    );
    let (frames, _) = plain_sub.collect_until_terminal(WAIT);
    assert!(frames.len() > 8, "{frames:?}");
    assert_reference_frames(&frames);
    let (ext_frames, _) = ext_sub.collect_until_terminal(WAIT);
    assert_eq!(ext_frames[0]["method"], "session.replay_complete");
    // REST pages hold standard event types only.
    let evs = events(&server, &f.session_id, &plain.session_key);
    for e in &evs {
        let t = e["event_type"].as_str().unwrap();
        assert!(proto::wire::EventType::parse(t).is_some(), "{t}");
    }
}
