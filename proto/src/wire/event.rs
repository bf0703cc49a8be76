//! The closed `event_type` catalogue and the EventView wire shape
//! (spec 02 §1.1, §4).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json::{push_opt_str, push_str};

macro_rules! event_types {
    ($($variant:ident => $s:literal,)*) => {
        /// Every `event_type` string the server may emit (closed set of 28).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventType {
            $(
                #[doc = concat!("`", $s, "`")]
                $variant,
            )*
        }

        impl EventType {
            /// The full catalogue in spec order.
            pub const ALL: [EventType; 28] = [$(EventType::$variant,)*];

            /// The wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$variant => $s,)*
                }
            }

            /// Parse a wire string; `None` for anything outside the catalogue
            /// (including the retired `session.compaction`).
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some(EventType::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

event_types! {
    ClientMessageSend => "client.message.send",
    ServerMessageSend => "server.message.send",
    ProviderRequest => "provider.request",
    ProviderResponse => "provider.response",
    ToolCall => "tool.call",
    ToolResult => "tool.result",
    McpRequest => "mcp.request",
    McpResponse => "mcp.response",
    SandboxRequest => "sandbox.request",
    SandboxResponse => "sandbox.response",
    SessionOpen => "session.open",
    SessionJoin => "session.join",
    SessionClose => "session.close",
    SessionError => "session.error",
    SessionDriverRegister => "session.driver.register",
    SessionSandboxAvailable => "session.sandbox.available",
    SessionSandboxStart => "session.sandbox.start",
    SessionSandboxRunning => "session.sandbox.running",
    SessionSandboxStop => "session.sandbox.stop",
    SessionSandboxStopped => "session.sandbox.stopped",
    SessionSandboxError => "session.sandbox.error",
    SessionSubagentStart => "session.subagent.start",
    SessionSubagentRunning => "session.subagent.running",
    SessionSubagentCompleted => "session.subagent.completed",
    SessionSubagentFailed => "session.subagent.failed",
    SessionSubagentCancelled => "session.subagent.cancelled",
    SessionCompactionStarted => "session.compaction.started",
    SessionCompactionCompleted => "session.compaction.completed",
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        EventType::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown event_type {s:?}")))
    }
}

/// One event as it leaves the server, member order
/// `id, session_id, client_key_id, event_type, payload, created_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    /// `evt_…`
    pub id: String,
    /// `ses_…`
    pub session_id: String,
    /// The acting client key (`key_…`); nullable.
    pub client_key_id: Option<String>,
    /// One of [`EventType`]'s strings (kept as a string so stored rows
    /// round-trip verbatim).
    pub event_type: String,
    /// The payload JSON.
    pub payload: Value,
    /// `YYYY-MM-DDTHH:MM:SS.sssZ`
    pub created_at: String,
}

impl EventView {
    /// The typed event type, if in the catalogue.
    pub fn kind(&self) -> Option<EventType> {
        EventType::parse(&self.event_type)
    }

    /// Compact JSON (same bytes as `serde_json::to_string(self)`).
    pub fn to_json(&self) -> String {
        let payload = serde_json::to_string(&self.payload).unwrap_or_else(|_| "null".into());
        event_view_json(
            &self.id,
            &self.session_id,
            self.client_key_id.as_deref(),
            &self.event_type,
            &payload,
            &self.created_at,
        )
    }
}

/// Build an EventView JSON object by concatenation.
///
/// `payload_json` must already be serialized JSON (it is inserted verbatim);
/// every other argument is escaped as a JSON string. For a compact
/// `payload_json` the result equals `serde_json::to_string` of the
/// corresponding [`EventView`].
pub fn event_view_json(
    id: &str,
    session_id: &str,
    client_key_id: Option<&str>,
    event_type: &str,
    payload_json: &str,
    created_at: &str,
) -> String {
    let mut out = String::with_capacity(
        120 + id.len() + session_id.len() + event_type.len() + payload_json.len(),
    );
    push_event_view(
        &mut out,
        id,
        session_id,
        client_key_id,
        event_type,
        payload_json,
        created_at,
    );
    out
}

/// [`event_view_json`] appended to `out` (a page renders all its items
/// into one buffer).
pub fn push_event_view(
    out: &mut String,
    id: &str,
    session_id: &str,
    client_key_id: Option<&str>,
    event_type: &str,
    payload_json: &str,
    created_at: &str,
) {
    out.push_str("{\"id\":");
    push_str(out, id);
    out.push_str(",\"session_id\":");
    push_str(out, session_id);
    out.push_str(",\"client_key_id\":");
    push_opt_str(out, client_key_id);
    out.push_str(",\"event_type\":");
    push_str(out, event_type);
    out.push_str(",\"payload\":");
    out.push_str(payload_json);
    out.push_str(",\"created_at\":");
    push_str(out, created_at);
    out.push('}');
}
