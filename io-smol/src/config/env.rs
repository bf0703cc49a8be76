//! `BAE_*` environment variables (spec 04 §1) plus our extensions.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::env_values::{
    is_truthy, overload, parse_addr, parse_whole, positive_seconds, positive_usize,
    resident_sessions, seconds, whole, whole_usize,
};
use super::{Cli, ConfigError};

/// Host-wide container engine for remote sandboxes (`BAE_SANDBOX_DRIVER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxDriver {
    /// `docker` (default).
    #[default]
    Docker,
    /// `apple-container` (the macOS `container` CLI).
    AppleContainer,
}

impl SandboxDriver {
    /// The variable's spelling: `docker` / `apple-container`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxDriver::Docker => "docker",
            SandboxDriver::AppleContainer => "apple-container",
        }
    }

    /// The CLI executable the driver invokes: `docker` / `container`.
    pub fn program(self) -> &'static str {
        match self {
            SandboxDriver::Docker => "docker",
            SandboxDriver::AppleContainer => "container",
        }
    }
}

/// SQLite `PRAGMA synchronous` mode (`BAE_SQLITE_SYNCHRONOUS`, extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL` (default): durable across process crashes; with WAL a power
    /// loss may roll back the most recent commits.
    #[default]
    Normal,
    /// `FULL`: fsync on every commit.
    Full,
}

impl Synchronous {
    /// The pragma value: `NORMAL` / `FULL`.
    pub fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Runtime settings read from the environment once at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    /// `BAE_ADDR`, default `0.0.0.0:8080`: client listener.
    pub addr: SocketAddr,
    /// `BAE_ADMIN_ADDR`, default `127.0.0.1:8081`: admin listener; loopback
    /// only.
    pub admin_addr: SocketAddr,
    /// `BAE_DB_PATH`, default `/var/lib/bae/bae.db`.
    pub db_path: PathBuf,
    /// Extension `BAE_DATABASE_URL` (+ `BAE_DATABASE_POOL_SIZE`): the
    /// PostgreSQL store instead of the SQLite file (docs/scaling.md).
    pub database: super::Database,
    /// Extension `BAE_REPLICA_ADVERTISE` (+ `BAE_REPLICA_ID`,
    /// `BAE_LEASE_MS`): replica mode on the PostgreSQL store.
    pub replica: Option<super::ReplicaEnv>,
    /// `BAE_LOG`, default `info`: stderr log filter directive (not validated
    /// here; an unparsable value falls back to `info` at logging init).
    pub log: String,
    /// `BAE_OTEL_LOG`, default `info`: filter for the OTel export layer.
    pub otel_log: String,
    /// `BAE_SHUTDOWN_TIMEOUT`, default 30 s.
    pub shutdown_timeout: Duration,
    /// `BAE_CONFIG`, default unset (an empty value counts as unset);
    /// `--config` wins (see [`resolve_paths`]).
    pub config_path: Option<PathBuf>,
    /// `BAE_TURN_TIMEOUT`, default 120 s.
    pub turn_timeout: Duration,
    /// `BAE_SUBAGENT_TIMEOUT`, default 600 s.
    pub subagent_timeout: Duration,
    /// `BAE_MAX_SUBAGENTS_PER_SESSION`, default 8 (`0` disables remote
    /// launches).
    pub max_subagents_per_session: u64,
    /// `BAE_ADMIN_KEY_FILE`, default `/var/lib/bae/admin-key.pem`.
    pub admin_key_file: PathBuf,
    /// `BAE_ADMIN_KEY_HASH_FILE`, default `/var/lib/bae/admin-key-hash.pem`.
    pub admin_key_hash_file: PathBuf,
    /// `BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH` truthy (trimmed `1` or
    /// case-insensitive `true`); after [`resolve_paths`] also the flag.
    pub disable_admin_auth: bool,
    /// `BAE_SANDBOX_DRIVER`, default `docker`.
    pub sandbox_driver: SandboxDriver,
    /// Extension `BAE_MAX_HEAD_BYTES`, default 16384: maximum size of an
    /// HTTP request line + headers, in bytes (≥ 1).
    pub max_head_bytes: usize,
    /// Extension `BAE_MAX_HEADERS`, default 64: maximum number of request
    /// headers (≥ 1).
    pub max_headers: usize,
    /// Extension `BAE_MAX_BODY_BYTES`, default 1048576 (1 MiB): maximum
    /// request body size in bytes (≥ 1).
    pub max_body_bytes: usize,
    /// Extension `BAE_MAX_IMPORT_BYTES`, default 67108864 (64 MiB): the
    /// body of a session import on the admin port, and the log a fork may
    /// copy (≥ 1).
    pub max_import_bytes: usize,
    /// Extension `BAE_PROVIDER_TIMEOUT`, default 300 s: whole-request timeout
    /// of one provider HTTP attempt (≥ 1 s). A timeout is an ordinary
    /// transport failure (`status: null`).
    pub provider_timeout: Duration,
    /// Extension `BAE_PROVIDER_IDLE_CONNECTIONS`, default 64 (≥ 0): idle
    /// keep-alive connections kept per provider host for the next calls
    /// (0 = a new connection per call).
    pub provider_idle_connections: usize,
    /// Extension `BAE_SQLITE_SYNCHRONOUS`, `normal` (default) or `full`,
    /// case-insensitive, trimmed.
    pub sqlite_synchronous: Synchronous,
    /// Extension `BAE_SQLITE_CACHE_KIB`, default 512 (0 to 2^31 − 1): the SQLite
    /// page cache of the store connection, in KiB.
    pub sqlite_cache_kib: usize,
    /// `BAE_ID_ORDER`, `time` (default) or `random`, case-insensitive,
    /// trimmed: how generated ids are made (`proto::wire::ids::IdOrder`).
    pub id_order: proto::wire::ids::IdOrder,
    /// Extension `BAE_REQUEST_TIMEOUT`, default 30 s (≥ 1): a request's head
    /// and body must arrive within this time of its first byte (else 408).
    pub request_timeout: Duration,
    /// Extension `BAE_IDLE_TIMEOUT`, default 75 s (≥ 1): idle keep-alive
    /// connections are closed after this long.
    pub idle_timeout: Duration,
    /// Extension `BAE_MAX_CONNECTIONS`, default 10000 (≥ 1): accepted
    /// connections beyond it are closed at once.
    pub max_connections: usize,
    /// Extension `BAE_MAX_QUEUED_TURNS`, default 256 (≥ 1): requests that may
    /// wait on one session's turn gate.
    pub max_queued_turns: usize,
    /// Extension `BAE_NDJSON_KEEPALIVE`, default 0 = off: seconds of silence
    /// after which a blank line is written on an NDJSON stream (opt-in).
    pub ndjson_keepalive: Duration,
    /// Extension `BAE_DURABLE_DRIVERS` (truthy like the admin-auth switch),
    /// default off: driver registrations survive restarts (opt-in, visible
    /// on the wire: participants and `-32001` differ from the reference).
    pub durable_drivers: bool,
    /// `BAE_METRICS_NO_AUTH` (truthy), default off: `GET /metrics` on the
    /// admin port answers without the admin key (a trusted local scraper).
    pub metrics_no_auth: bool,
    /// Extension `BAE_SHARED_HISTORY` (truthy), default off: new
    /// `provider.request` rows keep their `messages` and `tools` once per
    /// session in shared chunks (storage grows linearly; a reference
    /// server reading the file would see those members as `null`).
    pub shared_history: bool,
    /// Extension `BAE_SUBSCRIBER_LAG_LIMIT`, default 256 (≥ 1): unflushed
    /// frames a streaming consumer may have before it gets `lagged`.
    pub subscriber_lag_limit: usize,
    /// Extension `BAE_SUBSCRIBER_WINDOW_BYTES`, default 32768 (≥ 1): the
    /// unflushed bytes of a gapless subscriber before it reads from the
    /// store instead (extension `subscribe.gapless`).
    pub subscriber_window_bytes: usize,
    /// Extension `BAE_DELTA_WINDOW_BYTES`, default 65536 (≥ 1): the
    /// unflushed bytes past which a `turn.deltas` stream's deltas are held,
    /// then dropped for the attempt.
    pub delta_window_bytes: usize,
    /// Extension `BAE_MAX_PAGE_BYTES`, default 8 MiB (≥ 1): payload bytes
    /// after which an events page or a replay page takes no further event.
    pub max_page_bytes: usize,
    /// Extension `BAE_HISTORY_CACHE_BYTES`, default 1048576 (1 MiB, 0 =
    /// none): estimated heap bytes of cached provider-facing histories
    /// beyond which idle sessions' histories are dropped, oldest idle first.
    pub history_cache_bytes: usize,
    /// Extension `BAE_HISTORY_IDLE`, default 30 s (0 = at once): how long an
    /// idle session keeps its cached history.
    pub history_idle: Duration,
    /// Extension `BAE_RESIDENT_SESSIONS`, default 512 (`all` = `None`):
    /// idle sessions kept in memory beyond those in use.
    pub resident_sessions: Option<usize>,
    /// Extension `BAE_IDEMPOTENCY_RETENTION`, default 86400 s (≥ 1): how
    /// long a `sendMessage` idempotency key is remembered.
    pub idempotency_retention: Duration,
    /// Extension `BAE_MCP_TIMEOUT`, default 30 s (≥ 1): how long one MCP
    /// request (handshake step or `tools/call`) may take (spec 06 §4.4).
    pub mcp_timeout: Duration,
    /// Extension `BAE_MCP_MAX_MESSAGE_BYTES`, default 16777216 (16 MiB, ≥ 1):
    /// longest MCP stdout line or HTTP response body accepted.
    pub mcp_max_message_bytes: usize,
    /// Extension `BAE_SANDBOX_EXEC_TIMEOUT`, default 600 s (0 = none): how
    /// long one remote sandbox exec (Auto tool or `execRemoteSandbox`) may
    /// run before it is killed and reported as a driver error.
    pub sandbox_exec_timeout: Duration,
    /// Extension `BAE_SANDBOX_MAX_OUTPUT_BYTES`, default 1048576 (≥ 1): the
    /// stdout and the stderr of an exec or subagent are each captured up to
    /// this many bytes (then marked as truncated).
    pub sandbox_max_output: usize,
    /// Extensions `BAE_SANDBOX_MEMORY`, `BAE_SANDBOX_CPUS`,
    /// `BAE_SANDBOX_NETWORK`: resource limits passed to `run` as
    /// `--memory`, `--cpus`, `--network` (unset = the engine's defaults).
    pub sandbox_limits: SandboxLimits,
    /// Extensions `BAE_OVERLOAD_MAX_WAITING`, `BAE_OVERLOAD_MAX_STORE_BACKLOG`
    /// (unset = not watched) and `BAE_OVERLOAD_RETRY_AFTER` (default 1 s):
    /// new client requests get `503` past either bound.
    pub overload: engine::overload::OverloadLimits,
}

/// Optional resource limits of remote sandbox containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxLimits {
    /// e.g. `512m`, `2g` (digits, then an optional `b`/`k`/`m`/`g`).
    pub memory: Option<String>,
    /// e.g. `1.5` (a positive decimal number).
    pub cpus: Option<String>,
    /// e.g. `none`, `bridge` (a network name: letters, digits, `._-`).
    pub network: Option<String>,
}

impl SandboxLimits {
    /// The `run` flags, in a fixed order.
    pub fn run_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, v) in [
            ("--memory", &self.memory),
            ("--cpus", &self.cpus),
            ("--network", &self.network),
        ] {
            if let Some(v) = v {
                out.push(flag.to_string());
                out.push(v.clone());
            }
        }
        out
    }
}

fn sandbox_limits(get: &impl Fn(&str) -> Option<String>) -> Result<SandboxLimits, ConfigError> {
    let check = |var: &'static str, ok: fn(&str) -> bool, expected: &'static str| match get(var)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
    {
        None => Ok(None),
        Some(v) if ok(&v) => Ok(Some(v)),
        Some(v) => Err(ConfigError::InvalidValue {
            var,
            value: v,
            expected,
        }),
    };
    Ok(SandboxLimits {
        memory: check(
            "BAE_SANDBOX_MEMORY",
            |v| {
                let digits = v.trim_end_matches(['b', 'k', 'm', 'g', 'B', 'K', 'M', 'G']);
                !digits.is_empty()
                    && digits.len() + 1 >= v.len()
                    && digits.bytes().all(|b| b.is_ascii_digit())
            },
            "a size such as 512m or 2g",
        )?,
        cpus: check(
            "BAE_SANDBOX_CPUS",
            |v| v.parse::<f64>().is_ok_and(|c| c > 0.0 && c.is_finite()),
            "a positive number of CPUs such as 1.5",
        )?,
        network: check(
            "BAE_SANDBOX_NETWORK",
            |v| {
                v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            },
            "a network name such as none or bridge",
        )?,
    })
}

/// Default `BAE_ADDR`.
pub const DEFAULT_ADDR: &str = "0.0.0.0:8080";
/// Default `BAE_ADMIN_ADDR`.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8081";
/// Default `BAE_DB_PATH`.
pub const DEFAULT_DB_PATH: &str = "/var/lib/bae/bae.db";
/// Default `BAE_ADMIN_KEY_FILE`.
pub const DEFAULT_ADMIN_KEY_FILE: &str = "/var/lib/bae/admin-key.pem";
/// Default `BAE_ADMIN_KEY_HASH_FILE`.
pub const DEFAULT_ADMIN_KEY_HASH_FILE: &str = "/var/lib/bae/admin-key-hash.pem";

/// Reads a variable from the real process environment. Non-UTF-8 values are
/// converted lossily. Pass this to [`parse_env`] and [`super::substitute`].
pub fn process_env(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Parses and validates the `BAE_*` variables through `get` (spec 04 §1).
///
/// Variables are validated in table order; the first error wins. Addresses
/// are taken verbatim (no trimming, no host names); durations and counts are
/// trimmed non-negative decimal integers (no sign).
pub fn parse_env(get: impl Fn(&str) -> Option<String>) -> Result<Env, ConfigError> {
    let addr = parse_addr("BAE_ADDR", get("BAE_ADDR"), DEFAULT_ADDR)?;
    let admin_addr = parse_addr("BAE_ADMIN_ADDR", get("BAE_ADMIN_ADDR"), DEFAULT_ADMIN_ADDR)?;
    if !admin_addr.ip().is_loopback() {
        return Err(ConfigError::AdminNotLoopback { addr: admin_addr });
    }
    let db_path = PathBuf::from(get("BAE_DB_PATH").unwrap_or_else(|| DEFAULT_DB_PATH.into()));
    let database = super::database::parse_database(&get)?;
    let postgres = database != super::Database::Sqlite;
    let replica = super::replica::parse_replica(&get, postgres)?;
    let log = get("BAE_LOG").unwrap_or_else(|| "info".into());
    let otel_log = get("BAE_OTEL_LOG").unwrap_or_else(|| "info".into());
    let shutdown_timeout = seconds("BAE_SHUTDOWN_TIMEOUT", get("BAE_SHUTDOWN_TIMEOUT"), 30)?;
    let config_path = get("BAE_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let turn_timeout = seconds("BAE_TURN_TIMEOUT", get("BAE_TURN_TIMEOUT"), 120)?;
    let subagent_timeout = seconds("BAE_SUBAGENT_TIMEOUT", get("BAE_SUBAGENT_TIMEOUT"), 600)?;
    let max_subagents_per_session = whole(
        "BAE_MAX_SUBAGENTS_PER_SESSION",
        get("BAE_MAX_SUBAGENTS_PER_SESSION"),
        8,
    )?;
    let admin_key_file =
        PathBuf::from(get("BAE_ADMIN_KEY_FILE").unwrap_or_else(|| DEFAULT_ADMIN_KEY_FILE.into()));
    let admin_key_hash_file = PathBuf::from(
        get("BAE_ADMIN_KEY_HASH_FILE").unwrap_or_else(|| DEFAULT_ADMIN_KEY_HASH_FILE.into()),
    );
    let disable_admin_auth = get("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH")
        .map(|v| is_truthy(&v))
        .unwrap_or(false);
    let sandbox_driver = match get("BAE_SANDBOX_DRIVER") {
        None => SandboxDriver::Docker,
        Some(v) => match v.trim() {
            "docker" => SandboxDriver::Docker,
            "apple-container" => SandboxDriver::AppleContainer,
            _ => return Err(ConfigError::UnsupportedSandboxDriver { value: v }),
        },
    };

    let max_head_bytes = positive_usize("BAE_MAX_HEAD_BYTES", get("BAE_MAX_HEAD_BYTES"), 16384)?;
    let max_headers = positive_usize("BAE_MAX_HEADERS", get("BAE_MAX_HEADERS"), 64)?;
    let max_body_bytes =
        positive_usize("BAE_MAX_BODY_BYTES", get("BAE_MAX_BODY_BYTES"), 1_048_576)?;
    let max_import_bytes = positive_usize(
        "BAE_MAX_IMPORT_BYTES",
        get("BAE_MAX_IMPORT_BYTES"),
        engine::DEFAULT_MAX_IMPORT_BYTES,
    )?;
    let provider_timeout = match get("BAE_PROVIDER_TIMEOUT") {
        None => Duration::from_secs(300),
        Some(v) => match parse_whole(&v) {
            Some(n) if n > 0 => Duration::from_secs(n),
            _ => {
                return Err(ConfigError::InvalidValue {
                    var: "BAE_PROVIDER_TIMEOUT",
                    value: v,
                    expected: "a whole number of seconds, at least 1",
                })
            }
        },
    };
    let provider_idle_connections = whole_usize(
        "BAE_PROVIDER_IDLE_CONNECTIONS",
        get("BAE_PROVIDER_IDLE_CONNECTIONS"),
        64,
        "a whole number (0 = no connection reuse)",
    )?;
    let history_cache_bytes = whole_usize(
        "BAE_HISTORY_CACHE_BYTES",
        get("BAE_HISTORY_CACHE_BYTES"),
        engine::history_cache::DEFAULT_BUDGET_BYTES,
        "a whole number of bytes (0 = keep no idle history)",
    )?;
    let history_idle = seconds(
        "BAE_HISTORY_IDLE",
        get("BAE_HISTORY_IDLE"),
        engine::history_cache::DEFAULT_IDLE_MS / 1000,
    )?;
    let resident_sessions = resident_sessions(get("BAE_RESIDENT_SESSIONS"))?;
    let request_timeout = positive_seconds("BAE_REQUEST_TIMEOUT", get("BAE_REQUEST_TIMEOUT"), 30)?;
    let idle_timeout = positive_seconds("BAE_IDLE_TIMEOUT", get("BAE_IDLE_TIMEOUT"), 75)?;
    let max_connections =
        positive_usize("BAE_MAX_CONNECTIONS", get("BAE_MAX_CONNECTIONS"), 10_000)?;
    let max_queued_turns =
        positive_usize("BAE_MAX_QUEUED_TURNS", get("BAE_MAX_QUEUED_TURNS"), 256)?;
    let ndjson_keepalive = seconds("BAE_NDJSON_KEEPALIVE", get("BAE_NDJSON_KEEPALIVE"), 0)?;
    let subscriber_lag_limit = positive_usize(
        "BAE_SUBSCRIBER_LAG_LIMIT",
        get("BAE_SUBSCRIBER_LAG_LIMIT"),
        256,
    )?;
    let max_page_bytes = positive_usize(
        "BAE_MAX_PAGE_BYTES",
        get("BAE_MAX_PAGE_BYTES"),
        engine::DEFAULT_MAX_PAGE_BYTES,
    )?;
    let subscriber_window_bytes = positive_usize(
        "BAE_SUBSCRIBER_WINDOW_BYTES",
        get("BAE_SUBSCRIBER_WINDOW_BYTES"),
        32 * 1024,
    )?;
    let delta_window_bytes = positive_usize(
        "BAE_DELTA_WINDOW_BYTES",
        get("BAE_DELTA_WINDOW_BYTES"),
        64 * 1024,
    )?;
    let idempotency_retention = positive_seconds(
        "BAE_IDEMPOTENCY_RETENTION",
        get("BAE_IDEMPOTENCY_RETENTION"),
        86_400,
    )?;
    let mcp_timeout = positive_seconds("BAE_MCP_TIMEOUT", get("BAE_MCP_TIMEOUT"), 30)?;
    let mcp_max_message_bytes = positive_usize(
        "BAE_MCP_MAX_MESSAGE_BYTES",
        get("BAE_MCP_MAX_MESSAGE_BYTES"),
        16 * 1024 * 1024,
    )?;
    let sandbox_exec_timeout = seconds(
        "BAE_SANDBOX_EXEC_TIMEOUT",
        get("BAE_SANDBOX_EXEC_TIMEOUT"),
        600,
    )?;
    let sandbox_max_output = positive_usize(
        "BAE_SANDBOX_MAX_OUTPUT_BYTES",
        get("BAE_SANDBOX_MAX_OUTPUT_BYTES"),
        1024 * 1024,
    )?;
    let sandbox_limits = sandbox_limits(&get)?;
    let overload = overload(&get)?;
    let durable_drivers = get("BAE_DURABLE_DRIVERS")
        .map(|v| is_truthy(&v))
        .unwrap_or(false);
    let metrics_no_auth = get("BAE_METRICS_NO_AUTH")
        .map(|v| is_truthy(&v))
        .unwrap_or(false);
    let shared_history = get("BAE_SHARED_HISTORY")
        .map(|v| is_truthy(&v))
        .unwrap_or(false);
    if shared_history && database != super::Database::Sqlite {
        return Err(ConfigError::NotWithPostgres {
            var: "BAE_SHARED_HISTORY",
        });
    }
    let sqlite_cache_kib = whole_usize(
        "BAE_SQLITE_CACHE_KIB",
        get("BAE_SQLITE_CACHE_KIB"),
        crate::store::DEFAULT_CACHE_KIB,
        "a whole number of KiB up to 2147483647",
    )?;
    if sqlite_cache_kib > crate::store::MAX_CACHE_KIB {
        return Err(ConfigError::InvalidValue {
            var: "BAE_SQLITE_CACHE_KIB",
            value: sqlite_cache_kib.to_string(),
            expected: "a whole number of KiB up to 2147483647",
        });
    }
    let sqlite_synchronous = match get("BAE_SQLITE_SYNCHRONOUS") {
        None => Synchronous::Normal,
        Some(v) => {
            let t = v.trim();
            if t.eq_ignore_ascii_case("normal") {
                Synchronous::Normal
            } else if t.eq_ignore_ascii_case("full") {
                Synchronous::Full
            } else {
                return Err(ConfigError::InvalidValue {
                    var: "BAE_SQLITE_SYNCHRONOUS",
                    value: v,
                    expected: "\"normal\" or \"full\"",
                });
            }
        }
    };
    let id_order = match get("BAE_ID_ORDER") {
        None => proto::wire::ids::IdOrder::Time,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "time" => proto::wire::ids::IdOrder::Time,
            "random" => proto::wire::ids::IdOrder::Random,
            _ => {
                return Err(ConfigError::InvalidValue {
                    var: "BAE_ID_ORDER",
                    value: v,
                    expected: "\"time\" or \"random\"",
                })
            }
        },
    };

    Ok(Env {
        addr,
        admin_addr,
        db_path,
        database,
        replica,
        log,
        otel_log,
        shutdown_timeout,
        config_path,
        turn_timeout,
        subagent_timeout,
        max_subagents_per_session,
        admin_key_file,
        admin_key_hash_file,
        disable_admin_auth,
        sandbox_driver,
        max_head_bytes,
        max_headers,
        max_body_bytes,
        max_import_bytes,
        provider_timeout,
        provider_idle_connections,
        sqlite_synchronous,
        sqlite_cache_kib,
        id_order,
        request_timeout,
        idle_timeout,
        max_connections,
        mcp_timeout,
        mcp_max_message_bytes,
        sandbox_exec_timeout,
        sandbox_max_output,
        sandbox_limits,
        overload,
        max_queued_turns,
        ndjson_keepalive,
        durable_drivers,
        metrics_no_auth,
        shared_history,
        subscriber_lag_limit,
        subscriber_window_bytes,
        delta_window_bytes,
        max_page_bytes,
        history_cache_bytes,
        resident_sessions,
        history_idle,
        idempotency_retention,
    })
}

/// Applies flag > environment precedence: `--config`, `--admin-key-file`,
/// `--admin-key-hash-file` replace the environment values when given, and
/// `--dangerously-disable-admin-auth` forces `disable_admin_auth`.
pub fn resolve_paths(cli: &Cli, env: &mut Env) {
    if let Some(p) = &cli.config_path {
        env.config_path = Some(p.clone());
    }
    if let Some(p) = &cli.admin_key_file {
        env.admin_key_file = p.clone();
    }
    if let Some(p) = &cli.admin_key_hash_file {
        env.admin_key_hash_file = p.clone();
    }
    if cli.disable_admin_auth {
        env.disable_admin_auth = true;
    }
}

/// §5 step 7: `--rotate-admin-key` with admin auth disabled through the
/// environment is an error (the flag+flag case is already rejected by
/// [`super::parse_cli`]). Call after [`resolve_paths`], before opening the
/// database.
pub fn check_rotate_with_disabled_auth(cli: &Cli, env: &Env) -> Result<(), ConfigError> {
    if cli.rotate_admin_key && env.disable_admin_auth {
        Err(ConfigError::RotateWithDisabledAuth)
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
