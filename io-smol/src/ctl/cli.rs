//! `baectl`'s command tree as `clap` derives. `args.rs` turns a parsed
//! [`Cli`] into the [`super::args::Command`] that runs.

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

/// One page of the overview after `baectl --help`: every command with its
/// arguments, which clap's own list (one line per command group) leaves to
/// `baectl help COMMAND`.
const OVERVIEW: &str = "\
Commands in full (baectl help COMMAND for one of them):
  profiles list [--limit N] [--cursor C]
  profiles get ID
  profiles create --name NAME --primary-provider NAME
                  [--fallback-provider NAME]... [--mcp-server NAME]...
                  [--allowed-tool NAME]... [--available-sandbox IMAGE]...
  profiles update ID [--name NAME] [--primary-provider NAME]
                  [--fallback-provider NAME]... [--mcp-server NAME]...
                  [--allowed-tool NAME]... [--available-sandbox IMAGE]...
                  [--clear-fallback-providers] [--clear-mcp-servers]
                  [--clear-allowed-tools] [--clear-available-sandboxes]
  profiles delete ID
  keys list [--limit N] [--cursor C]
  keys create --name NAME --profile-id ID      (prints the key once)
  keys revoke ID
  sessions list [--state open|closed|error] [--limit N] [--cursor C]
  sessions events ID [--limit N] [--cursor C]
  sessions fork ID [--event-id E | --after-turn N | --before-message E]
                  [--client-key-id K] [--profile-id P]   (prints the key once)
  sessions rewind ID (--after-turn N | --before-message E) [...]
  sessions export ID [-o FILE]
  sessions import FILE|- --client-key-id K [--profile-id P] [--keep-id]
  sessions lineage ID
  providers list
  mcp-servers list            (alias: mcp list)
  config show
  sandbox-status
  usage session|key|profile ID [--since T] [--until T]
  quotas list
  quotas get key|profile ID
  quotas set key|profile ID [--max-open-sessions N] [--requests-per-second N]
                  [--burst N] [--token-budget N --window 1h|1d|...]
  quotas delete key|profile ID
  auth create key [--name NAME] [--out-dir DIR] [--force]    (offline)
  completions bash|zsh|fish                                  (offline)

Reference spellings are accepted too: list profiles|keys, get profile ID,
create profile NAME PROVIDER [--fallback N]..., update profile ID PROVIDER
[--name N] ..., delete profile ID, create key NAME PROFILE_ID, delete key ID.

Results go to stdout; errors go to stderr. Exit 1 on runtime or API
errors, 2 on usage errors.";

/// baectl — admin CLI for baesrv (admin API /admin/v1)
#[derive(Parser, Debug)]
#[command(
    name = "baectl",
    version,
    args_override_self = true,
    after_help = OVERVIEW,
    disable_help_subcommand = false
)]
pub(super) struct Cli {
    #[command(flatten)]
    pub globals: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<Top>,
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Global options")]
pub(super) struct GlobalArgs {
    /// Admin API address [default: $BAE_ADMIN_ADDR, else 127.0.0.1:8081]
    #[arg(long, global = true, value_name = "HOST:PORT|URL",
          value_parser = |v: &str| non_empty("--admin-addr", v))]
    pub admin_addr: Option<String>,
    /// Admin key, sent as a bearer token [default: $BAE_ADMIN_TOKEN]
    #[arg(long, global = true, value_name = "TOKEN",
          value_parser = |v: &str| non_empty("--admin-token", v))]
    pub admin_token: Option<String>,
    /// File holding the admin key [default: $BAE_ADMIN_KEY_FILE, else
    /// /var/lib/bae/admin-key.pem]
    #[arg(long, global = true, value_name = "PATH",
          value_parser = |v: &str| non_empty("--admin-key-file", v))]
    pub admin_key_file: Option<String>,
    /// Print the server's JSON instead of a table
    #[arg(long, global = true)]
    pub json: bool,
}

fn non_empty(flag: &str, v: &str) -> Result<String, String> {
    if v.trim().is_empty() {
        Err(format!("{flag} requires a non-empty value"))
    } else {
        Ok(v.to_string())
    }
}

fn positive(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("--limit: \"{v}\" is not a positive whole number")),
    }
}

/// A quota's number (the server checks its range).
fn whole(opt: &str, v: &str) -> Result<u64, String> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| format!("{opt}: \"{v}\" is not a whole number"))
}

#[derive(Subcommand, Debug)]
pub(super) enum Top {
    /// Profiles: list, get, create, update, delete
    #[command(subcommand, visible_alias = "profile")]
    Profiles(ProfilesCmd),
    /// Client keys: list, create, revoke
    #[command(subcommand, visible_alias = "key")]
    Keys(KeysCmd),
    /// Sessions: list, events, fork, rewind, export, import, lineage
    #[command(subcommand, visible_alias = "session")]
    Sessions(SessionsCmd),
    /// The provider registry
    Providers {
        #[command(subcommand)]
        verb: Option<ListVerb>,
    },
    /// The MCP server registry
    #[command(name = "mcp-servers", visible_alias = "mcp")]
    McpServers {
        #[command(subcommand)]
        verb: Option<ListVerb>,
    },
    /// The loaded configuration, secrets redacted
    Config {
        #[command(subcommand)]
        verb: Option<ShowVerb>,
    },
    /// Sandbox image status per profile
    #[command(name = "sandbox-status")]
    SandboxStatus,
    /// Provider tokens (and cost, where priced) of a session, key or profile
    #[command(subcommand)]
    Usage(UsageCmd),
    /// Quotas of client keys and profiles: list, get, set, delete
    #[command(subcommand, visible_alias = "quota")]
    Quotas(QuotasCmd),
    /// Offline admin-key provisioning
    #[command(subcommand)]
    Auth(AuthCmd),
    /// Print a shell completion script (offline)
    Completions {
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
    /// Print the version
    Version,
    /// Reference spelling: list profiles|keys|sessions|providers|mcp-servers
    #[command(subcommand)]
    List(ListWhat),
    /// Reference spelling: get profile ID
    #[command(subcommand)]
    Get(GetWhat),
    /// Reference spelling: create profile NAME PROVIDER | create key NAME PROFILE_ID
    #[command(subcommand)]
    Create(CreateWhat),
    /// Reference spelling: update profile ID PROVIDER (replaces the lists)
    #[command(subcommand)]
    Update(UpdateWhat),
    /// Reference spelling: delete profile ID | delete key ID
    #[command(subcommand)]
    Delete(DeleteWhat),
}

#[derive(Subcommand, Debug)]
pub(super) enum ListVerb {
    /// List the entries
    List,
}

#[derive(Subcommand, Debug)]
pub(super) enum ShowVerb {
    /// Show it
    Show,
}

#[derive(Args, Debug)]
pub(super) struct PageArgs {
    /// Fetch one page of at most N items instead of every page
    #[arg(long, value_name = "N", value_parser = positive)]
    pub limit: Option<u32>,
    /// Fetch the page at this cursor instead of every page
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

impl From<PageArgs> for super::args::Page {
    fn from(p: PageArgs) -> Self {
        super::args::Page {
            limit: p.limit,
            cursor: p.cursor,
        }
    }
}

#[derive(Subcommand, Debug)]
pub(super) enum ProfilesCmd {
    /// List profiles
    List(PageArgs),
    /// Show one profile
    #[command(visible_alias = "show")]
    Get { id: String },
    /// Create a profile
    Create(ProfileCreate),
    /// Change the members given, keep the others
    Update(ProfileUpdateArgs),
    /// Delete a profile (its client keys must be revoked first)
    #[command(visible_alias = "rm")]
    Delete { id: String },
}

/// The repeatable list options of a profile body.
#[derive(Args, Debug)]
pub(super) struct ListArgs {
    /// A fallback provider, in order (repeat for more)
    #[arg(
        long = "fallback-provider",
        visible_alias = "fallback",
        value_name = "NAME"
    )]
    pub fallback_providers: Vec<String>,
    /// An MCP server of the registry (repeat for more)
    #[arg(long = "mcp-server", value_name = "NAME")]
    pub mcp_servers: Vec<String>,
    /// A tool the profile may use (repeat for more)
    #[arg(long = "allowed-tool", value_name = "NAME")]
    pub allowed_tools: Vec<String>,
    /// A sandbox image the profile may start (repeat for more)
    #[arg(long = "available-sandbox", value_name = "IMAGE")]
    pub available_sandboxes: Vec<String>,
}

#[derive(Args, Debug)]
pub(super) struct ProfileCreate {
    /// Reference spelling of --name
    #[arg(value_name = "NAME")]
    pub name_pos: Option<String>,
    /// Reference spelling of --primary-provider
    #[arg(value_name = "PRIMARY_PROVIDER")]
    pub primary_provider_pos: Option<String>,
    /// Profile name (unique)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The provider tried first
    #[arg(long, value_name = "NAME")]
    pub primary_provider: Option<String>,
    #[command(flatten)]
    pub lists: ListArgs,
}

#[derive(Args, Debug)]
pub(super) struct ProfileUpdateArgs {
    pub id: String,
    /// Reference spelling of --primary-provider
    #[arg(value_name = "PRIMARY_PROVIDER")]
    pub primary_provider_pos: Option<String>,
    /// New profile name
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// New primary provider
    #[arg(long, value_name = "NAME")]
    pub primary_provider: Option<String>,
    #[command(flatten)]
    pub lists: ListArgs,
    /// Empty the fallback providers
    #[arg(long)]
    pub clear_fallback_providers: bool,
    /// Empty the MCP servers
    #[arg(long)]
    pub clear_mcp_servers: bool,
    /// Empty the allowed tools
    #[arg(long)]
    pub clear_allowed_tools: bool,
    /// Empty the available sandboxes
    #[arg(long)]
    pub clear_available_sandboxes: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum KeysCmd {
    /// List active client keys
    List(PageArgs),
    /// Create a client key (prints the key once)
    Create(KeyCreate),
    /// Revoke a client key (closes the sessions left without one)
    #[command(visible_aliases = ["delete", "rm"])]
    Revoke { id: String },
}

#[derive(Args, Debug)]
pub(super) struct KeyCreate {
    /// Reference spelling of --name
    #[arg(value_name = "NAME")]
    pub name_pos: Option<String>,
    /// Reference spelling of --profile-id
    #[arg(value_name = "PROFILE_ID")]
    pub profile_id_pos: Option<String>,
    /// Key name
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The profile the key uses
    #[arg(long, value_name = "ID")]
    pub profile_id: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum SessionsCmd {
    /// List sessions
    List(SessionsList),
    /// A session's event log, oldest first
    Events {
        id: String,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Fork a session at a complete point (default: after its last event)
    Fork(SessionsFork),
    /// Fork a session as it was after turn N or before a user message
    Rewind(SessionsFork),
    /// Stream a session's export document (JSON Lines) to a file or stdout
    Export {
        id: String,
        /// Write the document here instead of stdout
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<String>,
    },
    /// Create a session from an export document ("-": stdin)
    Import {
        #[arg(value_name = "FILE")]
        file: String,
        /// The client key that gets the session
        #[arg(long, value_name = "ID")]
        client_key_id: String,
        /// Its profile (default: the key's)
        #[arg(long, value_name = "ID")]
        profile_id: Option<String>,
        /// Keep the source session's id (refused when it is in use)
        #[arg(long)]
        keep_id: bool,
    },
    /// A session's origin, fork ancestors and forks
    Lineage { id: String },
}

#[derive(Args, Debug)]
pub(super) struct SessionsFork {
    pub id: String,
    /// Fork after this event
    #[arg(long, value_name = "EVENT_ID", conflicts_with_all = ["after_turn", "before_message"])]
    pub event_id: Option<String>,
    /// Fork after turn N ended (0: before the first turn)
    #[arg(long, value_name = "N", conflicts_with = "before_message")]
    pub after_turn: Option<u64>,
    /// Fork right before this user message (its payload is printed, to edit
    /// and send again)
    #[arg(long, value_name = "EVENT_ID")]
    pub before_message: Option<String>,
    /// The client key that gets the fork (default: the session's creator)
    #[arg(long, value_name = "ID")]
    pub client_key_id: Option<String>,
    /// The fork's profile (default: the session's)
    #[arg(long, value_name = "ID")]
    pub profile_id: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct SessionsList {
    /// Only sessions in this state (open, closed or error)
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    #[command(flatten)]
    pub page: PageArgs,
}

/// `usage session|key|profile ID`: `GET /admin/v1/{sessions,keys,profiles}/ID/usage`.
#[derive(Subcommand, Debug)]
pub(super) enum UsageCmd {
    /// A session's usage, by provider entry and by turn
    #[command(visible_alias = "sessions")]
    Session(UsageArgs),
    /// A client key's usage over its sessions, by provider entry
    #[command(visible_alias = "keys")]
    Key(UsageArgs),
    /// A profile's usage over its sessions, by provider entry
    #[command(visible_alias = "profiles")]
    Profile(UsageArgs),
}

#[derive(Args, Debug)]
pub(super) struct UsageArgs {
    pub id: String,
    /// Count from this UTC time on (2026-01-02, 2026-01-02T03:04:05Z)
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Count up to, not including, this UTC time
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

/// `quotas …`: `/admin/v1/quotas` and `/admin/v1/{keys,profiles}/ID/quota`.
#[derive(Subcommand, Debug)]
pub(super) enum QuotasCmd {
    /// Every quota with its consumption, and the refusals so far
    List,
    /// One quota with its consumption
    #[command(visible_alias = "show")]
    Get(QuotaTarget),
    /// Set (replace) a quota; options left out are not limited
    Set(QuotaSet),
    /// Remove a quota
    Delete(QuotaTarget),
}

/// Whose quota.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaOf {
    Key,
    Profile,
}

#[derive(Args, Debug)]
pub(super) struct QuotaTarget {
    #[arg(value_name = "key|profile")]
    pub of: QuotaOf,
    pub id: String,
}

#[derive(Args, Debug)]
pub(super) struct QuotaSet {
    #[command(flatten)]
    pub target: QuotaTarget,
    /// Sessions open at once
    #[arg(long, value_name = "N", value_parser = |v: &str| whole("--max-open-sessions", v))]
    pub max_open_sessions: Option<u64>,
    /// Requests per second (a token bucket)
    #[arg(long, value_name = "N", value_parser = |v: &str| whole("--requests-per-second", v))]
    pub requests_per_second: Option<u64>,
    /// Requests a full bucket holds (default: the rate)
    #[arg(long, value_name = "N", value_parser = |v: &str| whole("--burst", v))]
    pub burst: Option<u64>,
    /// Provider tokens (input, output, cache) per window
    #[arg(long, value_name = "N", value_parser = |v: &str| whole("--token-budget", v))]
    pub token_budget: Option<u64>,
    /// The budget's window: 30m, 1h, 1d… (UTC-aligned)
    #[arg(long, value_name = "W")]
    pub window: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum AuthCmd {
    /// Create admin key material
    #[command(subcommand)]
    Create(AuthCreate),
}

#[derive(Subcommand, Debug)]
pub(super) enum AuthCreate {
    /// Write DIR/admin-key.pem (plaintext) and DIR/admin-key-hash.pem (for
    /// BAE_ADMIN_KEY_HASH_FILE), both mode 0600
    Key(AuthKey),
}

#[derive(Args, Debug)]
pub(super) struct AuthKey {
    /// Name of the admin key
    #[arg(long, value_name = "NAME", default_value = "provisioned-admin")]
    pub name: String,
    /// Directory to write into (created if missing)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out_dir: String,
    /// Overwrite existing files
    #[arg(long)]
    pub force: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum ListWhat {
    #[command(visible_alias = "profile")]
    Profiles(PageArgs),
    #[command(visible_alias = "key")]
    Keys(PageArgs),
    #[command(visible_alias = "session")]
    Sessions(SessionsList),
    Providers,
    #[command(name = "mcp-servers", visible_alias = "mcp")]
    McpServers,
}

#[derive(Subcommand, Debug)]
pub(super) enum GetWhat {
    #[command(visible_alias = "profiles")]
    Profile { id: String },
}

#[derive(Subcommand, Debug)]
pub(super) enum CreateWhat {
    #[command(visible_alias = "profiles")]
    Profile(ProfileCreate),
    #[command(visible_alias = "keys")]
    Key(KeyCreate),
}

#[derive(Subcommand, Debug)]
pub(super) enum UpdateWhat {
    #[command(visible_alias = "profiles")]
    Profile(ProfileUpdateArgs),
}

#[derive(Subcommand, Debug)]
pub(super) enum DeleteWhat {
    #[command(visible_alias = "profiles")]
    Profile { id: String },
    #[command(visible_alias = "keys")]
    Key { id: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks over the whole tree.
    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }
}
