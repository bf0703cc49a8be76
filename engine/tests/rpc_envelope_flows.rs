//! The JSON-RPC envelope of `POST /api/v1/sessions/{id}/rpc` in-process
//! (spec 01 §5; checklist C-049…C-063): envelope errors and their exact
//! shape, notifications, id echo, omitted params, NDJSON framing. Moved
//! from `io-smol/tests/rpc_envelope.rs`, which keeps the 401 before any
//! NDJSON and a streamed turn's framing over a real socket.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

/// POSTs raw bytes to the session's `/rpc`.
fn post_rpc(h: &mut Harness, sid: &str, key: &str, body: &[u8]) -> Reply {
    let path = format!("/api/v1/sessions/{sid}/rpc");
    h.post_raw(Listener::Client, &path, key, Some("application/json"), body)
}

/// The NDJSON lines of a response; asserts the framing rules of C-061.
#[track_caller]
fn frames(r: &Reply) -> Vec<Value> {
    if r.text.is_empty() {
        return Vec::new();
    }
    assert!(
        r.text.ends_with('\n'),
        "body must end with \\n: {:?}",
        r.text
    );
    r.text[..r.text.len() - 1]
        .split('\n')
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("each line is JSON");
            assert!(v.is_object(), "frame is not an object: {line}");
            v
        })
        .collect()
}

/// Asserts the C-050 head: 200, `application/x-ndjson`, chunked.
#[track_caller]
fn assert_ndjson_head(r: &Reply) {
    assert_eq!(r.status, 200, "{}", r.text);
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/x-ndjson"),
        "content-type {ct:?}"
    );
    let te = r.header("transfer-encoding").map(str::to_ascii_lowercase);
    assert_eq!(te.as_deref(), Some("chunked"), "{:?}", r.headers);
}

/// The single terminal frame of a single-answer call.
#[track_caller]
fn single(r: &Reply) -> Value {
    assert_ndjson_head(r);
    let f = frames(r);
    assert_eq!(f.len(), 1, "exactly one frame expected: {f:?}");
    f.into_iter().next().unwrap()
}

/// C-063: an error object carries exactly `code` and `message`.
#[track_caller]
fn assert_error_frame(frame: &Value, id: Value, code: i64, message: &str) {
    assert_eq!(
        frame,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
    );
}

#[test]
fn c049_bad_session_key_is_401_problem_before_any_ndjson() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}"#;
    for key in [
        "bae_ses_000000000000000000000000000000000000000000000000",
        f.client_key.as_str(),
        "",
    ] {
        let r = post_rpc(&mut h, &f.sid, key, body);
        assert_problem(&r, 401, "unauthorized");
        assert!(!r.text.contains("jsonrpc"));
    }
    let evs = h.events(&f.sid, &f.skey);
    assert!(of_type(&evs, "session.driver.register").is_empty());
}

#[test]
fn c050_to_c056_envelope_errors_and_c063_error_shape() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (sid, key) = (f.sid.as_str(), f.skey.as_str());
    // C-051 parse error.
    let frame = single(&post_rpc(&mut h, sid, key, b"{not json"));
    assert_error_frame(&frame, Value::Null, -32700, "Parse error");
    // C-052 batch.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}]"#;
    let frame = single(&post_rpc(&mut h, sid, key, batch));
    assert_error_frame(
        &frame,
        Value::Null,
        -32600,
        "Invalid Request: batch requests are not supported",
    );
    // C-053 non-object JSON.
    for body in [&b"42"[..], b"\"x\"", b"null", b"true"] {
        let frame = single(&post_rpc(&mut h, sid, key, body));
        assert_error_frame(&frame, Value::Null, -32600, "Invalid Request");
    }
    // C-054 wrong or missing jsonrpc version, id echoed.
    let wrong_version = "Invalid Request: missing or wrong \"jsonrpc\" version";
    let body = br#"{"jsonrpc":"1.0","id":7,"method":"session.registerDriver"}"#;
    assert_error_frame(
        &single(&post_rpc(&mut h, sid, key, body)),
        json!(7),
        -32600,
        wrong_version,
    );
    let body = br#"{"id":"v","method":"session.registerDriver"}"#;
    assert_error_frame(
        &single(&post_rpc(&mut h, sid, key, body)),
        json!("v"),
        -32600,
        wrong_version,
    );
    // C-055 missing / non-string method.
    for body in [
        &br#"{"jsonrpc":"2.0","id":8}"#[..],
        br#"{"jsonrpc":"2.0","id":8,"method":5}"#,
    ] {
        let frame = single(&post_rpc(&mut h, sid, key, body));
        assert_error_frame(
            &frame,
            json!(8),
            -32600,
            "Invalid Request: missing \"method\"",
        );
    }
    // C-056 unknown method.
    let body = br#"{"jsonrpc":"2.0","id":"abc","method":"session.nope"}"#;
    let frame = single(&post_rpc(&mut h, sid, key, body));
    assert_error_frame(
        &frame,
        json!("abc"),
        -32601,
        "Method not found: session.nope",
    );
    // None of the above registered anybody or logged anything.
    assert_eq!(types_of(&h.events(sid, key)), ["session.open"]);
}

#[test]
fn c057_c058_notifications_write_an_empty_body() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (sid, key) = (f.sid.as_str(), f.skey.as_str());
    for body in [
        // C-057: unknown method without id.
        &br#"{"jsonrpc":"2.0","method":"session.nope"}"#[..],
        // Step 4/5 errors are silent for notifications too.
        br#"{"jsonrpc":"1.0","method":"x"}"#,
        // sendMessage before registration as a notification: silent.
        br#"{"jsonrpc":"2.0","method":"session.sendMessage","params":{"message":{"content":"hi"}}}"#,
        // C-058: registerDriver without id registers, silently.
        br#"{"jsonrpc":"2.0","method":"session.registerDriver","params":{}}"#,
    ] {
        let r = post_rpc(&mut h, sid, key, body);
        assert_ndjson_head(&r);
        assert!(r.text.is_empty(), "body {:?}", r.text);
    }
    let path = format!("/api/v1/sessions/{sid}/participants");
    assert_eq!(
        h.client("GET", &path, key, None).1,
        json!({"drivers": [f.key_id]})
    );
    assert_eq!(
        types_of(&h.events(sid, key)),
        ["session.open", "session.driver.register"]
    );
    assert!(h.call_bodies.is_empty());
}

#[test]
fn c059_c060_c062_id_echo_and_omitted_params() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (sid, key) = (f.sid.as_str(), f.skey.as_str());
    // C-059 `"id": null` is a request, echoed as null; C-062 params omitted.
    let body = br#"{"jsonrpc":"2.0","id":null,"method":"session.registerDriver"}"#;
    assert_eq!(
        single(&post_rpc(&mut h, sid, key, body)),
        json!({"jsonrpc":"2.0","id":null,"result":{"registered":true}})
    );
    // C-060 string and integer ids verbatim (also large / odd ones).
    for id in [
        json!("req-ü-1"),
        json!(""),
        json!(0),
        json!(-3),
        json!(9007199254740993u64),
        json!(4.5),
    ] {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"session.registerDriver"}).to_string();
        let r = post_rpc(&mut h, sid, key, body.as_bytes());
        let frame = single(&r);
        assert_eq!(frame["id"], id, "{}", r.text);
        assert_eq!(frame["result"], json!({"registered": true}));
        if id == json!(9007199254740993u64) {
            assert!(
                r.text.contains("\"id\":9007199254740993"),
                "no float round trip: {}",
                r.text
            );
        }
    }
    // C-062 for a method with required params: {} ⇒ missing "message".
    let body = br#"{"jsonrpc":"2.0","id":3,"method":"session.sendMessage"}"#;
    let frame = single(&post_rpc(&mut h, sid, key, body));
    assert_error_frame(
        &frame,
        json!(3),
        -32602,
        "Invalid params: missing \"message\"",
    );
    let body = br#"{"jsonrpc":"2.0","id":4,"method":"session.unsubscribe"}"#;
    let frame = single(&post_rpc(&mut h, sid, key, body));
    assert_eq!(frame["result"], json!({"unsubscribed": true}));
}

#[test]
fn c061_every_frame_is_one_json_object_per_line_terminal_last() {
    let mut h = Harness::new(config());
    let f = h.open_driver("main", &[], &[], json!({}));
    h.replies
        .push_back(anthropic_text("line one\nline two {\"x\":1}"));
    let body = json!({
        "jsonrpc": "2.0", "id": 11, "method": "session.sendMessage",
        "params": {"message": {"content": "multi\nline\ninput"}}
    });
    let r = post_rpc(
        &mut h,
        &f.sid,
        &f.a.session_key,
        body.to_string().as_bytes(),
    );
    assert_ndjson_head(&r);
    let frames = frames(&r);
    assert!(frames.len() >= 4, "{frames:?}");
    let (last, notes) = frames.split_last().unwrap();
    assert_eq!(last["id"], 11);
    assert!(last.get("result").is_some());
    for n in notes {
        assert!(n.get("id").is_none(), "only the last frame has an id: {n}");
        assert_eq!(
            (&n["jsonrpc"], &n["method"]),
            (&json!("2.0"), &json!("session.event"))
        );
    }
    assert_eq!(
        text_of(&last["result"]["message"]),
        "line one\nline two {\"x\":1}"
    );
}
