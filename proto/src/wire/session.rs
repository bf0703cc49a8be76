//! Client-port session bodies: open/join requests, tool declarations and the
//! REST responses (seed "Sessions"; spec 01 §4, spec 06 §3.1 and §6.2).

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::compaction::CompactionConfig;
use super::problem::{Problem, ProblemType};

/// The reserved, server-synthesized tool name.
pub const REMOTE_SUBAGENT_STATUS: &str = "remote_subagent_status";

/// Detail of the `422 reserved_tool_name` problem.
pub const RESERVED_TOOL_NAME_DETAIL: &str = "remote_subagent_status is reserved";

/// Detail of the join rejection when the body contains `compaction` (C-031).
pub const JOIN_COMPACTION_DETAIL: &str =
    "compaction is a session-level setting fixed at creation and cannot be set on join";

/// Prefix of 400 details for malformed non-compaction fields (C-020).
pub const INVALID_BODY_PREFIX: &str = "invalid request body: ";

/// 400 detail when a JSON body arrives without `Content-Type:
/// application/json` (the raw rejection text of the reference framework).
pub const CONTENT_TYPE_REJECTION: &str = "Expected request with `Content-Type: application/json`";

/// `session is already <state>` (409 `session_closed` on join/DELETE).
pub fn session_closed_detail(state: &str) -> String {
    format!("session is already {state}")
}

/// `tool "<name>" is not in the profile's allowlist` (403 `tool_not_allowed`
/// detail; the `-32015` message is `tool_not_allowed: ` + this).
pub fn tool_not_allowed_detail(name: &str) -> String {
    format!("tool \"{name}\" is not in the profile's allowlist")
}

// ---------------------------------------------------------------------------
// Session state

/// A session's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Accepts joins, registrations and turns.
    Open,
    /// Ended normally.
    Closed,
    /// Ended by a failure, or an audit row.
    Error,
}

impl SessionState {
    /// Every state.
    pub const ALL: [SessionState; 3] = [
        SessionState::Open,
        SessionState::Closed,
        SessionState::Error,
    ];

    /// Wire / column string.
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionState::Open => "open",
            SessionState::Closed => "closed",
            SessionState::Error => "error",
        }
    }

    /// Parse a wire / column string (exact, lower case).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(SessionState::Open),
            "closed" => Some(SessionState::Closed),
            "error" => Some(SessionState::Error),
            _ => None,
        }
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------
// Tool declarations

/// A client (or Auto-mode sandbox) tool declaration:
/// `{"name", "description"?, "input_schema"?}`.
///
/// Serializes to the stored / provider-facing form
/// `{"name","description"|null,"input_schema"|{}}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClientToolDef {
    /// Tool name (required string).
    pub name: String,
    /// Optional description (`null` accepted).
    #[serde(default)]
    pub description: Option<String>,
    /// Optional JSON schema (any JSON; `null` reads as absent).
    #[serde(default)]
    pub input_schema: Option<Value>,
}

/// Auto-mode sandbox tool declarations share the client-tool shape.
pub type SandboxToolDef = ClientToolDef;

impl ClientToolDef {
    /// A declaration with only a name.
    pub fn named(name: impl Into<String>) -> Self {
        ClientToolDef {
            name: name.into(),
            description: None,
            input_schema: None,
        }
    }

    /// The stored form `{"name","description"|null,"input_schema"|{}}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(3);
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert(
            "description".into(),
            self.description.clone().map_or(Value::Null, Value::String),
        );
        m.insert(
            "input_schema".into(),
            self.input_schema
                .clone()
                .unwrap_or_else(|| Value::Object(Map::new())),
        );
        Value::Object(m)
    }
}

impl Serialize for ClientToolDef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("description", &self.description)?;
        match &self.input_schema {
            Some(v) => m.serialize_entry("input_schema", v)?,
            None => m.serialize_entry("input_schema", &Map::new())?,
        }
        m.end()
    }
}

/// How a subagent receives its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptVia {
    /// Raw prompt bytes written to stdin; template must not contain `{prompt}`.
    Stdin,
    /// Shell-quoted prompt substituted for the single `{prompt}`.
    Arg,
}

impl PromptVia {
    /// Wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            PromptVia::Stdin => "stdin",
            PromptVia::Arg => "arg",
        }
    }

    /// Parse a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "stdin" => Some(PromptVia::Stdin),
            "arg" => Some(PromptVia::Arg),
            _ => None,
        }
    }
}

fn default_prompt_via() -> String {
    "stdin".to_owned()
}

/// One configured CLI harness of a remote subagent declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentEntry {
    /// Harness name (e.g. `claude`), unique within its declaration.
    pub harness: String,
    /// Command template with `{model}` / `{prompt}` placeholders.
    pub command_template: String,
    /// `"stdin"` (default) or `"arg"`; kept as a string so an unknown value
    /// is a 422 (not a 400).
    #[serde(default = "default_prompt_via")]
    pub prompt_via: String,
    /// Per-harness timeout; `None` = `BAE_SUBAGENT_TIMEOUT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl SubagentEntry {
    /// The typed `prompt_via`, if valid.
    pub fn prompt_via_kind(&self) -> Option<PromptVia> {
        PromptVia::parse(&self.prompt_via)
    }
}

/// A remote subagent launch declaration (`subagent_tools` entry, spec 06 §6.2).
///
/// Missing required members / wrong JSON types are body errors (400); the
/// semantic rules are checked by [`SubagentToolDef::validate`] (422).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentToolDef {
    /// Tool name advertised to the provider.
    pub name: String,
    /// Optional description.
    #[serde(default)]
    pub description: Option<String>,
    /// Optional input schema.
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// Image the running remote sandbox must use.
    pub image: String,
    /// Configured harnesses.
    pub subagents: Vec<SubagentEntry>,
}

/// 422 `invalid_subagent_tools` details (spec 06 §6.2).
pub mod subagent_detail {
    /// Blank `name`.
    pub const NAME: &str = "tool name must be a non-empty string";
    /// Blank `image` or empty `subagents`.
    pub const IMAGE_AND_SUBAGENTS: &str = "image and non-empty subagents are required";
    /// Blank or duplicate `harness`.
    pub const HARNESS: &str = "harness must be non-empty and unique";
    /// Bad `command_template`.
    pub const TEMPLATE: &str = "invalid command_template placeholders";
    /// Unknown `prompt_via`.
    pub const PROMPT_VIA: &str = "prompt_via must be \"stdin\" or \"arg\"";
    /// `timeout_secs` of 0.
    pub const TIMEOUT: &str = "timeout_secs must be a positive integer";
}

/// Counts of `{model}` and `{prompt}` placeholders in a command template, or
/// `None` when the template breaks the grammar (an unclosed `{`, a stray `}`,
/// or a placeholder name other than `model`/`prompt`).
pub fn template_placeholders(template: &str) -> Option<(usize, usize)> {
    let (mut model, mut prompt) = (0, 0);
    let mut rest = template;
    loop {
        let open = rest.find('{');
        let close = rest.find('}');
        match (open, close) {
            (None, None) => return Some((model, prompt)),
            (None, Some(_)) => return None,
            (Some(o), Some(c)) if c < o => return None,
            (Some(_), None) => return None,
            (Some(o), Some(c)) => {
                match &rest[o + 1..c] {
                    "model" => model += 1,
                    "prompt" => prompt += 1,
                    _ => return None,
                }
                rest = &rest[c + 1..];
            }
        }
    }
}

/// Whether `template` is non-blank with placeholders valid for `prompt_via`
/// (`arg`: exactly one `{prompt}`; `stdin`: none; anything else: invalid).
pub fn template_valid_for(template: &str, prompt_via: &str) -> bool {
    if template.trim().is_empty() {
        return false;
    }
    let Some((_, prompts)) = template_placeholders(template) else {
        return false;
    };
    match PromptVia::parse(prompt_via) {
        Some(PromptVia::Arg) => prompts == 1,
        Some(PromptVia::Stdin) => prompts == 0,
        None => false,
    }
}

/// POSIX single-quote shell escaping: `'` + s (each `'` as `'\''`) + `'`.
pub fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for ch in s.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

/// Interpolate a (valid) command template in one left-to-right pass:
/// `{model}` → shell-quoted `model`, `{prompt}` → shell-quoted `prompt`
/// (left in place when `prompt` is `None`). Substituted text is never
/// re-scanned.
pub fn interpolate_command(template: &str, model: &str, prompt: Option<&str>) -> String {
    let mut out = String::with_capacity(template.len() + model.len() + 8);
    let mut rest = template;
    while let Some(o) = rest.find('{') {
        out.push_str(&rest[..o]);
        let after = &rest[o..];
        if let Some(tail) = after.strip_prefix("{model}") {
            out.push_str(&shell_quote(model));
            rest = tail;
        } else if let (Some(tail), Some(p)) = (after.strip_prefix("{prompt}"), prompt) {
            out.push_str(&shell_quote(p));
            rest = tail;
        } else {
            out.push('{');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

impl SubagentToolDef {
    /// Semantic validation, first failure wins (C-025, C-028, C-029):
    /// blank name → `invalid_subagent_tools`; reserved name →
    /// `reserved_tool_name`; blank image / empty subagents; harnesses
    /// non-blank and unique; templates; `prompt_via`; `timeout_secs > 0`.
    pub fn validate(&self) -> Result<(), Problem> {
        let invalid = |d: &str| Err(Problem::new(ProblemType::InvalidSubagentTools, d));
        if self.name.trim().is_empty() {
            return invalid(subagent_detail::NAME);
        }
        if self.name == REMOTE_SUBAGENT_STATUS {
            return Err(Problem::new(
                ProblemType::ReservedToolName,
                RESERVED_TOOL_NAME_DETAIL,
            ));
        }
        if self.image.trim().is_empty() || self.subagents.is_empty() {
            return invalid(subagent_detail::IMAGE_AND_SUBAGENTS);
        }
        let mut seen: Vec<&str> = Vec::with_capacity(self.subagents.len());
        for e in &self.subagents {
            if e.harness.trim().is_empty() || seen.contains(&e.harness.as_str()) {
                return invalid(subagent_detail::HARNESS);
            }
            seen.push(&e.harness);
        }
        if !self
            .subagents
            .iter()
            .all(|e| template_valid_for(&e.command_template, &e.prompt_via))
        {
            return invalid(subagent_detail::TEMPLATE);
        }
        if !self.subagents.iter().all(|e| e.prompt_via_kind().is_some()) {
            return invalid(subagent_detail::PROMPT_VIA);
        }
        if self.subagents.iter().any(|e| e.timeout_secs == Some(0)) {
            return invalid(subagent_detail::TIMEOUT);
        }
        Ok(())
    }

    /// The entry for `harness`, if configured.
    pub fn entry(&self, harness: &str) -> Option<&SubagentEntry> {
        self.subagents.iter().find(|e| e.harness == harness)
    }

    /// The provider-facing part: name, description, input_schema only.
    pub fn provider_tool(&self) -> ClientToolDef {
        ClientToolDef {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// Validate every declaration in order (first failure wins).
pub fn validate_subagent_tools(decls: &[SubagentToolDef]) -> Result<(), Problem> {
    decls.iter().try_for_each(SubagentToolDef::validate)
}

/// `422 reserved_tool_name` when any `tools` or `sandbox_tools` entry is
/// named `remote_subagent_status` (C-025; spec 01 §4.1 step 6).
pub fn check_reserved_names(
    tools: &[ClientToolDef],
    sandbox_tools: &[ClientToolDef],
) -> Result<(), Problem> {
    if tools
        .iter()
        .chain(sandbox_tools)
        .any(|t| t.name == REMOTE_SUBAGENT_STATUS)
    {
        return Err(Problem::new(
            ProblemType::ReservedToolName,
            RESERVED_TOOL_NAME_DETAIL,
        ));
    }
    Ok(())
}

/// The first tool whose name is not in `allowed` (exact, case-sensitive; an
/// empty allowlist allows nothing).
pub fn first_disallowed<'a>(tools: &'a [ClientToolDef], allowed: &[String]) -> Option<&'a str> {
    tools
        .iter()
        .map(|t| t.name.as_str())
        .find(|n| !allowed.iter().any(|a| a == n))
}

/// `403 tool_not_allowed` for the first tool not in `allowed`.
pub fn check_allowed(tools: &[ClientToolDef], allowed: &[String]) -> Result<(), Problem> {
    match first_disallowed(tools, allowed) {
        Some(n) => Err(Problem::new(
            ProblemType::ToolNotAllowed,
            tool_not_allowed_detail(n),
        )),
        None => Ok(()),
    }
}

/// The `session.open` / `session.join` payload
/// `{client_version, tools, sandbox_tools, subagent_tools}` with names only
/// (C-027).
pub fn declarations_payload(
    client_version: Option<&str>,
    tools: &[ClientToolDef],
    sandbox_tools: &[ClientToolDef],
    subagent_tools: &[SubagentToolDef],
) -> Value {
    let names = |it: &mut dyn Iterator<Item = &String>| {
        Value::Array(it.map(|n| Value::String(n.clone())).collect())
    };
    let mut m = Map::with_capacity(4);
    m.insert(
        "client_version".into(),
        client_version.map_or(Value::Null, |v| Value::String(v.to_owned())),
    );
    m.insert("tools".into(), names(&mut tools.iter().map(|t| &t.name)));
    m.insert(
        "sandbox_tools".into(),
        names(&mut sandbox_tools.iter().map(|t| &t.name)),
    );
    m.insert(
        "subagent_tools".into(),
        names(&mut subagent_tools.iter().map(|t| &t.name)),
    );
    Value::Object(m)
}

// ---------------------------------------------------------------------------
// Open / join bodies

/// `POST /api/v1/sessions` body.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenSessionRequest {
    /// Optional client version.
    pub client_version: Option<String>,
    /// Client-dispatched tools.
    pub tools: Vec<ClientToolDef>,
    /// Auto-mode sandbox tools.
    pub sandbox_tools: Vec<SandboxToolDef>,
    /// Remote subagent declarations.
    pub subagent_tools: Vec<SubagentToolDef>,
    /// Normalized compaction config (absent / `null` → client mode).
    pub compaction: CompactionConfig,
}

/// `POST /api/v1/sessions/{id}/join` body.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinSessionRequest {
    /// Optional client version.
    pub client_version: Option<String>,
    /// Client-dispatched tools.
    pub tools: Vec<ClientToolDef>,
    /// Auto-mode sandbox tools.
    pub sandbox_tools: Vec<SandboxToolDef>,
    /// Remote subagent declarations.
    pub subagent_tools: Vec<SubagentToolDef>,
    /// Whether the body had a `compaction` member at all (even `null`).
    pub compaction_present: bool,
}

#[derive(Deserialize)]
struct DeclBody {
    #[serde(default)]
    client_version: Option<String>,
    #[serde(default)]
    tools: Option<Vec<ClientToolDef>>,
    #[serde(default)]
    sandbox_tools: Option<Vec<SandboxToolDef>>,
    #[serde(default)]
    subagent_tools: Option<Vec<SubagentToolDef>>,
}

fn parse_decls(body: &[u8]) -> Result<(DeclBody, Map<String, Value>), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Value::Object(mut obj) = value else {
        return Err(format!(
            "{INVALID_BODY_PREFIX}{}",
            super::json::invalid_type(&value, "a JSON object")
        ));
    };
    // `compaction` is parsed separately so its errors get their own prefix.
    let compaction = obj.shift_remove("compaction");
    let decls: DeclBody = serde_json::from_value(Value::Object(obj))
        .map_err(|e| format!("{INVALID_BODY_PREFIX}{e}"))?;
    let mut rest = Map::new();
    if let Some(c) = compaction {
        rest.insert("compaction".into(), c);
    }
    Ok((decls, rest))
}

/// Parse a create body. Errors are the full 400 `bad_request` detail:
/// - non-JSON: the raw parser text (C-017);
/// - a malformed non-compaction field: `invalid request body: <serde error>` (C-020);
/// - a malformed `compaction`: `invalid compaction config: <serde error>` (C-019);
/// - auto `size` < 1000: `invalid compaction config: size must be at least 1000 tokens` (C-018).
///
/// Unknown top-level members are ignored (C-030); `null` list members read
/// as `[]`.
pub fn parse_open(body: &[u8]) -> Result<OpenSessionRequest, String> {
    let (d, rest) = parse_decls(body)?;
    let compaction = match rest.get("compaction") {
        None => CompactionConfig::default(),
        Some(v) => CompactionConfig::from_value(v)?,
    };
    compaction.validate()?;
    Ok(OpenSessionRequest {
        client_version: d.client_version,
        tools: d.tools.unwrap_or_default(),
        sandbox_tools: d.sandbox_tools.unwrap_or_default(),
        subagent_tools: d.subagent_tools.unwrap_or_default(),
        compaction,
    })
}

/// Parse a join body (same rules as create, except that `compaction` is not
/// parsed: its mere presence is recorded in `compaction_present`; see
/// [`JoinSessionRequest::check_no_compaction`]).
pub fn parse_join(body: &[u8]) -> Result<JoinSessionRequest, String> {
    let (d, rest) = parse_decls(body)?;
    Ok(JoinSessionRequest {
        client_version: d.client_version,
        tools: d.tools.unwrap_or_default(),
        sandbox_tools: d.sandbox_tools.unwrap_or_default(),
        subagent_tools: d.subagent_tools.unwrap_or_default(),
        compaction_present: rest.contains_key("compaction"),
    })
}

impl OpenSessionRequest {
    /// Reserved-name check over `tools` and `sandbox_tools` (422).
    pub fn check_reserved_names(&self) -> Result<(), Problem> {
        check_reserved_names(&self.tools, &self.sandbox_tools)
    }

    /// Allowlist check over `tools` (403).
    pub fn check_allowed(&self, allowed: &[String]) -> Result<(), Problem> {
        check_allowed(&self.tools, allowed)
    }

    /// `subagent_tools` validation (422).
    pub fn validate_subagent_tools(&self) -> Result<(), Problem> {
        validate_subagent_tools(&self.subagent_tools)
    }

    /// The `session.open` payload.
    pub fn event_payload(&self) -> Value {
        declarations_payload(
            self.client_version.as_deref(),
            &self.tools,
            &self.sandbox_tools,
            &self.subagent_tools,
        )
    }
}

impl JoinSessionRequest {
    /// `Err(JOIN_COMPACTION_DETAIL)` when the body carried `compaction` (C-031).
    pub fn check_no_compaction(&self) -> Result<(), String> {
        if self.compaction_present {
            Err(JOIN_COMPACTION_DETAIL.to_owned())
        } else {
            Ok(())
        }
    }

    /// Reserved-name check over `tools` and `sandbox_tools` (422).
    pub fn check_reserved_names(&self) -> Result<(), Problem> {
        check_reserved_names(&self.tools, &self.sandbox_tools)
    }

    /// Allowlist check over `tools` (403).
    pub fn check_allowed(&self, allowed: &[String]) -> Result<(), Problem> {
        check_allowed(&self.tools, allowed)
    }

    /// `subagent_tools` validation (422).
    pub fn validate_subagent_tools(&self) -> Result<(), Problem> {
        validate_subagent_tools(&self.subagent_tools)
    }

    /// The `session.join` payload.
    pub fn event_payload(&self) -> Value {
        declarations_payload(
            self.client_version.as_deref(),
            &self.tools,
            &self.sandbox_tools,
            &self.subagent_tools,
        )
    }
}

// ---------------------------------------------------------------------------
// Responses

/// `provider` member of the sanitized profile (kind + model; both `null` if
/// the primary does not resolve).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSummary {
    /// Wire kind (`anthropic` | `openai`).
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
}

/// The client-facing profile (spec 05 §1.4): never tokens, base URLs,
/// fallbacks or sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SanitizedProfile {
    /// `pro_…`
    pub id: String,
    /// Profile name.
    pub name: String,
    /// Allowlisted client tool names.
    pub allowed_tools: Vec<String>,
    /// MCP server registry names.
    pub mcp_servers: Vec<String>,
    /// Primary provider kind + model.
    pub provider: ProviderSummary,
}

/// `201` body of create and join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSessionResponse {
    /// `ses_…`
    pub session_id: String,
    /// `bae_ses_…` (shown once).
    pub session_key: String,
    /// Sanitized profile.
    pub profile: SanitizedProfile,
}

/// `200` body of `DELETE /api/v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseResponse {
    /// `ses_…`
    pub session_id: String,
    /// Always `closed` on success.
    pub state: SessionState,
}

/// `200` body of `GET …/participants` (sorted ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participants {
    /// Registered driver client-key ids.
    pub drivers: Vec<String>,
}

/// `200` body of `GET /api/v1/meta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Server version.
    pub version: String,
    /// Always `["v1"]`.
    pub api_versions: Vec<String>,
}

impl Meta {
    /// `{"version": version, "api_versions": ["v1"]}`.
    pub fn new(version: impl Into<String>) -> Self {
        Meta {
            version: version.into(),
            api_versions: vec!["v1".to_owned()],
        }
    }
}
