//! `session.subscribe` / `session.unsubscribe` in-process (spec 01 §5.4,
//! §6.3, §6.4, §7; checklist C-126…C-133, C-047). The harness reports
//! every send flushed (a reader that keeps up) unless a test says not.
//! Moved from `io-smol/tests/live_subscribe.rs`, which keeps replay racing
//! concurrent turns over sockets and a subscriber whose socket never
//! drains (`lagged`).

mod common;

use common::*;
use engine::ConnId;
use serde_json::{json, Value};

fn harness(config: engine::Config) -> Harness {
    let mut h = Harness::new(config);
    h.auto_flush = true;
    h
}

fn subscribe(h: &mut Harness, sid: &str, key: &str, params: Value) -> ConnId {
    h.rpc_start(sid, key, &call(1, "session.subscribe", params))
}

/// `n` plain turns by `key`, each answered at once.
fn turns(h: &mut Harness, sid: &str, key: &str, n: usize) {
    for i in 0..n {
        h.replies.push_back(anthropic_text(&format!("answer {i}")));
        let (_, t) = h.send(sid, key, json!(format!("turn {i}")));
        assert!(t.get("result").is_some(), "{t}");
    }
}

/// The EventViews a subscribe stream carried; panics on a terminal frame.
#[track_caller]
fn seen(h: &Harness, conn: ConnId) -> Vec<Value> {
    let frames = h.frames(conn);
    assert!(
        frames.iter().all(|f| f.get("id").is_none()),
        "subscribe never writes a terminal frame: {frames:?}"
    );
    note_events(&frames)
}

/// The chunked body ended (the stream is over).
fn ended(h: &Harness, conn: ConnId) -> bool {
    h.sent.get(&conn).is_some_and(|b| b.ends_with(b"0\r\n\r\n"))
}

#[test]
fn c126_c129_live_only_without_since_and_no_registration_needed() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turns(&mut h, &f.sid, &key, 1);
    // An observer that never registered (a joiner).
    let (_, ck) = h.key(&f.profile_id);
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{}/join", f.sid),
        &ck,
        Some(&json!({})),
    );
    let obs = j["session_key"].as_str().unwrap().to_string();
    let before = h.events(&f.sid, &key);
    let s = subscribe(&mut h, &f.sid, &obs, json!({}));
    let head = Reply::parse(&h.sent[&s]);
    assert_eq!(head.status, 200);
    let ct = head.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("application/x-ndjson"), "{ct}");
    h.advance(200);
    assert!(seen(&h, s).is_empty(), "C-126: nothing replayed");
    assert_eq!(h.events(&f.sid, &key), before, "C-129: nothing logged");
    h.replies.push_back(anthropic_text("live"));
    let (_, t) = h.send(&f.sid, &key, json!("hello"));
    let got = seen(&h, s);
    assert_eq!(ids(&got), ids(&result_events(&t)));
    // Observers get the sender's own client.message.send (C-075).
    assert_eq!(got[0]["event_type"], "client.message.send");
    assert!(!ended(&h, s));
    // since = the newest event: nothing replayed, then live exactly once.
    let last = h.events(&f.sid, &key).last().unwrap()["id"].clone();
    let s2 = subscribe(&mut h, &f.sid, &obs, json!({"since_event_id": last}));
    h.advance(150);
    assert!(seen(&h, s2).is_empty());
    h.replies.push_back(anthropic_text("again"));
    let (_, t) = h.send(&f.sid, &key, json!("again"));
    assert_eq!(ids(&seen(&h, s2)), ids(&result_events(&t)));
    assert!(!ended(&h, s2));
}

#[test]
fn c127_since_event_id_replays_more_than_a_page_then_goes_live() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turns(&mut h, &f.sid, &key, 55);
    let history = h.events(&f.sid, &key);
    assert!(history.len() > 220);
    let s = subscribe(
        &mut h,
        &f.sid,
        &key,
        json!({"since_event_id": history[5]["id"]}),
    );
    turns(&mut h, &f.sid, &key, 5);
    let all = h.events(&f.sid, &key);
    let got = seen(&h, s);
    assert_eq!(ids(&got), ids(&all[6..]), "replay + live, in log order");
    assert_eq!(got, all[6..], "byte-identical EventViews");
}

#[test]
fn c127_replay_while_a_turn_is_running() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turns(&mut h, &f.sid, &key, 2);
    let turn = h.send_start(&f.sid, &key, json!("in flight"));
    let so_far = h.events(&f.sid, &key);
    assert_eq!(so_far.last().unwrap()["event_type"], "provider.request");
    let s = subscribe(
        &mut h,
        &f.sid,
        &key,
        json!({"since_event_id": so_far[2]["id"]}),
    );
    h.replies.push_back(anthropic_text("slow"));
    h.pump();
    h.finished(turn);
    let all = h.events(&f.sid, &key);
    assert_eq!(ids(&seen(&h, s)), ids(&all[3..]));
    assert!(!ended(&h, s));
}

#[test]
fn c128_unknown_or_foreign_since_event_id_replays_from_the_start() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let other = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turns(&mut h, &f.sid, &key, 2);
    let all = h.events(&f.sid, &key);
    let foreign = h.events(&other.sid, &other.a.session_key)[0]["id"].clone();
    for since in [
        json!("evt_00000000000000000000000000000000"),
        json!("not-even-an-id"),
        foreign,
    ] {
        let s = subscribe(&mut h, &f.sid, &key, json!({"since_event_id": since}));
        let got = seen(&h, s);
        assert_eq!(got, all, "since {since}");
        assert_eq!(got[0]["event_type"], "session.open");
        assert!(!ended(&h, s));
    }
}

#[test]
fn c130_c131_unsubscribe_ends_every_subscribe_stream_but_not_turns() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let other = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    let s1 = subscribe(&mut h, &f.sid, &key, json!({}));
    let s2 = subscribe(&mut h, &f.sid, &b.session_key, json!({}));
    turns(&mut h, &f.sid, &key, 60);
    let s3 = subscribe(
        &mut h,
        &f.sid,
        &b.session_key,
        json!({"since_event_id": "evt_unknown"}),
    );
    let unrelated = subscribe(&mut h, &other.sid, &other.a.session_key, json!({}));
    let turn = h.send_start(&f.sid, &key, json!("in flight"));
    // With an id here; a notification cancels too (next test).
    let conn = h.rpc_start(
        &f.sid,
        &b.session_key,
        &call(7, "session.unsubscribe", json!({})),
    );
    let (notes, t) = h.finished(conn);
    assert!(notes.is_empty());
    assert_eq!(t["result"], json!({"unsubscribed": true}));
    for s in [s1, s2, s3] {
        seen(&h, s);
        assert!(ended(&h, s), "stream {s:?} still open");
    }
    // C-131: the in-flight turn still completes on its stream.
    h.replies.push_back(anthropic_text("slow"));
    h.pump();
    let (_, t) = h.finished(turn);
    assert_eq!(text_of(&t["result"]["message"]), "slow");
    // Another session's subscriber is untouched.
    assert!(!ended(&h, unrelated));
    // Nothing logged by unsubscribe.
    let log = h.events(&f.sid, &key);
    assert_eq!(log.last().unwrap()["event_type"], "server.message.send");
}

#[test]
fn c130_unsubscribe_notification_still_cancels() {
    let mut h = harness(config());
    let f = h.fix(&[]);
    let s = subscribe(&mut h, &f.sid, &f.skey, json!({}));
    let note = json!({"jsonrpc": "2.0", "method": "session.unsubscribe"});
    let conn = h.rpc_start(&f.sid, &f.skey, &note);
    let r = Reply::parse(&h.sent[&conn]);
    assert_eq!((r.status, r.text.as_str()), (200, ""));
    assert!(ended(&h, s));
}

#[test]
fn c133_c047_closed_session_replays_and_delete_ends_streams() {
    let mut h = harness(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turns(&mut h, &f.sid, &key, 1);
    let live = subscribe(&mut h, &f.sid, &key, json!({}));
    let replaying = subscribe(&mut h, &f.sid, &key, json!({"since_event_id": "evt_x"}));
    assert_eq!(seen(&h, replaying).len(), 6);
    assert_eq!(
        h.client("DELETE", &format!("/api/v1/sessions/{}", f.sid), &key, None)
            .0,
        200
    );
    // C-047: both end cleanly (no terminal frame), after session.close.
    assert_eq!(types_of(&seen(&h, live)), ["session.close"]);
    assert_eq!(types_of(&seen(&h, replaying)[6..]), ["session.close"]);
    assert!(ended(&h, live) && ended(&h, replaying));
    // C-133: subscribe on the closed session replays its history, then
    // stays open until unsubscribed.
    let all = h.events(&f.sid, &key);
    let s = subscribe(
        &mut h,
        &f.sid,
        &key,
        json!({"since_event_id": all[0]["id"]}),
    );
    assert_eq!(seen(&h, s), all[1..]);
    h.advance(150);
    assert!(!ended(&h, s));
    let conn = h.rpc_start(&f.sid, &key, &call(2, "session.unsubscribe", json!({})));
    assert_eq!(h.finished(conn).1["result"], json!({"unsubscribed": true}));
    assert!(ended(&h, s));
}

/// C-132 on virtual sockets: a subscriber that never reads (nothing is
/// reported flushed) is dropped with the `lagged` notification once
/// `subscriber_lag_limit` events are unflushed; the driver's own stream
/// is unaffected and the lagged client recovers with `since_event_id`.
#[test]
fn c132_a_subscriber_that_never_reads_gets_lagged() {
    let mut h = Harness::new(engine::Config {
        subscriber_lag_limit: 20,
        ..config()
    });
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    let stuck = subscribe(&mut h, &f.sid, &key, json!({}));
    turns(&mut h, &f.sid, &key, 8);
    let frames = h.frames(stuck);
    let last = frames.last().unwrap();
    assert_eq!(
        last,
        &json!({"jsonrpc": "2.0", "error": {"code": -32000, "message": "lagged; reconnect with since_event_id"}})
    );
    assert!(ended(&h, stuck));
    let got = note_events(&frames[..frames.len() - 1]);
    let all = h.events(&f.sid, &key);
    assert!(got.len() < all.len() - 1, "cut off early: {}", got.len());
    let start = all.iter().position(|e| e["id"] == got[0]["id"]).unwrap();
    assert_eq!(
        ids(&got),
        ids(&all[start..start + got.len()]),
        "an exact slice"
    );
    // Recovery per spec: re-subscribe from the last id seen.
    h.auto_flush = true;
    let again = subscribe(
        &mut h,
        &f.sid,
        &key,
        json!({"since_event_id": got.last().unwrap()["id"]}),
    );
    assert_eq!(ids(&seen(&h, again)), ids(&all[start + got.len()..]));
}

/// `max_page_bytes` bounds what one answer holds: an events page of large
/// events stops early and names a cursor, and a subscribe replay reads its
/// pages the same way; paging and replay still deliver every event once,
/// in log order (C-127), byte-identical.
#[test]
fn byte_bounded_pages_and_replays_lose_nothing() {
    let mut h = harness(engine::Config {
        max_page_bytes: 20_000,
        ..config()
    });
    let f = h.open_driver("main", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    for i in 0..6 {
        h.replies.push_back(anthropic_text("ok"));
        let (_, t) = h.send(&f.sid, &key, json!(format!("{i} {}", "x".repeat(6000))));
        assert!(t.get("result").is_some(), "{t}");
    }
    let base = format!("/api/v1/sessions/{}/events", f.sid);
    // The oracle: one event per page is never cut.
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let (_, p) = h.client(
            "GET",
            &format!("{base}?limit=1&cursor={cursor}"),
            &key,
            None,
        );
        all.extend(p["items"].as_array().cloned().unwrap());
        match p["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert!(all.len() > 20, "{}", all.len());
    let (_, first) = h.client("GET", &format!("{base}?limit=200"), &key, None);
    let items = first["items"].as_array().unwrap();
    assert!(
        !items.is_empty() && items.len() < all.len(),
        "{}",
        items.len()
    );
    assert!(first["next_cursor"].is_string(), "{first}");
    let before_last: usize = items[..items.len() - 1]
        .iter()
        .map(|e| e["payload"].to_string().len())
        .sum();
    assert!(before_last < 20_000, "{before_last}");
    assert_eq!(h.events(&f.sid, &key), all);
    let s = subscribe(
        &mut h,
        &f.sid,
        &key,
        json!({"since_event_id": all[0]["id"]}),
    );
    assert_eq!(seen(&h, s), all[1..]);
}
