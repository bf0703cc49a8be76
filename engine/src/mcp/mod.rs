//! MCP connections (spec 06 §4): a sub-state machine that owns every
//! session's connection set and speaks a small vocabulary of its own.
//!
//! * In: [`McpHub::connect_session`], [`McpHub::call`],
//!   [`McpHub::close_session`], transport events ([`McpEvent`]) and timer
//!   ticks.
//! * Out: [`McpCommand`]s for the driver (open a transport, send a message,
//!   close it) and [`McpNotice`]s for the engine (a session's connects are
//!   done, a call finished).
//!
//! It never touches the session log, HTTP or the turn gate: the engine
//! records events and answers requests from the notices. Every request has
//! an engine timer (`mcp_timeout_ms`), never a socket timeout, so a silent
//! server cannot hold a turn past it.

mod conn;
#[cfg(test)]
mod tests;

use crate::ids::SessionId;
use std::collections::{BTreeMap, VecDeque};

use proto::mcp::{CallOutcome, McpTool};
use serde_json::Value;

use crate::MonoMs;
use conn::{Conn, PendingCall, Step};

pub use crate::ids::{CallToken, McpConnId};

/// One `[[mcp.servers]]` registry entry. Templates stay unresolved: the
/// driver resolves `${VAR}`s when it opens the transport.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// Extension (`reconnect = true`): a broken server is replaced on the
    /// next call, with backoff, and an expired HTTP session is renewed.
    pub reconnect: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking one JSON object per line on stdin/stdout.
    Stdio { command: String, args: Vec<String> },
    /// MCP "streamable HTTP" (`transport = "http"` or `"sse"`).
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// What the driver must do for the hub.
#[derive(Debug, Clone, PartialEq)]
pub enum McpCommand {
    /// Spawn the child / prepare the HTTP endpoint (resolving templates),
    /// then report [`McpEvent::Opened`] or [`McpEvent::OpenFailed`].
    Open {
        conn: McpConnId,
        server: McpServerSpec,
        /// Longest stdout line or HTTP body accepted; beyond it the
        /// transport reports [`McpEvent::Closed`] with a reason.
        max_message_bytes: usize,
        /// The engine's per-request timeout; a transport may bound its own
        /// blocking work by it (the engine's timer decides the outcome).
        timeout_ms: u64,
    },
    /// stdio: write `message` and a newline. HTTP: POST it (echoing
    /// `session_id` as `mcp-session-id`) and report
    /// [`McpEvent::HttpReply`] / [`McpEvent::HttpFailed`] for `exchange`.
    Send {
        conn: McpConnId,
        /// The JSON-RPC id of a request, `0` for a notification.
        exchange: u64,
        message: Vec<u8>,
        session_id: Option<String>,
    },
    /// Tear the transport down: kill and reap the child, or end the HTTP
    /// session with `DELETE` when the server gave it an id.
    Close {
        conn: McpConnId,
        session_id: Option<String>,
    },
}

/// What happened on a transport.
#[derive(Debug, Clone, PartialEq)]
pub enum McpEvent {
    Opened,
    /// The transport could not be opened (spawn error, unresolved `${VAR}`).
    OpenFailed(String),
    /// stdio: one line from the child's stdout (without the newline).
    Line(Vec<u8>),
    /// stdio: the child's stdout ended (it exited, or the driver gave up on
    /// it, with the reason).
    Closed(Option<String>),
    /// HTTP: the answer to the POST of `exchange`.
    HttpReply {
        exchange: u64,
        status: u16,
        content_type: String,
        session_id: Option<String>,
        body: Vec<u8>,
    },
    /// HTTP: no response for `exchange` (connect/IO error, text log-safe).
    HttpFailed {
        exchange: u64,
        error: String,
    },
}

/// What the hub tells the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum McpNotice {
    /// Every server of the session finished connecting (or failed and was
    /// skipped): the create request may be answered.
    SessionReady { session_id: SessionId },
    /// A [`McpHub::call`] finished.
    CallDone {
        token: CallToken,
        outcome: CallOutcome,
    },
}

/// Hub settings.
#[derive(Debug, Clone)]
pub struct McpSettings {
    pub server_version: String,
    /// Per-request timeout (spec: 30 s).
    pub timeout_ms: u64,
    pub max_message_bytes: usize,
}

/// One session's connection set.
struct Set {
    /// Connections in profile order.
    conns: Vec<McpConnId>,
    /// Connects not finished yet.
    connecting: usize,
    /// Tools advertised to the provider, in connect order, one per name
    /// (the route winner's definition).
    tools: Vec<Value>,
    /// Tool name → connection (a later server overwrites an earlier one).
    routes: BTreeMap<String, McpConnId>,
}

pub struct McpHub {
    settings: McpSettings,
    sets: BTreeMap<SessionId, Set>,
    conns: BTreeMap<McpConnId, Conn>,
    next_conn: McpConnId,
    commands: VecDeque<McpCommand>,
    notices: VecDeque<McpNotice>,
}

impl McpHub {
    pub fn new(settings: McpSettings) -> Self {
        McpHub {
            settings,
            sets: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_conn: McpConnId(1),
            commands: VecDeque::new(),
            notices: VecDeque::new(),
        }
    }

    /// Connects `servers` for a new session, all at once; a
    /// [`McpNotice::SessionReady`] follows when the last one is done.
    pub fn connect_session(
        &mut self,
        session_id: &SessionId,
        servers: Vec<McpServerSpec>,
        now: MonoMs,
    ) {
        if servers.is_empty() {
            self.notices.push_back(McpNotice::SessionReady {
                session_id: session_id.clone(),
            });
            return;
        }
        let mut ids = Vec::with_capacity(servers.len());
        for server in servers {
            let id = self.next_conn;
            self.next_conn += 1;
            ids.push(id);
            self.conns.insert(
                id,
                Conn::new(session_id, server.clone(), now, &self.settings),
            );
            self.commands.push_back(McpCommand::Open {
                conn: id,
                server,
                max_message_bytes: self.settings.max_message_bytes,
                timeout_ms: self.settings.timeout_ms,
            });
        }
        self.sets.insert(
            session_id.clone(),
            Set {
                connecting: ids.len(),
                conns: ids,
                tools: Vec::new(),
                routes: BTreeMap::new(),
            },
        );
    }

    /// Whether the session has a connection set (or one is connecting).
    pub fn has_session(&self, session_id: &str) -> bool {
        self.sets.contains_key(session_id)
    }

    /// The session's MCP tools in provider shape (empty without a set).
    pub fn tools(&self, session_id: &str) -> &[Value] {
        self.sets.get(session_id).map_or(&[], |s| &s.tools)
    }

    /// The server that would run `tool` in this session.
    pub fn route(&self, session_id: &str, tool: &str) -> Option<&str> {
        let conn = self.sets.get(session_id)?.routes.get(tool)?;
        self.conns.get(conn).map(|c| c.server_name())
    }

    /// Starts `tools/call`; `None` when no server advertises `tool` (the
    /// engine answers that case itself). Returns the server's name.
    pub fn call(
        &mut self,
        session_id: &str,
        tool: &str,
        input: &Value,
        token: CallToken,
        now: MonoMs,
    ) -> Option<String> {
        let id = *self.sets.get(session_id)?.routes.get(tool)?;
        let c = self.conns.get_mut(&id)?;
        let name = c.server_name().to_string();
        let call = PendingCall {
            tool: tool.to_string(),
            input: input.clone(),
            token,
            replayed: false,
        };
        if let (Some(reason), Some(retry_at)) = (c.broken(), c.may_reconnect()) {
            if now < retry_at {
                let text = format!("{reason} (reconnecting in {} ms)", retry_at - now);
                self.notices.push_back(McpNotice::CallDone {
                    token,
                    outcome: CallOutcome::Failed(text),
                });
            } else {
                self.reconnect(id, call, now);
            }
            return Some(name);
        }
        let step = c.call(call, now);
        self.apply(id, step, now);
        Some(name)
    }

    /// Replaces a broken connection by a new incarnation (a new id, so
    /// late events of the old transport cannot reach it) that sends `call`
    /// once it is ready.
    fn reconnect(&mut self, old: McpConnId, call: PendingCall, now: MonoMs) {
        let Some(old_conn) = self.conns.remove(&old) else {
            return;
        };
        self.commands.push_back(old_conn.close_command(old));
        let id = self.next_conn;
        self.next_conn += 1;
        tracing::info!(server = %old_conn.server_name(), "reconnecting MCP server");
        let c = Conn::reopen(&old_conn, call, now, &self.settings);
        self.commands.push_back(McpCommand::Open {
            conn: id,
            server: c.spec().clone(),
            max_message_bytes: self.settings.max_message_bytes,
            timeout_ms: self.settings.timeout_ms,
        });
        self.conns.insert(id, c);
        if let Some(set) = self.sets.get_mut(old_conn.session_id()) {
            for cid in set.conns.iter_mut().filter(|c| **c == old) {
                *cid = id;
            }
            for route in set.routes.values_mut().filter(|r| **r == old) {
                *route = id;
            }
        }
    }

    /// The caller of `token` is gone (a cancelled turn): no notice will
    /// follow and the connection is free for the next call.
    pub fn abandon(&mut self, token: CallToken) {
        for c in self.conns.values_mut() {
            c.abandon(token);
        }
    }

    /// Session DELETE or revocation-close: every connection goes down. A
    /// create still waiting on its connects is released.
    pub fn close_session(&mut self, session_id: &str) {
        let Some((session_id, set)) = self.sets.remove_entry(session_id) else {
            return;
        };
        for id in set.conns {
            if let Some(c) = self.conns.remove(&id) {
                self.commands.push_back(c.close_command(id));
            }
        }
        if set.connecting > 0 {
            self.notices
                .push_back(McpNotice::SessionReady { session_id });
        }
    }

    /// A transport event.
    pub fn handle(&mut self, conn: McpConnId, event: McpEvent, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let step = c.handle(event, now);
        self.apply(conn, step, now);
    }

    /// Fires every request deadline due at `now`.
    pub fn handle_timeout(&mut self, now: MonoMs) {
        let due: Vec<McpConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(c) = self.conns.get_mut(&id) {
                let step = c.expire(now);
                self.apply(id, step, now);
            }
        }
    }

    pub fn poll_timeout(&self) -> Option<MonoMs> {
        self.conns.values().filter_map(Conn::deadline).min()
    }

    pub fn poll_command(&mut self) -> Option<McpCommand> {
        self.commands.pop_front()
    }

    pub fn poll_notice(&mut self) -> Option<McpNotice> {
        self.notices.pop_front()
    }

    /// Live connections (gauge `bae.mcp.sessions.live` counts sets).
    pub fn live_sessions(&self) -> usize {
        self.sets.len()
    }

    fn apply(&mut self, id: McpConnId, step: Step, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        for message in c.take_outgoing() {
            self.commands.push_back(message.into_command(id));
        }
        let reconnecting = c.is_reconnect();
        match step {
            Step::Nothing => {}
            Step::CallDone(token, outcome) => {
                self.notices
                    .push_back(McpNotice::CallDone { token, outcome });
            }
            Step::Expired(call) => {
                let call = PendingCall {
                    replayed: true,
                    ..call
                };
                self.reconnect(id, call, now);
            }
            Step::Connected(tools) if reconnecting => self.reconnected(id, tools, now),
            Step::Connected(tools) => self.connect_finished(id, Some(tools)),
            Step::ConnectFailed(error) if reconnecting => {
                tracing::warn!(server = %c.server_name(), %error, "MCP reconnect failed");
                let queued = c.take_queued();
                c.backoff(now, error.clone());
                c.mark_closed();
                let close = c.close_command(id);
                self.commands.push_back(close);
                if let Some(call) = queued {
                    self.notices.push_back(McpNotice::CallDone {
                        token: call.token,
                        outcome: CallOutcome::Failed(error),
                    });
                }
            }
            Step::ConnectFailed(error) => {
                tracing::error!(server = %c.server_name(), %error, "MCP server skipped for this session");
                if let Some(c) = self.conns.remove(&id) {
                    self.commands.push_back(c.close_command(id));
                }
                self.connect_finished(id, None);
            }
        }
    }

    /// A reconnect's handshake is done: its tools are routable again (they
    /// may have changed), then the call that triggered it goes out.
    fn reconnected(&mut self, id: McpConnId, tools: Vec<McpTool>, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.set_tools(tools);
        c.reset_backoff();
        let queued = c.take_queued();
        let session_id = c.session_id().clone();
        let name = c.server_name().to_string();
        if let Some(set) = self.sets.get_mut(&session_id) {
            rebuild(set, &self.conns);
        }
        let Some(call) = queued else {
            return;
        };
        let routed = self
            .sets
            .get(&session_id)
            .and_then(|s| s.routes.get(&call.tool))
            == Some(&id);
        if !routed {
            let text = proto::mcp::errors::transport(&format!(
                "MCP server '{name}' no longer offers tool '{}' after reconnecting",
                call.tool
            ));
            self.notices.push_back(McpNotice::CallDone {
                token: call.token,
                outcome: CallOutcome::Failed(text),
            });
            return;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            let step = c.call(call, now);
            self.apply(id, step, now);
        }
    }

    /// One connect of a set is done; the last one builds the route table in
    /// profile order and releases the create.
    fn connect_finished(&mut self, id: McpConnId, tools: Option<Vec<McpTool>>) {
        let session_id = match self.conns.get(&id) {
            Some(c) => c.session_id().clone(),
            None => match self.sets.iter().find(|(_, s)| s.conns.contains(&id)) {
                Some((sid, _)) => sid.clone(),
                None => return,
            },
        };
        if let (Some(tools), Some(c)) = (tools, self.conns.get_mut(&id)) {
            c.set_tools(tools);
        }
        let Some(set) = self.sets.get_mut(&session_id) else {
            return;
        };
        set.connecting = set.connecting.saturating_sub(1);
        if set.connecting > 0 {
            return;
        }
        set.conns.retain(|c| self.conns.contains_key(c));
        rebuild(set, &self.conns);
        if set.conns.is_empty() {
            self.sets.remove(&session_id);
        }
        self.notices
            .push_back(McpNotice::SessionReady { session_id });
    }
}

/// Route table and advertised list of a set, in profile order: a later
/// server overwrites an earlier route; a shared name is advertised once,
/// with the definition of the server that runs it.
fn rebuild(set: &mut Set, conns: &BTreeMap<McpConnId, Conn>) {
    let mut tools: Vec<Value> = Vec::new();
    let mut slot: BTreeMap<String, usize> = BTreeMap::new();
    set.routes.clear();
    for cid in &set.conns {
        let Some(c) = conns.get(cid) else {
            continue;
        };
        for t in c.tools() {
            set.routes.insert(t.name.clone(), *cid);
            match slot.get(&t.name) {
                Some(&i) => {
                    if let Some(v) = tools.get_mut(i) {
                        *v = t.advertised.clone();
                    }
                }
                None => {
                    slot.insert(t.name.clone(), tools.len());
                    tools.push(t.advertised.clone());
                }
            }
        }
    }
    set.tools = tools;
}
