//! Engine settings, fixed at start ([`Config`]), and the provider registry
//! entries they hold. Re-exported at the crate root.

use crate::{history_cache, mcp, overload, provider_limits, replicas, usage, RetryPolicy};

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
    /// (`BAE_RESIDENT_SESSIONS`, [`crate::residency`]); `None`: all of them, and
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
    /// `[telemetry]` span export: the engine queues [`crate::telemetry::Fact`]s
    /// for [`crate::Engine::drain_telemetry`] (off: nothing is recorded).
    pub telemetry: bool,
    /// `BAE_OVERLOAD_*`: bounds past which new client requests get `503`
    /// at once (off by default).
    pub overload: overload::OverloadLimits,
    /// Replica mode (`BAE_REPLICA_ADVERTISE`, PostgreSQL only): session
    /// leases, forwarding, seq lanes. `None`: a lone server.
    pub replica: Option<replicas::ReplicaSettings>,
    /// A deliberately planted bug (simulator self-test only).
    #[cfg(feature = "planted-bugs")]
    pub planted: Option<crate::planted::Bug>,
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
