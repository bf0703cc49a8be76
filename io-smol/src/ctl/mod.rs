//! `baectl`: the admin CLI of baesrv, a thin client of the admin API
//! (spec 03) plus offline admin-key pre-provisioning (spec 03 §5.5).
//!
//! - Target: `--admin-addr` > `BAE_ADMIN_ADDR` > `127.0.0.1:8081`; a bare
//!   `host:port` means `http://`, a value with a scheme is used as given.
//! - Token: `--admin-token` / `BAE_ADMIN_TOKEN` > `--admin-key-file` /
//!   `BAE_ADMIN_KEY_FILE` > `/var/lib/bae/admin-key.pem` (surrounding
//!   whitespace trimmed). An explicitly named key file that cannot be read
//!   is an error; an absent default file means "no token".
//! - Lists follow `next_cursor` until it is null unless `--limit` or
//!   `--cursor` asks for one page.
//! - Results go to stdout (tables by default, the server's JSON with
//!   `--json`); errors go to stderr as `error: <type>: <detail>`, where
//!   `<type>` is the RFC 7807 `type` of an API error or one of `usage`,
//!   `connection`, `io`, `unexpected_response`.
//! - Exit codes: 0 success, 1 runtime or API error, 2 usage error.
//!
//! The command surface is documented in `docs/operations.md`.

pub mod args;
mod cli;
pub mod client;
pub mod keygen;
mod quotas;
pub mod render;
mod transfer;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use args::{Command, Invocation, Page, ProfileLists, ProfileUpdate};
use client::{encode, AdminClient};

/// Default admin address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8081";
/// Default plaintext admin key file.
pub const DEFAULT_ADMIN_KEY_FILE: &str = "/var/lib/bae/admin-key.pem";

/// Exit code of runtime and API errors.
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code of usage errors.
pub const EXIT_USAGE: i32 = 2;

/// A failure, printed as `error: <kind>: <detail>` (plus an optional hint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtlError {
    kind: String,
    detail: String,
    hint: Option<String>,
    exit: i32,
}

impl CtlError {
    /// A usage error (exit 2).
    pub fn usage(detail: impl Into<String>) -> CtlError {
        CtlError {
            kind: "usage".into(),
            detail: detail.into(),
            hint: Some("run \"baectl --help\" for the command list".into()),
            exit: EXIT_USAGE,
        }
    }

    /// A local or transport failure (exit 1).
    pub fn runtime(kind: impl Into<String>, detail: impl Into<String>) -> CtlError {
        CtlError {
            kind: kind.into(),
            detail: detail.into(),
            hint: None,
            exit: EXIT_RUNTIME,
        }
    }

    /// An RFC 7807 answer of the server (exit 1), with a hint for the
    /// types an operator can act on.
    pub fn api(kind: impl Into<String>, detail: impl Into<String>) -> CtlError {
        let kind = kind.into();
        let hint = match kind.as_str() {
            "unauthorized" => Some(
                "give an admin key with --admin-token / BAE_ADMIN_TOKEN, or point \
                 --admin-key-file / BAE_ADMIN_KEY_FILE at the key file baesrv wrote \
                 (default /var/lib/bae/admin-key.pem)"
                    .to_string(),
            ),
            "profile_in_use" => Some(
                "revoke the profile's client keys first (baectl list keys; baectl delete key ID), \
                 then delete it again"
                    .to_string(),
            ),
            "profile_unavailable" => Some(
                "no live profile has that id: it was never created or has been deleted \
                 (baectl list profiles)"
                    .to_string(),
            ),
            _ => None,
        };
        CtlError {
            kind,
            detail: detail.into(),
            hint,
            exit: EXIT_RUNTIME,
        }
    }

    /// Replaces the hint line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> CtlError {
        self.hint = Some(hint.into());
        self
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn detail(&self) -> &str {
        &self.detail
    }

    pub fn exit_code(&self) -> i32 {
        self.exit
    }

    /// The stderr text. Usage errors read like an argument parser's; every
    /// other failure is `baectl: <detail>` as the reference baectl prints
    /// it, the server's own detail first so scripts can match it, and any
    /// hint on the lines after. For the three answers the reference baectl
    /// words itself (and a script may match), its wording is there too:
    /// "no valid admin token was supplied (401 unauthorized)", "Revoke the
    /// profile's active keys first", "(the referenced profile does not exist
    /// or was deleted)".
    pub fn message(&self) -> String {
        let d = &self.detail;
        let mut s = match self.kind.as_str() {
            "usage" => format!("error: usage: {d}\n"),
            "unauthorized" => format!(
                "baectl: admin API rejected the request (401 unauthorized): {d}\n\
                 baectl: no valid admin token was supplied (401 unauthorized)\n"
            ),
            "profile_in_use" => {
                format!("baectl: {d}\nRevoke the profile's active keys first.\n")
            }
            "profile_unavailable" => {
                format!("baectl: {d} (the referenced profile does not exist or was deleted)\n")
            }
            _ => format!("baectl: {d}\n"),
        };
        if let Some(h) = &self.hint {
            s.push_str(&format!("hint: {h}\n"));
        }
        s
    }
}

impl std::fmt::Display for CtlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

impl std::error::Error for CtlError {}

/// The admin address to use.
pub fn resolve_addr(cli: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> String {
    cli.map(str::to_string)
        .or_else(|| env("BAE_ADMIN_ADDR").filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_ADMIN_ADDR.to_string())
}

/// The bearer token to send, if any (see the module docs for the order).
pub fn resolve_token(
    cli_token: Option<&str>,
    cli_key_file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    default_key_file: &Path,
) -> Result<Option<String>, CtlError> {
    if let Some(t) = cli_token {
        return Ok(Some(t.trim().to_string()));
    }
    if let Some(t) = env("BAE_ADMIN_TOKEN").filter(|t| !t.trim().is_empty()) {
        return Ok(Some(t.trim().to_string()));
    }
    let explicit = cli_key_file.map(Path::to_path_buf).or_else(|| {
        env("BAE_ADMIN_KEY_FILE")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    });
    let (path, required) = match explicit {
        Some(p) => (p, true),
        None => (default_key_file.to_path_buf(), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(raw) => {
            let token = raw.trim();
            Ok((!token.is_empty()).then(|| token.to_string()))
        }
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CtlError::runtime(
            "io",
            format!("cannot read admin key file {}: {e}", path.display()),
        )),
    }
}

/// Output sinks (stdout, stderr).
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

/// Runs `baectl` with `args` (without the program name) against the real
/// process environment; returns the exit code.
pub fn main_with_args(args: &[String]) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let mut out = stdout.lock();
    let mut err = stderr.lock();
    let env = |name: &str| std::env::var(name).ok();
    let code = run(
        args,
        &env,
        Path::new(DEFAULT_ADMIN_KEY_FILE),
        &mut Io {
            out: &mut out,
            err: &mut err,
        },
    );
    let _ = out.flush();
    code
}

/// Runs one invocation with an injected environment and outputs.
pub fn run(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    default_key_file: &Path,
    io: &mut Io<'_>,
) -> i32 {
    match parse_and_execute(args, env, default_key_file, io) {
        Ok(()) => 0,
        Err(e) => {
            let _ = io.err.write_all(e.message().as_bytes());
            e.exit_code()
        }
    }
}

fn parse_and_execute(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    default_key_file: &Path,
    io: &mut Io<'_>,
) -> Result<(), CtlError> {
    let (inv, text) = args::parse_with_text(args)?;
    if inv.command.is_offline() {
        return offline(&inv, text, io);
    }
    let addr = resolve_addr(inv.globals.admin_addr.as_deref(), env);
    let token = resolve_token(
        inv.globals.admin_token.as_deref(),
        inv.globals.admin_key_file.as_deref(),
        env,
        default_key_file,
    )?;
    let client = AdminClient::new(&addr, token);
    let text = execute(&client, &inv, io)?;
    // A closed stdout (`baectl … | head`) is not an error worth reporting.
    let _ = io.out.write_all(text.as_bytes());
    Ok(())
}

fn offline(inv: &Invocation, text: Option<String>, io: &mut Io<'_>) -> Result<(), CtlError> {
    // clap's help of the command asked about, or its `--version` line.
    if let Some(text) = text {
        let _ = io.out.write_all(text.as_bytes());
        return Ok(());
    }
    match &inv.command {
        Command::Help => {
            let _ = io.out.write_all(args::help_text().as_bytes());
        }
        Command::Version => {
            let _ = writeln!(io.out, "baectl {}", env!("CARGO_PKG_VERSION"));
        }
        Command::Completions(shell) => {
            let _ = io.out.write_all(&args::completions(*shell));
        }
        Command::AuthCreateKey {
            name,
            out_dir,
            force,
        } => {
            let key = keygen::generate()?;
            let (key_path, hash_path) = keygen::write_pair(out_dir, &key, name, *force)?;
            if inv.globals.json {
                let doc = json!({
                    "key_file": key_path.display().to_string(),
                    "hash_file": hash_path.display().to_string(),
                    "prefix": key.prefix,
                    "name": name,
                });
                let _ = io.out.write_all(render::json(&doc).as_bytes());
            } else {
                let _ = writeln!(io.out, "{}", key_path.display());
                let _ = writeln!(io.out, "{}", hash_path.display());
            }
            let _ = writeln!(
                io.err,
                "baectl: wrote an admin key pair (prefix {prefix}).\n\
                 - {key}: the plaintext admin key, a live credential; keep it secret and give it to \
                 baectl with --admin-key-file or BAE_ADMIN_KEY_FILE.\n\
                 - {hash}: its SHA-256 digest; copy it to every replica's BAE_ADMIN_KEY_HASH_FILE \
                 (default /var/lib/bae/admin-key-hash.pem) before the replica's first boot.",
                prefix = key.prefix,
                key = key_path.display(),
                hash = hash_path.display(),
            );
        }
        _ => unreachable!("online command in offline()"),
    }
    Ok(())
}

fn items(v: &Value) -> Vec<Value> {
    v.get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A paginated list: all pages (a JSON array of every item with `--json`)
/// or the single page asked for (the page document with `--json`).
fn list(
    client: &AdminClient,
    path: &str,
    query: &[(&str, String)],
    page: &Page,
    json: bool,
    table: fn(&[Value]) -> String,
) -> Result<String, CtlError> {
    if page.single() {
        let doc = client.page(path, query, page.limit, page.cursor.as_deref())?;
        if json {
            return Ok(render::json(&doc));
        }
        let mut out = table(&items(&doc));
        if let Some(next) = doc.get("next_cursor").and_then(Value::as_str) {
            out.push_str(&format!("next cursor: {next}\n"));
        }
        Ok(out)
    } else {
        let all = client.all(path, query)?;
        Ok(if json {
            render::json(&Value::Array(all))
        } else {
            table(&all)
        })
    }
}

/// A non-paginated `{"items": [...]}` registry.
fn registry(
    client: &AdminClient,
    path: &str,
    json: bool,
    table: fn(&[Value]) -> String,
) -> Result<String, CtlError> {
    let doc = client.json("GET", path, None)?;
    Ok(if json {
        render::json(&doc)
    } else {
        table(&items(&doc))
    })
}

fn profile_body(name: &str, primary_provider: &str, lists: &ProfileLists) -> Value {
    json!({
        "name": name,
        "primary_provider": primary_provider,
        "fallback_providers": lists.fallback_providers,
        "mcp_servers": lists.mcp_servers,
        "allowed_tools": lists.allowed_tools,
        "available_sandboxes": lists.available_sandboxes,
    })
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Merges an update into the current profile (a PUT is a full
/// replacement, so every member is sent).
pub fn merged_profile(current: &Value, update: &ProfileUpdate) -> Result<Value, CtlError> {
    let current_str = |key: &str| {
        current
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                CtlError::runtime(
                    "unexpected_response",
                    format!("the current profile has no string \"{key}\""),
                )
            })
    };
    let name = match &update.name {
        Some(n) => n.clone(),
        None => current_str("name")?,
    };
    let primary = match &update.primary_provider {
        Some(p) => p.clone(),
        None => current_str("primary_provider")?,
    };
    let pick =
        |new: &Option<Vec<String>>, key: &str| new.clone().unwrap_or_else(|| strings(current, key));
    // allowed_tools elements are not type-checked by the server: keep the
    // stored array verbatim when it is not replaced.
    let allowed_tools = match &update.allowed_tools {
        Some(t) => json!(t),
        None => current
            .get("allowed_tools")
            .cloned()
            .filter(Value::is_array)
            .unwrap_or_else(|| json!([])),
    };
    Ok(json!({
        "name": name,
        "primary_provider": primary,
        "fallback_providers": pick(&update.fallback_providers, "fallback_providers"),
        "mcp_servers": pick(&update.mcp_servers, "mcp_servers"),
        "allowed_tools": allowed_tools,
        "available_sandboxes": pick(&update.available_sandboxes, "available_sandboxes"),
    }))
}

fn execute(client: &AdminClient, inv: &Invocation, io: &mut Io<'_>) -> Result<String, CtlError> {
    let json = inv.globals.json;
    let out = |v: &Value, human: fn(&Value) -> String| {
        if json {
            render::json(v)
        } else {
            human(v)
        }
    };
    Ok(match &inv.command {
        Command::ProfilesList(page) => list(
            client,
            "/admin/v1/profiles",
            &[],
            page,
            json,
            render::profiles,
        )?,
        Command::ProfilesGet { id } => {
            let v = client.json("GET", &format!("/admin/v1/profiles/{}", encode(id)), None)?;
            out(&v, render::profile)
        }
        Command::ProfilesCreate {
            name,
            primary_provider,
            lists,
        } => {
            let body = profile_body(name, primary_provider, lists);
            let v = client.json("POST", "/admin/v1/profiles", Some(&body))?;
            out(&v, render::profile_created)
        }
        Command::ProfilesUpdate { id, update } => {
            let path = format!("/admin/v1/profiles/{}", encode(id));
            let current = client.json("GET", &path, None)?;
            let body = merged_profile(&current, update)?;
            let v = client.json("PUT", &path, Some(&body))?;
            out(&v, render::profile)
        }
        Command::ProfilesDelete { id } => {
            client.request(
                "DELETE",
                &format!("/admin/v1/profiles/{}", encode(id)),
                None,
            )?;
            if json {
                render::json(&json!({"id": id, "deleted": true}))
            } else {
                format!("deleted profile {id}\n")
            }
        }
        Command::KeysList(page) => list(client, "/admin/v1/keys", &[], page, json, render::keys)?,
        Command::KeysCreate { name, profile_id } => {
            let body = json!({"name": name, "profile_id": profile_id});
            let v = client.json("POST", "/admin/v1/keys", Some(&body))?;
            let _ = writeln!(
                io.err,
                "baectl: copy the key now; it cannot be retrieved again"
            );
            out(&v, render::key_created)
        }
        Command::KeysRevoke { id } => {
            client.request("DELETE", &format!("/admin/v1/keys/{}", encode(id)), None)?;
            if json {
                render::json(&json!({"id": id, "revoked": true}))
            } else {
                format!("revoked key {id}\n")
            }
        }
        Command::SessionsList { page, state } => {
            let query: Vec<(&str, String)> = state.iter().map(|s| ("state", s.clone())).collect();
            list(
                client,
                "/admin/v1/sessions",
                &query,
                page,
                json,
                render::sessions,
            )?
        }
        Command::SessionsEvents { id, page } => list(
            client,
            &format!("/admin/v1/sessions/{}/events", encode(id)),
            &[],
            page,
            json,
            render::events,
        )?,
        Command::SessionsFork { id, rewind, at } => {
            transfer::fork(client, id, *rewind, at, json, io)?
        }
        Command::SessionsExport { id, output } => {
            transfer::export(client, id, output.as_deref(), json, io)?
        }
        Command::SessionsImport {
            file,
            client_key_id,
            profile_id,
            keep_id,
        } => {
            let mut query = vec![("client_key_id", client_key_id.clone())];
            query.extend(profile_id.iter().map(|p| ("profile_id", p.clone())));
            if *keep_id {
                query.push(("keep_id", "true".into()));
            }
            transfer::import(client, file, query, json, io)?
        }
        Command::SessionsLineage { id } => transfer::lineage(client, id, json)?,
        Command::ProvidersList => registry(client, "/admin/v1/providers", json, render::providers)?,
        Command::McpServersList if json => {
            registry(client, "/admin/v1/mcp-servers", json, render::mcp_servers)?
        }
        Command::McpServersList => {
            let cfg = client.json("GET", "/admin/v1/config", None)?;
            let servers = cfg["mcp"]["servers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            render::mcp_servers_detail(&servers)
        }
        Command::SandboxStatus => registry(
            client,
            "/admin/v1/sandbox-status",
            json,
            render::sandbox_status,
        )?,
        Command::ConfigShow => {
            let v = client.json("GET", "/admin/v1/config", None)?;
            out(&v, render::config)
        }
        Command::QuotasList
        | Command::QuotasGet { .. }
        | Command::QuotasSet { .. }
        | Command::QuotasDelete { .. } => quotas::run(client, &inv.command, json)?,
        Command::Usage {
            of,
            id,
            since,
            until,
        } => {
            // The server checks the times (400 with the accepted forms).
            let query: Vec<(&str, String)> = [("since", since), ("until", until)]
                .into_iter()
                .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
                .collect();
            let path = format!("/admin/v1/{}/{}/usage", of.collection(), encode(id));
            let v = client.json("GET", &client::with_query(&path, &query), None)?;
            out(&v, render::usage)
        }
        Command::Help
        | Command::Version
        | Command::AuthCreateKey { .. }
        | Command::Completions(_) => {
            unreachable!("offline command in execute()")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("baectl-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn address_precedence() {
        let none = env_of(&[]);
        assert_eq!(resolve_addr(None, &none), "127.0.0.1:8081");
        let env = env_of(&[("BAE_ADMIN_ADDR", "127.0.0.2:9")]);
        assert_eq!(resolve_addr(None, &env), "127.0.0.2:9");
        assert_eq!(resolve_addr(Some("127.0.0.3:1"), &env), "127.0.0.3:1");
    }

    #[test]
    fn token_precedence() {
        let d = tmp("token");
        let file_a = d.join("a.pem");
        let file_b = d.join("b.pem");
        let default = d.join("default.pem");
        std::fs::write(&file_a, "  bae_admin_a\n").unwrap();
        std::fs::write(&file_b, "bae_admin_b\n\n").unwrap();
        std::fs::write(&default, "bae_admin_default\n").unwrap();
        let env = env_of(&[
            ("BAE_ADMIN_TOKEN", "env-token"),
            ("BAE_ADMIN_KEY_FILE", file_b.to_str().unwrap()),
        ]);
        let t =
            |cli_t: Option<&str>, cli_f: Option<&Path>, env: &dyn Fn(&str) -> Option<String>| {
                resolve_token(cli_t, cli_f, env, &default).unwrap()
            };
        assert_eq!(t(Some("cli"), Some(&file_a), &env).as_deref(), Some("cli"));
        assert_eq!(t(None, Some(&file_a), &env).as_deref(), Some("env-token"));
        let env_files = env_of(&[("BAE_ADMIN_KEY_FILE", file_b.to_str().unwrap())]);
        assert_eq!(
            t(None, Some(&file_a), &env_files).as_deref(),
            Some("bae_admin_a")
        );
        assert_eq!(t(None, None, &env_files).as_deref(), Some("bae_admin_b"));
        let none = env_of(&[]);
        assert_eq!(t(None, None, &none).as_deref(), Some("bae_admin_default"));
        std::fs::remove_file(&default).unwrap();
        assert_eq!(t(None, None, &none), None);
        // An explicit file that is missing is an error.
        let e = resolve_token(None, Some(&d.join("missing")), &none, &default).unwrap_err();
        assert_eq!(e.kind(), "io");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn merge_keeps_unmentioned_members() {
        let current = json!({"id": "pro_1", "name": "main", "primary_provider": "a",
            "fallback_providers": ["b"], "mcp_servers": ["fs"], "allowed_tools": ["t", 7],
            "available_sandboxes": ["node:22"], "created_at": "c", "updated_at": "u"});
        let merged = merged_profile(
            &current,
            &ProfileUpdate {
                primary_provider: Some("z".into()),
                mcp_servers: Some(vec![]),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"name": "main", "primary_provider": "z", "fallback_providers": ["b"],
                "mcp_servers": [], "allowed_tools": ["t", 7],
                "available_sandboxes": ["node:22"]})
        );
    }

    /// The reference baectl's wording of its three checked cases comes
    /// after our first line, our hints after it.
    #[test]
    fn reference_wording_of_three_api_errors() {
        assert_eq!(
            CtlError::api("profile_in_use", "profile has 1 active client key(s)").message(),
            "baectl: profile has 1 active client key(s)\n\
             Revoke the profile's active keys first.\n\
             hint: revoke the profile's client keys first (baectl list keys; \
             baectl delete key ID), then delete it again\n"
        );
        let m = CtlError::api("profile_unavailable", "no active profile pro_1").message();
        assert!(m.starts_with(
            "baectl: no active profile pro_1 \
             (the referenced profile does not exist or was deleted)\nhint: "
        ));
        let m = CtlError::api("unauthorized", "invalid admin key").message();
        assert!(m.starts_with(
            "baectl: admin API rejected the request (401 unauthorized): invalid admin key\n\
             baectl: no valid admin token was supplied (401 unauthorized)\nhint: "
        ));
        assert_eq!(CtlError::api("unauthorized", "x").exit_code(), 1);
    }

    #[test]
    fn usage_errors_exit_2_on_stderr() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = run(
            &["nope".to_string()],
            &env_of(&[]),
            Path::new("/nonexistent"),
            &mut Io {
                out: &mut out,
                err: &mut err,
            },
        );
        assert_eq!(code, 2);
        assert!(out.is_empty());
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with("error: usage: unknown command \"nope\"\n"),
            "{err}"
        );
    }

    #[test]
    fn connection_errors_exit_1() {
        // A port nobody listens on (bound then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let args: Vec<String> = ["--admin-addr", &format!("127.0.0.1:{port}"), "keys", "list"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let code = run(
            &args,
            &env_of(&[]),
            Path::new("/nonexistent"),
            &mut Io {
                out: &mut out,
                err: &mut err,
            },
        );
        assert_eq!(code, 1);
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with("baectl: could not reach the admin API"),
            "{err}"
        );
    }
}
