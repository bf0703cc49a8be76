//! A deterministic in-process driver for engine tests: commits writes to a
//! `MemStore`, answers reads, answers provider calls from a script, and
//! collects the bytes written to each connection.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};

use engine::mem_store::MemStore;
use engine::{
    Config, ConnId, Engine, Entropy, Input, Listener, Now, Output, ProviderCall, ProviderReply,
};
use proto::http::response::{ResponseDecoder, ResponseEvent};
use serde_json::Value;

pub mod admin;
mod wire;
pub use wire::*;

pub struct SeqEntropy(pub u64);

impl Entropy for SeqEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 33) as u8;
        }
    }
}

pub const ADMIN_KEY: &str = "bae_admin_000000000000000000000000000000000000000000000000";

pub struct Harness {
    pub engine: Engine,
    pub store: MemStore,
    pub now: Now,
    pub sent: HashMap<ConnId, Vec<u8>>,
    /// Sends whose bytes were shared with other connections.
    pub shared_sends: usize,
    pub closed: Vec<ConnId>,
    pub calls: VecDeque<ProviderCall>,
    /// Calls the engine closed (`Output::AbortProvider`).
    pub aborted: Vec<engine::CallId>,
    /// Scripted provider replies, consumed in order; empty = calls wait.
    pub replies: VecDeque<ProviderReply>,
    /// MCP transport commands, in emission order.
    pub mcp: VecDeque<engine::mcp::McpCommand>,
    /// Container engine commands, in emission order.
    pub sandbox: VecDeque<engine::sandbox::SandboxCommand>,
    /// Store reads this matches are answered with an error.
    pub fail_read: Option<fn(&engine::StoreRead) -> bool>,
    /// Replica mode: leases held by other replicas (session id → address).
    pub leased_elsewhere: HashMap<String, String>,
    /// Requests forwarded to other replicas.
    pub forwards: Vec<engine::replicas::Forward>,
    /// Every store read the engine asked for, in order.
    pub reads_seen: Vec<engine::StoreRead>,
    /// The body of every provider call, in order.
    pub call_bodies: Vec<Vec<u8>>,
    /// When set, every send is reported flushed at once (a reader that
    /// keeps up); off, sent bytes stay unflushed (a reader that never
    /// reads), which is what the lag bounds count.
    pub auto_flush: bool,
    next_conn: ConnId,
}

impl Harness {
    pub fn new(config: Config) -> Self {
        Harness::as_configured(test_residency(config))
    }

    /// [`Harness::new`] without `BAE_TEST_RESIDENT_SESSIONS`: for a test
    /// whose assertions depend on the configured residency (its timers).
    pub fn as_configured(config: Config) -> Self {
        let store = MemStore::with_admin_key("key_admin", ADMIN_KEY);
        let now = Now {
            mono: engine::MonoMs(1_000),
            unix: engine::UnixMs(1_780_000_000_000),
        };
        let engine = Engine::new(
            config.clone(),
            Box::new(SeqEntropy(7)),
            store.snapshot(),
            now,
        );
        Harness {
            engine,
            store,
            now,
            sent: HashMap::new(),
            shared_sends: 0,
            closed: Vec::new(),
            calls: VecDeque::new(),
            aborted: Vec::new(),
            replies: VecDeque::new(),
            mcp: VecDeque::new(),
            sandbox: VecDeque::new(),
            fail_read: None,
            leased_elsewhere: HashMap::new(),
            forwards: Vec::new(),
            reads_seen: Vec::new(),
            call_bodies: Vec::new(),
            auto_flush: false,
            next_conn: ConnId(1),
        }
    }

    /// Rebuilds the engine from the store, as a restart would.
    pub fn restart(&mut self, config: Config) {
        self.restart_from(config, engine::store::SnapshotScope::Full);
    }

    /// [`Harness::restart`] from a snapshot of `scope`.
    pub fn restart_from(&mut self, config: Config, scope: engine::store::SnapshotScope) {
        self.engine = Engine::new(
            test_residency(config),
            Box::new(SeqEntropy(99)),
            self.store.snapshot_of(scope),
            self.now,
        );
        self.sent.clear();
        self.calls.clear();
    }

    pub fn input(&mut self, input: Input) {
        self.engine.handle_input(self.now, input);
        self.drain();
    }

    pub fn advance(&mut self, ms: u64) {
        self.now.mono += ms;
        self.now.unix += ms;
        if self
            .engine
            .poll_timeout()
            .is_some_and(|t| t <= self.now.mono)
        {
            self.engine.handle_timeout(self.now);
            self.drain();
        }
    }

    fn drain(&mut self) {
        loop {
            let mut progressed = false;
            let mut reads = Vec::new();
            let mut flushed = Vec::new();
            while let Some(o) = self.engine.poll_output() {
                progressed = true;
                match o {
                    Output::Write(w) => self.store.apply(&w),
                    Output::Send { conn, bytes } | Output::SendUngated { conn, bytes } => {
                        if matches!(
                            bytes,
                            engine::bytes::Bytes::Shared(_) | engine::bytes::Bytes::Text(_)
                        ) {
                            self.shared_sends += 1;
                        }
                        if self.auto_flush {
                            flushed.push((conn, bytes.len()));
                        }
                        self.sent.entry(conn).or_default().extend(bytes.iter())
                    }
                    Output::Close { conn } => self.closed.push(conn),
                    Output::Read { id, read } => {
                        self.reads_seen.push(read.clone());
                        reads.push((id, read))
                    }
                    Output::CallProvider(c) => {
                        self.call_bodies.push(c.body.clone());
                        self.calls.push_back(c)
                    }
                    Output::AbortProvider(c) => self.aborted.push(c),
                    Output::Mcp(c) => self.mcp.push_back(c),
                    Output::Sandbox(c) => self.sandbox.push_back(c),
                    Output::Forward(f) => self.forwards.push(f),
                }
            }
            for (conn, bytes) in flushed {
                progressed = true;
                self.engine
                    .handle_input(self.now, Input::Flushed { conn, bytes });
            }
            for (id, read) in reads {
                let elsewhere = match &read {
                    engine::StoreRead::ClaimLease { session_id, .. } => {
                        self.leased_elsewhere.get(session_id).cloned()
                    }
                    _ => None,
                };
                let result = match self.fail_read {
                    Some(fail) if fail(&read) => Err(engine::ReadError::Store(
                        "injected read failure".to_string(),
                    )),
                    _ => match elsewhere {
                        Some(addr) => {
                            Ok(engine::ReadResult::Lease(engine::store::Lease::Elsewhere {
                                addr,
                            }))
                        }
                        None => Ok(self.store.read(&read)),
                    },
                };
                self.engine
                    .handle_input(self.now, Input::ReadDone { id, result });
            }
            while let (Some(_), Some(_)) = (self.calls.front(), self.replies.front()) {
                let call = self.calls.pop_front().unwrap();
                let reply = self.replies.pop_front().unwrap();
                self.engine.handle_input(
                    self.now,
                    Input::ProviderDone {
                        call: call.id,
                        reply,
                    },
                );
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
    }

    pub fn connect(&mut self, listener: Listener) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.input(Input::Accepted { conn, listener });
        conn
    }

    pub fn send_bytes(&mut self, conn: ConnId, bytes: &[u8]) {
        self.input(Input::Received {
            conn,
            bytes: bytes.to_vec(),
        });
    }

    pub fn take(&mut self, conn: ConnId) -> Vec<u8> {
        self.sent.remove(&conn).unwrap_or_default()
    }

    /// One request on a fresh connection; returns (status, body).
    pub fn request(
        &mut self,
        listener: Listener,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let conn = self.connect(listener);
        self.send_bytes(conn, &build_request(method, path, token, body));
        let raw = self.take(conn);
        let (status, body) = parse_response(&raw);
        let json = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body)
                .unwrap_or(Value::String(String::from_utf8_lossy(&body).into()))
        };
        (status, json)
    }

    pub fn admin(&mut self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.request(Listener::Admin, method, path, Some(ADMIN_KEY), body)
    }

    pub fn client(
        &mut self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        self.request(Listener::Client, method, path, Some(token), body)
    }

    /// Starts an `/rpc` request and returns its connection (frames via `frames`).
    pub fn rpc_start(&mut self, session_id: &str, key: &str, call: &Value) -> ConnId {
        let conn = self.connect(Listener::Client);
        let path = format!("/api/v1/sessions/{session_id}/rpc");
        self.send_bytes(conn, &build_request("POST", &path, Some(key), Some(call)));
        conn
    }

    /// NDJSON frames written so far on `conn` (cumulative).
    pub fn frames(&self, conn: ConnId) -> Vec<Value> {
        let raw = self.sent.get(&conn).cloned().unwrap_or_default();
        let (_, body) = parse_response(&raw);
        body.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("frame is JSON"))
            .collect()
    }

    pub fn rpc(&mut self, session_id: &str, key: &str, call: &Value) -> Vec<Value> {
        let conn = self.rpc_start(session_id, key, call);
        self.frames(conn)
    }

    /// One request of raw bytes on a fresh connection on `listener`, with
    /// the response's head kept (for content types and exact bodies).
    pub fn raw(&mut self, listener: Listener, bytes: &[u8]) -> Reply {
        let conn = self.connect(listener);
        self.send_bytes(conn, bytes);
        Reply::parse(&self.take(conn))
    }

    /// `POST` with an explicit (or absent) content type and raw body bytes.
    pub fn post_raw(
        &mut self,
        listener: Listener,
        path: &str,
        token: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Reply {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            req.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.raw(listener, &bytes)
    }

    /// [`Harness::request`] keeping the response head.
    pub fn reply(
        &mut self,
        listener: Listener,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        self.raw(listener, &build_request(method, path, token, body))
    }

    /// Every item of a paginated list on `listener` (following `next_cursor`).
    pub fn all_pages(&mut self, listener: Listener, path: &str, token: &str) -> Vec<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let url = format!("{path}{sep}limit=200&cursor={cursor}");
            let (s, v) = self.request(listener, "GET", &url, Some(token), None);
            assert_eq!(s, 200, "{url}: {v}");
            out.extend(v["items"].as_array().expect("items").iter().cloned());
            match v["next_cursor"].as_str() {
                Some(n) => cursor = n.to_string(),
                None => return out,
            }
        }
    }

    /// All events of a session through the client port.
    pub fn events(&mut self, sid: &str, skey: &str) -> Vec<Value> {
        let path = format!("/api/v1/sessions/{sid}/events");
        self.all_pages(Listener::Client, &path, skey)
    }

    /// All events of a session through the admin port.
    pub fn admin_events(&mut self, sid: &str) -> Vec<Value> {
        let path = format!("/admin/v1/sessions/{sid}/events");
        self.all_pages(Listener::Admin, &path, ADMIN_KEY)
    }

    /// Every admin session row.
    pub fn admin_sessions(&mut self) -> Vec<Value> {
        self.all_pages(Listener::Admin, "/admin/v1/sessions", ADMIN_KEY)
    }

    /// The admin session row of `sid`.
    #[track_caller]
    pub fn admin_session(&mut self, sid: &str) -> Value {
        let rows = self.admin_sessions();
        rows.into_iter()
            .find(|r| r["id"] == sid)
            .unwrap_or_else(|| panic!("session {sid} not in the admin list"))
    }

    /// A profile on provider `main` with these allowed tools; returns its id.
    pub fn profile(&mut self, allowed_tools: &[&str]) -> String {
        self.profile_on("main", allowed_tools)
    }

    /// A profile whose primary provider is `provider` (which may not exist).
    pub fn profile_on(&mut self, provider: &str, allowed_tools: &[&str]) -> String {
        let name = format!("p{}", self.next_conn);
        let body = serde_json::json!({"name": name, "primary_provider": provider, "allowed_tools": allowed_tools});
        let (s, p) = self.admin("POST", "/admin/v1/profiles", Some(&body));
        assert_eq!(s, 201, "{p}");
        p["id"].as_str().unwrap().to_string()
    }

    /// A client key of `profile_id`: (key id, plaintext).
    pub fn key(&mut self, profile_id: &str) -> (String, String) {
        let body = serde_json::json!({"name": "k", "profile_id": profile_id});
        let (s, k) = self.admin("POST", "/admin/v1/keys", Some(&body));
        assert_eq!(s, 201, "{k}");
        (
            k["id"].as_str().unwrap().to_string(),
            k["key"].as_str().unwrap().to_string(),
        )
    }

    /// Delivers scripted provider replies pushed after their calls went
    /// out (a provider answering later), and whatever follows from them.
    pub fn pump(&mut self) {
        self.drain();
    }

    /// A profile (`primary`, `fallbacks`, `allowed`), a client key and a
    /// session opened with `body`; the creator registers as a driver.
    pub fn open_driver(
        &mut self,
        primary: &str,
        fallbacks: &[&str],
        allowed: &[&str],
        body: Value,
    ) -> Live {
        let profile = serde_json::json!({
            "name": format!("p{}", self.next_conn),
            "primary_provider": primary,
            "fallback_providers": fallbacks,
            "allowed_tools": allowed,
        });
        self.open_driver_with(&profile, body)
    }

    /// [`Harness::open_driver`] with a whole admin profile body.
    pub fn open_driver_with(&mut self, profile: &Value, body: Value) -> Live {
        let (s, p) = self.admin("POST", "/admin/v1/profiles", Some(profile));
        assert_eq!(s, 201, "{p}");
        let profile_id = p["id"].as_str().unwrap().to_string();
        let (key_id, client_key) = self.key(&profile_id);
        let (s, o) = self.client("POST", "/api/v1/sessions", &client_key, Some(&body));
        assert_eq!(s, 201, "{o}");
        let sid = o["session_id"].as_str().unwrap().to_string();
        let a = Driver {
            key_id,
            client_key,
            session_key: o["session_key"].as_str().unwrap().into(),
        };
        self.register_driver(&sid, &a.session_key);
        Live { profile_id, sid, a }
    }

    /// A second client key on `live`'s profile joins with `body` and
    /// registers as a driver.
    pub fn join_driver(&mut self, live: &Live, body: Value) -> Driver {
        let (key_id, client_key) = self.key(&live.profile_id);
        let path = format!("/api/v1/sessions/{}/join", live.sid);
        let (s, j) = self.client("POST", &path, &client_key, Some(&body));
        assert_eq!(s, 201, "{j}");
        let d = Driver {
            key_id,
            client_key,
            session_key: j["session_key"].as_str().unwrap().into(),
        };
        self.register_driver(&live.sid, &d.session_key);
        d
    }

    /// Starts `session.sendMessage` with `content` (its stream: `frames`).
    pub fn send_start(&mut self, sid: &str, key: &str, content: Value) -> ConnId {
        let params = serde_json::json!({"message": {"role": "user", "content": content}});
        self.rpc_start(sid, key, &call(1, "session.sendMessage", params))
    }

    /// `session.sendMessage` that must finish now: (notifications, terminal).
    #[track_caller]
    pub fn send(&mut self, sid: &str, key: &str, content: Value) -> (Vec<Value>, Value) {
        let conn = self.send_start(sid, key, content);
        self.finished(conn)
    }

    /// The notifications and terminal frame of a finished call on `conn`.
    #[track_caller]
    pub fn finished(&self, conn: ConnId) -> (Vec<Value>, Value) {
        let mut frames = self.frames(conn);
        let terminal = frames.pop().expect("a frame");
        assert!(
            terminal.get("id").is_some(),
            "no terminal frame yet: {terminal}"
        );
        (frames, terminal)
    }

    /// Profile + key + session with an empty body.
    pub fn fix(&mut self, allowed_tools: &[&str]) -> Fix {
        let profile = self.profile(allowed_tools);
        let (key_id, client_key) = self.key(&profile);
        let (s, o) = self.client(
            "POST",
            "/api/v1/sessions",
            &client_key,
            Some(&serde_json::json!({})),
        );
        assert_eq!(s, 201, "{o}");
        Fix {
            profile,
            key_id,
            client_key,
            sid: o["session_id"].as_str().unwrap().into(),
            skey: o["session_key"].as_str().unwrap().into(),
        }
    }

    /// Profile + client key + open session; returns (client key, session id, session key).
    /// `session.registerDriver` for `key`, which must succeed.
    pub fn register_driver(&mut self, session_id: &str, key: &str) {
        let call =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"});
        let f = self.rpc(session_id, key, &call);
        assert_eq!(f[0]["result"]["registered"], true, "{f:?}");
    }

    pub fn open_session(
        &mut self,
        allowed_tools: &[&str],
        body: Value,
    ) -> (String, String, String) {
        let (s, p) = self.admin(
            "POST",
            "/admin/v1/profiles",
            Some(&serde_json::json!({"name": format!("p{}", self.next_conn), "primary_provider": "main", "allowed_tools": allowed_tools})),
        );
        assert_eq!(s, 201, "{p}");
        let (s, k) = self.admin(
            "POST",
            "/admin/v1/keys",
            Some(&serde_json::json!({"name": "k", "profile_id": p["id"]})),
        );
        assert_eq!(s, 201, "{k}");
        let key = k["key"].as_str().unwrap().to_string();
        let (s, o) = self.client("POST", "/api/v1/sessions", &key, Some(&body));
        assert_eq!(s, 201, "{o}");
        (
            key,
            o["session_id"].as_str().unwrap().into(),
            o["session_key"].as_str().unwrap().into(),
        )
    }
}

/// `BAE_TEST_RESIDENT_SESSIONS=<n>` (testkit/scripts/test-all.sh runs the
/// engine tests again with 0): the resident-session budget of every test
/// that does not set its own, so the flows also run with each idle session
/// evicted after every input and loaded back by its next request.
fn test_residency(mut config: Config) -> Config {
    let default = Config::default().resident_sessions;
    if config.resident_sessions == default {
        if let Some(n) = std::env::var("BAE_TEST_RESIDENT_SESSIONS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            config.resident_sessions = Some(n);
        }
    }
    config
}

pub fn build_request(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Vec<u8> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    req.into_bytes()
}

/// Status and de-chunked body of the first response in `raw`, as far as it
/// has arrived (a stream may still be open); `(0, [])` before its head is
/// complete. Decoded with proto's strict decoder: malformed framing fails
/// the test.
pub fn parse_response(raw: &[u8]) -> (u16, Vec<u8>) {
    let mut decoder = ResponseDecoder::new();
    decoder.feed(raw);
    let (mut status, mut body) = (0, Vec::new());
    loop {
        match decoder.poll() {
            Ok(Some(ResponseEvent::Head(head))) => status = head.status,
            Ok(Some(ResponseEvent::Data(data))) => body.extend(data),
            Ok(Some(ResponseEvent::End { .. }) | None) => return (status, body),
            Err(e) => panic!(
                "malformed response ({e}): {:?}",
                String::from_utf8_lossy(raw)
            ),
        }
    }
}

pub fn anthropic_text(text: &str) -> ProviderReply {
    let body = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}
    });
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

pub fn anthropic_tool_use(blocks: Value) -> ProviderReply {
    let body = serde_json::json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "m",
        "content": blocks, "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}
    });
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

pub fn config() -> Config {
    Config {
        providers: vec![engine::ProviderEntry {
            name: "main".into(),
            kind: proto::provider::Kind::Anthropic,
            base_url: "http://127.0.0.1:9".into(),
            model: "claude-test".into(),
            auth_template: "${TOKEN}".into(),
            max_tokens: 1024,
            retry: None,
            limits: None,
            cache: None,
            prices: None,
            stream: None,
        }],
        ..Config::default()
    }
}
