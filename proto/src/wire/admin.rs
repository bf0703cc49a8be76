//! Admin-port bodies and views (spec 03 §4).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::session::SessionState;

/// `409 duplicate_name` detail.
pub const DUPLICATE_NAME_DETAIL: &str = "a profile with that name already exists";

/// `404` detail for an unknown / deleted profile: `no profile <id>`.
pub fn no_profile_detail(id: &str) -> String {
    format!("no profile {id}")
}

/// `409 profile_in_use` detail.
pub fn profile_in_use_detail(active_keys: u64) -> String {
    format!("profile has {active_keys} active client key(s); revoke them before deleting")
}

/// `422 profile_unavailable` detail on key creation: `no active profile <id>`.
pub fn no_active_profile_detail(id: &str) -> String {
    format!("no active profile {id}")
}

/// `404` detail on key revocation: `no active client key <id>`.
pub fn no_active_key_detail(id: &str) -> String {
    format!("no active client key {id}")
}

/// `404` detail for an unknown session: `no session <id>`.
pub fn no_session_detail(id: &str) -> String {
    format!("no session {id}")
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(format!(
            "invalid request body: {}",
            super::json::invalid_type(&other, "a JSON object")
        )),
    }
}

/// A required non-blank string member: missing / `null` / blank →
/// `<name> must not be empty`; other types → `<name> must be a string`.
fn required_string(obj: &Map<String, Value>, name: &str) -> Result<String, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(format!("{name} must not be empty")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{name} must not be empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{name} must be a string")),
    }
}

/// An optional array of strings (absent / `null` → `[]`).
fn string_list(
    obj: &Map<String, Value>,
    name: &str,
    element_hint: &str,
) -> Result<Vec<String>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(format!("{name}[{i}] must be a string{element_hint}")),
            })
            .collect(),
        Some(_) => Err(format!("{name} must be an array")),
    }
}

const REGISTRY_HINT: &str = " (a bae-config.toml registry name)";

/// Create / replace body of `POST|PUT /admin/v1/profiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileBody {
    /// Non-blank.
    pub name: String,
    /// Non-blank registry name (not checked against the registry here).
    pub primary_provider: String,
    /// Registry names.
    pub fallback_providers: Vec<String>,
    /// MCP registry names.
    pub mcp_servers: Vec<String>,
    /// Allowlisted client tool names.
    pub allowed_tools: Vec<String>,
    /// Remote sandbox images.
    pub available_sandboxes: Vec<String>,
}

impl ProfileBody {
    /// Parse and validate (C-191). Errors are the 400 `bad_request` detail,
    /// checked in order: non-JSON (raw parser text), non-object, `name`,
    /// `primary_provider`, `fallback_providers`, `mcp_servers`,
    /// `available_sandboxes`, `allowed_tools`:
    /// - `name must not be empty` / `name must be a string`
    /// - `primary_provider must not be empty` / `primary_provider must be a string`
    /// - `fallback_providers must be an array`
    /// - `fallback_providers[<i>] must be a string (a bae-config.toml registry name)`
    /// - same two for `mcp_servers` and `available_sandboxes`
    /// - `allowed_tools must be an array`, `allowed_tools[<i>] must be a string`
    ///
    /// Unknown members are ignored; omitted lists are `[]`.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let obj = parse_object(body)?;
        Self::from_map(&obj)
    }

    /// [`ProfileBody::parse`] over an already-parsed object.
    pub fn from_map(obj: &Map<String, Value>) -> Result<Self, String> {
        let name = required_string(obj, "name")?;
        let primary_provider = required_string(obj, "primary_provider")?;
        let fallback_providers = string_list(obj, "fallback_providers", REGISTRY_HINT)?;
        let mcp_servers = string_list(obj, "mcp_servers", REGISTRY_HINT)?;
        let available_sandboxes = string_list(obj, "available_sandboxes", REGISTRY_HINT)?;
        let allowed_tools = string_list(obj, "allowed_tools", "")?;
        Ok(ProfileBody {
            name,
            primary_provider,
            fallback_providers,
            mcp_servers,
            allowed_tools,
            available_sandboxes,
        })
    }
}

/// The profile object (list items, get, put response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileView {
    /// `pro_…`
    pub id: String,
    /// Name.
    pub name: String,
    /// Primary provider registry name.
    pub primary_provider: String,
    /// Fallback registry names.
    pub fallback_providers: Vec<String>,
    /// MCP registry names.
    pub mcp_servers: Vec<String>,
    /// Allowlisted tool names.
    pub allowed_tools: Vec<String>,
    /// Images (always present, `[]` when none).
    pub available_sandboxes: Vec<String>,
    /// Creation time.
    pub created_at: String,
    /// Last replace time.
    pub updated_at: String,
}

/// `201` body of `POST /admin/v1/profiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileCreated {
    /// `pro_…`
    pub id: String,
    /// Name.
    pub name: String,
    /// Creation time.
    pub created_at: String,
}

/// Body of `POST /admin/v1/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateKeyBody {
    /// Label (non-blank).
    pub name: String,
    /// `pro_…` (existence checked by the caller → 422).
    pub profile_id: String,
}

impl CreateKeyBody {
    /// Parse and validate. Errors (400 detail): non-JSON (raw parser text);
    /// non-object; `name must not be empty` (missing/null/blank);
    /// `name must be a string`; `missing field \`profile_id\``;
    /// `profile_id must be a string`.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let obj = parse_object(body)?;
        let name = required_string(&obj, "name")?;
        let profile_id = match obj.get("profile_id") {
            None | Some(Value::Null) => return Err("missing field `profile_id`".to_owned()),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err("profile_id must be a string".to_owned()),
        };
        Ok(CreateKeyBody { name, profile_id })
    }
}

/// `201` body of `POST /admin/v1/keys` (the only time `key` is returned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCreated {
    /// `key_…`
    pub id: String,
    /// Label.
    pub name: String,
    /// `bae_…` plaintext.
    pub key: String,
    /// First 8 characters of `key`.
    pub prefix: String,
    /// `pro_…`
    pub profile_id: String,
    /// Creation time.
    pub created_at: String,
}

/// Item of `GET /admin/v1/keys` (never `key_hash`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyView {
    /// `key_…`
    pub id: String,
    /// Label.
    pub name: String,
    /// Display prefix.
    pub prefix: String,
    /// `pro_…`
    pub profile_id: String,
    /// Creation time.
    pub created_at: String,
    /// `null` until first use.
    pub last_used_at: Option<String>,
}

/// Item of `GET /admin/v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminSessionView {
    /// `ses_…`
    pub id: String,
    /// `pro_…`
    pub profile_id: String,
    /// `open` | `closed` | `error`.
    pub state: SessionState,
    /// From the create body.
    pub client_version: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// Set on the transition out of `open` (`null` on audit rows).
    pub closed_at: Option<String>,
}

/// `invalid state filter "<v>"; expected one of open, closed, error`.
pub fn invalid_state_filter_detail(v: &str) -> String {
    format!("invalid state filter \"{v}\"; expected one of open, closed, error")
}

/// Parse the `?state=` filter: absent or empty → no filter (C-201).
pub fn parse_state_filter(v: Option<&str>) -> Result<Option<SessionState>, String> {
    match v {
        None | Some("") => Ok(None),
        Some(s) => SessionState::parse(s)
            .map(Some)
            .ok_or_else(|| invalid_state_filter_detail(s)),
    }
}

/// `{"items": [...]}` without `next_cursor` (registry/status endpoints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Items<T> {
    /// All items.
    pub items: Vec<T>,
}

/// Item of `GET /admin/v1/mcp-servers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerItem {
    /// Registry name.
    pub name: String,
    /// `stdio` | `http` | `sse`.
    pub transport: String,
}

/// Item of `GET /admin/v1/providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderItem {
    /// Registry name.
    pub name: String,
    /// Wire kind.
    pub provider: String,
    /// Model.
    pub model: String,
    /// Effective base URL.
    pub base_url: String,
}

/// Image provisioning status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageState {
    /// Not yet ensured.
    Pending,
    /// Present locally.
    Available,
    /// Ensure failed.
    Error,
}

/// `{"name","status","detail"?}` (`detail` only on `error`), as used by
/// `session.sandbox.available` and `GET /admin/v1/sandbox-status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageStatus {
    /// Image name.
    pub name: String,
    /// Status.
    pub status: ImageState,
    /// Driver detail, only for `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Item of `GET /admin/v1/sandbox-status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatusItem {
    /// `pro_…`
    pub profile_id: String,
    /// Images sorted by name.
    pub images: Vec<ImageStatus>,
}
