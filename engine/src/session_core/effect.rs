//! The session core's output vocabulary: what a turn asks the engine to do
//! ([`Effect`]), and what it needs to know that only the engine has
//! ([`World`], read-only). Effects come out of [`super::SessionCore`] in
//! order; the engine performs each before taking the next, and answers the
//! ones that need an answer (a logged event's id, a call id, a subagent
//! launch) by calling back into the core, whose follow-up effects then come
//! first: the order is exactly that of a turn running synchronously.

use std::sync::Arc;

use proto::wire::content::Dispatch;
use proto::wire::EventType;
use serde_json::Value;

use super::Pause;
use crate::{AuthPlacement, ConnId, ProviderEntry};

/// What the core does once the engine logged an event for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTag {
    /// Nothing beyond keeping it for the turn's `result.events`.
    Plain,
    /// An applied steer: its stream is answered with the event's id.
    Steer(ConnId),
    /// The compaction preamble or summary: the completion names its id.
    CompactionPart,
    /// `session.compaction.completed`: the manual compaction's result.
    CompactionDone,
    /// The turn's own `client.message.send`: deltas name its id.
    TurnInput,
    /// An attempt's `provider.request`: its deltas name its id.
    Request,
}

/// One event to append on the turn's behalf (attributed to its driver).
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    pub event: EventType,
    /// Compact JSON, rendered by the core: a message's text is also its
    /// turn's `result.message`, and a `provider.request` splices its
    /// history in as text.
    pub payload: String,
    /// The request's own input: not echoed on the turn's own streams
    /// (spec 01 §7).
    pub quiet: bool,
    pub tag: LogTag,
    /// Estimated bytes the message added to the session's cached history
    /// (message events only; the core already added it).
    pub grew: Option<usize>,
}

/// A provider call for the current attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub entry: ProviderEntry,
    /// The id the engine gave it when it asked for its slot
    /// ([`Effect::Admit`]); `None`: the engine picks one now.
    pub ticket: Option<crate::CallId>,
    pub attempt: usize,
    pub url: String,
    /// Headers without the credential.
    pub headers: Vec<(String, String)>,
    pub auth: AuthPlacement,
    pub body: Vec<u8>,
}

/// What an attempt waiting for its provider slot asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// Its registry entry's name.
    pub entry: String,
    /// Its request's estimated input tokens
    /// ([`crate::provider_limits::estimate_tokens`]).
    pub tokens: u64,
    /// A retry's wait before it may leave.
    pub delay: Option<super::retry::Delay>,
}

/// Measurements for metrics and spans (spec 04 §7).
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// A provider reply came back for the call in flight; `input_tokens`
    /// is the usage it reported (it settles the entry's token bucket).
    ProviderReturned {
        call: crate::CallId,
        kind: proto::provider::Kind,
        ok: bool,
        latency_ms: u64,
        input_tokens: Option<u64>,
    },
    /// A `tool_use` was classified (its `tool.call` is logged).
    ToolCalled {
        tool_use_id: String,
        name: String,
        dispatch: Dispatch,
        input_bytes: usize,
    },
    /// A `tool.result` was logged; `latency_ms` for server-run blocks.
    ToolDone {
        tool_use_id: String,
        dispatch: Dispatch,
        is_error: bool,
        output_bytes: usize,
        latency_ms: Option<u64>,
    },
    /// A successful attempt's tokens by kind (usage accounting): its
    /// `provider.response` was just logged.
    Tokens {
        /// The provider entry's name.
        entry: String,
        model: String,
        tokens: proto::provider::Tokens,
        compaction: bool,
    },
    /// An MCP call or sandbox exec of a block came back.
    ToolChildEnded {
        tool_use_id: String,
        ok: bool,
        exit_code: Option<i64>,
    },
}

/// How a turn (or a compaction holding the gate) ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The assistant's final message, as the compact JSON its
    /// `server.message.send` event carries (serialised once for both).
    Completed(String),
    /// Paused for client tools: the tagged assistant message (its JSON, as
    /// logged) and the pause to park on the gate.
    Paused(String, Pause),
    /// Every provider failed (or the loop limit was hit).
    ProvidersFailed,
    /// An error answer; nothing more is recorded.
    Failed { code: i64, message: String },
    /// A manual compaction: the `session.compaction.completed` EventView,
    /// or `None` when it failed.
    Compacted(Option<crate::streams::EventJson>),
}

/// What the engine is asked to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append an event; answer with [`super::SessionCore::logged`].
    Log(Log),
    /// The session moves to `error` (terminal; its MCP servers close).
    SessionError,
    /// The cached history is missing: rebuild it from the log and answer
    /// with [`super::SessionCore::history_loaded`].
    LoadHistory,
    /// Before the first round trip: reconnect the session's MCP servers if
    /// it predates this process; answer with
    /// [`super::SessionCore::mcp_ready`] (at once when there is nothing to
    /// reconnect).
    RestoreMcp,
    /// Call a provider; answer with [`super::SessionCore::call_sent`], then
    /// later [`super::SessionCore::on_reply`].
    Call(Box<Call>),
    /// A prepared attempt on a limited entry, or a retry, asks for its
    /// slot: answer with [`super::SessionCore::admission`], then (when it
    /// must wait) [`super::SessionCore::admitted`] or
    /// [`super::SessionCore::admission_expired`].
    Admit(Admission),
    /// `tools/call` on the MCP server that serves `tool`; answer with
    /// [`super::SessionCore::on_mcp_done`].
    CallMcp {
        tool_use_id: String,
        tool: String,
        input: Value,
    },
    /// Run `command` in the session's remote sandbox; answer with
    /// [`super::SessionCore::on_exec_done`].
    Exec {
        index: usize,
        tool_use_id: String,
        command: String,
    },
    /// A subagent tool (`launch_subagent`-style or the status tool): the
    /// engine checks and launches it against the sandbox hub and answers
    /// with [`super::SessionCore::subagent_answered`].
    Subagent {
        tool_use_id: String,
        name: String,
        input: Value,
    },
    /// A steer was applied as the event `event_id`.
    SteerApplied {
        conn: ConnId,
        event_id: String,
    },
    /// A steer will never be applied.
    SteerRetired {
        conn: ConnId,
        why: &'static str,
    },
    /// The cached history was replaced (a compaction): weigh it again.
    HistoryRebuilt,
    Fact(Fact),
    /// Text of the streaming attempt, for the session's streams that opted
    /// into `turn.deltas` (never logged).
    Deltas(crate::streams::DeltaBatch),
    /// The streaming attempt whose deltas went out (`request`, its
    /// `provider.request` id) is over: `None` completed, else why its
    /// deltas are to be discarded.
    DeltasEnded {
        request: Arc<str>,
        reason: Option<proto::jsonrpc::DiscardReason>,
    },
    /// Close the call's connection now: a stream fault or timeout already
    /// failed its attempt.
    AbortCall(crate::CallId),
    /// The turn is over: the engine takes it
    /// ([`super::SessionCore::take_turn`]), answers its streams, and parks
    /// or releases the gate.
    End(Ending),
}

/// Why a profile's provider chain cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// The profile was deleted.
    ProfileUnavailable { profile_id: String },
    /// The primary provider is not in the registry.
    PrimaryMissing { name: String },
}

/// What a subagent tool came to, as the engine's sandbox hub saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum SubagentAnswer {
    /// A result text for the model (`is_error` when it is an error).
    Done { text: String, is_error: bool },
    /// A subagent was launched.
    Launched {
        id: String,
        harness: String,
        model: String,
    },
}

/// What the engine knows that a turn reads (never changes) while it
/// decides: the session's state, its profile's providers, its tool
/// declarations and servers, its sandbox, and the settings.
pub trait World {
    /// Why the session can take no turn (closed or in error), as the
    /// request's error message.
    fn open_error(&self) -> Option<String>;
    /// The session's profile's provider chain (re-read every turn; unknown
    /// fallbacks are skipped).
    fn chain(&self) -> Result<Vec<ProviderEntry>, ChainError>;
    /// Whether the session's profile still exists.
    fn profile_live(&self) -> bool;
    /// Tools offered to the provider on behalf of driver `key_id`.
    fn tools(&self, key_id: &str) -> Vec<Value>;
    /// Where a tool named `tool` runs when driver `key_id` calls it.
    fn classify(&self, key_id: &str, tool: &str) -> Dispatch;
    /// The MCP server that advertises `tool` to the session.
    fn mcp_server(&self, tool: &str) -> Option<String>;
    /// The session's running remote sandbox: `(image, container)`.
    fn sandbox(&self) -> Option<(String, String)>;
    /// The automatic compaction threshold (`None`: client mode).
    fn auto_compaction_size(&self) -> Option<u64>;
    /// The session's stored `session.compact` prompt.
    fn compaction_prompt(&self) -> Option<String>;
    /// `BAE_TURN_TIMEOUT` in ms.
    fn turn_timeout_ms(&self) -> u64;
    /// Capture limit of a sandbox exec's streams (the truncation marker).
    fn max_output(&self) -> usize;
    /// OpenAI's `prompt_cache_key` for the session (entries with caching
    /// on): derived from the session's id, never a secret.
    fn prompt_cache_key(&self) -> String;
}
