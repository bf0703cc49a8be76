//! One MCP connection: open → `initialize` → `notifications/initialized` →
//! `tools/list` → ready for `tools/call`s, one request in flight, each with
//! a deadline. Transport differences stay small: stdio answers arrive as
//! lines matched by id, HTTP answers as the reply to the request's own POST.

use proto::mcp::{self, errors, Answer, CallOutcome, McpMethod, McpTool};
use serde_json::Value;

use super::{CallToken, McpCommand, McpConnId, McpEvent, McpServerSpec, McpSettings};
use crate::MonoMs;

/// Backoff between reconnect attempts of a `reconnect = true` server.
const BACKOFF_START_MS: u64 = 250;
const BACKOFF_MAX_MS: u64 = 30_000;
/// Most `tools/list` pages followed during one handshake.
const MAX_LIST_PAGES: u32 = 64;

/// What a handled event means for the hub.
pub(super) enum Step {
    Nothing,
    Connected(Vec<McpTool>),
    ConnectFailed(String),
    CallDone(CallToken, CallOutcome),
    /// The HTTP server no longer knows our `mcp-session-id` (404): the call
    /// was not processed, so it may be sent again on a new session.
    Expired(PendingCall),
}

/// A `tools/call` as sent, kept so an expired HTTP session can replay it
/// once on a fresh one.
#[derive(Debug, Clone)]
pub(super) struct PendingCall {
    pub tool: String,
    pub input: Value,
    pub token: CallToken,
    pub replayed: bool,
}

/// The request a connection is waiting on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Open,
    Initialize,
    /// HTTP only: the POST of the `initialized` notification.
    InitializedAck,
    ToolsList,
    Call(CallToken),
}

impl Awaiting {
    fn method(self) -> &'static str {
        match self {
            Awaiting::Open => "transport open",
            Awaiting::Initialize => McpMethod::Initialize.as_str(),
            Awaiting::InitializedAck => "notifications/initialized",
            Awaiting::ToolsList => McpMethod::ToolsList.as_str(),
            Awaiting::Call(_) => McpMethod::ToolsCall.as_str(),
        }
    }
}

struct Pending {
    /// JSON-RPC id (`0` for the notification's POST).
    exchange: u64,
    awaiting: Awaiting,
    deadline: MonoMs,
    call: Option<PendingCall>,
}

/// A message queued for the driver.
pub(super) struct Outgoing {
    exchange: u64,
    message: Vec<u8>,
    session_id: Option<String>,
}

impl Outgoing {
    pub(super) fn into_command(self, conn: McpConnId) -> McpCommand {
        McpCommand::Send {
            conn,
            exchange: self.exchange,
            message: self.message,
            session_id: self.session_id,
        }
    }
}

pub(super) struct Conn {
    spec: McpServerSpec,
    http: bool,
    timeout_ms: u64,
    version: String,
    next_id: u64,
    pending: Option<Pending>,
    /// Set once the transport failed: later calls fail at once with it.
    broken: Option<String>,
    /// `mcp-session-id` once the HTTP server returned one.
    http_session: Option<String>,
    outgoing: Vec<Outgoing>,
    tools: Vec<McpTool>,
    /// A reconnect incarnation (its handshake is not part of a create).
    reconnect: bool,
    /// Failed reconnect attempts in a row, and when the next may start.
    attempts: u32,
    retry_at: MonoMs,
    /// The call that triggered a reconnect, sent once the handshake is done.
    queued: Option<PendingCall>,
    /// `tools/list` pages gathered so far during a handshake.
    listed: Vec<McpTool>,
    pages: u32,
    /// The hub closed this transport (a failed reconnect kept for its
    /// backoff): its late events must not overwrite the failure.
    closed: bool,
    /// A reconnect's whole handshake shares one deadline, so a call that
    /// reconnects waits at most two timeouts (handshake, then the call).
    handshake_deadline: Option<MonoMs>,
}

impl Conn {
    pub(super) fn new(spec: McpServerSpec, now: MonoMs, settings: &McpSettings) -> Self {
        Conn {
            http: matches!(spec.transport, super::McpTransport::Http { .. }),
            spec,
            timeout_ms: settings.timeout_ms,
            version: settings.server_version.clone(),
            next_id: 1,
            pending: Some(Pending {
                exchange: 0,
                awaiting: Awaiting::Open,
                deadline: now + settings.timeout_ms,
                call: None,
            }),
            broken: None,
            http_session: None,
            outgoing: Vec::new(),
            tools: Vec::new(),
            reconnect: false,
            attempts: 0,
            retry_at: MonoMs(0),
            queued: None,
            listed: Vec::new(),
            pages: 0,
            closed: false,
            handshake_deadline: None,
        }
    }

    /// A new incarnation of `old` (same server, same session) that will
    /// send `queued` once its handshake is done.
    pub(super) fn reopen(
        old: &Conn,
        queued: PendingCall,
        now: MonoMs,
        settings: &McpSettings,
    ) -> Self {
        let mut c = Conn::new(old.spec.clone(), now, settings);
        c.reconnect = true;
        c.handshake_deadline = Some(now + settings.timeout_ms);
        c.attempts = old.attempts;
        c.tools = old.tools.clone();
        c.queued = Some(queued);
        c
    }

    pub(super) fn spec(&self) -> &McpServerSpec {
        &self.spec
    }

    pub(super) fn server_name(&self) -> &str {
        &self.spec.name
    }

    pub(super) fn is_reconnect(&self) -> bool {
        self.reconnect
    }

    /// `Some(reason)` when the transport failed for good.
    pub(super) fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Whether a broken connection may be replaced, and from when.
    pub(super) fn may_reconnect(&self) -> Option<MonoMs> {
        self.spec.reconnect.then_some(self.retry_at)
    }

    /// A reconnect attempt failed: back off exponentially.
    pub(super) fn backoff(&mut self, now: MonoMs, reason: String) {
        self.attempts = self.attempts.saturating_add(1);
        let shift = self.attempts.saturating_sub(1).min(16);
        let delay = (BACKOFF_START_MS << shift).min(BACKOFF_MAX_MS);
        self.retry_at = now + delay;
        self.broken = Some(reason);
        self.pending = None;
    }

    pub(super) fn take_queued(&mut self) -> Option<PendingCall> {
        self.queued.take()
    }

    /// The handshake of a reconnect finished: attempts start over.
    pub(super) fn reset_backoff(&mut self) {
        self.attempts = 0;
        self.retry_at = MonoMs(0);
    }

    pub(super) fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    pub(super) fn set_tools(&mut self, tools: Vec<McpTool>) {
        self.tools = tools;
    }

    pub(super) fn deadline(&self) -> Option<MonoMs> {
        self.pending.as_ref().map(|p| p.deadline)
    }

    pub(super) fn take_outgoing(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outgoing)
    }

    /// The caller of `token` gave up (its turn was cancelled): the
    /// connection takes the next call at once; the late answer is skipped.
    pub(super) fn abandon(&mut self, token: CallToken) {
        if self.awaiting() == Some(Awaiting::Call(token)) {
            self.pending = None;
        }
        // A call waiting for a reconnect's handshake is never sent (found
        // by sim seed 2729: the tool ran after its turn was cancelled).
        if self.queued.as_ref().is_some_and(|q| q.token == token) {
            self.queued = None;
        }
    }

    /// The hub closed the transport; later events of it are ignored.
    pub(super) fn mark_closed(&mut self) {
        self.closed = true;
    }

    pub(super) fn close_command(&self, conn: McpConnId) -> McpCommand {
        McpCommand::Close {
            conn,
            session_id: self.http_session.clone(),
        }
    }

    /// Sends a request and waits for its answer.
    fn request(&mut self, method: McpMethod, params: &Value, awaiting: Awaiting, now: MonoMs) {
        self.request_for(method, params, awaiting, None, now);
    }

    fn request_for(
        &mut self,
        method: McpMethod,
        params: &Value,
        awaiting: Awaiting,
        call: Option<PendingCall>,
        now: MonoMs,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        self.outgoing.push(Outgoing {
            exchange: id,
            message: mcp::request(id, method, params),
            session_id: self.http_session.clone(),
        });
        let mut deadline = now + self.timeout_ms;
        if call.is_none() {
            if let Some(d) = self.handshake_deadline {
                deadline = deadline.min(d);
            }
        }
        self.pending = Some(Pending {
            exchange: id,
            awaiting,
            deadline,
            call,
        });
    }

    /// `tools/call`; a broken or busy connection fails at once rather than
    /// waiting out the timeout.
    pub(super) fn call(&mut self, call: PendingCall, now: MonoMs) -> Step {
        let token = call.token;
        if let Some(reason) = &self.broken {
            return Step::CallDone(token, CallOutcome::Failed(reason.clone()));
        }
        if self.pending.is_some() {
            let text = errors::transport("another request to this MCP server is in flight");
            return Step::CallDone(token, CallOutcome::Failed(text));
        }
        let params = mcp::call_params(&call.tool, &call.input);
        self.request_for(
            McpMethod::ToolsCall,
            &params,
            Awaiting::Call(token),
            Some(call),
            now,
        );
        Step::Nothing
    }

    pub(super) fn handle(&mut self, event: McpEvent, now: MonoMs) -> Step {
        if self.closed {
            return Step::Nothing;
        }
        match event {
            McpEvent::Opened => {
                if self.awaiting() != Some(Awaiting::Open) {
                    return Step::Nothing;
                }
                let params = mcp::initialize_params(&self.version);
                self.request(McpMethod::Initialize, &params, Awaiting::Initialize, now);
                Step::Nothing
            }
            McpEvent::OpenFailed(error) => self.fail(errors::connect(&error)),
            McpEvent::Line(line) => {
                let Some(p) = &self.pending else {
                    return Step::Nothing;
                };
                match mcp::match_answer(&line, p.exchange) {
                    Some(answer) if !self.http => self.answered(answer, now),
                    _ => Step::Nothing,
                }
            }
            McpEvent::Closed(reason) => {
                let text =
                    reason.map_or_else(|| errors::CLOSED.to_string(), |r| errors::transport(&r));
                self.fail(text)
            }
            McpEvent::HttpReply {
                exchange,
                status,
                content_type,
                session_id,
                body,
            } => {
                if session_id.is_some() {
                    self.http_session = session_id;
                }
                if self.pending.as_ref().map(|p| p.exchange) != Some(exchange) {
                    return Step::Nothing;
                }
                if status == 404 && self.spec.reconnect && self.http_session.is_some() {
                    let call = self.pending.as_ref().and_then(|p| p.call.clone());
                    if let Some(call) = call.filter(|c| !c.replayed) {
                        // The server restarted or expired us: start over.
                        self.pending = None;
                        self.http_session = None;
                        self.broken = Some(errors::http_status(404));
                        return Step::Expired(call);
                    }
                }
                if !(200..300).contains(&status) {
                    return self.fail_request(errors::http_status(status));
                }
                if self.awaiting() == Some(Awaiting::InitializedAck) {
                    self.pending = None;
                    self.request(
                        McpMethod::ToolsList,
                        &serde_json::json!({}),
                        Awaiting::ToolsList,
                        now,
                    );
                    return Step::Nothing;
                }
                let sse = content_type
                    .to_ascii_lowercase()
                    .contains("text/event-stream");
                let answer = if sse {
                    mcp::match_answer_in_sse(&body, exchange)
                } else {
                    mcp::match_answer(&body, exchange)
                };
                match answer {
                    Some(a) => self.answered(a, now),
                    None if sse => self.fail_request(errors::NO_SSE_MATCH.to_string()),
                    None => self.fail_request(errors::NOT_JSON.to_string()),
                }
            }
            McpEvent::HttpFailed { exchange, error } => {
                if self.pending.as_ref().map(|p| p.exchange) != Some(exchange) {
                    return Step::Nothing;
                }
                self.fail_request(errors::transport(&error))
            }
        }
    }

    /// The pending request's deadline passed.
    pub(super) fn expire(&mut self, now: MonoMs) -> Step {
        match &self.pending {
            Some(p) if p.deadline <= now => {
                let text = errors::timed_out(p.awaiting.method());
                self.fail_request(text)
            }
            _ => Step::Nothing,
        }
    }

    fn awaiting(&self) -> Option<Awaiting> {
        self.pending.as_ref().map(|p| p.awaiting)
    }

    fn answered(&mut self, answer: Answer, now: MonoMs) -> Step {
        let Some(p) = self.pending.take() else {
            return Step::Nothing;
        };
        match (p.awaiting, answer) {
            (Awaiting::Call(token), answer) => {
                Step::CallDone(token, CallOutcome::from_answer(answer))
            }
            (_, Answer::Error { code, message }) => {
                Step::ConnectFailed(errors::connect(&Answer::error_text(code, &message)))
            }
            (Awaiting::Initialize, Answer::Result(_)) => {
                self.outgoing.push(Outgoing {
                    exchange: 0,
                    message: mcp::initialized_notification(),
                    session_id: self.http_session.clone(),
                });
                if self.http {
                    // Its POST must succeed before the handshake goes on.
                    self.pending = Some(Pending {
                        exchange: 0,
                        awaiting: Awaiting::InitializedAck,
                        deadline: now + self.timeout_ms,
                        call: None,
                    });
                } else {
                    self.request(
                        McpMethod::ToolsList,
                        &serde_json::json!({}),
                        Awaiting::ToolsList,
                        now,
                    );
                }
                Step::Nothing
            }
            (Awaiting::ToolsList, Answer::Result(result)) => {
                self.listed.extend(mcp::tools_from_list(&result));
                self.pages += 1;
                // Follow `nextCursor` (spec 06 §7 note 4: a compatible
                // improvement), bounded against a server that never ends.
                match result.get("nextCursor").and_then(Value::as_str) {
                    Some(cursor) if self.pages < MAX_LIST_PAGES => {
                        let params = serde_json::json!({ "cursor": cursor });
                        self.request(McpMethod::ToolsList, &params, Awaiting::ToolsList, now);
                        Step::Nothing
                    }
                    _ => Step::Connected(std::mem::take(&mut self.listed)),
                }
            }
            (Awaiting::Open | Awaiting::InitializedAck, Answer::Result(_)) => Step::Nothing,
        }
    }

    /// The pending request failed; the connection itself stays usable.
    fn fail_request(&mut self, text: String) -> Step {
        match self.pending.take().map(|p| p.awaiting) {
            Some(Awaiting::Call(token)) => Step::CallDone(token, CallOutcome::Failed(text)),
            Some(_) => Step::ConnectFailed(with_connect_prefix(text)),
            None => Step::Nothing,
        }
    }

    /// The transport is gone for good.
    fn fail(&mut self, text: String) -> Step {
        self.broken = Some(text.clone());
        self.fail_request(text)
    }
}

fn with_connect_prefix(text: String) -> String {
    if text.starts_with("MCP connect failed") {
        text
    } else {
        errors::connect(&text)
    }
}
