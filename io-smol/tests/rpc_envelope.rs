//! JSON-RPC envelope and NDJSON framing of `POST /api/v1/sessions/{id}/rpc`
//! over the real binary (spec 01 §5; checklist C-049…C-063).

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{Response, Server};

/// POSTs raw bytes to the session's `/rpc` and reads the whole response.
fn post_rpc(server: &Server, session_id: &str, key: &str, body: &[u8]) -> Response {
    server.client().bearer(key).request(
        "POST",
        &format!("/api/v1/sessions/{session_id}/rpc"),
        &[("content-type", "application/json")],
        body,
    )
}

/// The NDJSON lines of a response; asserts the framing rules of C-061.
#[track_caller]
fn frames(resp: &Response) -> Vec<Value> {
    let text = resp.text();
    if text.is_empty() {
        return Vec::new();
    }
    assert!(text.ends_with('\n'), "body must end with \\n: {text:?}");
    text[..text.len() - 1]
        .split('\n')
        .map(|line| {
            assert!(!line.trim().is_empty(), "blank NDJSON line in {text:?}");
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("NDJSON line is not JSON ({e}): {line:?}"));
            assert!(v.is_object(), "frame is not an object: {line}");
            v
        })
        .collect()
}

/// Asserts the C-050 head: 200, `application/x-ndjson`, chunked.
#[track_caller]
fn assert_ndjson_head(resp: &Response) {
    resp.assert_status(200);
    let ct = resp.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/x-ndjson"),
        "content-type {ct:?}"
    );
    assert_eq!(
        resp.header("transfer-encoding")
            .map(str::to_ascii_lowercase),
        Some("chunked".to_string()),
        "rpc responses are streamed chunked: {:?}",
        resp.headers
    );
}

/// The single terminal frame of a single-answer call.
#[track_caller]
fn single(resp: &Response) -> Value {
    assert_ndjson_head(resp);
    let f = frames(resp);
    assert_eq!(f.len(), 1, "exactly one frame expected: {f:?}");
    f.into_iter().next().unwrap()
}

/// C-063: an error object carries exactly `code` and `message`.
#[track_caller]
fn assert_error_frame(frame: &Value, id: Value, code: i64, message: &str) {
    let keys: Vec<&String> = frame.as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["error", "id", "jsonrpc"], "{frame}");
    assert_eq!(frame["jsonrpc"], "2.0");
    assert_eq!(frame["id"], id, "{frame}");
    let err = frame["error"].as_object().expect("error object");
    let mut members: Vec<&String> = err.keys().collect();
    members.sort();
    assert_eq!(members, vec!["code", "message"], "C-063: {frame}");
    assert_eq!(frame["error"]["code"], json!(code), "{frame}");
    assert_eq!(frame["error"]["message"], json!(message), "{frame}");
}

#[test]
fn c049_bad_session_key_is_401_problem_before_any_ndjson() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}"#;
    for key in [
        "bae_ses_000000000000000000000000000000000000000000000000",
        f.a.client_key.as_str(), // a client key is the wrong role
        "",
    ] {
        let resp = post_rpc(&server, &f.session_id, key, body);
        resp.assert_status(401);
        assert!(
            resp.header("content-type")
                .unwrap_or("")
                .starts_with("application/json"),
            "{:?}",
            resp.headers
        );
        let problem = resp.json();
        assert_eq!(problem["type"], "unauthorized");
        assert_eq!(problem["status"], 401);
        assert!(problem["title"].is_string() && problem["detail"].is_string());
        assert!(!resp.text().contains("jsonrpc"));
    }
    // Missing header entirely.
    let resp = server.client().request(
        "POST",
        &format!("/api/v1/sessions/{}/rpc", f.session_id),
        &[],
        body,
    );
    resp.assert_status(401);
    assert_eq!(resp.problem_type().as_deref(), Some("unauthorized"));
    // Nothing was registered by the rejected calls.
    assert!(!types(&events(&server, &f.session_id, &f.a.session_key))
        .contains(&"session.driver.register".to_string()));
}

#[test]
fn c050_to_c056_envelope_errors_and_c063_error_shape() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.as_str(), f.a.session_key.as_str());

    // C-051 parse error.
    let frame = single(&post_rpc(&server, sid, key, b"{not json"));
    assert_error_frame(&frame, Value::Null, -32700, "Parse error");
    assert_eq!(
        frame,
        json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})
    );
    // C-052 batch.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}]"#;
    let frame = single(&post_rpc(&server, sid, key, batch));
    assert_error_frame(
        &frame,
        Value::Null,
        -32600,
        "Invalid Request: batch requests are not supported",
    );
    // C-053 non-object JSON.
    for body in [&b"42"[..], b"\"x\"", b"null", b"true"] {
        let frame = single(&post_rpc(&server, sid, key, body));
        assert_error_frame(&frame, Value::Null, -32600, "Invalid Request");
    }
    // C-054 wrong or missing jsonrpc version, id echoed.
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"1.0","id":7,"method":"session.registerDriver"}"#,
    ));
    assert_error_frame(
        &frame,
        json!(7),
        -32600,
        "Invalid Request: missing or wrong \"jsonrpc\" version",
    );
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"id":"v","method":"session.registerDriver"}"#,
    ));
    assert_error_frame(
        &frame,
        json!("v"),
        -32600,
        "Invalid Request: missing or wrong \"jsonrpc\" version",
    );
    // C-055 missing / non-string method.
    for body in [
        &br#"{"jsonrpc":"2.0","id":8}"#[..],
        br#"{"jsonrpc":"2.0","id":8,"method":5}"#,
    ] {
        let frame = single(&post_rpc(&server, sid, key, body));
        assert_error_frame(
            &frame,
            json!(8),
            -32600,
            "Invalid Request: missing \"method\"",
        );
    }
    // C-056 unknown method.
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","id":"abc","method":"session.nope"}"#,
    ));
    assert_error_frame(
        &frame,
        json!("abc"),
        -32601,
        "Method not found: session.nope",
    );
    // None of the above registered anybody or logged anything.
    assert_eq!(
        types(&events(&server, sid, key)),
        vec!["session.open".to_string()]
    );
}

#[test]
fn c057_c058_notifications_write_an_empty_body() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.as_str(), f.a.session_key.as_str());

    // C-057: unknown method without id.
    let resp = post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","method":"session.nope"}"#,
    );
    assert_ndjson_head(&resp);
    assert!(resp.body.is_empty(), "body {:?}", resp.text());
    // Step 4/5 errors are silent for notifications too.
    let resp = post_rpc(&server, sid, key, br#"{"jsonrpc":"1.0","method":"x"}"#);
    assert_ndjson_head(&resp);
    assert!(resp.body.is_empty(), "body {:?}", resp.text());
    // sendMessage before registration as a notification: silent.
    let resp = post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","method":"session.sendMessage","params":{"message":{"content":"hi"}}}"#,
    );
    assert_ndjson_head(&resp);
    assert!(resp.body.is_empty(), "body {:?}", resp.text());

    // C-058: registerDriver without id registers, silently.
    let resp = post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","method":"session.registerDriver","params":{}}"#,
    );
    assert_ndjson_head(&resp);
    assert!(resp.body.is_empty(), "body {:?}", resp.text());
    let parts = server
        .client()
        .bearer(key)
        .get(&format!("/api/v1/sessions/{sid}/participants"));
    parts.assert_status(200);
    assert_eq!(parts.json(), json!({"drivers": [f.a.key_id]}));
    let evs = events(&server, sid, key);
    assert_eq!(
        types(&evs),
        vec!["session.open", "session.driver.register"],
        "{evs:?}"
    );
}

#[test]
fn c059_c060_c062_id_echo_and_omitted_params() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.as_str(), f.a.session_key.as_str());

    // C-059 `"id": null` is a request, echoed as null; C-062 params omitted.
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","id":null,"method":"session.registerDriver"}"#,
    ));
    assert_eq!(
        frame,
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
        let body =
            serde_json::to_vec(&json!({"jsonrpc":"2.0","id":id,"method":"session.registerDriver"}))
                .unwrap();
        let resp = post_rpc(&server, sid, key, &body);
        let frame = single(&resp);
        assert_eq!(frame["id"], id, "{}", resp.text());
        assert_eq!(frame["result"], json!({"registered": true}));
        if id == json!(9007199254740993u64) {
            // Verbatim: no float round trip of large integers.
            assert!(
                resp.text().contains("\"id\":9007199254740993"),
                "{}",
                resp.text()
            );
        }
    }
    // C-062 for a method with required params: {} ⇒ missing "message".
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","id":3,"method":"session.sendMessage"}"#,
    ));
    assert_error_frame(
        &frame,
        json!(3),
        -32602,
        "Invalid params: missing \"message\"",
    );
    // Omitted params on subscribe+unsubscribe behave like {}.
    let frame = single(&post_rpc(
        &server,
        sid,
        key,
        br#"{"jsonrpc":"2.0","id":4,"method":"session.unsubscribe"}"#,
    ));
    assert_eq!(frame["result"], json!({"unsubscribed": true}));
}

#[test]
fn c061_every_frame_is_one_json_object_per_line_terminal_last() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(testkit::Reply::text("line one\nline two {\"x\":1}"));
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 11, "method": "session.sendMessage",
        "params": {"message": {"content": "multi\nline\ninput"}}
    }))
    .unwrap();
    let resp = post_rpc(&server, &f.session_id, &f.a.session_key, &body);
    assert_ndjson_head(&resp);
    let f = frames(&resp);
    assert!(f.len() >= 4, "{f:?}");
    let (last, notes) = f.split_last().unwrap();
    assert_eq!(last["id"], 11);
    assert!(last.get("result").is_some());
    for n in notes {
        assert!(n.get("id").is_none(), "only the last frame has an id: {n}");
        assert_eq!(n["jsonrpc"], "2.0");
        assert_eq!(n["method"], "session.event");
    }
    assert_eq!(
        text_of(&last["result"]["message"]),
        "line one\nline two {\"x\":1}"
    );
}
