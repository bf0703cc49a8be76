//! Extension `send.idempotent` in-process (docs/extensions.md): a retried
//! `sendMessage` with the same key never runs a second turn; it gets the
//! first answer (replayed, or live while the first request waits or
//! runs); keys expire after the retention. Moved from
//! `io-smol/tests/ext_idempotent.rs`, which keeps concurrent retries over
//! sockets and keys surviving kill -9.

mod common;

use common::*;
use engine::{ConnId, ProviderReply};
use serde_json::{json, Value};

const REUSED: i64 = -32023;

fn register_ext(h: &mut Harness, sid: &str, key: &str) {
    let params = json!({"extensions": ["send.idempotent"]});
    let conn = h.rpc_start(sid, key, &call(1, "session.registerDriver", params));
    let t = h.finished(conn).1;
    assert_eq!(t["result"]["extensions"], json!(["send.idempotent"]), "{t}");
}

fn send_key_start(h: &mut Harness, sid: &str, key: &str, text: &str, ikey: &str) -> ConnId {
    let params = json!({"message": {"role": "user", "content": text}, "idempotency_key": ikey});
    h.rpc_start(sid, key, &call(2, "session.sendMessage", params))
}

fn send_key(h: &mut Harness, sid: &str, key: &str, text: &str, ikey: &str) -> Value {
    let conn = send_key_start(h, sid, key, text, ikey);
    h.finished(conn).1
}

fn setup(h: &mut Harness) -> Fix {
    let f = h.fix(&[]);
    register_ext(h, &f.sid, &f.skey);
    f
}

/// A second client key joined and registered with the extension.
fn joiner(h: &mut Harness, f: &Fix, ext: bool) -> String {
    let (_, ck) = h.key(&f.profile);
    let path = format!("/api/v1/sessions/{}/join", f.sid);
    let (_, j) = h.client("POST", &path, &ck, Some(&json!({})));
    let key = j["session_key"].as_str().unwrap().to_string();
    if ext {
        register_ext(h, &f.sid, &key);
    } else {
        h.register_driver(&f.sid, &key);
    }
    key
}

fn user_messages(h: &mut Harness, f: &Fix) -> usize {
    of_type(&h.events(&f.sid, &f.skey), "client.message.send").len()
}

#[test]
fn a_retry_after_the_answer_replays_it_without_a_second_turn() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    h.replies.push_back(anthropic_text("once"));
    let first = send_key(&mut h, &f.sid, &f.skey, "hi", "k-1");
    assert_eq!(first["result"]["message"]["content"][0]["text"], "once");
    let again = send_key(&mut h, &f.sid, &f.skey, "hi", "k-1");
    assert_eq!(again["result"], first["result"], "same message and events");
    assert_eq!(h.call_bodies.len(), 1);
    assert_eq!(user_messages(&mut h, &f), 1);
    // The same key with another message changes nothing.
    let other = send_key(&mut h, &f.sid, &f.skey, "something else", "k-1");
    assert_rpc_error(
        &other,
        REUSED,
        "idempotency_key_reused: this key was used with a different message",
    );
    assert_eq!(h.call_bodies.len(), 1);
    assert_eq!(user_messages(&mut h, &f), 1);
    // Keys are per client key: another driver's identical key is its own.
    let b = joiner(&mut h, &f, true);
    h.replies.push_back(anthropic_text("for b"));
    let t = send_key(&mut h, &f.sid, &b, "hi", "k-1");
    assert_eq!(t["result"]["message"]["content"][0]["text"], "for b");
    // An error answer is what a retry gets too.
    h.replies.push_back(ProviderReply::Http {
        status: 500,
        body: b"boom".to_vec(),
        advice: Default::default(),
    });
    let failed = send_key(&mut h, &f.sid, &f.skey, "fail", "k-2");
    let retried = send_key(&mut h, &f.sid, &f.skey, "fail", "k-2");
    assert_eq!(retried["result"], failed["result"]);
    assert_eq!(h.call_bodies.len(), 3);
}

#[test]
fn retries_while_the_turn_runs_or_waits_attach_to_it() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    let first = send_key_start(&mut h, &f.sid, &f.skey, "hi", "k-run");
    let retry = send_key_start(&mut h, &f.sid, &f.skey, "hi", "k-run");
    // A queued request of another driver, and its retry.
    let b = joiner(&mut h, &f, true);
    let queued = send_key_start(&mut h, &f.sid, &b, "later", "k-q");
    let queued_retry = send_key_start(&mut h, &f.sid, &b, "later", "k-q");
    h.replies.push_back(anthropic_text("slow"));
    h.replies.push_back(anthropic_text("for b"));
    h.pump();
    let t1 = h.finished(first).1;
    let (notes, t2) = h.finished(retry);
    assert_eq!(t1["result"], t2["result"]);
    // The retry saw the rest of the turn's events live.
    let seen = types_of(&note_events(&notes));
    assert!(seen.contains(&"provider.response".to_string()), "{notes:?}");
    for q in [queued, queued_retry] {
        let t = h.finished(q).1;
        assert_eq!(t["result"]["message"]["content"][0]["text"], "for b");
    }
    assert_eq!(h.call_bodies.len(), 2);
    assert_eq!(user_messages(&mut h, &f), 2);
}

#[test]
fn twenty_retries_of_one_key_in_flight_run_one_turn() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    let conns: Vec<ConnId> = (0..20)
        .map(|_| send_key_start(&mut h, &f.sid, &f.skey, "hi", "k-many"))
        .collect();
    h.replies.push_back(anthropic_text("only one"));
    h.pump();
    let results: Vec<Value> = conns.iter().map(|c| h.finished(*c).1).collect();
    for r in &results {
        assert_eq!(r["result"], results[0]["result"], "{r}");
    }
    assert_eq!(
        results[0]["result"]["message"]["content"][0]["text"],
        "only one"
    );
    assert_eq!(h.call_bodies.len(), 1);
    assert_eq!(user_messages(&mut h, &f), 1);
}

#[test]
fn keys_expire_after_the_retention_and_are_ignored_without_the_opt_in() {
    let mut h = Harness::new(engine::Config {
        idempotency_retention_ms: 1_000,
        ..config()
    });
    let f = setup(&mut h);
    h.replies.push_back(anthropic_text("first"));
    send_key(&mut h, &f.sid, &f.skey, "hi", "k-old");
    h.advance(1_200);
    h.replies.push_back(anthropic_text("again"));
    let t = send_key(&mut h, &f.sid, &f.skey, "hi", "k-old");
    assert_eq!(t["result"]["message"]["content"][0]["text"], "again");
    assert_eq!(h.call_bodies.len(), 2, "expired: a new turn");
    // A plain driver's key is just an unknown param (the reference wire).
    let plain = joiner(&mut h, &f, false);
    for _ in 0..2 {
        h.replies.push_back(anthropic_text("plain"));
        send_key(&mut h, &f.sid, &plain, "hi", "k-plain");
    }
    assert_eq!(h.call_bodies.len(), 4);
    // A malformed key is refused for an opted-in driver.
    let params = json!({"message": {"content": "x"}, "idempotency_key": 7});
    let conn = h.rpc_start(&f.sid, &f.skey, &call(3, "session.sendMessage", params));
    assert_rpc_error(
        &h.finished(conn).1,
        -32602,
        "Invalid params: \"idempotency_key\" must be a non-empty string of at most 255 characters",
    );
}
