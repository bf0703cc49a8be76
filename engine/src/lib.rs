//! The BAE protocol engine: a single-threaded, sans-IO state machine.
//!
//! Shape (after quinn-proto / str0m): the driver feeds everything that
//! happens through [`Engine::handle_input`] and [`Engine::handle_timeout`],
//! then drains [`Engine::poll_output`] for everything that must happen and
//! sleeps until [`Engine::poll_timeout`]. The engine never reads a socket, a
//! file, a clock or the OS RNG: time arrives as [`Now`], entropy through the
//! injected [`Entropy`] source.
//!
//! Durability rule: every [`StoreWrite`] an input causes is emitted *before*
//! any output that reveals it. The driver commits writes (group commit, one
//! transaction per batch) before it hands later [`Output::Send`]s to sockets.
#![forbid(unsafe_code)]
// No input may panic the server (it runs with `panic = "abort"`): lookups
// that can miss answer with an error instead. Tests may index freely.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable
    )
)]

mod admin_api;
mod admin_ui;
mod auth;
mod auth_legacy;
pub mod burst;
pub mod bytes;
mod calls;
mod client_api;
mod conn;
mod connections;
mod decls;
pub mod faults;
pub mod history_cache;
pub mod history_load;
mod idempotency;
pub mod ids;
mod log;
pub mod mcp;
pub mod mem_store;
pub mod metrics;
mod model;
pub mod overload;
pub mod pipeline;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod provider_limits;
mod replica_route;
pub mod replicas;
pub mod residency;
mod respond;
mod rpc;
pub mod sandbox;
mod session_core;
mod session_load;
mod session_mcp;
mod session_sandbox;
mod sessions;
pub mod store;
mod streams;
mod subscribe;
pub mod telemetry;
pub mod time;
pub mod transfer;
mod turn;
pub mod usage;

use std::collections::{BTreeMap, VecDeque};

use model::Catalog;
use proto::jsonrpc::codes;

/// Provider-facing history rebuilt from the log with plain store reads.
pub use ids::{CallId, ConnId};
pub use session_core::retry::RetryPolicy;
pub use store::{ReadId, ReadResult, Snapshot, StoreRead, StoreWrite};
pub use time::{MonoMs, UnixMs};

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
    /// A store read was answered (`Err` carries a log-safe error text).
    ReadDone {
        id: ReadId,
        result: Result<ReadResult, String>,
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
    /// never held behind a commit ([`pipeline::Pipeline::deliver_ungated`]).
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

/// One `[[providers.entries]]` registry entry, as the engine needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderEntry {
    pub name: String,
    /// The wire format (a config error at load when unknown, never guessed).
    pub kind: proto::provider::Kind,
    /// Effective base URL (explicit or the kind default, no trailing `/`).
    pub base_url: String,
    pub model: String,
    /// Raw credential template; resolved only by the driver, per call.
    pub auth_template: String,
    pub max_tokens: u32,
    /// `retry`: failed attempts tried again on this entry (`None`: the
    /// reference's walk, every failure goes to the fallback).
    pub retry: Option<RetryPolicy>,
    /// `limits`: calls in flight, requests and input tokens per minute,
    /// shared by every session (`None`: unlimited).
    pub limits: Option<provider_limits::EntryLimits>,
    /// Prompt caching (opt-in; `None`: requests are the reference's).
    pub cache: Option<proto::provider::Caching>,
    /// Prices per million tokens, for cost estimates (`None`: no cost).
    pub prices: Option<usage::Prices>,
    /// `stream = true`: replies are streamed (`None`: the reference's
    /// unstreamed calls, byte for byte).
    pub stream: Option<StreamSettings>,
}

/// How a streamed provider call is watched (docs/configuration.md,
/// `[[providers.entries]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// From the call leaving to the first byte of its body.
    pub first_byte_timeout_ms: u64,
    /// Between two events that carry progress (pings and comments do not).
    pub idle_timeout_ms: u64,
    /// Body bytes of one streamed reply (events, pings and all).
    pub max_bytes: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            first_byte_timeout_ms: 120_000,
            idle_timeout_ms: 60_000,
            max_bytes: proto::provider::stream::DEFAULT_MAX_STREAM_BYTES,
        }
    }
}

/// Engine settings, fixed at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Server version reported by `/api/v1/meta`.
    pub version: String,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: usize,
    /// `BAE_MAX_IMPORT_BYTES`: the body of a session import on the admin
    /// port, and the log a fork may copy (both are held in memory once).
    pub max_import_bytes: usize,
    /// `BAE_TURN_TIMEOUT`: how long a paused turn's owner may stay away.
    pub turn_timeout_ms: u64,
    /// Per provider HTTP call (the reference has none; a hung provider
    /// would hold the turn gate forever).
    pub provider_timeout_ms: u64,
    /// `--dangerously-disable-admin-auth`.
    pub admin_auth_disabled: bool,
    /// The provider registry.
    pub providers: Vec<ProviderEntry>,
    /// Pre-rendered JSON bodies for the read-only registry endpoints
    /// (`/admin/v1/providers`, `/admin/v1/mcp-servers`, `/admin/v1/config`).
    pub admin_providers_json: String,
    pub admin_mcp_servers_json: String,
    pub admin_config_json: String,
    /// The `[[mcp.servers]]` registry (templates unresolved).
    pub mcp_servers: Vec<mcp::McpServerSpec>,
    /// Per MCP request (spec: 30 s), an engine timer.
    pub mcp_timeout_ms: u64,
    /// Longest MCP message (stdout line or HTTP body) accepted.
    pub mcp_max_message_bytes: usize,
    /// Wall-clock bound of one remote sandbox exec (0 = none).
    pub sandbox_exec_timeout_ms: u64,
    /// Capture limit per stream of a sandbox exec or subagent.
    pub sandbox_max_output: usize,
    /// `BAE_SUBAGENT_TIMEOUT`.
    pub subagent_timeout_ms: u64,
    /// Labels on every container the server starts (besides
    /// `bae.session`), so a later run can find what a crash left.
    pub sandbox_labels: Vec<(String, String)>,
    /// `BAE_MAX_SUBAGENTS_PER_SESSION`.
    pub max_subagents_per_session: u64,
    /// Opt-in: keep driver registrations across restarts (rebuilt from the
    /// `session.driver.register` events). Off by default: the contract
    /// says the registry is in memory and empty after a restart.
    pub durable_drivers: bool,
    /// How generated ids are made (`BAE_ID_ORDER`): time-ordered (the
    /// default: B-tree inserts append) or all random.
    pub id_order: proto::wire::ids::IdOrder,
    /// Gated requests that may wait on one session's turn gate; beyond it a
    /// request is refused with `-32000` instead of queueing without bound.
    pub max_queued_per_session: usize,
    /// How long a request's head and body may take to arrive, from its first
    /// byte (slowloris guard; answered 408 and closed).
    pub request_timeout_ms: u64,
    /// How long a keep-alive connection may sit idle between requests.
    pub idle_timeout_ms: u64,
    /// Opt-in: write a blank NDJSON line on a stream silent for this long
    /// (0 = never, the default; SDKs skip blank lines, proxies see traffic).
    pub ndjson_keepalive_ms: u64,
    /// Events a streaming consumer may fall behind before it is dropped
    /// with the `lagged` error (the reference's broadcast capacity).
    pub subscriber_lag_limit: usize,
    /// Unflushed bytes past which a stream that opted into `turn.deltas`
    /// gets no delta frames: they are joined and held until it drains (a
    /// subscription at most 16 windows of them, then dropped for the
    /// attempt with a `lagged` marker; docs/extensions.md).
    pub delta_window_bytes: usize,
    /// Unflushed bytes a gapless subscriber (extension `subscribe.gapless`)
    /// may have before it stops taking live events and later catches up
    /// from the store: its per-subscriber memory bound.
    pub subscriber_window_bytes: usize,
    /// Payload bytes after which an events page or a replay page takes no
    /// further event (at least one is always taken): one answer's memory
    /// bound, whatever the session's history weighs.
    pub max_page_bytes: usize,
    /// When idle sessions' cached provider-facing histories are dropped
    /// (`BAE_HISTORY_CACHE_BYTES`, `BAE_HISTORY_IDLE`).
    pub history_cache: history_cache::Limits,
    /// Idle sessions the catalogue keeps beyond those in use
    /// (`BAE_RESIDENT_SESSIONS`, [`residency`]); `None`: all of them, and
    /// a start restores every session (always so in replica mode).
    pub resident_sessions: Option<usize>,
    /// How long a `sendMessage` idempotency key is remembered (wall clock,
    /// from its first use; extension `send.idempotent`).
    pub idempotency_retention_ms: u64,
    /// `[telemetry.metrics] disabled`: instruments left out of `/metrics`.
    pub metrics_disabled: Vec<String>,
    /// `BAE_METRICS_NO_AUTH`: `GET /metrics` on the admin port without the
    /// admin key (for a scraper on a trusted loopback).
    pub metrics_no_auth: bool,
    /// `[telemetry]` span export: the engine queues [`telemetry::Fact`]s
    /// for [`Engine::drain_telemetry`] (off: nothing is recorded).
    pub telemetry: bool,
    /// `BAE_OVERLOAD_*`: bounds past which new client requests get `503`
    /// at once (off by default).
    pub overload: overload::OverloadLimits,
    /// Replica mode (`BAE_REPLICA_ADVERTISE`, PostgreSQL only): session
    /// leases, forwarding, seq lanes. `None`: a lone server.
    pub replica: Option<replicas::ReplicaSettings>,
    /// A deliberately planted bug (simulator self-test only).
    #[cfg(feature = "planted-bugs")]
    pub planted: Option<planted::Bug>,
}

/// [`Config::max_page_bytes`] unless configured: 8 MiB.
pub const DEFAULT_MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// [`Config::max_import_bytes`] unless configured: 64 MiB.
pub const DEFAULT_MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;

/// [`Config::resident_sessions`] unless configured. Each idle resident
/// session holds about 1 KB; one beyond it costs a store read when it is
/// used again (docs/performance.md, "Defaults and store costs, measured").
pub const DEFAULT_RESIDENT_SESSIONS: usize = 512;

impl Config {
    /// The registry entry named `name`.
    pub fn provider(&self, name: &str) -> Option<&ProviderEntry> {
        self.providers.iter().find(|p| p.name == name)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: env!("CARGO_PKG_VERSION").to_string(),
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 1024 * 1024,
            max_import_bytes: DEFAULT_MAX_IMPORT_BYTES,
            turn_timeout_ms: 120_000,
            provider_timeout_ms: 300_000,
            admin_auth_disabled: false,
            providers: Vec::new(),

            admin_providers_json: r#"{"items":[]}"#.to_string(),
            admin_mcp_servers_json: r#"{"items":[]}"#.to_string(),
            admin_config_json: "{}".to_string(),
            mcp_servers: Vec::new(),
            mcp_timeout_ms: 30_000,
            mcp_max_message_bytes: 16 * 1024 * 1024,
            sandbox_exec_timeout_ms: 600_000,
            sandbox_max_output: 1024 * 1024,
            subagent_timeout_ms: 600_000,
            sandbox_labels: Vec::new(),
            max_subagents_per_session: 8,
            durable_drivers: false,
            id_order: proto::wire::ids::IdOrder::Time,
            max_queued_per_session: 256,
            ndjson_keepalive_ms: 0,
            request_timeout_ms: 30_000,
            idle_timeout_ms: 75_000,
            subscriber_lag_limit: 256,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            history_cache: history_cache::Limits::default(),
            resident_sessions: Some(DEFAULT_RESIDENT_SESSIONS),
            subscriber_window_bytes: 32 * 1024,
            delta_window_bytes: 64 * 1024,
            idempotency_retention_ms: 24 * 3600 * 1000,
            metrics_disabled: Vec::new(),
            metrics_no_auth: false,
            telemetry: false,
            overload: overload::OverloadLimits::default(),
            replica: None,
            #[cfg(feature = "planted-bugs")]
            planted: None,
        }
    }
}

/// The protocol engine. See the crate docs for the driving contract.
pub struct Engine {
    config: Config,
    entropy: Box<dyn Entropy>,
    outputs: VecDeque<Output>,
    /// Time of the input being handled.
    now: Now,
    catalog: Catalog,
    // Ordered maps wherever iteration order reaches the outputs: the same
    // inputs must give the same outputs (the simulator depends on it).
    conns: connections::Table,
    /// Next event rowid (global, strictly increasing).
    next_seq: u64,
    next_read: ReadId,
    pending_reads: crate::ids::IdMap<ReadId, conn::PendingRead>,
    /// Every session's runtime parts (core, pending create, drivers'
    /// extensions, MCP restore) and the indices over them.
    sessions: sessions::Sessions,
    /// Connections with an open NDJSON stream, per session (fan-out index).
    streams: streams::Hub,
    /// The session each running turn (or compaction) belongs to; the turn
    /// itself lives in the session's core.
    running: BTreeMap<turn::TurnId, ids::SessionId>,
    next_turn: turn::TurnId,
    /// Provider calls in flight, by the session whose turn made them, and
    /// the watchdog deadlines of streamed ones.
    calls: calls::Calls,
    /// Every provider entry's shared limits, queues and retry timers.
    provider_limits: provider_limits::ProviderLimits,
    next_call: CallId,
    /// Every session's MCP connection set.
    mcp: mcp::McpHub,
    /// Every session's remote sandbox and subagents; image status.
    sandbox: sandbox::SandboxHub,
    /// MCP calls in flight, by the session and turn that made them.
    mcp_calls: crate::ids::IdMap<mcp::CallToken, (ids::SessionId, turn::TurnId)>,
    next_mcp_call: mcp::CallToken,
    /// When the last legacy Argon2id verification failed (rate limit).
    last_legacy_failure: Option<MonoMs>,
    /// While set, events are not echoed on these connections' streams (a
    /// request's own recorded input, spec 01 §7).
    quiet: Vec<ConnId>,
    /// `sendMessage` idempotency keys (extension `send.idempotent`).
    idem: idempotency::Keys,
    /// The planted bug (if any), handed to the components that host one.
    faults: faults::Faults,
    /// Counters and histograms of `GET /metrics`.
    metrics: metrics::Metrics,
    /// Span facts for the driver's exporter (spec 04 §7.1).
    telemetry: telemetry::Telemetry,
    /// Events in the log (gauge `bae.events.total`).
    events_total: u64,
    /// Replica mode: claimed sessions and the seq lane (`None`: alone).
    replicas: Option<replicas::Replicas>,
    /// Which sessions the catalogue holds, and counts of the others.
    residency: residency::Residency,
    /// Exports, imports, forks and lineage answers in progress.
    transfers: transfer::Transfers,
    /// The first seq this process assigned: later registrations are its.
    boot_seq: u64,
    /// Overload bounds and refusals (`BAE_OVERLOAD_*`).
    overload: overload::Overload,
    shutting_down: bool,
}

impl Engine {
    /// Builds an engine restored from `snapshot` (everything but events).
    pub fn new(config: Config, entropy: Box<dyn Entropy>, snapshot: Snapshot, now: Now) -> Self {
        #[cfg(feature = "planted-bugs")]
        let faults = faults::Faults::planted(config.planted);
        #[cfg(not(feature = "planted-bugs"))]
        let faults = faults::Faults::default();
        let mut snapshot = snapshot;
        if faults.seq_reuse_after_restart() {
            snapshot.max_event_seq = snapshot.max_event_seq.saturating_sub(1);
        }
        let catalog = Catalog::restore(&mut snapshot, config.durable_drivers);
        // Replica mode holds every session it knows (leases move them).
        let budget = config
            .resident_sessions
            .filter(|_| config.replica.is_none());
        let mut residency = residency::Residency::new(budget);
        residency.stored = catalog.unheld(snapshot.stored_sessions, config.durable_drivers);
        let mcp = mcp::McpHub::new(mcp::McpSettings {
            server_version: config.version.clone(),
            timeout_ms: config.mcp_timeout_ms,
            max_message_bytes: config.mcp_max_message_bytes,
        });
        let sandbox = sandbox::SandboxHub::new(sandbox::SandboxSettings {
            exec_timeout_ms: config.sandbox_exec_timeout_ms,
            max_output: config.sandbox_max_output,
            subagent_timeout_ms: config.subagent_timeout_ms,
            labels: config.sandbox_labels.clone(),
        });
        let conns = connections::Table::new(connections::Settings {
            http: proto::http::Limits {
                max_head_bytes: config.max_head_bytes,
                max_headers: config.max_headers,
                max_body_bytes: config.max_body_bytes,
                ..Default::default()
            },
            idle_timeout_ms: config.idle_timeout_ms,
            request_timeout_ms: config.request_timeout_ms,
            max_import_bytes: config.max_import_bytes,
        });
        let metrics = metrics::Metrics::new(&config.metrics_disabled)
            .with_provider_entries(config.providers.iter().map(|p| p.name.as_str()));
        let replicas = config.replica.map(replicas::Replicas::new);
        let next_seq = match &replicas {
            Some(r) => r.align(snapshot.max_event_seq + 1),
            None => snapshot.max_event_seq + 1,
        };
        let telemetry = telemetry::Telemetry::new(config.telemetry);
        let histories = history_cache::HistoryCache::new(config.history_cache);
        let overload = overload::Overload::new(config.overload);
        let limits = config.providers.iter().map(|p| (p.name.as_str(), p.limits));
        let provider_limits = provider_limits::ProviderLimits::new(limits, now.mono);
        let transfers = transfer::Transfers::new(config.max_import_bytes);
        let mut engine = Engine {
            sandbox,
            mcp,
            mcp_calls: Default::default(),
            next_mcp_call: mcp::CallToken(1),
            config,
            entropy,
            outputs: VecDeque::new(),
            now,
            catalog,
            conns,
            next_seq,
            next_read: ReadId(1),
            sessions: sessions::Sessions::new(histories, faults),
            pending_reads: Default::default(),
            streams: streams::Hub::default(),
            running: BTreeMap::new(),
            next_turn: turn::TurnId(1),
            calls: calls::Calls::default(),
            provider_limits,
            next_call: CallId(1),
            quiet: Vec::new(),
            idem: idempotency::Keys::restore(&snapshot.idempotency),
            last_legacy_failure: None,
            faults,
            metrics,
            telemetry,
            events_total: snapshot.events_total,
            replicas,
            residency,
            transfers,
            boot_seq: next_seq,
            overload,
            shutting_down: false,
        };
        // Spec 04 §5 step 11: re-provision every active profile's images.
        let profiles: Vec<String> = engine
            .catalog
            .profiles
            .values()
            .filter(|p| p.is_live() && !p.row.available_sandboxes.is_empty())
            .map(|p| p.row.id.clone())
            .collect();
        for id in profiles {
            engine.provision_profile(&id);
        }
        engine.pump_mcp();
        engine
    }

    /// Feeds one thing that happened.
    pub fn handle_input(&mut self, now: Now, input: Input) {
        self.now = now;
        match input {
            Input::Accepted { conn, listener } => self.on_accepted(conn, listener),
            Input::Received { conn, bytes } => self.on_received(conn, &bytes),
            Input::Flushed { conn, bytes } => self.on_flushed(conn, bytes),
            Input::Closed { conn } => self.on_closed(conn),
            Input::ReadDone { id, result } => self.on_read_done(id, result),
            Input::ProviderDone { call, reply } => self.on_provider_done(call, reply),
            Input::ProviderChunk { call, bytes } => self.on_provider_chunk(call, &bytes),
            Input::Mcp { conn, event } => self.mcp.handle(conn, event, now.mono),
            Input::Sandbox { op, reply } => self.sandbox.handle_reply(op, reply, now.mono),
            Input::Shutdown => self.on_shutdown(),
            Input::Catalog(update) => self.on_catalog(*update),
        }
        self.route_limit_notices();
        self.pump_mcp();
        self.evict_idle_sessions();
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        self.now = now;
        self.fire_gate_deadlines();
        self.drop_idle_histories();
        self.send_keepalives();
        self.expire_reads();
        self.check_provider_streams();
        self.mcp.handle_timeout(now.mono);
        self.sandbox.handle_timeout(now.mono);
        self.provider_limits.tick(now.mono);
        self.route_limit_notices();
        self.pump_mcp();
        self.evict_idle_sessions();
    }

    /// Next thing to do, in order. Drain it completely after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Monotonic deadline of the next timer, if any.
    pub fn poll_timeout(&self) -> Option<MonoMs> {
        let mcp = self
            .mcp
            .poll_timeout()
            .filter(|_| !self.faults.mcp_timer_not_armed());
        [
            self.sessions.next_gate_deadline(),
            self.sessions.next_history_deadline(),
            self.next_keepalive(),
            self.conns.next_deadline(),
            mcp,
            self.sandbox.poll_timeout(),
            self.residency.next_deadline(),
            self.provider_limits.poll_timeout(),
            self.calls.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the span facts queued since the last call to `out` (empty
    /// unless [`Config::telemetry`]); drain after every input.
    pub fn drain_telemetry(&mut self, out: &mut Vec<telemetry::Fact>) {
        self.telemetry.drain_into(out);
    }

    /// The driver's store backlog (writes emitted and not yet committed,
    /// [`pipeline::Pipeline::backlog`]), for overload control; drivers
    /// report it after every input.
    pub fn note_store_backlog(&mut self, writes: usize) {
        self.overload.note_backlog(writes);
    }

    /// Number of connections the engine is tracking (for drivers' shutdown).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    fn random_bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.entropy.fill(&mut b);
        b
    }

    /// A fresh `<prefix>` + 32-hex id (time-ordered unless configured).
    fn new_id(&mut self, kind: proto::wire::ids::IdKind) -> String {
        let random = self.random_bytes::<16>();
        let bytes = self.config.id_order.bytes(self.now.unix.0, random);
        proto::wire::ids::make_id(kind, bytes)
    }

    /// A fresh secret token (192 bits of entropy).
    fn new_secret(&mut self, kind: proto::wire::ids::SecretKind) -> String {
        let bytes = self.random_bytes::<24>();
        proto::wire::ids::make_secret(kind, bytes)
    }

    /// `created_at` text for the current input.
    fn timestamp(&self) -> String {
        proto::wire::time::format_created_at(self.now.unix.0)
    }

    fn write(&mut self, w: StoreWrite) {
        self.outputs.push_back(Output::Write(w));
    }

    fn read(&mut self, read: StoreRead, then: conn::PendingRead) {
        let id = self.next_read;
        self.next_read += 1;
        self.pending_reads.insert(id, then);
        self.outputs.push_back(Output::Read { id, read });
    }

    /// Graceful shutdown: no new requests or admissions; subscriptions end
    /// cleanly; queued requests are refused; running turns finish (the driver
    /// waits for them up to `BAE_SHUTDOWN_TIMEOUT`).
    fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(&id) {
                c.keep_alive = false;
            }
            let kind = self.streams.get(id).map(|s| &s.kind);
            match kind {
                None if !self.conns.get(&id).is_some_and(|c| c.busy) => self.close_conn(id),
                Some(rpc::StreamKind::Subscribe(_)) => self.end_stream(id),
                Some(rpc::StreamKind::Queued) => {
                    self.terminal_error(id, codes::APPLICATION_ERROR, "server is shutting down")
                }
                _ => {}
            }
        }
        for live in self.sessions.cores_mut() {
            live.gate.drain();
        }
        self.telemetry.shutdown();
    }
}
