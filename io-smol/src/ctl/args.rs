//! Command-line parsing of `baectl`.
//!
//! Two spellings reach the same commands:
//!
//! - resource first (`baectl profiles list`, `baectl keys revoke ID`), the
//!   form documented in `docs/operations.md`;
//! - verb first (`baectl list profiles`, `baectl create profile NAME
//!   PROVIDER`, `baectl delete key ID`), the form of the reference baectl,
//!   accepted unchanged so existing scripts keep working.
//!
//! Options may appear anywhere after the program name, as `--opt value` or
//! `--opt=value`; `--` ends option parsing. Every usage error is reported
//! with exit code 2.

use std::path::PathBuf;

use super::CtlError;

/// Options that never take a value.
const SWITCHES: &[&str] = &[
    "--json",
    "--help",
    "-h",
    "--version",
    "-V",
    "--force",
    "--clear-fallback-providers",
    "--clear-mcp-servers",
    "--clear-allowed-tools",
    "--clear-available-sandboxes",
];

/// Options accepted by every command.
const GLOBAL_OPTIONS: &[&str] = &["--admin-addr", "--admin-token", "--admin-key-file"];

/// `--limit` / `--cursor` of the paginated lists. Either one fetches a single
/// page instead of following `next_cursor`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

impl Page {
    /// True when the caller asked for one explicit page.
    pub fn single(&self) -> bool {
        self.limit.is_some() || self.cursor.is_some()
    }
}

/// The list members of a profile body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileLists {
    pub fallback_providers: Vec<String>,
    pub mcp_servers: Vec<String>,
    pub allowed_tools: Vec<String>,
    pub available_sandboxes: Vec<String>,
}

/// `profiles update`: `None` keeps the stored value, `Some` replaces it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileUpdate {
    pub name: Option<String>,
    pub primary_provider: Option<String>,
    pub fallback_providers: Option<Vec<String>>,
    pub mcp_servers: Option<Vec<String>>,
    pub allowed_tools: Option<Vec<String>>,
    pub available_sandboxes: Option<Vec<String>>,
}

/// One parsed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    ProfilesList(Page),
    ProfilesGet {
        id: String,
    },
    ProfilesCreate {
        name: String,
        primary_provider: String,
        lists: ProfileLists,
    },
    ProfilesUpdate {
        id: String,
        update: ProfileUpdate,
    },
    ProfilesDelete {
        id: String,
    },
    KeysList(Page),
    KeysCreate {
        name: String,
        profile_id: String,
    },
    KeysRevoke {
        id: String,
    },
    SessionsList {
        page: Page,
        state: Option<String>,
    },
    SessionsEvents {
        id: String,
        page: Page,
    },
    ProvidersList,
    McpServersList,
    ConfigShow,
    SandboxStatus,
    AuthCreateKey {
        name: String,
        out_dir: PathBuf,
        force: bool,
    },
}

impl Command {
    /// Commands that never contact the server.
    pub fn is_offline(&self) -> bool {
        matches!(
            self,
            Command::Help | Command::Version | Command::AuthCreateKey { .. }
        )
    }
}

/// Global settings given on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globals {
    pub admin_addr: Option<String>,
    pub admin_token: Option<String>,
    pub admin_key_file: Option<PathBuf>,
    pub json: bool,
}

/// The result of parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub globals: Globals,
    pub command: Command,
}

/// Raw split of the arguments.
#[derive(Debug, Default)]
struct Raw {
    positionals: Vec<String>,
    /// `(option, value)` in order of appearance.
    options: Vec<(String, String)>,
    switches: Vec<String>,
}

impl Raw {
    fn split(args: &[String]) -> Result<Raw, CtlError> {
        let mut raw = Raw::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                raw.positionals.extend(it.by_ref().cloned());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                raw.positionals.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            if SWITCHES.contains(&name.as_str()) {
                if inline.is_some() {
                    return Err(CtlError::usage(format!("{name} does not take a value")));
                }
                raw.switches.push(name);
                continue;
            }
            if !name.starts_with("--") {
                return Err(CtlError::usage(format!("unknown option \"{arg}\"")));
            }
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| CtlError::usage(format!("{name} requires a value")))?,
            };
            raw.options.push((name, value));
        }
        Ok(raw)
    }

    fn has(&self, switch: &str) -> bool {
        self.switches.iter().any(|s| s == switch)
    }

    /// The last value of a single-valued option.
    fn last(&self, names: &[&str]) -> Option<String> {
        self.options
            .iter()
            .rev()
            .find(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, v)| v.clone())
    }

    /// Every value of a repeatable option, in order.
    fn all(&self, names: &[&str]) -> Vec<String> {
        self.options
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn given(&self, names: &[&str]) -> bool {
        self.options
            .iter()
            .any(|(n, _)| names.contains(&n.as_str()))
    }

    /// Rejects options and switches outside `allowed` (plus the globals).
    fn only(&self, command: &str, allowed: &[&str]) -> Result<(), CtlError> {
        let ok = |n: &str| {
            GLOBAL_OPTIONS.contains(&n)
                || matches!(n, "--json" | "--help" | "-h" | "--version" | "-V")
                || allowed.contains(&n)
        };
        for n in self
            .options
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(self.switches.iter().map(String::as_str))
        {
            if !ok(n) {
                return Err(CtlError::usage(format!(
                    "unknown option \"{n}\" for \"{command}\""
                )));
            }
        }
        Ok(())
    }
}

/// Option names of the repeatable profile lists (first name is canonical).
const FALLBACK: &[&str] = &["--fallback-provider", "--fallback"];
const MCP: &[&str] = &["--mcp-server"];
const TOOL: &[&str] = &["--allowed-tool"];
const SANDBOX: &[&str] = &["--available-sandbox"];
const PROFILE_LIST_OPTIONS: &[&str] = &[
    "--fallback-provider",
    "--fallback",
    "--mcp-server",
    "--allowed-tool",
    "--available-sandbox",
];

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Invocation, CtlError> {
    let raw = Raw::split(args)?;
    let globals = Globals {
        admin_addr: non_empty(&raw, "--admin-addr")?,
        admin_token: non_empty(&raw, "--admin-token")?,
        admin_key_file: non_empty(&raw, "--admin-key-file")?.map(PathBuf::from),
        json: raw.has("--json"),
    };
    let command = if raw.has("--help") || raw.has("-h") {
        Command::Help
    } else if raw.has("--version") || raw.has("-V") {
        Command::Version
    } else {
        command(&raw)?
    };
    Ok(Invocation { globals, command })
}

fn non_empty(raw: &Raw, name: &str) -> Result<Option<String>, CtlError> {
    match raw.last(&[name]) {
        Some(v) if v.trim().is_empty() => Err(CtlError::usage(format!(
            "{name} requires a non-empty value"
        ))),
        other => Ok(other),
    }
}

fn command(raw: &Raw) -> Result<Command, CtlError> {
    let pos: Vec<&str> = raw.positionals.iter().map(String::as_str).collect();
    let Some((&first, rest)) = pos.split_first() else {
        return Err(CtlError::usage("no command given"));
    };
    match first {
        "help" => Ok(Command::Help),
        "version" => Ok(Command::Version),
        "profiles" | "profile" => resource_profiles(raw, rest, false),
        "keys" | "key" => resource_keys(raw, rest),
        "sessions" | "session" => resource_sessions(raw, rest),
        "providers" => simple(raw, rest, "providers", &["list"], Command::ProvidersList),
        "mcp-servers" | "mcp" => {
            simple(raw, rest, "mcp-servers", &["list"], Command::McpServersList)
        }
        "config" => simple(raw, rest, "config", &["show"], Command::ConfigShow),
        "sandbox-status" => simple(raw, rest, "sandbox-status", &[], Command::SandboxStatus),
        "auth" => auth(raw, rest),
        // Reference (verb-first) spellings.
        "list" | "get" | "create" | "update" | "delete" => verb_first(raw, first, rest),
        other => Err(CtlError::usage(format!("unknown command \"{other}\""))),
    }
}

/// `providers list`, `config show`, `sandbox-status`: an optional verb and
/// no other argument.
fn simple(
    raw: &Raw,
    rest: &[&str],
    resource: &str,
    verbs: &[&str],
    cmd: Command,
) -> Result<Command, CtlError> {
    let rest = match rest.split_first() {
        Some((v, tail)) if verbs.contains(v) => tail,
        _ => rest,
    };
    if let Some(extra) = rest.first() {
        return Err(CtlError::usage(format!(
            "unexpected argument \"{extra}\" for \"{resource}\""
        )));
    }
    raw.only(resource, &[])?;
    Ok(cmd)
}

fn verb_first(raw: &Raw, verb: &str, rest: &[&str]) -> Result<Command, CtlError> {
    let Some((&resource, tail)) = rest.split_first() else {
        return Err(CtlError::usage(format!(
            "\"{verb}\" needs a resource (profile, key…)"
        )));
    };
    let mut args = vec![verb];
    args.extend_from_slice(tail);
    match (verb, resource) {
        (_, "profile" | "profiles") => resource_profiles(raw, &args, true),
        ("list" | "create" | "delete", "key" | "keys") => {
            if verb == "delete" {
                args[0] = "revoke";
            }
            resource_keys(raw, &args)
        }
        ("list", "sessions" | "session") => resource_sessions(raw, &args),
        ("list", "providers") => simple(raw, tail, "providers", &[], Command::ProvidersList),
        ("list", "mcp-servers" | "mcp") => {
            simple(raw, tail, "mcp-servers", &[], Command::McpServersList)
        }
        _ => Err(CtlError::usage(format!(
            "unknown command \"{verb} {resource}\""
        ))),
    }
}

fn exactly<'a>(rest: &[&'a str], what: &str, names: &[&str]) -> Result<Vec<&'a str>, CtlError> {
    if rest.len() < names.len() {
        return Err(CtlError::usage(format!(
            "{what} requires {}",
            names[rest.len()..].join(" ")
        )));
    }
    if rest.len() > names.len() {
        return Err(CtlError::usage(format!(
            "unexpected argument \"{}\" for \"{what}\"",
            rest[names.len()]
        )));
    }
    Ok(rest.to_vec())
}

fn page(raw: &Raw) -> Result<Page, CtlError> {
    let limit = match raw.last(&["--limit"]) {
        None => None,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(CtlError::usage(format!(
                    "--limit: \"{v}\" is not a positive whole number"
                )))
            }
        },
    };
    Ok(Page {
        limit,
        cursor: raw.last(&["--cursor"]),
    })
}

/// A value given either as an option or as a positional (not both).
fn flag_or_positional(
    raw: &Raw,
    option: &str,
    positional: Option<&str>,
    what: &str,
) -> Result<String, CtlError> {
    let value = match (raw.last(&[option]), positional) {
        (Some(_), Some(p)) => {
            return Err(CtlError::usage(format!(
                "{what}: give {option} or the positional \"{p}\", not both"
            )))
        }
        (Some(v), None) => v,
        (None, Some(p)) => p.to_string(),
        (None, None) => return Err(CtlError::usage(format!("{what} requires {option}"))),
    };
    if value.trim().is_empty() {
        return Err(CtlError::usage(format!("{option} must not be blank")));
    }
    Ok(value)
}

fn lists(raw: &Raw) -> ProfileLists {
    ProfileLists {
        fallback_providers: raw.all(FALLBACK),
        mcp_servers: raw.all(MCP),
        allowed_tools: raw.all(TOOL),
        available_sandboxes: raw.all(SANDBOX),
    }
}

fn resource_profiles(raw: &Raw, rest: &[&str], verb_first: bool) -> Result<Command, CtlError> {
    let Some((&verb, args)) = rest.split_first() else {
        return Err(CtlError::usage(
            "\"profiles\" needs a subcommand: list, get, create, update or delete",
        ));
    };
    match verb {
        "list" => {
            exactly(args, "profiles list", &[])?;
            raw.only("profiles list", &["--limit", "--cursor"])?;
            Ok(Command::ProfilesList(page(raw)?))
        }
        "get" | "show" => {
            let a = exactly(args, "profiles get", &["ID"])?;
            raw.only("profiles get", &[])?;
            Ok(Command::ProfilesGet {
                id: a[0].to_string(),
            })
        }
        "create" => {
            if args.len() > 2 {
                return Err(CtlError::usage(format!(
                    "unexpected argument \"{}\" for \"profiles create\"",
                    args[2]
                )));
            }
            let mut allowed = vec!["--name", "--primary-provider"];
            allowed.extend_from_slice(PROFILE_LIST_OPTIONS);
            raw.only("profiles create", &allowed)?;
            let name = flag_or_positional(raw, "--name", args.first().copied(), "profiles create")?;
            let primary_provider = flag_or_positional(
                raw,
                "--primary-provider",
                args.get(1).copied(),
                "profiles create",
            )?;
            Ok(Command::ProfilesCreate {
                name,
                primary_provider,
                lists: lists(raw),
            })
        }
        "update" => {
            let Some((&id, args)) = args.split_first() else {
                return Err(CtlError::usage("profiles update requires ID"));
            };
            if args.len() > 1 {
                return Err(CtlError::usage(format!(
                    "unexpected argument \"{}\" for \"profiles update\"",
                    args[1]
                )));
            }
            let mut allowed = vec![
                "--name",
                "--primary-provider",
                "--clear-fallback-providers",
                "--clear-mcp-servers",
                "--clear-allowed-tools",
                "--clear-available-sandboxes",
            ];
            allowed.extend_from_slice(PROFILE_LIST_OPTIONS);
            raw.only("profiles update", &allowed)?;
            let primary_provider = match (raw.last(&["--primary-provider"]), args.first()) {
                (Some(_), Some(p)) => {
                    return Err(CtlError::usage(format!(
                    "profiles update: give --primary-provider or the positional \"{p}\", not both"
                )))
                }
                (Some(v), None) => Some(v),
                (None, Some(p)) => Some(p.to_string()),
                (None, None) if verb_first => {
                    return Err(CtlError::usage(
                        "update profile requires ID PRIMARY_PROVIDER",
                    ))
                }
                (None, None) => None,
            };
            let name = raw.last(&["--name"]);
            for (opt, v) in [("--name", &name), ("--primary-provider", &primary_provider)] {
                if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
                    return Err(CtlError::usage(format!("{opt} must not be blank")));
                }
            }
            // Resource-first: a list changes only when one of its options
            // (or its --clear-…) is given. Verb-first keeps the reference
            // semantics: the three lists the reference knows are replaced
            // (omitted = empty); available_sandboxes, which it never sends,
            // is kept instead of being silently cleared.
            let list = |names: &[&str], clear: &str, reference: bool| {
                if raw.given(names) || raw.has(clear) || (verb_first && reference) {
                    Some(raw.all(names))
                } else {
                    None
                }
            };
            Ok(Command::ProfilesUpdate {
                id: id.to_string(),
                update: ProfileUpdate {
                    name,
                    primary_provider,
                    fallback_providers: list(FALLBACK, "--clear-fallback-providers", true),
                    mcp_servers: list(MCP, "--clear-mcp-servers", true),
                    allowed_tools: list(TOOL, "--clear-allowed-tools", true),
                    available_sandboxes: list(SANDBOX, "--clear-available-sandboxes", false),
                },
            })
        }
        "delete" | "rm" => {
            let a = exactly(args, "profiles delete", &["ID"])?;
            raw.only("profiles delete", &[])?;
            Ok(Command::ProfilesDelete {
                id: a[0].to_string(),
            })
        }
        other => Err(CtlError::usage(format!(
            "unknown profiles subcommand \"{other}\" (expected list, get, create, update or delete)"
        ))),
    }
}

fn resource_keys(raw: &Raw, rest: &[&str]) -> Result<Command, CtlError> {
    let Some((&verb, args)) = rest.split_first() else {
        return Err(CtlError::usage(
            "\"keys\" needs a subcommand: list, create or revoke",
        ));
    };
    match verb {
        "list" => {
            exactly(args, "keys list", &[])?;
            raw.only("keys list", &["--limit", "--cursor"])?;
            Ok(Command::KeysList(page(raw)?))
        }
        "create" => {
            if args.len() > 2 {
                return Err(CtlError::usage(format!(
                    "unexpected argument \"{}\" for \"keys create\"",
                    args[2]
                )));
            }
            raw.only("keys create", &["--name", "--profile-id"])?;
            let name = flag_or_positional(raw, "--name", args.first().copied(), "keys create")?;
            let profile_id =
                flag_or_positional(raw, "--profile-id", args.get(1).copied(), "keys create")?;
            Ok(Command::KeysCreate { name, profile_id })
        }
        "revoke" | "delete" | "rm" => {
            let a = exactly(args, "keys revoke", &["ID"])?;
            raw.only("keys revoke", &[])?;
            Ok(Command::KeysRevoke {
                id: a[0].to_string(),
            })
        }
        other => Err(CtlError::usage(format!(
            "unknown keys subcommand \"{other}\" (expected list, create or revoke)"
        ))),
    }
}

fn resource_sessions(raw: &Raw, rest: &[&str]) -> Result<Command, CtlError> {
    let Some((&verb, args)) = rest.split_first() else {
        return Err(CtlError::usage(
            "\"sessions\" needs a subcommand: list or events",
        ));
    };
    match verb {
        "list" => {
            exactly(args, "sessions list", &[])?;
            raw.only("sessions list", &["--limit", "--cursor", "--state"])?;
            Ok(Command::SessionsList {
                page: page(raw)?,
                state: raw.last(&["--state"]),
            })
        }
        "events" => {
            let a = exactly(args, "sessions events", &["ID"])?;
            raw.only("sessions events", &["--limit", "--cursor"])?;
            Ok(Command::SessionsEvents {
                id: a[0].to_string(),
                page: page(raw)?,
            })
        }
        other => Err(CtlError::usage(format!(
            "unknown sessions subcommand \"{other}\" (expected list or events)"
        ))),
    }
}

fn auth(raw: &Raw, rest: &[&str]) -> Result<Command, CtlError> {
    if rest != ["create", "key"] {
        return Err(CtlError::usage(
            "the only auth command is \"auth create key [--name N] [--out-dir DIR]\"",
        ));
    }
    raw.only("auth create key", &["--name", "--out-dir", "--force"])?;
    let name = raw
        .last(&["--name"])
        .unwrap_or_else(|| "provisioned-admin".to_string());
    if name.trim().is_empty() {
        return Err(CtlError::usage("--name must not be blank"));
    }
    let out_dir = raw.last(&["--out-dir"]).unwrap_or_else(|| ".".to_string());
    if out_dir.is_empty() {
        return Err(CtlError::usage("--out-dir must not be empty"));
    }
    Ok(Command::AuthCreateKey {
        name,
        out_dir: PathBuf::from(out_dir),
        force: raw.has("--force"),
    })
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
