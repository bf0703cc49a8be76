//! Helpers of the fork, export and import tests over the real binary
//! (`transfer_*.rs`): the admin and client routes, and a reader that reads
//! a session the way the reference SDKs do (an unknown `event_type` or
//! content block type is an error, blank NDJSON lines are skipped).
#![allow(dead_code)]

use serde_json::{json, Value};
use testkit::{RpcStream, Server};

use crate::live_support::*;

/// `POST /api/v1/sessions/{id}/fork|rewind` with the creator's session key.
#[track_caller]
pub fn client_fork(
    server: &Server,
    sid: &str,
    key: &str,
    route: &str,
    body: Value,
) -> (u16, Value) {
    let r = server
        .client()
        .bearer(key)
        .post_json(&format!("/api/v1/sessions/{sid}/{route}"), &body);
    (r.status, r.try_json().unwrap_or(Value::Null))
}

/// `POST /admin/v1/sessions/{id}/fork|rewind`.
#[track_caller]
pub fn admin_fork(server: &Server, sid: &str, route: &str, body: Value) -> (u16, Value) {
    let r = server
        .admin()
        .post_json(&format!("/admin/v1/sessions/{sid}/{route}"), &body);
    (r.status, r.try_json().unwrap_or(Value::Null))
}

/// A fork as a [`Client`] of its own (its creator's credentials, its new
/// session key), after `registerDriver`.
#[track_caller]
pub fn forked_client(server: &Server, of: &Client, answer: &Value) -> (String, Client) {
    let sid = answer["session_id"].as_str().expect("fork id").to_string();
    let c = Client {
        key_id: of.key_id.clone(),
        client_key: of.client_key.clone(),
        session_key: answer["session_key"].as_str().expect("fork key").into(),
    };
    testkit::fixtures::register_driver(server, &sid, &c.session_key);
    (sid, c)
}

/// `GET /admin/v1/sessions/{id}/export`: the document.
#[track_caller]
pub fn export(server: &Server, sid: &str) -> String {
    let r = server
        .admin()
        .timeout(std::time::Duration::from_secs(120))
        .get(&format!("/admin/v1/sessions/{sid}/export"));
    r.assert_status(200);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let disposition = r.header("content-disposition").unwrap_or("");
    assert!(disposition.starts_with("attachment"), "{disposition}");
    r.text()
}

/// `POST /admin/v1/sessions/import?{query}` with the document.
#[track_caller]
pub fn import(server: &Server, query: &str, doc: &[u8]) -> (u16, Value) {
    let r = server
        .admin()
        .timeout(std::time::Duration::from_secs(120))
        .request(
            "POST",
            &format!("/admin/v1/sessions/import?{query}"),
            &[("Content-Type", "application/x-ndjson")],
            doc,
        );
    (r.status, r.try_json().unwrap_or(Value::Null))
}

/// Every event of a session through the admin API (all pages).
#[track_caller]
pub fn admin_events(server: &Server, sid: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let r = server.admin().get(&format!(
            "/admin/v1/sessions/{sid}/events?limit=200&cursor={cursor}"
        ));
        r.assert_status(200);
        let page = r.json();
        out.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.into(),
            None => return out,
        }
    }
}

/// The parts of an event a copy keeps: type, payload (ids of compaction
/// references left out: a copy renames them), attribution, timestamp.
pub fn kept(e: &Value) -> Value {
    let mut payload = e["payload"].clone();
    if e["event_type"] == "session.compaction.completed" {
        for k in ["preamble_event_id", "summary_event_id"] {
            if let Some(m) = payload.as_object_mut() {
                m.remove(k);
            }
        }
    }
    json!([
        e["event_type"],
        payload,
        e["client_key_id"],
        e["created_at"]
    ])
}

/// The body the mock provider received for the last request.
#[track_caller]
pub fn last_request(mock: &testkit::MockProvider) -> Vec<u8> {
    mock.requests()
        .last()
        .expect("a provider request")
        .raw_body
        .clone()
}

// ---- A reader that behaves like the reference SDKs ------------------------

/// Content block types the reference SDKs know.
const BLOCK_TYPES: [&str; 3] = ["text", "tool_use", "tool_result"];

/// Checks one EventView as the SDKs parse it: every member present, the
/// event type in the closed catalogue, every content block of a message a
/// known type.
#[track_caller]
pub fn sdk_read_event(e: &Value) {
    for m in ["id", "session_id", "event_type", "payload", "created_at"] {
        assert!(e.get(m).is_some(), "EventView without {m}: {e}");
    }
    let t = e["event_type"].as_str().unwrap_or("");
    assert!(
        proto::wire::EventType::parse(t).is_some(),
        "an SDK raises on the unknown event type {t:?}"
    );
    if let Some(blocks) = e["payload"]["content"].as_array() {
        for b in blocks {
            let bt = b["type"].as_str().unwrap_or("");
            assert!(
                BLOCK_TYPES.contains(&bt),
                "unknown content block {bt:?}: {e}"
            );
        }
    }
}

/// Reads a stream's lines as an SDK does until its terminal frame (or its
/// end): blank lines skipped, each line one frame, every frame a
/// `session.event` notification or the terminal answer.
#[track_caller]
pub fn sdk_read_stream(s: &mut RpcStream) -> (Vec<Value>, Option<Value>) {
    let mut events = Vec::new();
    while let Some(line) = s.next_line(WAIT) {
        if line.trim().is_empty() {
            continue;
        }
        let frame: Value = serde_json::from_str(&line).expect("one JSON object per line");
        if frame.get("id").is_some() {
            return (events, Some(frame));
        }
        assert_eq!(frame["method"], "session.event", "unknown frame: {frame}");
        sdk_read_event(&frame["params"]);
        events.push(frame["params"].clone());
    }
    (events, None)
}

/// A whole session read as an SDK does: `GET …/events` page by page with
/// the session key, then a subscription replaying from its first event.
#[track_caller]
pub fn sdk_read_session(server: &Server, sid: &str, key: &str) -> Vec<Value> {
    let all = events(server, sid, key);
    for e in &all {
        sdk_read_event(e);
    }
    let first = all.first().expect("a first event")["id"].clone();
    let mut sub = subscribe(server, sid, key, json!({"since_event_id": first}));
    let mut replayed = Vec::new();
    while replayed.len() + 1 < all.len() {
        let f = sub.next_frame(WAIT).expect("a replayed frame");
        assert_eq!(f["method"], "session.event", "unknown frame: {f}");
        sdk_read_event(&f["params"]);
        replayed.push(f["params"].clone());
    }
    assert_eq!(&replayed[..], &all[1..]);
    all
}
