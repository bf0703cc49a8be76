//! Shared helpers of the live-loop and compaction end-to-end tests
//! (`live_*.rs`, `rpc_*.rs`, `compaction_*.rs`): boot the real `baesrv`
//! against a loopback [`MockProvider`], open sessions, read the event log.
//!
//! Each test file includes this module with `mod live_support;`; not every
//! file uses every helper.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::http::next_rpc_id;
use testkit::{rpc_request, MockProvider, RpcStream, Server, ServerOptions};

/// Generous bound for anything that should happen "now".
pub const WAIT: Duration = Duration::from_secs(10);

/// Path of the binary under test: `baesrv`, or `baesrv-threads` when
/// `BAE_TEST_RUNTIME=threads` (the second runtime's e2e pass).
pub fn bin() -> &'static str {
    match std::env::var("BAE_TEST_RUNTIME").as_deref() {
        Ok("threads") => env!("CARGO_BIN_EXE_baesrv-threads"),
        _ => env!("CARGO_BIN_EXE_baesrv"),
    }
}

/// Server options with the real binary and the given config.
pub fn opts(config: &str) -> ServerOptions {
    ServerOptions::new().bin(bin()).config(config)
}

/// A mock provider and a server whose registry has one Anthropic entry
/// named `main` pointing at it. `env` is extra child environment.
pub fn anthropic_server(env: &[(&str, &str)]) -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let config = provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "tok-main",
    )]);
    let mut o = opts(&config);
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    (mock, Server::start(o))
}

/// One client of a session: key ids and credentials.
#[derive(Debug, Clone)]
pub struct Client {
    pub key_id: String,
    pub client_key: String,
    pub session_key: String,
}

/// A profile with a session opened by a first client.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub profile_id: String,
    pub session_id: String,
    pub a: Client,
}

/// Creates a profile (`primary`, `fallbacks`, `allowed`), a client key and a
/// session opened with `body` (which may declare tools / compaction).
pub fn open(
    server: &Server,
    primary: &str,
    fallbacks: &[&str],
    allowed: &[&str],
    body: Value,
) -> Fixture {
    let profile = json!({
        "name": unique_name("profile"),
        "primary_provider": primary,
        "fallback_providers": fallbacks,
        "allowed_tools": allowed,
    });
    open_with_profile(server, &profile, body)
}

/// A profile created from `profile` (an admin body), a client key and a
/// session opened with `body`.
pub fn open_with_profile(server: &Server, profile: &Value, body: Value) -> Fixture {
    let profile_id = fixtures::create_profile_json(server, profile);
    let (key_id, client_key) = fixtures::create_key(server, &profile_id);
    let (session_id, session_key) = fixtures::open_session(server, &client_key, body);
    Fixture {
        profile_id,
        session_id,
        a: Client {
            key_id,
            client_key,
            session_key,
        },
    }
}

/// [`open`] then `registerDriver` for the creator.
pub fn open_registered(
    server: &Server,
    primary: &str,
    fallbacks: &[&str],
    allowed: &[&str],
    body: Value,
) -> Fixture {
    let f = open(server, primary, fallbacks, allowed, body);
    fixtures::register_driver(server, &f.session_id, &f.a.session_key);
    f
}

impl Fixture {
    /// A second client key on the same profile joins with `body`.
    pub fn join(&self, server: &Server, body: Value) -> Client {
        let (key_id, client_key) = fixtures::create_key(server, &self.profile_id);
        let session_key = fixtures::join_session(server, &self.session_id, &client_key, body);
        Client {
            key_id,
            client_key,
            session_key,
        }
    }

    /// [`Fixture::join`] then `registerDriver`.
    pub fn join_registered(&self, server: &Server, body: Value) -> Client {
        let c = self.join(server, body);
        fixtures::register_driver(server, &self.session_id, &c.session_key);
        c
    }
}

/// Driver A (declaring the client tool `get_time`) and a second driver B on
/// one session: the usual cast of the gate tests.
pub fn get_time_pair(server: &Server, primary: &str) -> (Fixture, Client) {
    let f = open_registered(
        server,
        primary,
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let b = f.join_registered(server, json!({}));
    (f, b)
}

/// Opt-in switch that keeps driver registrations across restarts
/// (extension; off by default: the contract's registry is in memory).
pub const DURABLE_DRIVERS: (&str, &str) = ("BAE_DURABLE_DRIVERS", "true");

/// After a restart in the default (non-durable) mode, drivers register
/// again, as SDKs do on reconnect.
#[track_caller]
pub fn reregister(server: &Server, session_id: &str, clients: &[&Client]) {
    for c in clients {
        fixtures::register_driver(server, session_id, &c.session_key);
    }
}

/// One complete JSON-RPC call: (notifications, terminal frame).
#[track_caller]
pub fn rpc(
    server: &Server,
    session_id: &str,
    session_key: &str,
    method: &str,
    params: Value,
) -> (Vec<Value>, Value) {
    server
        .client()
        .rpc(session_id, session_key, method, params, next_rpc_id())
}

/// `session.sendMessage` with `{role:"user", content}`.
#[track_caller]
pub fn send(server: &Server, session_id: &str, c: &Client, content: Value) -> (Vec<Value>, Value) {
    fixtures::send_message(server, session_id, &c.session_key, content)
}

/// Opens a streaming call without reading anything.
pub fn stream(
    server: &Server,
    session_id: &str,
    session_key: &str,
    method: &str,
    params: Value,
) -> RpcStream {
    server.client().rpc_stream(
        session_id,
        session_key,
        &rpc_request(method, params, next_rpc_id()),
    )
}

/// A `session.sendMessage` stream (not read yet).
pub fn send_stream(server: &Server, session_id: &str, c: &Client, content: Value) -> RpcStream {
    stream(
        server,
        session_id,
        &c.session_key,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": content}}),
    )
}

/// A `session.subscribe` stream (not read yet).
pub fn subscribe(server: &Server, session_id: &str, session_key: &str, params: Value) -> RpcStream {
    stream(server, session_id, session_key, "session.subscribe", params)
}

/// Every event of the session through `GET …/events` (all pages).
#[track_caller]
pub fn events(server: &Server, session_id: &str, session_key: &str) -> Vec<Value> {
    let client = server.client().bearer(session_key);
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let resp = client.get(&format!(
            "/api/v1/sessions/{session_id}/events?limit=200&cursor={cursor}"
        ));
        resp.assert_status(200);
        let page = resp.json();
        out.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => return out,
        }
    }
}

/// The `event_type` of each event.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The EventViews carried by `session.event` notification frames.
pub fn note_events(notes: &[Value]) -> Vec<Value> {
    notes
        .iter()
        .filter(|n| n["method"] == "session.event")
        .map(|n| n["params"].clone())
        .collect()
}

/// The `result.events` of a terminal frame.
#[track_caller]
pub fn result_events(terminal: &Value) -> Vec<Value> {
    terminal["result"]["events"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("terminal frame has no result.events: {terminal}"))
}

/// Events of `event_type` in `events`.
pub fn of_type(events: &[Value], event_type: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .cloned()
        .collect()
}

/// The single event of `event_type` with `payload.reason == reason`, if any.
pub fn error_with_reason(events: &[Value], reason: &str) -> Option<Value> {
    events
        .iter()
        .find(|e| e["event_type"] == "session.error" && e["payload"]["reason"] == reason)
        .cloned()
}

/// Ids of a list of EventViews.
pub fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The text of the first text block of a message.
pub fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .find(|b| b["type"] == "text")
            .and_then(|b| b["text"].as_str())
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

/// The session state as seen by the admin API (`GET /admin/v1/sessions`,
/// filtered per state).
#[track_caller]
pub fn admin_state(server: &Server, session_id: &str) -> String {
    for state in ["open", "closed", "error"] {
        let mut cursor = String::new();
        loop {
            let resp = server.admin().get(&format!(
                "/admin/v1/sessions?state={state}&limit=200&cursor={cursor}"
            ));
            resp.assert_status(200);
            let page = resp.json();
            let items = page["items"].as_array().cloned().unwrap_or_default();
            if items.iter().any(|i| i["id"] == session_id) {
                return state.to_string();
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
    }
    panic!("session {session_id} not listed by the admin API")
}

/// Poll `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads `n` event notifications from a stream (panics on a shortfall).
#[track_caller]
pub fn read_events(s: &mut RpcStream, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < n {
        match s.next_frame(WAIT) {
            Some(f) if f["method"] == "session.event" => out.push(f["params"].clone()),
            Some(f) => panic!("unexpected frame after {} events: {f}", out.len()),
            None => panic!("stream ended/timed out after {} of {n} events", out.len()),
        }
    }
    out
}

/// Reads event notifications until one has `event_type` (inclusive).
#[track_caller]
pub fn read_events_until(s: &mut RpcStream, event_type: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        match s.next_frame(WAIT) {
            Some(f) if f["method"] == "session.event" => {
                let done = f["params"]["event_type"] == event_type;
                out.push(f["params"].clone());
                if done {
                    return out;
                }
            }
            Some(f) => panic!("unexpected frame while waiting for {event_type}: {f}"),
            None => panic!("no {event_type} within {WAIT:?}; got {:?}", types(&out)),
        }
    }
}

/// A client tool declaration.
pub fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("{name} tool"), "input_schema": {"type": "object"}})
}

/// A `tool_result` block.
pub fn tool_result(id: &str, text: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": text})
}

/// Asserts the terminal frame is a JSON-RPC error with `code` and exactly
/// `message`.
#[track_caller]
pub fn assert_rpc_error(terminal: &Value, code: i64, message: &str) {
    assert_eq!(
        terminal["error"]["code"],
        json!(code),
        "wrong error code: {terminal}"
    );
    assert_eq!(
        terminal["error"]["message"],
        json!(message),
        "wrong error message: {terminal}"
    );
}

#[allow(unused_imports)] // Not every test binary reads raw streams.
pub use testkit::ndjson::RawStream;
