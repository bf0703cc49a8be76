//! The `baesrv` process: subcommands, the `serve` startup sequence of spec
//! 04 §5 and exit codes (§4).
//!
//! Exit codes: 0 success; 1 runtime failure (database, bootstrap I/O,
//! listener bind, runtime); 2 usage/configuration error. Errors go to stderr
//! as `baesrv: …` before logging is initialised and through the logger
//! afterwards.

use std::io::{IsTerminal, Write};

use engine::store::Snapshot;
use engine::{Engine, Entropy, ProviderEntry};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{self, Cli, Command, ConfigError, Env, FileConfig};
use crate::driver::{self, Clock, DriverSettings, OsEntropy};
use crate::log_filter;
use crate::store::pg::PgStore;
use crate::store::{
    self, bootstrap_admin_key, Backend, BootstrapOutcome, BootstrapSettings, Store,
};

/// Exit code of runtime failures.
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code of usage and configuration errors.
pub const EXIT_USAGE: i32 = 2;

/// A runtime that drives the engine until a graceful shutdown completes:
/// [`driver::run`] (smol) or [`crate::threads::run`] (std threads).
pub type Runtime = fn(driver::Boot) -> std::io::Result<()>;

/// Runs the process with `args` (without the program name) on the smol
/// runtime; returns the exit code.
pub fn main_with_args(args: &[String]) -> i32 {
    main_inner(args, driver::run, true)
}

/// [`main_with_args`] on `runtime`: everything but the runtime (flags,
/// environment, configuration, database, exit codes, telemetry export) is
/// shared. Such a runtime cannot forward requests, so replica mode is
/// refused.
pub fn main_with_runtime(args: &[String], runtime: Runtime) -> i32 {
    main_inner(args, runtime, false)
}

fn main_inner(args: &[String], runtime: Runtime, smol_runtime: bool) -> i32 {
    crate::heap_trim::tune();
    // §5 step 1: flags (rotate+disable flags are rejected by the parser).
    let cli = match config::parse_cli(args) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("{}", e.stderr_line());
            if e.show_usage() {
                eprint!("{}", config::usage_text());
            }
            return e.exit_code();
        }
    };
    match cli.command {
        Command::Version => {
            print!("{}", config::version_text());
            let _ = std::io::stdout().flush();
            0
        }
        Command::Help => {
            eprint!("{}", config::usage_text());
            0
        }
        Command::Migrate => migrate(&cli),
        Command::Serve => serve(&cli, runtime, smol_runtime),
    }
}

/// §5 step 2: environment, with flag > env precedence applied.
fn read_env(cli: &Cli) -> Result<Env, ConfigError> {
    let mut env = config::parse_env(config::process_env)?;
    config::resolve_paths(cli, &mut env);
    Ok(env)
}

fn config_error(e: &ConfigError) -> i32 {
    eprintln!("{}", e.stderr_line());
    e.exit_code()
}

/// Initialises the stderr logger from `BAE_LOG` (an unparsable filter falls
/// back to `info`, with a warning).
fn init_logging(directive: &str) {
    let (filter, bad) = log_filter::stderr_filter(directive);
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish()
        .with(filter)
        .try_init();
    if bad {
        tracing::warn!(directive, "BAE_LOG is not a valid filter; using \"info\"");
    }
}

fn sync_mode(env: &Env) -> store::Synchronous {
    match env.sqlite_synchronous {
        config::Synchronous::Normal => store::Synchronous::Normal,
        config::Synchronous::Full => store::Synchronous::Full,
    }
}

/// Replica mode as started: its seq lane, database, identity (with its
/// fencing token) and the watch of its lease renewals.
struct ReplicaStart {
    lane: u64,
    url: config::DatabaseUrl,
    me: crate::store::pg::replica::ReplicaIdentity,
    watch: crate::store::pg::renewer::LeaseWatch,
}

/// Replica mode (`BAE_REPLICA_ADVERTISE`, docs/scaling.md): names this
/// replica, draws its fencing token, takes a seq lane, starts the lease
/// renewer and tells the other replicas to re-read the admin keys (a
/// rotation at start). `Ok(None)`: a lone server. Only `baesrv` (the smol
/// runtime, the one that exports telemetry) can forward requests.
fn start_replica(
    env: &config::Env,
    store: &mut Backend,
    smol_runtime: bool,
) -> Result<Option<ReplicaStart>, i32> {
    let Some(r) = &env.replica else {
        return Ok(None);
    };
    let Backend::Postgres(pg) = store else {
        tracing::error!("configuration error: BAE_REPLICA_ADVERTISE needs BAE_DATABASE_URL");
        return Err(EXIT_USAGE);
    };
    if !smol_runtime {
        tracing::error!(
            "configuration error: replica mode (BAE_REPLICA_ADVERTISE) needs baesrv; \
             this runtime cannot forward requests"
        );
        return Err(EXIT_USAGE);
    }
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let owner = match &r.id {
        Some(id) => id.clone(),
        None => format!("{}@{started}.{}", r.advertise, std::process::id()),
    };
    let me = crate::store::pg::replica::ReplicaIdentity::new(
        owner.clone(),
        r.advertise.clone(),
        r.lease_ms as i64,
    );
    let claimed = pg.set_replica(me.clone()).and_then(|watch| {
        let lane = pg.claim_lane()?;
        pg.notify_admin_keys()?;
        Ok((lane, watch))
    });
    let (lane, watch) = match claimed {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return Err(EXIT_RUNTIME);
        }
    };
    let url = pg.url().clone();
    if let Err(e) =
        crate::store::pg::renewer::start_renewer(url.clone(), me.clone(), lane, watch.clone())
    {
        tracing::error!("cannot start the lease renewer: {e}");
        return Err(EXIT_RUNTIME);
    }
    tracing::info!(
        replica = %owner,
        advertise = %r.advertise,
        lease_ms = r.lease_ms,
        lane,
        "replica mode"
    );
    Ok(Some(ReplicaStart {
        lane,
        url,
        me,
        watch,
    }))
}

/// Opens and migrates the database (§5 step 8): the SQLite file, or
/// PostgreSQL when `BAE_DATABASE_URL` is set.
fn open_store(env: &Env) -> Result<Backend, store::StoreError> {
    match &env.database {
        config::Database::Sqlite => {
            let mut store = Store::open(&env.db_path, sync_mode(env))?;
            store.set_cache_kib(env.sqlite_cache_kib)?;
            store.set_shared_history(env.shared_history);
            store.migrate()?;
            Ok(Backend::Sqlite(store))
        }
        config::Database::Postgres { url, .. } => {
            let mut store = PgStore::connect(url)?;
            store.migrate()?;
            Ok(Backend::Postgres(Box::new(store)))
        }
    }
}

/// The `bae.db` label of this server's sandbox containers: a digest of
/// the database file's path, or of the PostgreSQL URL without its password.
fn store_label(env: &Env) -> String {
    match &env.database {
        config::Database::Sqlite => crate::sandbox_cleanup::db_label(&env.db_path),
        config::Database::Postgres { url, .. } => {
            use sha2::{Digest, Sha256};
            // Replicas share the database, maybe the container engine too:
            // each cleans up only what an earlier run at its own address
            // left.
            let replica = env.replica.as_ref().map(|r| r.advertise.as_str());
            let text = match replica {
                Some(addr) => format!("{url} {addr}"),
                None => url.to_string(),
            };
            let digest = Sha256::digest(text.as_bytes());
            proto::wire::hex::encode(&digest[..8])
        }
    }
}

/// `baesrv migrate`: env only (`--config` is ignored), open, migrate, close.
fn migrate(cli: &Cli) -> i32 {
    let env = match read_env(cli) {
        Ok(env) => env,
        Err(e) => return config_error(&e),
    };
    init_logging(&env.log);
    match open_store(&env) {
        Ok(store) => {
            let at = store.describe();
            drop(store);
            println!("migrations up to date at {at}");
            0
        }
        Err(e) => {
            tracing::error!("{e}");
            EXIT_RUNTIME
        }
    }
}

/// `baesrv serve`: the startup sequence of spec 04 §5.
fn serve(cli: &Cli, runtime: Runtime, smol_runtime: bool) -> i32 {
    // Step 2.
    let env = match read_env(cli) {
        Ok(env) => env,
        Err(e) => return config_error(&e),
    };
    // Step 3.
    let file = match config::load_file(env.config_path.as_deref()) {
        Ok(f) => f,
        Err(e) => return config_error(&e),
    };
    // Step 4: telemetry was validated by the loader; resolve its headers
    // once (the only `${VAR}` resolved at startup).
    let headers = match config::resolve_otlp_headers(&file.telemetry, config::process_env) {
        Ok(h) => h,
        Err(e) => return config_error(&e),
    };
    let telemetry = match crate::otel::init(&file.telemetry, headers, &env.otel_log) {
        Ok(t) => t,
        Err(e) => return config_error(&e),
    };
    // Step 5.
    init_logging(&env.log);
    // Step 6 (registries were validated by the loader).
    tracing::info!(
        mcp_servers = file.mcp.servers.len(),
        providers = file.providers.len(),
        "registries loaded"
    );
    // Step 7.
    if let Err(e) = config::check_rotate_with_disabled_auth(cli, &env) {
        tracing::error!("configuration error: {e}");
        return e.exit_code();
    }
    // Step 8.
    let mut store = match open_store(&env) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return EXIT_RUNTIME;
        }
    };
    // Step 9.
    let settings = BootstrapSettings {
        disabled: env.disable_admin_auth,
        rotate: cli.rotate_admin_key,
        key_file: env.admin_key_file.clone(),
        hash_file: env.admin_key_hash_file.clone(),
    };
    let mut os_rng = OsEntropy::new();
    let mut entropy = |buf: &mut [u8]| os_rng.fill(buf);
    let outcome = match bootstrap_admin_key(&mut store, &settings, &mut entropy) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("{e}");
            return e.exit_code();
        }
    };
    // Replica mode: a lane and the lease renewer before the snapshot, so
    // the seqs it starts from are past everything this lane ever held.
    let replica = match start_replica(&env, &mut store, smol_runtime) {
        Ok(r) => r,
        Err(code) => return code,
    };
    // Sessions are read when first used unless every one is kept in memory
    // (always so in replica mode: leases move sessions between replicas).
    let scope = match (env.resident_sessions, &replica) {
        (Some(_), None) => engine::store::SnapshotScope::Lazy,
        _ => engine::store::SnapshotScope::Full,
    };
    let snapshot = match store.load_snapshot(scope) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return EXIT_RUNTIME;
        }
    };
    if let (Backend::Postgres(pg), config::Database::Postgres { pool_size, .. }) =
        (&mut store, &env.database)
    {
        if let Err(e) = pg.start_readers(*pool_size) {
            tracing::error!("{e}");
            return EXIT_RUNTIME;
        }
        tracing::info!(database = %pg.describe(), pool_size, "using the PostgreSQL store");
    }
    // Step 10.
    if let Err(code) = check_sandbox_driver(&env, &snapshot) {
        return code;
    }
    // Step 12: once now, then hourly from the driver.
    log_activity(&snapshot);

    let run_label = crate::sandbox_cleanup::run_label();
    crate::sandbox_cleanup::stop_leftovers(
        env.sandbox_driver,
        store_label(&env),
        run_label.clone(),
    );
    let clock = Clock::new();
    crate::driver::provider::configure(env.provider_idle_connections);
    let mut engine_cfg = engine_config(&env, &file, &run_label);
    // Spans are recorded only when an exporter takes them.
    engine_cfg.telemetry = telemetry.is_some() && file.telemetry.traces_enabled;
    engine_cfg.replica = replica.as_ref().map(|r| engine::replicas::ReplicaSettings {
        slot: r.lane,
        lanes: crate::store::pg::replica::LANES,
    });
    let engine = Engine::new(
        engine_cfg,
        Box::new(OsEntropy::new()),
        snapshot,
        clock.now(),
    );
    // Step 13.
    let listeners = match driver::bind_listeners(env.addr, env.admin_addr) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return EXIT_RUNTIME;
        }
    };
    tracing::info!(client = %env.addr, admin = %env.admin_addr, "listening");
    if outcome == BootstrapOutcome::Generated {
        // First boot: say where the key is and what to do next (never the key).
        tracing::info!("{}", first_boot_hint(&env.admin_key_file, env.admin_addr));
    }
    // Step 14.
    let settings = DriverSettings {
        shutdown_timeout: env.shutdown_timeout,
        max_connections: env.max_connections,
        sandbox_driver: env.sandbox_driver,
        sandbox_run_args: env.sandbox_limits.run_args(),
        forward_timeout: std::time::Duration::from_millis(
            (env.replica.as_ref())
                .map_or(config::DEFAULT_FORWARD_TIMEOUT_MS, |r| r.forward_timeout_ms),
        ),
    };
    let boot = driver::Boot {
        engine,
        clock,
        store,
        listeners,
        settings,
        telemetry,
        replica_notices: replica.as_ref().map(|r| r.url.clone()),
        lease_watch: replica.as_ref().map(|r| r.watch.clone()),
    };
    match runtime(boot) {
        Ok(()) => {
            // A graceful stop hands this replica's sessions over at once
            // (everything is committed): no waiting for the leases to expire.
            if let Some(r) = &replica {
                crate::store::pg::renewer::release(&r.url, &r.me);
            }
            0
        }
        Err(e) => {
            tracing::error!("runtime failure: {e}");
            EXIT_RUNTIME
        }
    }
}

/// The one line logged after a first boot wrote a new admin key file: where
/// the key is and the `baectl` command to run next. It names the file, never
/// its content.
pub fn first_boot_hint(key_file: &std::path::Path, admin_addr: std::net::SocketAddr) -> String {
    let path = shell_word(&key_file.display().to_string());
    let addr = if admin_addr.to_string() == crate::ctl::DEFAULT_ADMIN_ADDR {
        String::new()
    } else {
        format!(" --admin-addr {admin_addr}")
    };
    format!(
        "admin key written to {path}; next: baectl{addr} --admin-key-file {path} \
         profiles create --name NAME --primary-provider PROVIDER (see docs/quickstart.md)"
    )
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// §5 step 10: `apple-container` only works on macOS; elsewhere it is fatal
/// (exit 2) when an active profile declares sandboxes, else a warning.
fn check_sandbox_driver(env: &Env, snapshot: &Snapshot) -> Result<(), i32> {
    if env.sandbox_driver != config::SandboxDriver::AppleContainer || cfg!(target_os = "macos") {
        return Ok(());
    }
    let uses_sandboxes = snapshot
        .profiles
        .iter()
        .any(|p| p.deleted_at.is_none() && !p.available_sandboxes.is_empty());
    if uses_sandboxes {
        tracing::error!(
            "configuration error: BAE_SANDBOX_DRIVER: \"apple-container\" is not usable on \
             this host, but an active profile declares available_sandboxes"
        );
        return Err(EXIT_USAGE);
    }
    tracing::warn!(
        "BAE_SANDBOX_DRIVER \"apple-container\" is not supported on this host; \
         every sandbox call will fail"
    );
    Ok(())
}

fn log_activity(s: &Snapshot) {
    store::Activity {
        profiles: s.profiles.iter().filter(|p| p.deleted_at.is_none()).count() as u64,
        client_keys: s
            .keys
            .iter()
            .filter(|k| k.role == engine::store::KeyRole::Client)
            .count() as u64,
        open_sessions: s.stored_sessions.open,
        total_sessions: s.stored_sessions.total,
        events: s.events_total,
    }
    .log();
}

/// The engine's settings from the environment and the config file.
// The update fills the simulator-only `planted` field when a workspace
// build enables the engine's `planted-bugs` feature.
#[allow(clippy::needless_update)]
pub fn engine_config(env: &Env, file: &FileConfig, run_label: &str) -> engine::Config {
    let providers = file
        .providers
        .iter()
        .map(|p| ProviderEntry {
            name: p.name.clone(),
            kind: p.kind,
            base_url: p.api_base_url().to_string(),
            model: p.model.clone(),
            auth_template: p.auth_token.clone(),
            max_tokens: p.max_tokens,
            retry: p.retry.clone(),
            limits: p.limits,
            cache: p.cache,
            prices: p.prices,
            stream: p.stream.map(|s| engine::StreamSettings {
                first_byte_timeout_ms: s.first_byte_timeout_secs.saturating_mul(1000),
                idle_timeout_ms: s.idle_timeout_secs.saturating_mul(1000),
                max_bytes: usize::try_from(s.max_bytes).unwrap_or(usize::MAX),
            }),
        })
        .collect();
    engine::Config {
        version: env!("CARGO_PKG_VERSION").to_string(),
        max_head_bytes: env.max_head_bytes,
        max_headers: env.max_headers,
        max_body_bytes: env.max_body_bytes,
        max_import_bytes: env.max_import_bytes,
        turn_timeout_ms: duration_ms(env.turn_timeout),
        provider_timeout_ms: duration_ms(env.provider_timeout),
        admin_auth_disabled: env.disable_admin_auth,
        providers,

        admin_providers_json: config::providers_json(file).to_string(),
        admin_mcp_servers_json: config::mcp_servers_json(file).to_string(),
        admin_config_json: config::redacted_config_json(file).to_string(),
        max_subagents_per_session: env.max_subagents_per_session,
        max_queued_per_session: env.max_queued_turns,
        durable_drivers: env.durable_drivers,
        id_order: env.id_order,
        metrics_no_auth: env.metrics_no_auth,
        // Spec 04 §3.3: nothing under `[telemetry]` is used unless enabled.
        metrics_disabled: match file.telemetry.enabled {
            true => file.telemetry.metrics_disabled.clone(),
            false => Vec::new(),
        },
        ndjson_keepalive_ms: duration_ms(env.ndjson_keepalive),
        subscriber_lag_limit: env.subscriber_lag_limit,
        max_page_bytes: env.max_page_bytes,
        resident_sessions: env.resident_sessions,
        history_cache: engine::history_cache::Limits {
            budget_bytes: env.history_cache_bytes,
            idle_ms: duration_ms(env.history_idle),
        },
        subscriber_window_bytes: env.subscriber_window_bytes,
        delta_window_bytes: env.delta_window_bytes,
        idempotency_retention_ms: duration_ms(env.idempotency_retention),
        request_timeout_ms: duration_ms(env.request_timeout),
        idle_timeout_ms: duration_ms(env.idle_timeout),
        mcp_servers: file.mcp.servers.iter().map(mcp_spec).collect(),
        mcp_timeout_ms: duration_ms(env.mcp_timeout),
        mcp_max_message_bytes: env.mcp_max_message_bytes,
        sandbox_exec_timeout_ms: duration_ms(env.sandbox_exec_timeout),
        sandbox_max_output: env.sandbox_max_output,
        subagent_timeout_ms: duration_ms(env.subagent_timeout),
        overload: env.overload,
        sandbox_labels: vec![
            ("bae.db".to_string(), store_label(env)),
            ("bae.run".to_string(), run_label.to_string()),
        ],
        ..engine::Config::default()
    }
}

/// The engine's view of a registry entry (templates stay unresolved).
fn mcp_spec(s: &config::McpServer) -> engine::mcp::McpServerSpec {
    use config::Transport;
    let transport = match s.transport {
        Transport::Stdio => engine::mcp::McpTransport::Stdio {
            command: s.command.clone().unwrap_or_default(),
            args: s.args.clone(),
        },
        // Both are MCP "streamable HTTP" (spec 06 §4.4).
        Transport::Http | Transport::Sse => engine::mcp::McpTransport::Http {
            url: s.url.clone().unwrap_or_default(),
            headers: s
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
    };
    engine::mcp::McpServerSpec {
        name: s.name.clone(),
        transport,
        reconnect: s.reconnect,
    }
}

fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::first_boot_hint;
    use std::path::Path;

    #[test]
    fn first_boot_hint_names_the_file_and_the_next_command() {
        let default_admin = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(
            first_boot_hint(Path::new("./bae-data/admin-key.pem"), default_admin),
            "admin key written to ./bae-data/admin-key.pem; next: baectl --admin-key-file \
             ./bae-data/admin-key.pem profiles create --name NAME --primary-provider PROVIDER \
             (see docs/quickstart.md)"
        );
        let other = first_boot_hint(
            Path::new("/srv/my keys/k.pem"),
            "127.0.0.1:9001".parse().unwrap(),
        );
        assert!(other.starts_with("admin key written to '/srv/my keys/k.pem'; next: baectl --admin-addr 127.0.0.1:9001 --admin-key-file '/srv/my keys/k.pem' profiles create"), "{other}");
        assert!(!other.contains('\n'));
        let quote = first_boot_hint(Path::new("/a'b"), default_admin);
        assert!(quote.contains("'/a'\\''b'"), "{quote}");
    }
}
