//! Helpers over the admin and client APIs of a running [`Server`], plus
//! config-file builders. Every helper panics (showing the response body) on
//! an unexpected status.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use crate::http::next_rpc_id;
use crate::server::Server;

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// `<prefix>-<pid>-<n>`: unique within the test process run.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

fn str_field(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("response lacks string member {field:?}: {v}"))
        .to_string()
}

/// `POST /admin/v1/profiles`; returns the `pro_…` id.
#[track_caller]
pub fn create_profile(
    server: &Server,
    name: &str,
    primary: &str,
    fallbacks: &[&str],
    allowed_tools: &[&str],
) -> String {
    create_profile_json(
        server,
        &json!({
            "name": name,
            "primary_provider": primary,
            "fallback_providers": fallbacks,
            "allowed_tools": allowed_tools,
        }),
    )
}

/// `POST /admin/v1/profiles` with an arbitrary body; returns the id.
#[track_caller]
pub fn create_profile_json(server: &Server, body: &Value) -> String {
    let resp = server.admin().post_json("/admin/v1/profiles", body);
    resp.assert_status(201);
    str_field(&resp.json(), "id")
}

/// `POST /admin/v1/keys` (auto-generated name); returns (key id, plaintext).
#[track_caller]
pub fn create_key(server: &Server, profile_id: &str) -> (String, String) {
    let resp = server.admin().post_json(
        "/admin/v1/keys",
        &json!({"name": unique_name("key"), "profile_id": profile_id}),
    );
    resp.assert_status(201);
    let v = resp.json();
    (str_field(&v, "id"), str_field(&v, "key"))
}

/// `POST /api/v1/sessions`; returns (session id, session key).
#[track_caller]
pub fn open_session(server: &Server, client_key: &str, body: Value) -> (String, String) {
    let resp = server
        .client()
        .bearer(client_key)
        .post_json("/api/v1/sessions", &body);
    resp.assert_status(201);
    let v = resp.json();
    (str_field(&v, "session_id"), str_field(&v, "session_key"))
}

/// `POST /api/v1/sessions/{id}/join`; returns the joiner's session key.
#[track_caller]
pub fn join_session(server: &Server, session_id: &str, client_key: &str, body: Value) -> String {
    let resp = server
        .client()
        .bearer(client_key)
        .post_json(&format!("/api/v1/sessions/{session_id}/join"), &body);
    resp.assert_status(201);
    str_field(&resp.json(), "session_key")
}

/// `session.registerDriver`; panics unless the result is `registered: true`.
#[track_caller]
pub fn register_driver(server: &Server, session_id: &str, session_key: &str) {
    let (_, terminal) = server.client().rpc(
        session_id,
        session_key,
        "session.registerDriver",
        json!({}),
        next_rpc_id(),
    );
    assert_eq!(
        terminal.pointer("/result/registered"),
        Some(&Value::Bool(true)),
        "registerDriver failed: {terminal}"
    );
}

/// `session.sendMessage` with a user message; returns (notifications, terminal).
#[track_caller]
pub fn send_message(
    server: &Server,
    session_id: &str,
    session_key: &str,
    content: Value,
) -> (Vec<Value>, Value) {
    server.client().rpc(
        session_id,
        session_key,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": content}}),
        next_rpc_id(),
    )
}

/// Everything needed to drive one session.
#[derive(Debug, Clone)]
pub struct ReadySession {
    pub profile_id: String,
    pub key_id: String,
    pub client_key: String,
    pub session_id: String,
    pub session_key: String,
}

/// Create a uniquely named profile, a client key, open a session (no tools
/// declared) and register the driver.
#[track_caller]
pub fn ready_session(
    server: &Server,
    primary: &str,
    fallbacks: &[&str],
    allowed_tools: &[&str],
) -> ReadySession {
    let profile_id = create_profile(
        server,
        &unique_name("profile"),
        primary,
        fallbacks,
        allowed_tools,
    );
    let (key_id, client_key) = create_key(server, &profile_id);
    let (session_id, session_key) = open_session(server, &client_key, json!({}));
    register_driver(server, &session_id, &session_key);
    ReadySession {
        profile_id,
        key_id,
        client_key,
        session_id,
        session_key,
    }
}

/// A TOML basic string literal (quoted and escaped).
pub fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `[[providers.entries]]` tables for `(name, kind, base_url, model, token)`
/// tuples. An empty `base_url` omits the key (kind default applies).
pub fn provider_toml(entries: &[(&str, &str, &str, &str, &str)]) -> String {
    let mut out = String::new();
    for (name, kind, base_url, model, token) in entries {
        out.push_str("[[providers.entries]]\n");
        out.push_str(&format!("name = {}\n", toml_string(name)));
        out.push_str(&format!("provider = {}\n", toml_string(kind)));
        if !base_url.is_empty() {
            out.push_str(&format!("base_url = {}\n", toml_string(base_url)));
        }
        out.push_str(&format!("model = {}\n", toml_string(model)));
        out.push_str(&format!("auth_token = {}\n\n", toml_string(token)));
    }
    out
}
