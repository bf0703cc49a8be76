//! Extension `subscribe.gapless` in-process (docs/extensions.md): a
//! subscriber that stops reading is never dropped, it catches up from the
//! store once it reads again, every event once and in order; and a session
//! mixing extension drivers with plain readers shows the plain ones the
//! reference wire only. A stalled reader is a connection whose sends are
//! not reported flushed. Moved from `io-smol/tests/ext_gapless.rs`, which
//! keeps ten thousand events through a real socket that stops draining.

mod common;

use common::*;
use engine::{ConnId, Input};
use serde_json::{json, Value};

/// One `session.subagent.running` event carrying `size` bytes of detail.
fn report(h: &mut Harness, sid: &str, key: &str, n: usize, size: usize) {
    let params = json!({"state": "running", "subagent_id": format!("sba_{n}"), "harness": "h",
                        "model": "m", "detail": "x".repeat(size)});
    let conn = h.rpc_start(sid, key, &call(1, "session.reportLocalSubagent", params));
    assert!(h.finished(conn).1.get("result").is_some());
}

/// Reports everything written to `conn` so far as flushed (the reader
/// drained its socket); `done` is what was reported before. False when
/// nothing new was written.
fn drain(h: &mut Harness, conn: ConnId, done: &mut usize) -> bool {
    let sent = h.sent.get(&conn).map_or(0, Vec::len);
    if sent == *done {
        return false;
    }
    let bytes = sent - *done;
    *done = sent;
    h.input(Input::Flushed { conn, bytes });
    true
}

/// The reader keeps reading until the engine writes nothing more.
fn read_all(h: &mut Harness, conn: ConnId, done: &mut usize) {
    let mut rounds = 0;
    while drain(h, conn, done) {
        rounds += 1;
        assert!(rounds < 100_000, "the stream never settles");
    }
}

fn subscribe(h: &mut Harness, sid: &str, key: &str, params: Value) -> ConnId {
    h.rpc_start(sid, key, &call(1, "session.subscribe", params))
}

#[test]
fn a_stalled_gapless_subscriber_catches_up_in_order_and_a_plain_one_lags() {
    let mut h = Harness::new(engine::Config {
        subscriber_lag_limit: 64,
        subscriber_window_bytes: 64 * 1024,
        ..config()
    });
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    let ext = json!({"extensions": ["subscribe.gapless", "subscribe.replay_complete"]});
    let gapless = subscribe(&mut h, &f.sid, &key, ext);
    let plain = subscribe(&mut h, &f.sid, &key, json!({}));
    const N: usize = 400;
    for n in 0..N {
        report(&mut h, &f.sid, &key, n, 2048);
    }
    // The control: the plain subscriber that never read was cut off.
    let frames = h.frames(plain);
    assert_eq!(
        frames.last().unwrap()["error"]["message"],
        "lagged; reconnect with since_event_id"
    );
    assert!(frames.len() < N, "cut off early");
    // The gapless one stopped taking live events (its window is full) …
    let stalled = h.frames(gapless).len();
    assert!(stalled < N, "held back at {stalled}");
    assert!(!h.sent[&gapless].ends_with(b"0\r\n\r\n"), "never dropped");
    // … and once it reads, it catches up: the marker, then every event
    // once, in log order, then live ones.
    let mut done = 0;
    read_all(&mut h, gapless, &mut done);
    let frames = h.frames(gapless);
    assert_eq!(
        frames[0]["method"], "session.replay_complete",
        "{:.300}",
        frames[0]
    );
    let seen: Vec<String> = frames[1..]
        .iter()
        .map(|f| {
            assert_eq!(f["method"], "session.event", "{f:.300}");
            f["params"]["id"].as_str().unwrap().to_string()
        })
        .collect();
    let log: Vec<String> = of_type(&h.events(&f.sid, &key), "session.subagent.running")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(log.len(), N);
    assert_eq!(seen, log, "every event once, in order");
    h.auto_flush = true;
    report(&mut h, &f.sid, &key, N, 10);
    let live = h.frames(gapless).last().unwrap().clone();
    assert_eq!(live["params"]["payload"]["subagent_id"], format!("sba_{N}"));
}

#[test]
fn a_gapless_replay_longer_than_the_lag_limit_is_never_dropped() {
    let mut h = Harness::new(engine::Config {
        subscriber_lag_limit: 8,
        ..config()
    });
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    for n in 0..500 {
        report(&mut h, &f.sid, &key, n, 512);
    }
    let since = h.events(&f.sid, &key)[0]["id"].clone();
    let params = json!({"since_event_id": since, "extensions": ["subscribe.gapless"]});
    let s = subscribe(&mut h, &f.sid, &key, params);
    // Events keep arriving while it replays; it reads as they come.
    let mut done = 0;
    for n in 500..700 {
        report(&mut h, &f.sid, &key, n, 512);
        let _ = drain(&mut h, s, &mut done);
    }
    read_all(&mut h, s, &mut done);
    let ids: Vec<String> = h
        .frames(s)
        .iter()
        .map(|f| {
            assert_eq!(f["method"], "session.event", "no lagged drop: {f}");
            f["params"]["id"].as_str().unwrap().to_string()
        })
        .collect();
    let log: Vec<String> = h.events(&f.sid, &key)[1..]
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, log, "every event once, in log order");
}

/// A reference-SDK-style reader: every frame must be a `session.event` of a
/// known type, or its terminal.
fn assert_reference_frames(frames: &[Value]) {
    for f in frames.iter().filter(|f| f.get("id").is_none()) {
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
    let mut h = Harness::new(config());
    h.auto_flush = true;
    let f = h.fix(&[]);
    let all = [
        "turn.cancel",
        "turn.queue",
        "turn.steer",
        "send.idempotent",
        "subscribe.gapless",
        "subscribe.replay_complete",
    ];
    let conn = h.rpc_start(
        &f.sid,
        &f.skey,
        &call(1, "session.registerDriver", json!({"extensions": all})),
    );
    assert_eq!(h.finished(conn).1["result"]["extensions"], json!(all));
    let join = |h: &mut Harness| {
        let (_, ck) = h.key(&f.profile);
        let path = format!("/api/v1/sessions/{}/join", f.sid);
        let (_, j) = h.client("POST", &path, &ck, Some(&json!({})));
        j["session_key"].as_str().unwrap().to_string()
    };
    let plain = join(&mut h);
    h.register_driver(&f.sid, &plain);
    let plain_sub = subscribe(&mut h, &f.sid, &plain, json!({}));
    let ext_sub = subscribe(
        &mut h,
        &f.sid,
        &f.skey,
        json!({"extensions": ["subscribe.replay_complete"]}),
    );
    // The extension driver holds the gate with an idempotent send.
    let params = json!({"message": {"content": "go"}, "idempotency_key": "k"});
    let holder = h.rpc_start(&f.sid, &f.skey, &call(2, "session.sendMessage", params));
    // Another extension driver queues, then cancels its queued request.
    let b = join(&mut h);
    let params = json!({"extensions": ["turn.queue", "turn.cancel"]});
    let conn = h.rpc_start(&f.sid, &b, &call(1, "session.registerDriver", params));
    assert_eq!(h.finished(conn).1["result"]["registered"], true);
    let queued = h.send_start(&f.sid, &b, json!("queued"));
    assert_eq!(h.frames(queued)[0]["method"], "session.queue");
    let plain_turn = h.send_start(&f.sid, &plain, json!("plain"));
    let conn = h.rpc_start(&f.sid, &b, &call(3, "session.cancelTurn", json!({})));
    assert_eq!(h.finished(conn).1["result"]["state"], "queued");
    assert_eq!(h.finished(queued).1["error"]["code"], -32021);
    // A steer lands at the holder's next round trip.
    let steer = h.rpc_start(
        &f.sid,
        &f.skey,
        &call(
            4,
            "session.steerTurn",
            json!({"message": {"content": "steer"}}),
        ),
    );
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}]),
    ));
    h.replies.push_back(anthropic_text("steered"));
    h.replies.push_back(anthropic_text("for plain"));
    h.pump();
    assert_eq!(h.finished(steer).1["result"]["steered"], true);
    assert!(h.finished(holder).1.get("result").is_some());
    let (notes, t) = h.finished(plain_turn);
    assert_eq!(t["result"]["message"]["content"][0]["text"], "for plain");
    assert_reference_frames(&notes);
    let conn = h.rpc_start(&f.sid, &plain, &call(5, "session.unsubscribe", json!({})));
    h.finished(conn);
    let frames = h.frames(plain_sub);
    assert!(frames.len() > 8, "{frames:?}");
    assert_reference_frames(&frames);
    assert_eq!(h.frames(ext_sub)[0]["method"], "session.replay_complete");
    // REST pages hold standard event types only.
    for e in h.events(&f.sid, &plain) {
        let t = e["event_type"].as_str().unwrap();
        assert!(proto::wire::EventType::parse(t).is_some(), "{t}");
    }
}
