//! Command-line parsing of `baectl`: the command tree is `clap` derives
//! (`cli.rs`, with help, `--version`, suggestions and shell completions);
//! this module turns clap's result into the [`Command`] vocabulary the
//! rest of `baectl` runs, and clap's errors into `baectl`'s usage errors.
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
//! `--opt=value`; `--` ends option parsing; a repeated single-valued option
//! keeps its last value. Every usage error is reported with exit code 2.

use std::path::PathBuf;

use clap::error::{ContextKind, ErrorKind};
use clap::{CommandFactory, Parser};
pub use clap_complete::Shell;

pub use super::cli::QuotaOf;
use super::cli::{self, Cli, Top};
use super::CtlError;

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

/// Where a fork starts and who gets it (the admin fork body's members).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForkOpts {
    pub event_id: Option<String>,
    pub after_turn: Option<u64>,
    pub before_message: Option<String>,
    pub client_key_id: Option<String>,
    pub profile_id: Option<String>,
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
    /// `sessions fork|rewind` (extension; docs/extensions.md).
    SessionsFork {
        id: String,
        rewind: bool,
        at: ForkOpts,
    },
    SessionsExport {
        id: String,
        output: Option<PathBuf>,
    },
    SessionsImport {
        file: String,
        client_key_id: String,
        profile_id: Option<String>,
        keep_id: bool,
    },
    SessionsLineage {
        id: String,
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
    /// `completions SHELL`: the shell's completion script on stdout.
    Completions(Shell),
    /// `quotas list`.
    QuotasList,
    /// `quotas get key|profile ID`.
    QuotasGet {
        of: QuotaOf,
        id: String,
    },
    /// `quotas set key|profile ID [--…]`: the body to `PUT`.
    QuotasSet {
        of: QuotaOf,
        id: String,
        body: serde_json::Value,
    },
    /// `quotas delete key|profile ID`.
    QuotasDelete {
        of: QuotaOf,
        id: String,
    },
    /// `usage session|key|profile ID [--since T] [--until T]`.
    Usage {
        of: UsageOf,
        id: String,
        since: Option<String>,
        until: Option<String>,
    },
}

/// Whose usage `baectl usage` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOf {
    Session,
    Key,
    Profile,
}

impl UsageOf {
    /// The admin API's collection (`/admin/v1/{sessions,keys,profiles}`).
    pub fn collection(self) -> &'static str {
        match self {
            UsageOf::Session => "sessions",
            UsageOf::Key => "keys",
            UsageOf::Profile => "profiles",
        }
    }
}

impl Command {
    /// Commands that never contact the server.
    pub fn is_offline(&self) -> bool {
        matches!(
            self,
            Command::Help
                | Command::Version
                | Command::AuthCreateKey { .. }
                | Command::Completions(_)
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

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Invocation, CtlError> {
    parse_with_text(args).map(|(inv, _)| inv)
}

/// [`parse`], plus clap's rendered text for `Help` (the help of the
/// command asked about) and `--version`.
pub(super) fn parse_with_text(args: &[String]) -> Result<(Invocation, Option<String>), CtlError> {
    let argv = std::iter::once("baectl".to_string()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let command = match e.kind() {
                ErrorKind::DisplayHelp => Command::Help,
                ErrorKind::DisplayVersion => Command::Version,
                _ => return Err(usage_error(&e, args)),
            };
            let inv = Invocation {
                globals: Globals::default(),
                command,
            };
            return Ok((inv, Some(e.render().to_string())));
        }
    };
    let g = cli.globals;
    let globals = Globals {
        admin_addr: g.admin_addr,
        admin_token: g.admin_token,
        admin_key_file: g.admin_key_file.map(PathBuf::from),
        json: g.json,
    };
    let Some(top) = cli.command else {
        return Err(CtlError::usage("no command given"));
    };
    let command = command(top)?;
    Ok((Invocation { globals, command }, None))
}

/// The top-level help (`baectl --help`).
pub fn help_text() -> String {
    Cli::command().render_help().to_string()
}

/// The completion script of `shell` for the whole command tree.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "baectl", &mut out);
    out
}

fn command(top: Top) -> Result<Command, CtlError> {
    use cli::{
        AuthCmd, AuthCreate, CreateWhat, DeleteWhat, GetWhat, KeysCmd, ListWhat, ProfilesCmd,
        SessionsCmd, UpdateWhat, UsageCmd,
    };
    Ok(match top {
        Top::Profiles(p) => match p {
            ProfilesCmd::List(page) => Command::ProfilesList(page.into()),
            ProfilesCmd::Get { id } => Command::ProfilesGet { id },
            ProfilesCmd::Create(c) => profile_create(c)?,
            ProfilesCmd::Update(u) => profile_update(u, false)?,
            ProfilesCmd::Delete { id } => Command::ProfilesDelete { id },
        },
        Top::Keys(k) => match k {
            KeysCmd::List(page) => Command::KeysList(page.into()),
            KeysCmd::Create(c) => key_create(c)?,
            KeysCmd::Revoke { id } => Command::KeysRevoke { id },
        },
        Top::Sessions(s) => match s {
            SessionsCmd::List(l) => Command::SessionsList {
                page: l.page.into(),
                state: l.state,
            },
            SessionsCmd::Events { id, page } => Command::SessionsEvents {
                id,
                page: page.into(),
            },
            SessionsCmd::Fork(f) => fork(f, false),
            SessionsCmd::Rewind(f) => {
                if f.after_turn.is_none() && f.before_message.is_none() {
                    return Err(CtlError::usage(
                        "sessions rewind needs --after-turn or --before-message",
                    ));
                }
                fork(f, true)
            }
            SessionsCmd::Export { id, output } => Command::SessionsExport {
                id,
                output: output.map(PathBuf::from),
            },
            SessionsCmd::Import {
                file,
                client_key_id,
                profile_id,
                keep_id,
            } => Command::SessionsImport {
                file,
                client_key_id,
                profile_id,
                keep_id,
            },
            SessionsCmd::Lineage { id } => Command::SessionsLineage { id },
        },
        Top::Providers { .. } => Command::ProvidersList,
        Top::McpServers { .. } => Command::McpServersList,
        Top::Config { .. } => Command::ConfigShow,
        Top::SandboxStatus => Command::SandboxStatus,
        Top::Quotas(q) => {
            use cli::QuotasCmd;
            let target = |t: cli::QuotaTarget| {
                if t.id.trim().is_empty() {
                    return Err(CtlError::usage("quotas: ID must not be blank"));
                }
                Ok((t.of, t.id))
            };
            match q {
                QuotasCmd::List => Command::QuotasList,
                QuotasCmd::Get(t) => {
                    let (of, id) = target(t)?;
                    Command::QuotasGet { of, id }
                }
                QuotasCmd::Delete(t) => {
                    let (of, id) = target(t)?;
                    Command::QuotasDelete { of, id }
                }
                QuotasCmd::Set(a) => {
                    let (of, id) = target(a.target)?;
                    // The server checks the values (400 naming the field).
                    let body = serde_json::json!({
                        "max_open_sessions": a.max_open_sessions,
                        "requests_per_second": a.requests_per_second,
                        "burst": a.burst,
                        "token_budget": a.token_budget,
                        "window": a.window,
                    });
                    Command::QuotasSet { of, id, body }
                }
            }
        }
        Top::Usage(u) => {
            let (of, a) = match u {
                UsageCmd::Session(a) => (UsageOf::Session, a),
                UsageCmd::Key(a) => (UsageOf::Key, a),
                UsageCmd::Profile(a) => (UsageOf::Profile, a),
            };
            if a.id.trim().is_empty() {
                return Err(CtlError::usage("usage: ID must not be blank"));
            }
            Command::Usage {
                of,
                id: a.id,
                since: a.since,
                until: a.until,
            }
        }
        Top::Auth(AuthCmd::Create(AuthCreate::Key(a))) => {
            if a.name.trim().is_empty() {
                return Err(CtlError::usage("--name must not be blank"));
            }
            if a.out_dir.is_empty() {
                return Err(CtlError::usage("--out-dir must not be empty"));
            }
            Command::AuthCreateKey {
                name: a.name,
                out_dir: PathBuf::from(a.out_dir),
                force: a.force,
            }
        }
        Top::Completions { shell } => Command::Completions(shell),
        Top::Version => Command::Version,
        Top::List(l) => match l {
            ListWhat::Profiles(page) => Command::ProfilesList(page.into()),
            ListWhat::Keys(page) => Command::KeysList(page.into()),
            ListWhat::Sessions(l) => Command::SessionsList {
                page: l.page.into(),
                state: l.state,
            },
            ListWhat::Providers => Command::ProvidersList,
            ListWhat::McpServers => Command::McpServersList,
        },
        Top::Get(GetWhat::Profile { id }) => Command::ProfilesGet { id },
        Top::Create(CreateWhat::Profile(c)) => profile_create(c)?,
        Top::Create(CreateWhat::Key(c)) => key_create(c)?,
        Top::Update(UpdateWhat::Profile(u)) => profile_update(u, true)?,
        Top::Delete(DeleteWhat::Profile { id }) => Command::ProfilesDelete { id },
        Top::Delete(DeleteWhat::Key { id }) => Command::KeysRevoke { id },
    })
}

fn fork(f: cli::SessionsFork, rewind: bool) -> Command {
    Command::SessionsFork {
        id: f.id,
        rewind,
        at: ForkOpts {
            event_id: f.event_id,
            after_turn: f.after_turn,
            before_message: f.before_message,
            client_key_id: f.client_key_id,
            profile_id: f.profile_id,
        },
    }
}

/// A value given either as an option or as a positional (not both).
fn flag_or_positional(
    flag: Option<String>,
    option: &str,
    positional: Option<String>,
    what: &str,
) -> Result<String, CtlError> {
    let value = match (flag, positional) {
        (Some(_), Some(p)) => {
            return Err(CtlError::usage(format!(
                "{what}: give {option} or the positional \"{p}\", not both"
            )))
        }
        (Some(v), None) | (None, Some(v)) => v,
        (None, None) => return Err(CtlError::usage(format!("{what} requires {option}"))),
    };
    if value.trim().is_empty() {
        return Err(CtlError::usage(format!("{option} must not be blank")));
    }
    Ok(value)
}

fn profile_create(c: cli::ProfileCreate) -> Result<Command, CtlError> {
    let what = "profiles create";
    Ok(Command::ProfilesCreate {
        name: flag_or_positional(c.name, "--name", c.name_pos, what)?,
        primary_provider: flag_or_positional(
            c.primary_provider,
            "--primary-provider",
            c.primary_provider_pos,
            what,
        )?,
        lists: ProfileLists {
            fallback_providers: c.lists.fallback_providers,
            mcp_servers: c.lists.mcp_servers,
            allowed_tools: c.lists.allowed_tools,
            available_sandboxes: c.lists.available_sandboxes,
        },
    })
}

fn key_create(c: cli::KeyCreate) -> Result<Command, CtlError> {
    let what = "keys create";
    Ok(Command::KeysCreate {
        name: flag_or_positional(c.name, "--name", c.name_pos, what)?,
        profile_id: flag_or_positional(c.profile_id, "--profile-id", c.profile_id_pos, what)?,
    })
}

fn profile_update(u: cli::ProfileUpdateArgs, verb_first: bool) -> Result<Command, CtlError> {
    let primary_provider = match (u.primary_provider, u.primary_provider_pos) {
        (Some(_), Some(p)) => {
            return Err(CtlError::usage(format!(
                "profiles update: give --primary-provider or the positional \"{p}\", not both"
            )))
        }
        (Some(v), None) | (None, Some(v)) => Some(v),
        (None, None) if verb_first => {
            return Err(CtlError::usage(
                "update profile requires ID PRIMARY_PROVIDER",
            ))
        }
        (None, None) => None,
    };
    for (opt, v) in [
        ("--name", &u.name),
        ("--primary-provider", &primary_provider),
    ] {
        if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(CtlError::usage(format!("{opt} must not be blank")));
        }
    }
    // Resource-first: a list changes only when one of its options (or its
    // --clear-…) is given. Verb-first keeps the reference semantics: the
    // three lists the reference knows are replaced (omitted = empty);
    // available_sandboxes, which it never sends, is kept instead of being
    // silently cleared.
    let list = |values: Vec<String>, clear: bool, reference: bool| {
        (!values.is_empty() || clear || (verb_first && reference)).then_some(values)
    };
    let l = u.lists;
    Ok(Command::ProfilesUpdate {
        id: u.id,
        update: ProfileUpdate {
            name: u.name,
            primary_provider,
            fallback_providers: list(l.fallback_providers, u.clear_fallback_providers, true),
            mcp_servers: list(l.mcp_servers, u.clear_mcp_servers, true),
            allowed_tools: list(l.allowed_tools, u.clear_allowed_tools, true),
            available_sandboxes: list(l.available_sandboxes, u.clear_available_sandboxes, false),
        },
    })
}

/// clap's error as `baectl`'s usage error: the detail names the command
/// the way the help does (`unknown option "--bogus" for "keys list"`), and
/// clap's suggestion, if any, leads the hint.
fn usage_error(e: &clap::Error, args: &[String]) -> CtlError {
    let ctx = |k: ContextKind| e.get(k).map(ToString::to_string).unwrap_or_default();
    // The usage line names the command as the help does; a missing
    // subcommand's error is that command's help, usage line included.
    let usage = match e.get(ContextKind::Usage) {
        Some(u) => u.to_string(),
        None => e.render().to_string(),
    };
    let path = command_path(&usage);
    // `--admin-token <TOKEN>` → `--admin-token`.
    let invalid = ctx(ContextKind::InvalidArg);
    let flag = invalid.split([' ', '=']).next().unwrap_or("").to_string();
    let detail = match e.kind() {
        ErrorKind::InvalidSubcommand => {
            let bad = ctx(ContextKind::InvalidSubcommand);
            if path.is_empty() {
                format!("unknown command \"{bad}\"")
            } else {
                let expected: Vec<String> = subcommands(&path)
                    .iter()
                    .map(|c| format!("{path} {c}"))
                    .collect();
                format!(
                    "unknown command \"{path} {bad}\" (expected {})",
                    or_list(&expected)
                )
            }
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            format!(
                "\"{path}\" needs a subcommand: {}",
                or_list(&subcommands(&path))
            )
        }
        ErrorKind::UnknownArgument if !invalid.starts_with('-') => {
            format!("unexpected argument \"{invalid}\" for \"{path}\"")
        }
        // An unknown option ending the line reads as one missing its
        // value, as it always has (the option may be one of another
        // command's that takes a value).
        ErrorKind::UnknownArgument
            if invalid.starts_with("--")
                && !invalid.contains('=')
                && args.last() == Some(&invalid) =>
        {
            format!("{invalid} requires a value")
        }
        ErrorKind::UnknownArgument => format!("unknown option \"{flag}\" for \"{path}\""),
        ErrorKind::MissingRequiredArgument => {
            let missing: Vec<String> = match e.get(ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::Strings(v)) => v
                    .iter()
                    .map(|a| a.trim_matches(['<', '>']).to_string())
                    .collect(),
                _ => vec![invalid.trim_matches(['<', '>']).to_string()],
            };
            format!("{path} requires {}", missing.join(" "))
        }
        ErrorKind::InvalidValue if ctx(ContextKind::InvalidValue).is_empty() => {
            format!("{flag} requires a value")
        }
        ErrorKind::InvalidValue => format!(
            "invalid value \"{}\" for {} (expected {})",
            ctx(ContextKind::InvalidValue),
            invalid.trim_matches(['<', '>']),
            match e.get(ContextKind::ValidValue) {
                Some(clap::error::ContextValue::Strings(v)) => or_list(v),
                other => other.map(ToString::to_string).unwrap_or_default(),
            }
        ),
        ErrorKind::TooManyValues | ErrorKind::NoEquals => {
            format!("{flag} does not take a value")
        }
        // Our value parsers word the whole message.
        ErrorKind::ValueValidation => match std::error::Error::source(e) {
            Some(src) => src.to_string(),
            None => first_line(e),
        },
        _ => first_line(e),
    };
    let mut err = CtlError::usage(detail);
    let suggested = [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(|k| match e.get(k) {
        Some(clap::error::ContextValue::Strings(v)) if !v.is_empty() => Some(v.clone()),
        Some(clap::error::ContextValue::String(v)) => Some(vec![v.clone()]),
        _ => None,
    });
    if let Some(s) = suggested {
        let quoted: Vec<String> = s.iter().map(|x| format!("\"{x}\"")).collect();
        err = err.with_hint(format!(
            "did you mean {}? run \"baectl --help\" for the command list",
            or_list(&quoted)
        ));
    }
    err
}

/// `Usage: baectl keys list [OPTIONS]` → `keys list`.
fn command_path(usage: &str) -> String {
    usage
        .split_whitespace()
        .skip_while(|w| *w != "baectl")
        .skip(1)
        .take_while(|w| !w.starts_with(['[', '<', '-']))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The names of the subcommands of the command at `path`.
fn subcommands(path: &str) -> Vec<String> {
    let root = Cli::command();
    let mut cmd = &root;
    for name in path.split_whitespace() {
        match cmd.find_subcommand(name) {
            Some(c) => cmd = c,
            None => break,
        }
    }
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name().to_string())
        .collect()
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or("");
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
