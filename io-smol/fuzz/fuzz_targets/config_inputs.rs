//! Feeds baesrv's startup configuration parsers (io-smol `src/config`,
//! compiled in through `#[path]`, see Cargo.toml): the `bae-config.toml`
//! text (`parse_file_str`), the environment as a fuzzed variable map
//! (`parse_env`, and through it `parse_database` and `parse_replica`), the
//! command line (`parse_cli`) and the `${VAR}` substitution. Nothing may
//! panic, and:
//! - an accepted file's admin views render, with every secret-bearing
//!   value (provider `auth_token`, MCP header values, `otlp_headers`
//!   values) shown as the redaction marker;
//! - resolving those templates against the map never puts a resolved
//!   value in an error message (the map's values are tagged so a leak is
//!   visible);
//! - substitution is the identity when every variable resolves to its own
//!   `${NAME}` token, and fails exactly when a token is present and no
//!   variable is set.
//!
//! Input (lossy UTF-8), in parts separated by NUL: the TOML file; the
//! environment, one `NAME=VALUE` a line (`#n` as a name picks the n-th
//! variable baesrv reads); the command line, one argument a line; a
//! template.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[allow(dead_code, unused_imports)]
#[path = "../../src/config/mod.rs"]
mod config;

/// What `src/config` reads from io-smol's store module (same values as
/// `io-smol/src/store/mod.rs`; the fuzz target does not link the store).
#[allow(dead_code)]
mod store {
    pub const DEFAULT_CACHE_KIB: usize = 512;
    pub const MAX_CACHE_KIB: usize = i32::MAX as usize;
}

use config::{
    check_rotate_with_disabled_auth, mcp_servers_json, parse_cli, parse_env, parse_file_str,
    providers_json, redacted_config_json, resolve_otlp_headers, resolve_paths, substitute,
    REDACTED,
};

/// The variables baesrv reads (`#n` picks one).
const NAMES: &[&str] = &[
    "BAE_ADDR",
    "BAE_ADMIN_ADDR",
    "BAE_ADMIN_KEY_FILE",
    "BAE_ADMIN_KEY_HASH_FILE",
    "BAE_CONFIG",
    "BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH",
    "BAE_DATABASE_POOL_SIZE",
    "BAE_DATABASE_URL",
    "BAE_DB_PATH",
    "BAE_DELTA_WINDOW_BYTES",
    "BAE_DURABLE_DRIVERS",
    "BAE_FORWARD_TIMEOUT_MS",
    "BAE_HISTORY_CACHE_BYTES",
    "BAE_HISTORY_IDLE",
    "BAE_IDEMPOTENCY_RETENTION",
    "BAE_IDLE_TIMEOUT",
    "BAE_ID_ORDER",
    "BAE_LEASE_MS",
    "BAE_LOG",
    "BAE_MAX_BODY_BYTES",
    "BAE_MAX_CONNECTIONS",
    "BAE_MAX_HEADERS",
    "BAE_MAX_HEAD_BYTES",
    "BAE_MAX_IMPORT_BYTES",
    "BAE_MAX_PAGE_BYTES",
    "BAE_MAX_QUEUED_TURNS",
    "BAE_MAX_SUBAGENTS_PER_SESSION",
    "BAE_MCP_MAX_MESSAGE_BYTES",
    "BAE_MCP_TIMEOUT",
    "BAE_METRICS_NO_AUTH",
    "BAE_NDJSON_KEEPALIVE",
    "BAE_OTEL_LOG",
    "BAE_OVERLOAD_MAX_STORE_BACKLOG",
    "BAE_OVERLOAD_MAX_WAITING",
    "BAE_OVERLOAD_RETRY_AFTER",
    "BAE_PROVIDER_IDLE_CONNECTIONS",
    "BAE_PROVIDER_TIMEOUT",
    "BAE_REPLICA_ADVERTISE",
    "BAE_REPLICA_ID",
    "BAE_REQUEST_TIMEOUT",
    "BAE_RESIDENT_SESSIONS",
    "BAE_SANDBOX_CPUS",
    "BAE_SANDBOX_DRIVER",
    "BAE_SANDBOX_EXEC_TIMEOUT",
    "BAE_SANDBOX_MAX_OUTPUT_BYTES",
    "BAE_SANDBOX_MEMORY",
    "BAE_SANDBOX_NETWORK",
    "BAE_SHARED_HISTORY",
    "BAE_SHUTDOWN_TIMEOUT",
    "BAE_SQLITE_CACHE_KIB",
    "BAE_SQLITE_SYNCHRONOUS",
    "BAE_SUBAGENT_TIMEOUT",
    "BAE_SUBSCRIBER_LAG_LIMIT",
    "BAE_SUBSCRIBER_WINDOW_BYTES",
    "BAE_TURN_TIMEOUT",
];

/// Prefixed to every resolved value, so a leak is recognisable.
const TAG: &str = "~s3cr3t~";

fn env_map(text: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for line in text.lines() {
        let (name, value) = line.split_once('=').unwrap_or((line, ""));
        let name = match name.strip_prefix('#').map(str::parse::<usize>) {
            Some(Ok(n)) => NAMES[n % NAMES.len()].to_string(),
            _ => name.to_string(),
        };
        map.insert(name, value.to_string());
    }
    map
}

/// Every member named `field` of every object in `v` holds `REDACTED`.
fn all_redacted(v: &Value, field: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == field {
                    match x {
                        Value::String(s) => assert_eq!(s, REDACTED, "{field} shown"),
                        Value::Object(h) => {
                            assert!(h.values().all(|s| s == REDACTED), "{field} values shown")
                        }
                        other => panic!("{field} is {other}"),
                    }
                } else {
                    all_redacted(x, field);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_redacted(x, field)),
        _ => {}
    }
}

fn check_file(text: &str, env: &HashMap<String, String>) {
    let Ok(cfg) = parse_file_str(text, Path::new("bae-config.toml")) else {
        return;
    };
    let view = redacted_config_json(&cfg);
    all_redacted(&view["providers"], "auth_token");
    all_redacted(&view["mcp"], "headers");
    all_redacted(&view["telemetry"], "otlp_headers");
    let _ = (providers_json(&cfg), mcp_servers_json(&cfg));
    let _ = format!("{cfg:?}");

    // Resolved values are tagged; an input that holds the tag itself
    // cannot tell a leak from its own text.
    if text.contains(TAG) || env.keys().any(|k| k.contains(TAG)) {
        return;
    }
    let get = |name: &str| env.get(name).map(|v| format!("{TAG}{v}"));
    let leaks = |msg: String| assert!(!msg.contains(TAG), "a resolved value in {msg:?}");
    if let Err(e) = resolve_otlp_headers(&cfg.telemetry, get) {
        leaks(e.to_string());
        leaks(format!("{e:?}"));
    }
    let templates = (cfg.providers.iter().map(|p| p.auth_token.as_str())).chain(
        cfg.mcp
            .servers
            .iter()
            .flat_map(|s| s.headers.values().map(String::as_str)),
    );
    for t in templates {
        if let Err(e) = substitute(t, get) {
            leaks(e.to_string());
        }
    }
}

fn check_template(t: &str) {
    let same = substitute(t, |n| Some(format!("${{{n}}}")));
    match substitute(t, |_| None) {
        Ok(s) => {
            assert!(!t.contains("${"), "an unset variable resolved");
            assert_eq!(s, t);
            assert_eq!(same.as_deref(), Ok(t));
        }
        Err(_) => {
            assert!(t.contains("${"));
            if let Ok(s) = same {
                assert_eq!(s, t, "substitution is not the identity");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let mut parts = input.split('\0');
    let file = parts.next().unwrap_or_default();
    let env = env_map(parts.next().unwrap_or_default());
    let args: Vec<String> = (parts.next().unwrap_or_default().lines())
        .map(str::to_string)
        .collect();
    let template = parts.next().unwrap_or_default();

    check_file(file, &env);
    check_template(template);

    let parsed_env = parse_env(|name| env.get(name).cloned());
    if let Err(e) = &parsed_env {
        let _ = e.stderr_line();
    }
    match parse_cli(&args) {
        Ok(cli) => {
            if let Ok(mut e) = parsed_env {
                resolve_paths(&cli, &mut e);
                let _ = check_rotate_with_disabled_auth(&cli, &e);
            }
        }
        Err(e) => {
            let _ = (e.stderr_line(), e.show_usage());
        }
    }
});
