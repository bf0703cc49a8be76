//! The driver's vocabulary: what happens to the engine ([`Input`]), what
//! it needs done ([`Output`]), the provider calls it asks for and their
//! replies, and the clocks and entropy the driver supplies. Re-exported at
//! the crate root.

use crate::store::{ReadError, ReadId, ReadResult, StoreRead, StoreWrite};
use crate::{bytes, mcp, replicas, sandbox, store};
use crate::{CallId, ConnId, MonoMs, UnixMs};

/// Which listener accepted a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Client,
    Admin,
}

/// The two clocks the engine needs, both supplied by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Now {
    /// The monotonic clock (timers).
    pub mono: MonoMs,
    /// The wall clock (`created_at` stamps).
    pub unix: UnixMs,
}

/// Source of randomness for ids and secrets. Production drivers must supply
/// a CSPRNG; the simulator supplies a seeded generator.
pub trait Entropy {
    fn fill(&mut self, buf: &mut [u8]);
}

/// Where a provider's credential goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthPlacement {
    /// `x-api-key: <token>` (Anthropic).
    XApiKey,
    /// `authorization: Bearer <token>` (OpenAI).
    Bearer,
}

/// An HTTP call to an LLM provider, performed by the driver.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderCall {
    pub id: CallId,
    pub url: String,
    /// Headers without the credential.
    pub headers: Vec<(String, String)>,
    /// The raw `auth_token` template (`${VAR}` resolved by the driver right
    /// before the call, never stored or logged).
    pub auth_template: String,
    pub auth: AuthPlacement,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
    /// A streamed call (`stream = true` on its registry entry): the body
    /// of a 2xx response is reported as it arrives, in
    /// [`Input::ProviderChunk`]s, then [`ProviderReply::Streamed`]; any
    /// other status is read whole as usual.
    pub stream: bool,
}

/// What came back from a [`ProviderCall`].
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderReply {
    /// An HTTP response was obtained (any status), with what its headers
    /// advised about calling again (read by the driver for non-2xx
    /// statuses; a retry policy uses it).
    Http {
        status: u16,
        body: Vec<u8>,
        advice: proto::provider::retry::RetryAdvice,
    },
    /// No usable HTTP response: connect/TLS/IO/timeout. Text has URLs removed.
    Transport(String),
    /// The credential template could not be resolved (unset `${VAR}`…).
    Credential(String),
    /// A streamed call's 2xx body was reported in
    /// [`Input::ProviderChunk`]s and ended normally.
    Streamed,
}

/// Everything that happens to the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A connection was accepted on `listener`.
    Accepted { conn: ConnId, listener: Listener },
    /// Bytes arrived on a connection.
    Received { conn: ConnId, bytes: Vec<u8> },
    /// `bytes` previously emitted for `conn` were written to the socket.
    Flushed { conn: ConnId, bytes: usize },
    /// The peer closed the connection or it failed; the engine forgets it.
    Closed { conn: ConnId },
    /// A store read was answered (`Err`: why it has none, typed; its text is for logs).
    ReadDone {
        id: ReadId,
        result: Result<ReadResult, ReadError>,
    },
    /// A provider call finished.
    ProviderDone { call: CallId, reply: ProviderReply },
    /// Body bytes of a streamed call's 2xx response, in order, as they
    /// arrived (any split). [`Input::ProviderDone`] follows.
    ProviderChunk { call: CallId, bytes: Vec<u8> },
    /// Something happened on an MCP transport opened by [`Output::Mcp`].
    Mcp {
        conn: mcp::McpConnId,
        event: mcp::McpEvent,
    },
    /// The container engine answered an [`Output::Sandbox`] command.
    Sandbox {
        op: sandbox::OpId,
        reply: sandbox::SandboxReply,
    },
    /// Graceful shutdown began: stop starting work, end streams.
    Shutdown,
    /// Replica mode: catalogue rows another replica committed (profiles,
    /// keys, revocations, sessions), to merge into the in-memory catalogue.
    Catalog(Box<store::CatalogUpdate>),
}

impl Input {
    /// The connection a socket input is about (`None` for other inputs).
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            Input::Accepted { conn, .. }
            | Input::Received { conn, .. }
            | Input::Flushed { conn, .. }
            | Input::Closed { conn } => Some(*conn),
            _ => None,
        }
    }
}

/// Everything the engine needs done.
// Outputs are moved straight to the driver; boxing writes would add an
// allocation per event for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write bytes to a connection (after committing earlier writes).
    Send { conn: ConnId, bytes: bytes::Bytes },
    /// Write bytes that reveal no stored state (`/healthz`,
    /// `/api/v1/meta`): after earlier output to the same connection, but
    /// never held behind a commit ([`crate::pipeline::Pipeline::deliver_ungated`]).
    SendUngated { conn: ConnId, bytes: bytes::Bytes },
    /// Close a connection once everything sent before has been written.
    Close { conn: ConnId },
    /// Persist a change (see the durability rule).
    Write(StoreWrite),
    /// Answer a query with [`Input::ReadDone`].
    Read { id: ReadId, read: StoreRead },
    /// Perform a provider call and report [`Input::ProviderDone`].
    CallProvider(ProviderCall),
    /// Stop a provider call now: close its connection (the provider stops
    /// generating) and report nothing more for it; a report already on its
    /// way is ignored.
    AbortProvider(CallId),
    /// Open, write to or close an MCP transport; report [`Input::Mcp`].
    Mcp(mcp::McpCommand),
    /// Run a container engine command; report [`Input::Sandbox`].
    Sandbox(sandbox::SandboxCommand),
    /// Replica mode: relay a request to the replica that owns its session
    /// (after earlier writes commit, like a `Send`); the engine has
    /// forgotten the connection.
    Forward(replicas::Forward),
}
