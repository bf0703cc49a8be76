//! Telemetry facts (spec 04 §7.1): the engine says which spans open and end,
//! with typed names, kinds, parents, links and attributes; the driver turns
//! the facts into OpenTelemetry spans, draws trace and span ids, samples,
//! stamps times and exports. Span keys are opaque engine counters, never
//! ids on the wire.
//!
//! The component is off unless the driver asks for it: every method returns
//! at once and nothing is allocated. The privacy rule is in the types:
//! attribute values are ids, names, counts and closed enums the engine
//! already has; a span's error status carries a `&'static str` only, so no
//! provider, MCP or user text can reach it.

use crate::ids::IdMap;

use proto::trace_context::TraceParent;
use proto::wire::content::Dispatch;

use crate::ids::{CallId, ConnId, TurnId};
use crate::Listener;

/// An engine-assigned span handle (unique per process run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanKey(pub u64);

/// The spans of spec 04 §7.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanName {
    HttpRequest,
    Session,
    Turn,
    ProviderAttempt,
    ToolDispatch,
    McpCall,
    SandboxExec,
    Subagent,
}

/// OpenTelemetry span kinds used by §7.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server,
    Internal,
    Client,
}

impl SpanName {
    pub fn as_str(self) -> &'static str {
        match self {
            SpanName::HttpRequest => "http.request",
            SpanName::Session => "bae.session",
            SpanName::Turn => "bae.turn",
            SpanName::ProviderAttempt => "bae.provider.attempt",
            SpanName::ToolDispatch => "bae.tool.dispatch",
            SpanName::McpCall => "bae.mcp.call",
            SpanName::SandboxExec => "bae.sandbox.exec",
            SpanName::Subagent => "bae.subagent",
        }
    }

    pub fn kind(self) -> SpanKind {
        match self {
            SpanName::HttpRequest => SpanKind::Server,
            SpanName::ProviderAttempt | SpanName::McpCall => SpanKind::Client,
            _ => SpanKind::Internal,
        }
    }

    /// The log target a `BAE_OTEL_LOG` directive names to filter this span.
    pub fn target(self) -> &'static str {
        match self {
            SpanName::HttpRequest => "baesrv::http",
            SpanName::Session => "baesrv::session",
            SpanName::Turn => "baesrv::turn",
            SpanName::ProviderAttempt => "baesrv::provider",
            SpanName::ToolDispatch => "baesrv::tool",
            SpanName::McpCall => "baesrv::mcp",
            SpanName::SandboxExec => "baesrv::sandbox",
            SpanName::Subagent => "baesrv::subagent",
        }
    }
}

/// Where a span hangs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    /// A new trace (the server is the trace root: `sample_ratio` applies).
    Root,
    /// The caller's span from a valid inbound `traceparent`.
    Remote(TraceParent),
    /// Another span of this process.
    Span(SpanKey),
}

/// `bae.link.kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Session,
    Resume,
    Subagent,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Session => "session",
            LinkKind::Resume => "resume",
            LinkKind::Subagent => "subagent",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub to: SpanKey,
    pub kind: LinkKind,
}

/// Attribute names of §7.1 (and the HTTP semantic conventions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKey {
    HttpMethod,
    HttpRoute,
    UrlPath,
    HttpStatus,
    SessionId,
    ProfileId,
    ClientKeyId,
    TurnOutcome,
    TurnResumed,
    ProviderName,
    ProviderKind,
    ProviderModel,
    ProviderAttempt,
    ProviderAttemptKind,
    ToolName,
    ToolDispatch,
    ToolIsError,
    ToolInputBytes,
    ToolOutputBytes,
    McpServer,
    SandboxExitCode,
    SubagentId,
    SubagentOutcome,
}

impl AttrKey {
    pub fn as_str(self) -> &'static str {
        match self {
            AttrKey::HttpMethod => "http.request.method",
            AttrKey::HttpRoute => "http.route",
            AttrKey::UrlPath => "url.path",
            AttrKey::HttpStatus => "http.response.status_code",
            AttrKey::SessionId => "bae.session.id",
            AttrKey::ProfileId => "bae.profile.id",
            AttrKey::ClientKeyId => "bae.client_key.id",
            AttrKey::TurnOutcome => "bae.turn.outcome",
            AttrKey::TurnResumed => "bae.turn.resumed",
            AttrKey::ProviderName => "bae.provider.name",
            AttrKey::ProviderKind => "bae.provider.kind",
            AttrKey::ProviderModel => "bae.provider.model",
            AttrKey::ProviderAttempt => "bae.provider.attempt",
            AttrKey::ProviderAttemptKind => "bae.provider.attempt_kind",
            AttrKey::ToolName => "bae.tool.name",
            AttrKey::ToolDispatch => "bae.tool.dispatch",
            AttrKey::ToolIsError => "bae.tool.is_error",
            AttrKey::ToolInputBytes => "bae.tool.input.bytes",
            AttrKey::ToolOutputBytes => "bae.tool.output.bytes",
            AttrKey::McpServer => "bae.mcp.server",
            AttrKey::SandboxExitCode => "bae.sandbox.exit_code",
            AttrKey::SubagentId => "bae.subagent.id",
            AttrKey::SubagentOutcome => "bae.subagent.outcome",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A closed enum's value.
    Static(&'static str),
    /// An id or a name the operator configured (never free text).
    Text(String),
    Int(i64),
    Bool(bool),
}

pub type Attr = (AttrKey, AttrValue);

/// A span's final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Unset,
    Ok,
    /// A generic message chosen by the engine (never a peer's error text).
    Error(&'static str),
}

/// One thing that happened to a span.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    Opened {
        key: SpanKey,
        name: SpanName,
        parent: Parent,
        links: Vec<Link>,
        attrs: Vec<Attr>,
    },
    /// More attributes for an open span.
    Annotated { key: SpanKey, attrs: Vec<Attr> },
    /// The span ended. With `keep`, the driver remembers its ids until
    /// [`Fact::Released`] (a later span links to it).
    Ended {
        key: SpanKey,
        status: Status,
        keep: bool,
    },
    /// An ended span nothing will link to any more.
    Released { key: SpanKey },
}

/// `bae.turn.outcome` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    Completed,
    Paused,
    ProvidersFailed,
    /// The request failed before the turn could run (a JSON-RPC error).
    Failed,
}

/// The engine's telemetry component: span bookkeeping and the fact queue.
#[derive(Debug, Default)]
pub struct Telemetry {
    enabled: bool,
    next: u64,
    facts: Vec<Fact>,
    /// The request span of each connection's current request.
    http: IdMap<ConnId, SpanKey>,
    /// `bae.session` anchors of open sessions.
    sessions: IdMap<String, SpanKey>,
    /// A session's paused turn (ended, kept for the resume link).
    paused: IdMap<String, SpanKey>,
    turns: IdMap<TurnId, SpanKey>,
    attempts: IdMap<CallId, SpanKey>,
    /// `(turn, tool_use id)` → dispatch span.
    dispatches: IdMap<(TurnId, String), SpanKey>,
    /// Children of a dispatch: MCP calls and sandbox execs.
    tool_children: IdMap<(TurnId, String), SpanKey>,
    /// Running subagents by id.
    subagents: IdMap<String, SpanKey>,
}

impl Telemetry {
    pub fn new(enabled: bool) -> Self {
        Telemetry {
            enabled,
            ..Telemetry::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Moves every queued fact to `out` (the driver drains after each input).
    pub fn drain_into(&mut self, out: &mut Vec<Fact>) {
        out.append(&mut self.facts);
    }

    fn open(
        &mut self,
        name: SpanName,
        parent: Parent,
        links: Vec<Link>,
        attrs: Vec<Attr>,
    ) -> SpanKey {
        self.next += 1;
        let key = SpanKey(self.next);
        self.facts.push(Fact::Opened {
            key,
            name,
            parent,
            links,
            attrs,
        });
        key
    }

    fn end(&mut self, key: SpanKey, attrs: Vec<Attr>, status: Status, keep: bool) {
        if !attrs.is_empty() {
            self.facts.push(Fact::Annotated { key, attrs });
        }
        self.facts.push(Fact::Ended { key, status, keep });
    }

    // ---- http.request ----

    /// A request was decoded (not called for `/healthz`).
    pub fn http_begin(
        &mut self,
        conn: ConnId,
        listener: Listener,
        method: &str,
        path: &str,
        traceparent: Option<&[u8]>,
    ) {
        if !self.enabled || path == "/healthz" {
            return;
        }
        let parent = traceparent
            .and_then(TraceParent::parse)
            .map_or(Parent::Root, Parent::Remote);
        let attrs = vec![
            (AttrKey::HttpMethod, AttrValue::Text(method.to_string())),
            (AttrKey::HttpRoute, AttrValue::Static(route(listener, path))),
            (AttrKey::UrlPath, AttrValue::Text(path.to_string())),
        ];
        let key = self.open(SpanName::HttpRequest, parent, Vec::new(), attrs);
        if let Some(old) = self.http.insert(conn, key) {
            self.end(old, Vec::new(), Status::Unset, false);
        }
    }

    /// The response head with `status` was written.
    pub fn http_status(&mut self, conn: ConnId, status: u16) {
        let Some(&key) = self.http.get(&conn).filter(|_| self.enabled) else {
            return;
        };
        let attrs = vec![(AttrKey::HttpStatus, AttrValue::Int(status.into()))];
        self.facts.push(Fact::Annotated { key, attrs });
    }

    /// The request was fully answered, or its connection went away.
    pub fn http_end(&mut self, conn: ConnId) {
        if let Some(key) = self.http.remove(&conn) {
            self.end(key, Vec::new(), Status::Unset, false);
        }
    }

    fn http_span(&self, conn: Option<ConnId>) -> Parent {
        conn.and_then(|c| self.http.get(&c))
            .map_or(Parent::Root, |k| Parent::Span(*k))
    }

    // ---- bae.session ----

    pub fn session_open(&mut self, session_id: &str, profile_id: &str, key_id: &str) {
        if !self.enabled {
            return;
        }
        let attrs = vec![
            (AttrKey::SessionId, AttrValue::Text(session_id.to_string())),
            (AttrKey::ProfileId, AttrValue::Text(profile_id.to_string())),
            (AttrKey::ClientKeyId, AttrValue::Text(key_id.to_string())),
        ];
        let key = self.open(SpanName::Session, Parent::Root, Vec::new(), attrs);
        if let Some(old) = self.sessions.insert(session_id.to_string(), key) {
            self.end(old, Vec::new(), Status::Unset, false);
        }
    }

    /// The session closed (`error = false`) or moved to `error`.
    pub fn session_end(&mut self, session_id: &str, error: bool) {
        if !self.enabled {
            return;
        }
        if let Some(p) = self.paused.remove(session_id) {
            self.facts.push(Fact::Released { key: p });
        }
        if let Some(key) = self.sessions.remove(session_id) {
            let status = if error {
                Status::Error("session error")
            } else {
                Status::Ok
            };
            self.end(key, Vec::new(), status, false);
        }
    }

    /// Ends every session anchor (graceful shutdown, spec 04 §5.1).
    pub fn shutdown(&mut self) {
        let open: Vec<SpanKey> = self.sessions.drain().map(|(_, k)| k).collect();
        for key in open {
            self.end(key, Vec::new(), Status::Unset, false);
        }
    }

    // ---- bae.turn ----

    /// A `sendMessage` turn took the gate. The session anchor of a session
    /// from before a restart is opened lazily here.
    pub fn turn_begin(
        &mut self,
        turn: TurnId,
        conn: Option<ConnId>,
        session: (&str, &str, &str),
        resumed: bool,
    ) {
        if !self.enabled {
            return;
        }
        let (session_id, profile_id, key_id) = session;
        if !self.sessions.contains_key(session_id) {
            self.session_open(session_id, profile_id, key_id);
        }
        let mut links = Vec::new();
        if let Some(s) = self.sessions.get(session_id) {
            links.push(Link {
                to: *s,
                kind: LinkKind::Session,
            });
        }
        let paused = self.paused.remove(session_id);
        if let Some(p) = paused.filter(|_| resumed) {
            links.push(Link {
                to: p,
                kind: LinkKind::Resume,
            });
        }
        let attrs = vec![
            (AttrKey::SessionId, AttrValue::Text(session_id.to_string())),
            (AttrKey::ClientKeyId, AttrValue::Text(key_id.to_string())),
            (AttrKey::TurnResumed, AttrValue::Bool(resumed)),
        ];
        let parent = self.http_span(conn);
        let key = self.open(SpanName::Turn, parent, links, attrs);
        if let Some(p) = paused {
            self.facts.push(Fact::Released { key: p });
        }
        self.turns.insert(turn, key);
    }

    /// The turn ended; a paused turn's span is kept for the resume link.
    pub fn turn_end(&mut self, turn: TurnId, session_id: &str, outcome: TurnEnd) {
        if !self.enabled {
            return;
        }
        self.end_tools_of(turn);
        let Some(key) = self.turns.remove(&turn) else {
            return;
        };
        let (value, status) = match outcome {
            TurnEnd::Completed => ("completed", Status::Ok),
            TurnEnd::Paused => ("paused", Status::Ok),
            TurnEnd::ProvidersFailed => ("providers_failed", Status::Error("providers failed")),
            TurnEnd::Failed => ("failed", Status::Error("turn failed")),
        };
        let attrs = vec![(AttrKey::TurnOutcome, AttrValue::Static(value))];
        let keep = outcome == TurnEnd::Paused;
        self.end(key, attrs, status, keep);
        if keep {
            if let Some(old) = self.paused.insert(session_id.to_string(), key) {
                self.facts.push(Fact::Released { key: old });
            }
        }
    }

    fn turn_parent(&self, turn: TurnId, conn: Option<ConnId>) -> Parent {
        match self.turns.get(&turn) {
            Some(k) => Parent::Span(*k),
            // A compaction has no turn span: its attempts hang on the request.
            None => self.http_span(conn),
        }
    }

    // ---- bae.provider.attempt ----

    pub fn attempt_begin(
        &mut self,
        call: CallId,
        turn: TurnId,
        conn: Option<ConnId>,
        entry: &crate::ProviderEntry,
        attempt: usize,
    ) {
        if !self.enabled {
            return;
        }
        let attempt_kind = if attempt == 0 { "primary" } else { "fallback" };
        let attrs = vec![
            (AttrKey::ProviderName, AttrValue::Text(entry.name.clone())),
            (
                AttrKey::ProviderKind,
                AttrValue::Static(entry.kind.as_str()),
            ),
            (AttrKey::ProviderModel, AttrValue::Text(entry.model.clone())),
            (AttrKey::ProviderAttempt, AttrValue::Int(attempt as i64)),
            (
                AttrKey::ProviderAttemptKind,
                AttrValue::Static(attempt_kind),
            ),
        ];
        let parent = self.turn_parent(turn, conn);
        let key = self.open(SpanName::ProviderAttempt, parent, Vec::new(), attrs);
        self.attempts.insert(call, key);
    }

    pub fn attempt_end(&mut self, call: CallId, ok: bool) {
        if let Some(key) = self.attempts.remove(&call) {
            let status = if ok {
                Status::Ok
            } else {
                Status::Error("provider attempt failed")
            };
            self.end(key, Vec::new(), status, false);
        }
    }

    // ---- bae.tool.dispatch and its children ----

    pub fn dispatch_begin(
        &mut self,
        turn: TurnId,
        tool_use_id: &str,
        name: &str,
        dispatch: Dispatch,
        input_bytes: usize,
    ) {
        if !self.enabled {
            return;
        }
        let attrs = vec![
            (AttrKey::ToolName, AttrValue::Text(name.to_string())),
            (AttrKey::ToolDispatch, AttrValue::Static(dispatch.as_str())),
            (AttrKey::ToolInputBytes, AttrValue::Int(input_bytes as i64)),
        ];
        let parent = self.turn_parent(turn, None);
        let key = self.open(SpanName::ToolDispatch, parent, Vec::new(), attrs);
        self.dispatches.insert((turn, tool_use_id.to_string()), key);
    }

    /// The block's `tool_result` is known (`output_bytes` of its content),
    /// or `None` for a client tool handed to the client at a pause.
    pub fn dispatch_end(&mut self, turn: TurnId, tool_use_id: &str, result: Option<(bool, usize)>) {
        if !self.enabled {
            return;
        }
        let id = (turn, tool_use_id.to_string());
        if let Some(child) = self.tool_children.remove(&id) {
            self.end(child, Vec::new(), Status::Unset, false);
        }
        let Some(key) = self.dispatches.remove(&id) else {
            return;
        };
        let (attrs, status) = match result {
            Some((is_error, bytes)) => (
                vec![
                    (AttrKey::ToolIsError, AttrValue::Bool(is_error)),
                    (AttrKey::ToolOutputBytes, AttrValue::Int(bytes as i64)),
                ],
                if is_error {
                    Status::Error("tool error")
                } else {
                    Status::Ok
                },
            ),
            None => (Vec::new(), Status::Unset),
        };
        self.end(key, attrs, status, false);
    }

    /// An MCP `tools/call` (client kind) or a sandbox exec under a dispatch.
    pub fn tool_child_begin(&mut self, turn: TurnId, tool_use_id: &str, child: ToolChild<'_>) {
        if !self.enabled {
            return;
        }
        let id = (turn, tool_use_id.to_string());
        let Some(&dispatch) = self.dispatches.get(&id) else {
            return;
        };
        let (name, attrs) = match child {
            ToolChild::Mcp { server } => (
                SpanName::McpCall,
                vec![(AttrKey::McpServer, AttrValue::Text(server.to_string()))],
            ),
            ToolChild::Sandbox => (SpanName::SandboxExec, Vec::new()),
        };
        let key = self.open(name, Parent::Span(dispatch), Vec::new(), attrs);
        self.tool_children.insert(id, key);
    }

    /// The child ended; `exit_code` for a sandbox exec that ran.
    pub fn tool_child_end(
        &mut self,
        turn: TurnId,
        tool_use_id: &str,
        ok: bool,
        exit_code: Option<i64>,
    ) {
        if !self.enabled {
            return;
        }
        let Some(key) = self.tool_children.remove(&(turn, tool_use_id.to_string())) else {
            return;
        };
        let attrs = exit_code
            .map(|c| vec![(AttrKey::SandboxExitCode, AttrValue::Int(c))])
            .unwrap_or_default();
        let status = if ok {
            Status::Ok
        } else {
            Status::Error("call failed")
        };
        self.end(key, attrs, status, false);
    }

    fn end_tools_of(&mut self, turn: TurnId) {
        let mut left: Vec<(TurnId, String)> = self
            .dispatches
            .keys()
            .filter(|(t, _)| *t == turn)
            .cloned()
            .collect();
        left.sort();
        for (_, id) in left {
            self.dispatch_end(turn, &id, None);
        }
    }

    // ---- bae.subagent ----

    /// A subagent was launched by the dispatch of `tool_use_id`: its own
    /// root, linked to that dispatch.
    pub fn subagent_begin(&mut self, turn: TurnId, tool_use_id: &str, session_id: &str, id: &str) {
        if !self.enabled {
            return;
        }
        let links = self
            .dispatches
            .get(&(turn, tool_use_id.to_string()))
            .map(|d| Link {
                to: *d,
                kind: LinkKind::Subagent,
            })
            .into_iter()
            .collect();
        let attrs = vec![
            (AttrKey::SessionId, AttrValue::Text(session_id.to_string())),
            (AttrKey::SubagentId, AttrValue::Text(id.to_string())),
        ];
        let key = self.open(SpanName::Subagent, Parent::Root, links, attrs);
        self.subagents.insert(id.to_string(), key);
    }

    /// A subagent reached a terminal state.
    pub fn subagent_ended(&mut self, id: &str, end: SubagentEnd) {
        let (value, status) = match end {
            SubagentEnd::Completed => ("completed", Status::Ok),
            SubagentEnd::Failed => ("failed", Status::Error("subagent failed")),
            SubagentEnd::Cancelled => ("cancelled", Status::Unset),
        };
        let Some(key) = self.subagents.remove(id) else {
            return;
        };
        let attrs = vec![(AttrKey::SubagentOutcome, AttrValue::Static(value))];
        self.end(key, attrs, status, false);
    }
}

/// What runs under a dispatch span.
#[derive(Debug, Clone, Copy)]
pub enum ToolChild<'a> {
    Mcp { server: &'a str },
    Sandbox,
}

/// `bae.subagent.outcome` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubagentEnd {
    Completed,
    Failed,
    Cancelled,
}

/// The `http.route` template of a path (low cardinality: ids are replaced).
pub fn route(listener: Listener, path: &str) -> &'static str {
    match listener {
        Listener::Client => match path {
            "/healthz" => "/healthz",
            "/api/v1/meta" => "/api/v1/meta",
            "/api/v1/sessions" => "/api/v1/sessions",
            _ => {
                let Some(rest) = path.strip_prefix("/api/v1/sessions/") else {
                    return "unmatched";
                };
                match rest.split_once('/').map(|(_, tail)| tail) {
                    None if !rest.is_empty() => "/api/v1/sessions/{session_id}",
                    Some("join") => "/api/v1/sessions/{session_id}/join",
                    Some("participants") => "/api/v1/sessions/{session_id}/participants",
                    Some("events") => "/api/v1/sessions/{session_id}/events",
                    Some("rpc") => "/api/v1/sessions/{session_id}/rpc",
                    _ => "unmatched",
                }
            }
        },
        Listener::Admin => {
            if path == "/metrics" {
                return "/metrics";
            }
            if path.starts_with("/admin/ui") {
                return "/admin/ui";
            }
            let Some(rest) = path.strip_prefix("/admin/v1/") else {
                return "unmatched";
            };
            let parts: Vec<&str> = rest.split('/').collect();
            match parts.as_slice() {
                ["profiles"] => "/admin/v1/profiles",
                ["profiles", _] => "/admin/v1/profiles/{profile_id}",
                ["keys"] => "/admin/v1/keys",
                ["keys", _] => "/admin/v1/keys/{key_id}",
                ["sessions"] => "/admin/v1/sessions",
                ["sessions", _, "events"] => "/admin/v1/sessions/{session_id}/events",
                ["sessions", _, "cancel-turn"] => "/admin/v1/sessions/{session_id}/cancel-turn",
                ["mcp-servers"] => "/admin/v1/mcp-servers",
                ["providers"] => "/admin/v1/providers",
                ["config"] => "/admin/v1/config",
                ["sandbox-status"] => "/admin/v1/sandbox-status",
                _ => "unmatched",
            }
        }
    }
}

#[cfg(test)]
mod tests;
