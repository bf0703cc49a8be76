//! What the harness's tests read answers with: the session's cast
//! (`Live`, `Driver`, `Fix`), responses with their head (`Reply`), RFC 7807
//! and JSON-RPC error checks, and small readers of event lists and
//! messages.

use proto::http::response::{ResponseDecoder, ResponseEvent};

use super::Harness;
use serde_json::{json, Value};

/// One client of a session: its key id and credentials.
#[derive(Debug, Clone)]
pub struct Driver {
    pub key_id: String,
    pub client_key: String,
    pub session_key: String,
}

/// A profile with a session opened (and driven) by a first client.
#[derive(Debug, Clone)]
pub struct Live {
    pub profile_id: String,
    pub sid: String,
    pub a: Driver,
}

/// `result.events` of a terminal frame.
pub fn result_events(terminal: &Value) -> Vec<Value> {
    terminal["result"]["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The EventViews carried by notification frames.
pub fn note_events(notes: &[Value]) -> Vec<Value> {
    notes.iter().map(|n| n["params"].clone()).collect()
}

/// The first `session.error` with this `reason`.
pub fn error_with_reason(events: &[Value], reason: &str) -> Option<Value> {
    events
        .iter()
        .find(|e| e["event_type"] == "session.error" && e["payload"]["reason"] == reason)
        .cloned()
}

/// Events of one type.
pub fn of_type(events: &[Value], event_type: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .cloned()
        .collect()
}

/// Event ids.
pub fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The concatenated text blocks of a message.
pub fn text_of(message: &Value) -> String {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .map(|b| b["text"].as_str().unwrap_or(""))
                .collect()
        })
        .unwrap_or_default()
}

/// A `tool_result` block.
pub fn tool_result(id: &str, text: &str) -> Value {
    serde_json::json!({"type": "tool_result", "tool_use_id": id, "content": text})
}

/// Asserts a JSON-RPC error terminal with `code` and exactly `message`.
#[track_caller]
pub fn assert_rpc_error(terminal: &Value, code: i64, message: &str) {
    assert_eq!(terminal["error"]["code"], code, "{terminal}");
    assert_eq!(terminal["error"]["message"], message, "{terminal}");
}

/// What [`Harness::fix`] made: a profile, one of its client keys and a
/// session opened with it.
pub struct Fix {
    pub profile: String,
    pub key_id: String,
    pub client_key: String,
    pub sid: String,
    pub skey: String,
}

/// A response with its head: status, headers, raw body and the body as
/// JSON (`Null` when empty, a string when not JSON).
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
    pub json: Value,
}

impl Reply {
    pub fn parse(raw: &[u8]) -> Reply {
        let mut decoder = ResponseDecoder::new();
        decoder.feed(raw);
        let (mut status, mut headers, mut body) = (0, Vec::new(), Vec::new());
        loop {
            match decoder.poll() {
                Ok(Some(ResponseEvent::Head(head))) => {
                    status = head.status;
                    headers = head.headers;
                }
                Ok(Some(ResponseEvent::Data(data))) => body.extend(data),
                Ok(Some(ResponseEvent::End { .. }) | None) => break,
                Err(e) => panic!(
                    "malformed response ({e}): {:?}",
                    String::from_utf8_lossy(raw)
                ),
            }
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let json = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or(Value::String(text.clone()))
        };
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Fixed RFC 7807 titles (spec 01 §3.1).
pub fn title_of(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "",
    }
}

/// Asserts an RFC 7807 error (C-014): status, `type`, exactly the four
/// members, the fixed title and `application/json`. Returns `detail`.
#[track_caller]
pub fn assert_problem(r: &Reply, status: u16, ty: &str) -> String {
    assert_eq!(r.status, status, "status; body {}", r.text);
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/json"),
        "problem content-type {ct:?}"
    );
    let obj = r
        .json
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {}", r.text));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["detail", "status", "title", "type"],
        "members of {}",
        r.text
    );
    assert_eq!(r.json["type"], ty, "type of {}", r.text);
    assert_eq!(r.json["status"], status, "status member of {}", r.text);
    let title = title_of(status);
    if !title.is_empty() {
        assert_eq!(r.json["title"], title, "title of {}", r.text);
    }
    r.json["detail"]
        .as_str()
        .expect("detail is a string")
        .to_string()
}

/// Event types of a list of EventViews.
pub fn types_of(evts: &[Value]) -> Vec<String> {
    evts.iter()
        .map(|e| e["event_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// True if `s` is `prefix` followed by exactly `n` lowercase hex digits.
pub fn is_prefixed_hex(s: &str, prefix: &str, n: usize) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == n
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22];
    b.len() == 24
        && digits.iter().all(|&i| b[i].is_ascii_digit())
        && [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (23, b'Z'),
        ]
        .iter()
        .all(|&(i, c)| b[i] == c)
}

/// A client tool declaration with an object schema.
pub fn tool(name: &str) -> Value {
    serde_json::json!({"name": name, "description": name, "input_schema": {"type": "object"}})
}

/// A JSON-RPC 2.0 call.
pub fn call(id: u64, method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Moves a session to `error` through provider exhaustion (C-085).
pub fn make_error_session(h: &mut Harness, f: &Fix) {
    h.register_driver(&f.sid, &f.skey);
    h.replies
        .push_back(engine::ProviderReply::Transport("refused".into()));
    let msg = json!({"message": {"role": "user", "content": "hello"}});
    let frames = h.rpc(&f.sid, &f.skey, &call(1, "session.sendMessage", msg));
    assert!(frames.last().unwrap().get("result").is_some(), "{frames:?}");
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
}
