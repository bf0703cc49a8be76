//! One MCP connection: open → `initialize` → `notifications/initialized` →
//! `tools/list` → ready for `tools/call`s, one request in flight, each with
//! a deadline. Transport differences stay small: stdio answers arrive as
//! lines matched by id, HTTP answers as the reply to the request's own POST.

use proto::mcp::{self, errors, Answer, CallOutcome, McpMethod, McpTool};
use serde_json::Value;

use super::{CallToken, McpCommand, McpConnId, McpEvent, McpSettings};

/// What a handled event means for the hub.
pub(super) enum Step {
    Nothing,
    Connected(Vec<McpTool>),
    ConnectFailed(String),
    CallDone(CallToken, CallOutcome),
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
    deadline: u64,
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
    session_id: String,
    server: String,
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
}

impl Conn {
    pub(super) fn new(
        session_id: &str,
        server: &str,
        http: bool,
        now: u64,
        settings: &McpSettings,
    ) -> Self {
        Conn {
            session_id: session_id.to_string(),
            server: server.to_string(),
            http,
            timeout_ms: settings.timeout_ms,
            version: settings.server_version.clone(),
            next_id: 1,
            pending: Some(Pending {
                exchange: 0,
                awaiting: Awaiting::Open,
                deadline: now + settings.timeout_ms,
            }),
            broken: None,
            http_session: None,
            outgoing: Vec::new(),
            tools: Vec::new(),
        }
    }

    pub(super) fn server_name(&self) -> &str {
        &self.server
    }

    pub(super) fn session_id(&self) -> &str {
        &self.session_id
    }

    pub(super) fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    pub(super) fn set_tools(&mut self, tools: Vec<McpTool>) {
        self.tools = tools;
    }

    pub(super) fn deadline(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.deadline)
    }

    pub(super) fn take_outgoing(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outgoing)
    }

    pub(super) fn close_command(&self, conn: McpConnId) -> McpCommand {
        McpCommand::Close {
            conn,
            session_id: self.http_session.clone(),
        }
    }

    /// Sends a request and waits for its answer.
    fn request(&mut self, method: McpMethod, params: &Value, awaiting: Awaiting, now: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.outgoing.push(Outgoing {
            exchange: id,
            message: mcp::request(id, method, params),
            session_id: self.http_session.clone(),
        });
        self.pending = Some(Pending {
            exchange: id,
            awaiting,
            deadline: now + self.timeout_ms,
        });
    }

    /// `tools/call`; a broken or busy connection fails at once rather than
    /// waiting out the timeout.
    pub(super) fn call(&mut self, tool: &str, input: &Value, token: CallToken, now: u64) -> Step {
        if let Some(reason) = &self.broken {
            return Step::CallDone(token, CallOutcome::Failed(reason.clone()));
        }
        if self.pending.is_some() {
            let text = errors::transport("another request to this MCP server is in flight");
            return Step::CallDone(token, CallOutcome::Failed(text));
        }
        let params = mcp::call_params(tool, input);
        self.request(McpMethod::ToolsCall, &params, Awaiting::Call(token), now);
        Step::Nothing
    }

    pub(super) fn handle(&mut self, event: McpEvent, now: u64) -> Step {
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
    pub(super) fn expire(&mut self, now: u64) -> Step {
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

    fn answered(&mut self, answer: Answer, now: u64) -> Step {
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
                Step::Connected(mcp::tools_from_list(&result))
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
