//! Startup configuration of `baesrv` (spec `04-configuration.md`).
//!
//! Three independent inputs, each parsed by a pure function that takes its
//! input explicitly so it can be unit-tested without touching the process:
//!
//! * [`parse_cli`] — command-line flags and subcommand (§2);
//! * [`parse_env`] — the `BAE_*` environment variables (§1), read through a
//!   getter closure (use [`process_env`] for the real environment);
//! * [`load_file`] / [`parse_file_str`] — `bae-config.toml` (§3).
//!
//! [`resolve_paths`] merges flags over environment values and
//! [`check_rotate_with_disabled_auth`] performs the late rotate+disable
//! check of §5 step 7. [`substitute`] implements the `${VAR}` algorithm
//! (§3.4); [`redacted_config_json`], [`providers_json`] and
//! [`mcp_servers_json`] render the admin read-only views (spec 03 §4.4–§4.6).
//!
//! Errors ([`UsageError`], [`ConfigError`]) display their message without the
//! `baesrv: …` prefix; [`UsageError::stderr_line`] and
//! [`ConfigError::stderr_line`] add it. Both always exit with code 2.

mod caching;
mod cli;
mod database;
mod env;
mod env_values;
mod file;
mod redact;
mod replica;
mod subst;
mod toml_de;
mod traffic;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use cli::{parse_cli, usage_text, version_text, Cli, Command};
pub use database::{Database, DatabaseUrl, DEFAULT_POOL_SIZE, MAX_POOL_SIZE};
pub use env::{
    check_rotate_with_disabled_auth, parse_env, process_env, resolve_paths, Env, SandboxDriver,
    Synchronous,
};
pub use file::{
    load_file, parse_file_str, resolve_otlp_headers, FileConfig, McpConfig, McpServer,
    OtlpProtocol, ProviderEntry, ProviderKind, Telemetry, Transport, DEFAULT_MAX_TOKENS,
    DEFAULT_SERVICE_NAME, METRIC_NAMES,
};
pub use redact::{mcp_servers_json, providers_json, redacted_config_json, REDACTED};
pub use replica::{ReplicaEnv, DEFAULT_FORWARD_TIMEOUT_MS, DEFAULT_LEASE_MS};
pub use subst::{substitute, SubstError};

/// Exit code for every usage or configuration error (spec 04 §4).
pub const EXIT_USAGE: i32 = 2;

/// A command-line usage error (spec 04 §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageError {
    /// `--config`, `--admin-key-file` or `--admin-key-hash-file` without a
    /// (non-empty) value.
    MissingValue { flag: &'static str },
    /// An unrecognised subcommand, flag or extra argument.
    UnknownCommand { arg: String },
    /// `--rotate-admin-key` together with `--dangerously-disable-admin-auth`.
    RotateWithDisableFlag,
}

impl UsageError {
    /// Always 2.
    pub fn exit_code(&self) -> i32 {
        EXIT_USAGE
    }

    /// Whether the usage text should be printed on stderr after the message.
    pub fn show_usage(&self) -> bool {
        matches!(self, UsageError::UnknownCommand { .. })
    }

    /// The full stderr line, e.g. `baesrv: unknown command "frob"`.
    pub fn stderr_line(&self) -> String {
        format!("baesrv: {self}")
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::MissingValue { flag } => write!(f, "{flag} requires a path argument"),
            UsageError::UnknownCommand { arg } => write!(f, "unknown command \"{arg}\""),
            UsageError::RotateWithDisableFlag => f.write_str(
                "--rotate-admin-key cannot be combined with --dangerously-disable-admin-auth",
            ),
        }
    }
}

impl std::error::Error for UsageError {}

/// An environment, config-file or registry validation error (spec 04 §1, §3).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// An address variable does not parse as `IP:port`.
    InvalidAddress {
        var: &'static str,
        value: String,
        detail: String,
    },
    /// `BAE_ADMIN_ADDR` parsed but is not a loopback IP.
    AdminNotLoopback { addr: SocketAddr },
    /// A duration/count variable is not a non-negative integer.
    NotWholeSeconds { var: &'static str, value: String },
    /// `BAE_SANDBOX_DRIVER` is neither `docker` nor `apple-container`.
    UnsupportedSandboxDriver { value: String },
    /// One of our extension variables has an invalid value.
    InvalidValue {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    /// `--rotate-admin-key` with `BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH` truthy.
    RotateWithDisabledAuth,
    /// `BAE_DATABASE_URL` is not a usable PostgreSQL URL; `shown` is the
    /// value with its password redacted.
    InvalidDatabaseUrl { shown: String, detail: String },
    /// An option the PostgreSQL store does not support (yet) was set
    /// together with `BAE_DATABASE_URL`.
    NotWithPostgres { var: &'static str },
    /// The config file exists but cannot be read.
    CannotReadFile { path: PathBuf, detail: String },
    /// The config file is not valid TOML or does not match the schema.
    InvalidFile { path: PathBuf, detail: String },
    /// Two `[[mcp.servers]]` entries share a name.
    DuplicateMcpServer { name: String },
    /// An `[[mcp.servers]]` entry has a blank name.
    BlankMcpServerName,
    /// An `[[mcp.servers]]` entry lacks the field its transport requires.
    McpMissingField {
        name: String,
        transport: Transport,
        field: &'static str,
    },
    /// Two `[[providers.entries]]` share a name.
    DuplicateProvider { name: String },
    /// A `[[providers.entries]]` entry has a blank name.
    BlankProviderName,
    /// A configured URL's host is not ASCII; `at` names the entry and
    /// field. Only the host is shown: the rest may hold credentials.
    NonAsciiHost { at: String, host: String },
    /// `[telemetry]` validation or `otlp_headers` resolution failure; the
    /// payload is the complete message.
    Telemetry(String),
}

impl ConfigError {
    /// Always 2.
    pub fn exit_code(&self) -> i32 {
        EXIT_USAGE
    }

    /// The full stderr line: `baesrv: configuration error: <message>`.
    pub fn stderr_line(&self) -> String {
        format!("baesrv: configuration error: {self}")
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::InvalidAddress { var, value, detail } => write!(
                f,
                "{var}: \"{value}\" is not a valid host:port address ({detail})"
            ),
            ConfigError::AdminNotLoopback { addr } => write!(
                f,
                "BAE_ADMIN_ADDR: {addr} is not a loopback address; \
                 the admin port must bind to localhost only"
            ),
            ConfigError::NotWholeSeconds { var, value } => {
                write!(f, "{var}: \"{value}\" is not a whole number of seconds")
            }
            ConfigError::UnsupportedSandboxDriver { value } => write!(
                f,
                "BAE_SANDBOX_DRIVER: \"{value}\" is not a supported sandbox driver \
                 (expected \"docker\" or \"apple-container\")"
            ),
            ConfigError::InvalidValue {
                var,
                value,
                expected,
            } => write!(f, "{var}: \"{value}\" is not valid (expected {expected})"),
            ConfigError::InvalidDatabaseUrl { shown, detail } => {
                write!(f, "BAE_DATABASE_URL: \"{shown}\" is not valid ({detail})")
            }
            ConfigError::NotWithPostgres { var } => write!(
                f,
                "{var} is not supported with BAE_DATABASE_URL (the PostgreSQL store); unset one"
            ),
            ConfigError::RotateWithDisabledAuth => f.write_str(
                "--rotate-admin-key cannot be combined with \
                 BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH",
            ),
            ConfigError::CannotReadFile { path, detail } => write!(
                f,
                "cannot read config file \"{}\": {detail}",
                path.display()
            ),
            ConfigError::InvalidFile { path, detail } => {
                write!(f, "invalid config file \"{}\": {detail}", path.display())
            }
            ConfigError::DuplicateMcpServer { name } => {
                write!(f, "duplicate MCP server name \"{name}\" in [mcp.servers]")
            }
            ConfigError::BlankMcpServerName => {
                f.write_str("MCP server name must not be blank in [mcp.servers]")
            }
            ConfigError::McpMissingField {
                name,
                transport,
                field,
            } => write!(
                f,
                "MCP server \"{name}\" uses transport \"{}\" but is missing required field \"{field}\"",
                transport.as_str()
            ),
            ConfigError::DuplicateProvider { name } => {
                write!(f, "duplicate provider name \"{name}\" in [providers.entries]")
            }
            ConfigError::BlankProviderName => {
                f.write_str("provider name must not be blank in [providers.entries]")
            }
            ConfigError::NonAsciiHost { at, host } => write!(
                f,
                "{at}: host \"{host}\" is not ASCII; \
                 write it in its ASCII form (xn--…, as idn2 prints it)"
            ),
            ConfigError::Telemetry(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_exit_codes() {
        let e = UsageError::UnknownCommand { arg: "x".into() };
        assert_eq!(e.stderr_line(), "baesrv: unknown command \"x\"");
        assert!(e.show_usage());
        assert_eq!(e.exit_code(), 2);
        let e = ConfigError::NotWholeSeconds {
            var: "BAE_TURN_TIMEOUT",
            value: "soon".into(),
        };
        assert_eq!(
            e.stderr_line(),
            "baesrv: configuration error: BAE_TURN_TIMEOUT: \"soon\" is not a whole number of seconds"
        );
        assert_eq!(e.exit_code(), 2);
    }
}
