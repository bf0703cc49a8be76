//! JSON-RPC envelope and NDJSON framing of `POST /api/v1/sessions/{id}/rpc`
//! over the real binary (spec 01 §5; checklist C-049, C-050, C-061): the
//! 401 before any NDJSON and a streamed turn's framing on a real socket.
//! Envelope errors, notifications, id echo and omitted params
//! (C-050…C-063) are tested in-process in `engine/tests/rpc_envelope_flows.rs`.

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
