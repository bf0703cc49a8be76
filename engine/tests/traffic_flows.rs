//! Traffic control through the in-process harness (no sockets, virtual
//! time): overload refusals, provider retries and shared provider limits
//! as the engine routes them (docs/extensions.md, "Traffic control").

mod common;

use common::*;
use engine::overload::OverloadLimits;
use engine::Listener;
use serde_json::{json, Value};

fn send(t: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 9, "method": "session.sendMessage", "params": {"message": {"content": t}}})
}

fn register(h: &mut Harness, sid: &str, key: &str) {
    h.rpc(
        sid,
        key,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"}),
    );
}

/// Head and body of the first response on `conn`.
/// Two sessions of one client key, each with a registered driver, on an
/// entry with a single call slot whose waiters give up after `max_wait_ms`.
fn two_sessions_one_slot(
    mut cfg: engine::Config,
    max_wait_ms: u64,
) -> (Harness, [(String, String); 2]) {
    cfg.providers[0].limits = Some(engine::provider_limits::EntryLimits {
        max_concurrent: Some(1),
        requests_per_minute: None,
        input_tokens_per_minute: None,
        max_wait_ms,
    });
    let mut h = Harness::new(cfg);
    let (key, a, akey) = h.open_session(&[], json!({}));
    register(&mut h, &a, &akey);
    let (s, b) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201, "{b}");
    let (b, bkey) = (
        b["session_id"].as_str().unwrap().to_string(),
        b["session_key"].as_str().unwrap().to_string(),
    );
    register(&mut h, &b, &bkey);
    (h, [(a, akey), (b, bkey)])
}

fn response(h: &mut Harness, conn: engine::ConnId) -> (u16, String, Value) {
    let raw = h.take(conn);
    let text = String::from_utf8_lossy(&raw).to_string();
    let (status, body) = parse_response(&raw);
    (
        status,
        text,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[test]
fn past_the_waiting_bound_new_requests_get_503_with_retry_after_and_probes_answer() {
    let mut cfg = config();
    cfg.overload = OverloadLimits {
        max_waiting: Some(1),
        max_store_backlog: None,
        retry_after_s: 3,
    };
    let mut h = Harness::new(cfg);
    let (key, sid, skey) = h.open_session(&[], json!({}));
    register(&mut h, &sid, &skey);
    // One turn holds the gate (its provider call is unanswered), one waits.
    let _a = h.rpc_start(&sid, &skey, &send("first"));
    let _b = h.rpc_start(&sid, &skey, &send("second"));
    assert_eq!(h.calls.len(), 1);
    let c = h.connect(Listener::Client);
    let path = format!("/api/v1/sessions/{sid}/rpc");
    h.send_bytes(
        c,
        &build_request("POST", &path, Some(&skey), Some(&send("third"))),
    );
    let (status, head, body) = response(&mut h, c);
    assert_eq!(status, 503);
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 3\r\n"),
        "{head}"
    );
    assert_eq!(body["type"], "overloaded");
    assert_eq!(body["status"], 503);
    // Creates are refused too; the probes and the admin port are not.
    let (s, b) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!((s, b["type"].as_str()), (503, Some("overloaded")));
    assert_eq!(
        h.request(Listener::Client, "GET", "/healthz", None, None).0,
        200
    );
    assert_eq!(
        h.request(Listener::Client, "GET", "/api/v1/meta", None, None)
            .0,
        200
    );
    assert_eq!(h.admin("GET", "/admin/v1/sessions", None).0, 200);
    // Once the queue drains, requests are served again.
    h.replies.push_back(anthropic_text("one"));
    h.replies.push_back(anthropic_text("two"));
    h.advance(0);
    let (s, _) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201);
}

#[test]
fn past_the_store_backlog_bound_new_requests_get_503() {
    let mut cfg = config();
    cfg.overload = OverloadLimits {
        max_waiting: None,
        max_store_backlog: Some(500),
        retry_after_s: 1,
    };
    let mut h = Harness::new(cfg);
    let (key, _sid, _skey) = h.open_session(&[], json!({}));
    h.engine.note_store_backlog(500);
    let (s, b) = h.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 503, "{b}");
    assert!(b["detail"].as_str().unwrap().contains("store"), "{b}");
    assert_eq!(
        h.request(Listener::Client, "GET", "/healthz", None, None).0,
        200
    );
    h.engine.note_store_backlog(499);
    assert_eq!(
        h.client("POST", "/api/v1/sessions", &key, Some(&json!({})))
            .0,
        201
    );
}

/// A session closed during its call on an entry limited to one call at a
/// time: a streamed call's connection is closed, so the next session's call
/// leaves at once; an unstreamed one runs to its end, and its slot is free
/// only when its (ignored) reply comes.
#[test]
fn a_closed_sessions_streamed_call_frees_its_slot_at_once_an_unstreamed_one_at_its_reply() {
    for streamed in [true, false] {
        let mut cfg = config();
        cfg.providers[0].stream = streamed.then(engine::StreamSettings::default);
        let (mut h, [(a, akey), (b, bkey)]) = two_sessions_one_slot(cfg, 60_000);
        h.rpc_start(&a, &akey, &send("first"));
        h.rpc_start(&b, &bkey, &send("second"));
        assert_eq!(h.calls.len(), 1, "one slot");
        assert_eq!(h.calls[0].stream, streamed);
        let first = h.calls.pop_front().unwrap().id;
        let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{a}"), &akey, None);
        assert_eq!(s, 200);
        assert_eq!(h.aborted, [first]);
        if !streamed {
            assert!(h.calls.is_empty(), "the unstreamed call still runs");
            h.input(engine::Input::ProviderDone {
                call: first,
                reply: anthropic_text("late"),
            });
        }
        assert_eq!(
            h.calls.len(),
            1,
            "the waiting call left (streamed {streamed})"
        );
        assert_ne!(h.calls[0].id, first);
    }
}

/// A slot freed in the very millisecond a waiter's `max_wait_ms` runs out
/// is not the waiter's: it has waited the bound, so it fails its attempt
/// ("no call slot within 300 ms") and the next call to ask takes the slot,
/// whether the reply or the wait's timer is handled first. The simulator's
/// `inv_slot_fifo` judges by this rule (sim seed 127 met the reply-first
/// order through the driver core).
#[test]
fn a_slot_freed_as_a_wait_runs_out_goes_to_the_next_asker_in_either_order() {
    for reply_first in [true, false] {
        let (mut h, [(a, akey), (b, bkey)]) = two_sessions_one_slot(config(), 300);
        h.rpc_start(&a, &akey, &send("first"));
        h.rpc_start(&a, &akey, &send("again"));
        h.rpc_start(&b, &bkey, &send("waits"));
        assert_eq!(h.calls.len(), 1, "one slot, b's call waits");
        let first = h.calls.pop_front().unwrap().id;
        let done = engine::Input::ProviderDone {
            call: first,
            reply: anthropic_text("one"),
        };
        if reply_first {
            // The same millisecond as b's deadline, its timer not yet run.
            h.now.mono += 300;
            h.now.unix += 300;
            h.input(done);
            h.advance(0);
        } else {
            h.advance(300);
            h.input(done);
        }
        let expired = h.admin_events(&b);
        let expired = of_type(&expired, "provider.response");
        assert_eq!(
            expired[0]["payload"]["error"], "provider limit: no call slot within 300 ms",
            "reply first {reply_first}"
        );
        assert_eq!(h.calls.len(), 1, "reply first {reply_first}");
        let body = String::from_utf8_lossy(&h.calls[0].body).into_owned();
        assert!(
            body.contains("again"),
            "a's next call took the slot: {body}"
        );
    }
}
