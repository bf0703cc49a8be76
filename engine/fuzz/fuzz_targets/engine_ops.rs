//! The whole engine under arbitrary sequences of inputs: connections on both
//! ports carrying templated requests (every route and JSON-RPC method, with
//! fuzzed params and extension opt-ins) or raw bytes, closes, flush reports,
//! time, store answers (or failures), provider replies (valid text and tool
//! calls, errors, garbage), MCP transport events and container replies.
//! Outputs go through the production `engine::pipeline`. The only assertion
//! is the one that matters for a server built with `panic = "abort"`: no
//! input sequence panics.

#![no_main]

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use engine::mcp::{McpCommand, McpConnId, McpEvent, McpServerSpec, McpTransport};
use engine::mem_store::MemStore;
use engine::pipeline::{Delivery, Job, Pipeline};
use engine::sandbox::{DriverError, ExecOutput, OpId, SandboxCommand, SandboxReply};
use engine::store::{KeyRole, KeyRow, ProfileRow, SessionRow, SessionState, StoreWrite};
use engine::{
    CallId, Config, Engine, Entropy, Input, Listener, Now, Output, ProviderEntry, ProviderReply,
    ReadId, StoreRead,
};
use libfuzzer_sys::fuzz_target;
use proto::wire::ids::{make_secret, SecretKind};
use serde_json::json;
use sha2::{Digest, Sha256};

const SESSION: &str = "ses_00000000000000000000000000000001";
const PROFILE: &str = "prf_00000000000000000000000000000001";
const CLIENT_ID: &str = "key_00000000000000000000000000000001";

#[derive(Arbitrary, Debug)]
enum Op {
    Connect {
        admin: bool,
    },
    Request {
        conn: u8,
        req: Req,
    },
    Raw {
        conn: u8,
        bytes: Vec<u8>,
    },
    Close {
        conn: u8,
    },
    Flush {
        conn: u8,
        bytes: u16,
    },
    Advance {
        ms: u16,
    },
    Commit,
    AnswerRead {
        pick: u8,
        fail: bool,
    },
    Provider {
        pick: u8,
        reply: PReply,
    },
    Mcp {
        pick: u8,
        event: MEvent,
    },
    Sandbox {
        pick: u8,
        ok: bool,
    },
    Shutdown,
    /// Replica mode: a pending lease claim answered "another replica holds
    /// it" (the request is then forwarded).
    LeaseElsewhere {
        pick: u8,
    },
    /// Replica mode: catalogue rows another replica committed.
    Catalog {
        revoke_client: bool,
        close_session: bool,
        full: bool,
    },
}

#[derive(Arbitrary, Debug)]
enum Req {
    Rpc {
        method: u8,
        params: Params,
        ext: u8,
        token: Tok,
        notification: bool,
    },
    Rest {
        route: u8,
        token: Tok,
        body: Body,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Tok {
    Client,
    Session,
    Admin,
    None,
    Bogus,
}

#[derive(Arbitrary, Debug)]
enum Params {
    Empty,
    Text { text: String, key: Option<u8> },
    ToolResult { id: u8, error: bool },
    Since { id: String },
    Tools { names: Vec<String> },
    Sandbox { image: u8, command: String },
    Subagent { state: u8, detail: String },
    Any { json: String },
}

#[derive(Arbitrary, Debug)]
enum Body {
    None,
    Session,
    Profile { name: String },
    Key,
    Raw { bytes: Vec<u8> },
}

#[derive(Arbitrary, Debug)]
enum PReply {
    Text,
    ToolUse { client: bool, server: bool },
    Status { status: u16 },
    Transport,
    Garbage { bytes: Vec<u8> },
}

#[derive(Arbitrary, Debug)]
enum MEvent {
    Opened,
    OpenFailed,
    Initialize,
    ToolsList,
    CallResult { error: bool },
    Line { bytes: Vec<u8> },
    Closed,
}

struct Counter(u64);

impl Entropy for Counter {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 56) as u8;
        }
    }
}

fn digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn key(id: &str, name: &str, token: &str, role: KeyRole, client: Option<&str>) -> StoreWrite {
    StoreWrite::InsertKey(KeyRow {
        id: id.into(),
        name: name.into(),
        key_hash: digest(token),
        key_prefix: token.chars().take(8).collect(),
        role,
        profile_id: (role == KeyRole::Client).then(|| PROFILE.to_string()),
        client_id: client.map(str::to_string),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        last_used_at: None,
        deleted_at: None,
    })
}

struct World {
    engine: Engine,
    pipe: Pipeline,
    store: MemStore,
    now: Now,
    conns: Vec<engine::ConnId>,
    next_conn: engine::ConnId,
    reads: Vec<(ReadId, StoreRead)>,
    calls: Vec<CallId>,
    mcp: Vec<McpConnId>,
    mcp_exchanges: VecDeque<(McpConnId, u64)>,
    sandbox: Vec<SandboxCommand>,
    tokens: [String; 3],
}

impl World {
    fn new(replica: bool, drop_histories: bool) -> World {
        let tokens = [
            make_secret(SecretKind::Client, [1; 24]),
            make_secret(SecretKind::Session, [2; 24]),
            make_secret(SecretKind::Admin, [3; 24]),
        ];
        let mut store = MemStore::default();
        store.apply(&StoreWrite::InsertProfile(ProfileRow {
            id: PROFILE.into(),
            name: "p".into(),
            primary_provider: "main".into(),
            fallback_providers: vec!["backup".into()],
            mcp_servers: vec!["m1".into()],
            allowed_tools: vec![json!("get_time")],
            available_sandboxes: vec!["img".into()],
            created_at: "2026-01-01T00:00:00.000Z".into(),
            updated_at: "2026-01-01T00:00:00.000Z".into(),
            deleted_at: None,
        }));
        store.apply(&key(CLIENT_ID, "c", &tokens[0], KeyRole::Client, None));
        store.apply(&key(
            "key_s",
            SESSION,
            &tokens[1],
            KeyRole::Session,
            Some(CLIENT_ID),
        ));
        store.apply(&key(
            "key_a",
            "bootstrap-admin",
            &tokens[2],
            KeyRole::Admin,
            None,
        ));
        store.apply(&StoreWrite::InsertSession(SessionRow {
            id: SESSION.into(),
            client_key_id: CLIENT_ID.into(),
            profile_id: PROFILE.into(),
            state: SessionState::Open,
            client_version: None,
            client_tools:
                json!({ CLIENT_ID: [{"name": "get_time", "input_schema": {"type": "object"}}] })
                    .to_string(),
            sandbox_tools:
                json!({ CLIENT_ID: [{"name": "sh", "input_schema": {"type": "object"}}] })
                    .to_string(),
            subagent_tools: "{}".into(),
            compaction: Some(json!({"mode": "auto", "threshold_tokens": 50}).to_string()),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            closed_at: None,
        }));
        let entry = |name: &str| ProviderEntry {
            name: name.into(),
            kind: proto::provider::Kind::Anthropic,
            base_url: "http://provider.fuzz".into(),
            model: "m".into(),
            auth_template: "${TOKEN}".into(),
            max_tokens: 64,
            retry: None,
            limits: None,
            cache: None,
            prices: None,
            stream: None,
        };
        let config = Config {
            providers: vec![entry("main"), entry("backup")],
            mcp_servers: vec![McpServerSpec {
                name: "m1".into(),
                transport: McpTransport::Stdio {
                    command: "x".into(),
                    args: vec![],
                },
                reconnect: true,
            }],
            subscriber_lag_limit: 4,
            subscriber_window_bytes: 512,
            max_queued_per_session: 4,
            replica: replica.then_some(engine::replicas::ReplicaSettings { slot: 1, lanes: 4 }),
            // Either every idle history is dropped at once (rebuilt from the
            // store by the next arrival) or the defaults apply.
            history_cache: match drop_histories {
                true => engine::history_cache::Limits {
                    budget_bytes: 0,
                    idle_ms: 0,
                },
                false => engine::history_cache::Limits::default(),
            },
            ..Config::default()
        };
        let now = Now {
            mono: engine::MonoMs(1_000),
            unix: engine::UnixMs(1_780_000_000_000),
        };
        let engine = Engine::new(config, Box::new(Counter(7)), store.snapshot(), now);
        World {
            engine,
            pipe: Pipeline::new(),
            store,
            now,
            conns: Vec::new(),
            next_conn: engine::ConnId(1),
            reads: Vec::new(),
            calls: Vec::new(),
            mcp: Vec::new(),
            mcp_exchanges: VecDeque::new(),
            sandbox: Vec::new(),
            tokens,
        }
    }

    fn input(&mut self, input: Input) {
        self.engine.handle_input(self.now, input);
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(out) = self.engine.poll_output() {
            match out {
                Output::Write(w) => self.pipe.write(w),
                Output::Read { id, read } => self.pipe.read(id, read),
                Output::Send { conn, bytes } => {
                    drop(self.pipe.deliver(Delivery::Send { conn, bytes }))
                }
                Output::SendUngated { conn, bytes } => drop(self.pipe.deliver_ungated(conn, bytes)),
                Output::Close { conn } => {
                    if self.pipe.deliver(Delivery::Close { conn }).is_some() {
                        self.conns.retain(|c| *c != conn);
                    }
                }
                Output::CallProvider(call) => self.calls.push(call.id),
                Output::AbortProvider(call) => self.calls.retain(|c| *c != call),
                Output::Mcp(McpCommand::Open { conn, .. }) => self.mcp.push(conn),
                Output::Mcp(McpCommand::Send { conn, exchange, .. }) => {
                    self.mcp_exchanges.push_back((conn, exchange))
                }
                Output::Mcp(McpCommand::Close { conn, .. }) => self.mcp.retain(|c| *c != conn),
                Output::Sandbox(cmd) => self.sandbox.push(cmd),
                Output::Forward(_) => {}
            }
        }
    }

    fn conn(&self, pick: u8) -> Option<engine::ConnId> {
        (!self.conns.is_empty()).then(|| self.conns[pick as usize % self.conns.len()])
    }

    fn token(&self, t: Tok) -> Option<String> {
        match t {
            Tok::Client => Some(self.tokens[0].clone()),
            Tok::Session => Some(self.tokens[1].clone()),
            Tok::Admin => Some(self.tokens[2].clone()),
            Tok::None => None,
            Tok::Bogus => Some("bae_0123".into()),
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Connect { admin } => {
                let conn = self.next_conn;
                self.next_conn += 1;
                self.conns.push(conn);
                let listener = if admin {
                    Listener::Admin
                } else {
                    Listener::Client
                };
                self.input(Input::Accepted { conn, listener });
            }
            Op::Request { conn, req } => {
                if let Some(conn) = self.conn(conn) {
                    let bytes = self.request(req);
                    self.input(Input::Received { conn, bytes });
                }
            }
            Op::Raw { conn, bytes } => {
                if let Some(conn) = self.conn(conn) {
                    self.input(Input::Received { conn, bytes });
                }
            }
            Op::Close { conn } => {
                if let Some(c) = self.conn(conn) {
                    self.conns.retain(|x| *x != c);
                    self.input(Input::Closed { conn: c });
                }
            }
            Op::Flush { conn, bytes } => {
                if let Some(conn) = self.conn(conn) {
                    self.input(Input::Flushed {
                        conn,
                        bytes: bytes as usize,
                    });
                }
            }
            Op::Advance { ms } => {
                self.now.mono += ms as u64 * 50;
                self.now.unix += ms as u64 * 50;
                if self
                    .engine
                    .poll_timeout()
                    .is_some_and(|t| t <= self.now.mono)
                {
                    self.engine.handle_timeout(self.now);
                    self.drain();
                }
            }
            Op::Commit => {
                while let Some(jobs) = self.pipe.take_submission() {
                    for job in jobs {
                        match job {
                            Job::Commit { batch, writes, .. } => {
                                self.store.commit(&writes);
                                drop(self.pipe.committed(batch));
                            }
                            Job::Read { id, read } => self.reads.push((id, read)),
                            Job::Activity => {}
                        }
                    }
                }
            }
            Op::AnswerRead { pick, fail } => {
                if self.reads.is_empty() {
                    return;
                }
                let (id, read) = self.reads.remove(pick as usize % self.reads.len());
                self.pipe.read_done();
                let result = if fail {
                    Err(engine::ReadError::Store("boom".into()))
                } else {
                    Ok(self.store.read(&read))
                };
                self.input(Input::ReadDone { id, result });
            }
            Op::Provider { pick, reply } => {
                if self.calls.is_empty() {
                    return;
                }
                let call = self.calls.remove(pick as usize % self.calls.len());
                self.input(Input::ProviderDone {
                    call,
                    reply: provider_reply(reply),
                });
            }
            Op::Mcp { pick, event } => {
                let Some(conn) =
                    (!self.mcp.is_empty()).then(|| self.mcp[pick as usize % self.mcp.len()])
                else {
                    return;
                };
                let id = self.mcp_exchanges.pop_front().map(|(_, x)| x).unwrap_or(1);
                let line = |v: serde_json::Value| McpEvent::Line(v.to_string().into_bytes());
                let event = match event {
                    MEvent::Opened => McpEvent::Opened,
                    MEvent::OpenFailed => McpEvent::OpenFailed("no".into()),
                    MEvent::Initialize => line(
                        json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}}),
                    ),
                    MEvent::ToolsList => line(
                        json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": "lookup_db", "inputSchema": {"type": "object"}}]}}),
                    ),
                    MEvent::CallResult { error } => line(
                        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "r"}], "isError": error}}),
                    ),
                    MEvent::Line { bytes } => McpEvent::Line(bytes),
                    MEvent::Closed => McpEvent::Closed(Some("gone".into())),
                };
                self.input(Input::Mcp { conn, event });
            }
            Op::Sandbox { pick, ok } => {
                if self.sandbox.is_empty() {
                    return;
                }
                let cmd = self.sandbox.remove(pick as usize % self.sandbox.len());
                let reply = if ok {
                    match cmd {
                        SandboxCommand::EnsureImage { op, .. } => {
                            Some((op, SandboxReply::Ensured(Ok(()))))
                        }
                        SandboxCommand::Start { op, .. } => {
                            Some((op, SandboxReply::Started(Ok("c1".into()))))
                        }
                        SandboxCommand::Exec { op, .. } => Some((
                            op,
                            SandboxReply::Exec(Ok(ExecOutput {
                                stdout: "out".into(),
                                stderr: String::new(),
                                exit_code: 0,
                                stdout_truncated: false,
                                stderr_truncated: false,
                            })),
                        )),
                        SandboxCommand::Stop { op, .. } => {
                            Some((op, SandboxReply::Stopped(Ok(()))))
                        }
                        SandboxCommand::Kill { .. } => None,
                    }
                } else {
                    failed(&cmd)
                };
                if let Some((op, reply)) = reply {
                    self.input(Input::Sandbox { op, reply });
                }
            }
            Op::Shutdown => self.input(Input::Shutdown),
            Op::LeaseElsewhere { pick } => {
                let claims: Vec<usize> = (0..self.reads.len())
                    .filter(|i| matches!(self.reads[*i].1, StoreRead::ClaimLease { .. }))
                    .collect();
                if claims.is_empty() {
                    return;
                }
                let (id, _) = self.reads.remove(claims[pick as usize % claims.len()]);
                self.pipe.read_done();
                let lease = engine::store::Lease::Elsewhere {
                    addr: "127.0.0.1:9".into(),
                };
                let result = Ok(engine::store::ReadResult::Lease(lease));
                self.input(Input::ReadDone { id, result });
            }
            Op::Catalog {
                revoke_client,
                close_session,
                full,
            } => {
                let snapshot = self.store.snapshot();
                let mut update = engine::store::CatalogUpdate {
                    profiles: snapshot.profiles.clone(),
                    keys: snapshot.keys.clone(),
                    revoked: Vec::new(),
                    sessions: snapshot.sessions.clone(),
                    quotas: snapshot.quotas.clone(),
                    quotas_removed: Vec::new(),
                    full,
                };
                if revoke_client {
                    let at = "2026-01-02T00:00:00.000Z".to_string();
                    let (revoked, kept) = update
                        .keys
                        .drain(..)
                        .partition(|k| k.role == KeyRole::Client);
                    update.keys = kept;
                    update.revoked = revoked;
                    for k in &mut update.revoked {
                        k.deleted_at = Some(at.clone());
                    }
                }
                if close_session {
                    for s in &mut update.sessions {
                        s.state = SessionState::Closed;
                    }
                }
                self.input(Input::Catalog(Box::new(update)));
            }
        }
    }

    fn request(&self, req: Req) -> Vec<u8> {
        let (method, path, token, body) = match req {
            Req::Rpc {
                method,
                params,
                ext,
                token,
                notification,
            } => {
                const METHODS: [&str; 15] = [
                    "session.registerDriver",
                    "session.sendMessage",
                    "session.compact",
                    "session.subscribe",
                    "session.unsubscribe",
                    "session.startRemoteSandbox",
                    "session.stopRemoteSandbox",
                    "session.execRemoteSandbox",
                    "session.reportLocalSandbox",
                    "session.reportLocalSubagent",
                    "session.cancelSubagent",
                    "session.updateClientTools",
                    "session.cancelTurn",
                    "session.steerTurn",
                    "session.nope",
                ];
                const EXT: [&str; 6] = [
                    "turn.cancel",
                    "turn.queue",
                    "turn.steer",
                    "send.idempotent",
                    "subscribe.gapless",
                    "subscribe.replay_complete",
                ];
                let exts: Vec<&str> = EXT
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| ext & (1 << i) != 0)
                    .map(|(_, e)| *e)
                    .collect();
                let mut p = match params {
                    Params::Empty => json!({}),
                    Params::Text { text, key } => {
                        json!({"message": {"role": "user", "content": text}, "idempotency_key": key.map(|k| format!("k{}", k % 4))})
                    }
                    Params::ToolResult { id, error } => {
                        json!({"message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("tu_{}", id % 3), "is_error": error, "content": "r"}]}})
                    }
                    Params::Since { id } => json!({"since_event_id": id}),
                    Params::Tools { names } => {
                        json!({"tools": names.iter().map(|n| json!({"name": n, "input_schema": {"type": "object"}})).collect::<Vec<_>>()})
                    }
                    Params::Sandbox { image, command } => {
                        json!({"image": (["img", "other"][image as usize % 2]), "command": command})
                    }
                    Params::Subagent { state, detail } => {
                        json!({"state": (["start", "running", "completed", "failed", "cancelled"][state as usize % 5]), "subagent_id": "sba_1", "harness": "h", "model": "m", "detail": detail})
                    }
                    Params::Any { json } => serde_json::from_str(&json).unwrap_or(json!({})),
                };
                if ext != 0 && p.is_object() {
                    p["extensions"] = json!(exts);
                }
                let mut call = json!({"jsonrpc": "2.0", "method": METHODS[method as usize % METHODS.len()], "params": p});
                if !notification {
                    call["id"] = json!(1);
                }
                (
                    "POST",
                    format!("/api/v1/sessions/{SESSION}/rpc"),
                    token,
                    call.to_string().into_bytes(),
                )
            }
            Req::Rest { route, token, body } => {
                let body = match body {
                    Body::None => Vec::new(),
                    Body::Session => json!({"client_tools": [{"name": "get_time", "input_schema": {"type": "object"}}]}).to_string().into_bytes(),
                    Body::Profile { name } => json!({"name": name, "primary_provider": "main", "mcp_servers": ["m1"], "available_sandboxes": ["img"]}).to_string().into_bytes(),
                    Body::Key => json!({"name": "k", "profile_id": PROFILE}).to_string().into_bytes(),
                    Body::Raw { bytes } => bytes,
                };
                let routes: [(&str, String); 14] = [
                    ("POST", "/api/v1/sessions".into()),
                    ("POST", format!("/api/v1/sessions/{SESSION}/join")),
                    ("GET", format!("/api/v1/sessions/{SESSION}")),
                    ("GET", format!("/api/v1/sessions/{SESSION}/events?limit=3")),
                    ("GET", format!("/api/v1/sessions/{SESSION}/participants")),
                    ("DELETE", format!("/api/v1/sessions/{SESSION}")),
                    ("GET", "/api/v1/meta".into()),
                    ("GET", "/healthz".into()),
                    ("POST", "/admin/v1/profiles".into()),
                    ("GET", "/admin/v1/sessions?limit=2".into()),
                    ("POST", "/admin/v1/keys".into()),
                    ("DELETE", format!("/admin/v1/keys/{CLIENT_ID}")),
                    ("POST", format!("/admin/v1/sessions/{SESSION}/cancel-turn")),
                    ("DELETE", format!("/admin/v1/profiles/{PROFILE}")),
                ];
                let (m, p) = &routes[route as usize % routes.len()];
                (*m, p.clone(), token, body)
            }
        };
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: f\r\n");
        if let Some(t) = self.token(token) {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
        let mut out = head.into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

fn provider_reply(r: PReply) -> ProviderReply {
    let ok = |v: serde_json::Value| ProviderReply::Http {
        status: 200,
        body: v.to_string().into_bytes(),
        advice: Default::default(),
    };
    match r {
        PReply::Text => ok(
            json!({"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": {"input_tokens": 40, "output_tokens": 20}}),
        ),
        PReply::ToolUse { client, server } => {
            let mut blocks = Vec::new();
            if client {
                blocks.push(
                    json!({"type": "tool_use", "id": "tu_0", "name": "get_time", "input": {}}),
                );
            }
            if server {
                blocks.push(
                    json!({"type": "tool_use", "id": "tu_1", "name": "lookup_db", "input": {}}),
                );
                blocks.push(json!({"type": "tool_use", "id": "tu_2", "name": "sh", "input": {"command": "ls"}}));
            }
            ok(
                json!({"id": "m", "type": "message", "role": "assistant", "model": "m", "content": blocks, "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 5}}),
            )
        }
        PReply::Status { status } => ProviderReply::Http {
            status,
            body: b"{}".to_vec(),
            advice: Default::default(),
        },
        PReply::Transport => ProviderReply::Transport("reset".into()),
        PReply::Garbage { bytes } => ProviderReply::Http {
            status: 200,
            body: bytes,
            advice: Default::default(),
        },
    }
}

/// A container engine that fails every operation (a stop succeeds:
/// nothing runs; a kill has no reply).
fn failed(cmd: &SandboxCommand) -> Option<(OpId, SandboxReply)> {
    let err = || DriverError::Unsupported("fuzz".to_string());
    Some(match cmd {
        SandboxCommand::EnsureImage { op, .. } => (*op, SandboxReply::Ensured(Err(err()))),
        SandboxCommand::Start { op, .. } => (*op, SandboxReply::Started(Err(err()))),
        SandboxCommand::Exec { op, .. } => (*op, SandboxReply::Exec(Err(err()))),
        SandboxCommand::Stop { op, .. } => (*op, SandboxReply::Stopped(Ok(()))),
        SandboxCommand::Kill { .. } => return None,
    })
}

fuzz_target!(|input: (bool, bool, Vec<Op>)| {
    let (replica, drop_histories, ops) = input;
    let mut w = World::new(replica, drop_histories);
    for op in ops.into_iter().take(256) {
        w.step(op);
    }
});
