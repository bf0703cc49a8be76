//! `bae-config.toml` loading and validation (spec 04 §3).
//!
//! Loading runs in three phases whose order decides which error wins
//! (spec 04 §5): (1) TOML syntax and schema — strict key sets, types and enum
//! values — reported as `invalid config file "<path>": <detail>`;
//! (2) `[telemetry]` value validation, only when `enabled = true`;
//! (3) MCP then provider registry validation (blank/duplicate names, fields
//! required by the transport).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::subst::{substitute, SubstError};
use super::ConfigError;

/// Default provider `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default `[telemetry] service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "baesrv";
/// The closed set of metric instrument names (spec 04 §7.2), usable in
/// `[telemetry.metrics] disabled`.
pub const METRIC_NAMES: [&str; 15] = [
    "bae.sessions.open",
    "bae.sessions.total",
    "bae.events.total",
    "bae.profiles.count",
    "bae.keys.count",
    "bae.mcp.sessions.live",
    "bae.turns.pending",
    "bae.sandboxes.live",
    "bae.subagents.active",
    "bae.drivers.registered",
    "bae.turns.completed",
    "bae.provider.requests",
    "bae.provider.latency",
    "bae.tool.calls",
    "bae.tool.latency",
];

/// Parsed `bae-config.toml`. `Default` is the empty configuration (no MCP
/// servers, no providers, telemetry off). Entries keep file order; the
/// admin views sort by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FileConfig {
    pub mcp: McpConfig,
    pub providers: Vec<ProviderEntry>,
    pub telemetry: Telemetry,
}

impl FileConfig {
    /// Looks up a provider entry by exact name.
    pub fn provider(&self, name: &str) -> Option<&ProviderEntry> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// Looks up an MCP server by exact name.
    pub fn mcp_server(&self, name: &str) -> Option<&McpServer> {
        self.mcp.servers.iter().find(|s| s.name == name)
    }
}

/// `[mcp]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpConfig {
    pub servers: Vec<McpServer>,
}

/// MCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Sse,
    Http,
}

impl Transport {
    /// `stdio` / `sse` / `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Sse => "sse",
            Transport::Http => "http",
        }
    }
}

/// One `[[mcp.servers]]` entry. `command`, `args` and header values are raw
/// `${VAR}` templates (resolve with [`super::substitute`] right before
/// connecting). `Debug` redacts header values.
#[derive(Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub transport: Transport,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Extension `reconnect = true`: a broken server is reconnected on the
    /// next call (bounded backoff) instead of staying broken for the
    /// session. Default false, as the spec says.
    pub reconnect: bool,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("url", &self.url)
            .field("headers", &RedactedMap(&self.headers))
            .field("reconnect", &self.reconnect)
            .finish()
    }
}

/// Provider wire format (`provider = "anthropic" | "openai"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Anthropic,
    Openai,
}

impl ProviderKind {
    /// `anthropic` / `openai`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
        }
    }

    /// Bare host used when `base_url` is absent.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Openai => "https://api.openai.com",
        }
    }
}

/// One `[[providers.entries]]` entry. `auth_token` is the raw template
/// (resolve right before each HTTP attempt). `Debug` redacts `auth_token`.
#[derive(Clone, PartialEq)]
pub struct ProviderEntry {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub model: String,
    pub auth_token: String,
    /// Default [`DEFAULT_MAX_TOKENS`].
    pub max_tokens: u32,
}

impl ProviderEntry {
    /// `base_url` verbatim when set, otherwise the kind default. This is the
    /// value shown by the admin API.
    pub fn effective_base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or_else(|| self.kind.default_base_url())
    }

    /// [`Self::effective_base_url`] with one trailing `/` trimmed: the prefix
    /// to which the versioned path (`/v1/messages`, …) is appended.
    pub fn api_base_url(&self) -> &str {
        let b = self.effective_base_url();
        b.strip_suffix('/').unwrap_or(b)
    }
}

impl fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("auth_token", &super::REDACTED)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// `[telemetry]`, `[telemetry.traces]`, `[telemetry.metrics]`. `Default` is
/// the disabled configuration. `Debug` redacts `otlp_headers` values.
#[derive(Clone, PartialEq)]
pub struct Telemetry {
    pub enabled: bool,
    pub otlp_endpoint: Option<String>,
    /// Raw templates; see [`resolve_otlp_headers`].
    pub otlp_headers: BTreeMap<String, String>,
    /// Default 1.0.
    pub sample_ratio: f64,
    /// Default [`DEFAULT_SERVICE_NAME`].
    pub service_name: String,
    /// `[telemetry.traces] enabled`, default true.
    pub traces_enabled: bool,
    /// `[telemetry.metrics] enabled`, default true.
    pub metrics_enabled: bool,
    /// `[telemetry.metrics] disabled`, default empty.
    pub metrics_disabled: Vec<String>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            enabled: false,
            otlp_endpoint: None,
            otlp_headers: BTreeMap::new(),
            sample_ratio: 1.0,
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            traces_enabled: true,
            metrics_enabled: true,
            metrics_disabled: Vec::new(),
        }
    }
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.enabled)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("otlp_headers", &RedactedMap(&self.otlp_headers))
            .field("sample_ratio", &self.sample_ratio)
            .field("service_name", &self.service_name)
            .field("traces_enabled", &self.traces_enabled)
            .field("metrics_enabled", &self.metrics_enabled)
            .field("metrics_disabled", &self.metrics_disabled)
            .finish()
    }
}

struct RedactedMap<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, super::REDACTED)))
            .finish()
    }
}

/// Loads `bae-config.toml` from `path` (already resolved `--config` >
/// `BAE_CONFIG`). `None` or a nonexistent file → empty configuration. A file
/// that exists but cannot be read → [`ConfigError::CannotReadFile`]; then
/// see [`parse_file_str`].
pub fn load_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileConfig::default()),
        Err(e) => {
            return Err(ConfigError::CannotReadFile {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })
        }
    };
    let text = String::from_utf8(bytes).map_err(|e| ConfigError::InvalidFile {
        path: path.to_path_buf(),
        detail: format!("not valid UTF-8 ({e})"),
    })?;
    parse_file_str(&text, path)
}

/// Parses and validates config text; `path` is used only in messages.
pub fn parse_file_str(text: &str, path: &Path) -> Result<FileConfig, ConfigError> {
    let cfg = parse_document(text).map_err(|detail| ConfigError::InvalidFile {
        path: PathBuf::from(path),
        detail,
    })?;
    validate_telemetry(&cfg.telemetry)?;
    validate_registries(&cfg)?;
    Ok(cfg)
}

/// Resolves `[telemetry] otlp_headers` once at exporter initialisation
/// (spec 04 §3.3/§3.4). Returns no headers when telemetry is disabled.
/// Errors (unset variable, unterminated token, invalid header name, invalid
/// resolved value) never include the resolved value.
pub fn resolve_otlp_headers(
    telemetry: &Telemetry,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    if !telemetry.enabled {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(telemetry.otlp_headers.len());
    for (name, template) in &telemetry.otlp_headers {
        check_header_name(name)?;
        let value = substitute(template, &get).map_err(|e| {
            ConfigError::Telemetry(match e {
                SubstError::Unset(var) => format!(
                    "[telemetry] otlp_headers \"{name}\": environment variable {var} is not set"
                ),
                SubstError::Unterminated => {
                    format!("[telemetry] otlp_headers \"{name}\": unterminated ${{...}} token")
                }
            })
        })?;
        if !value
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
            return Err(ConfigError::Telemetry(format!(
                "[telemetry] otlp_headers \"{name}\" resolves to an invalid header value \
                 (only printable ASCII is allowed)"
            )));
        }
        out.push((name.clone(), value));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Phase 1: syntax and schema.

fn parse_document(text: &str) -> Result<FileConfig, String> {
    let root: Table = text.parse().map_err(|e: toml::de::Error| {
        let msg = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        match e.span() {
            Some(span) => {
                let (line, col) = line_col(text, span.start);
                format!("TOML parse error at line {line}, column {col}: {msg}")
            }
            None => format!("TOML parse error: {msg}"),
        }
    })?;

    let mut cfg = FileConfig::default();
    // Unknown top-level keys are ignored (forward compatibility).
    if let Some(v) = root.get("mcp") {
        let t = as_table(v, "mcp")?;
        check_keys(t, &["servers"], "[mcp]")?;
        if let Some(servers) = t.get("servers") {
            for (i, item) in as_array(servers, "mcp.servers")?.iter().enumerate() {
                let at = format!("mcp.servers[{i}]");
                cfg.mcp
                    .servers
                    .push(parse_mcp_server(as_table(item, &at)?, &at)?);
            }
        }
    }
    if let Some(v) = root.get("providers") {
        let t = as_table(v, "providers")?;
        check_keys(t, &["entries"], "[providers]")?;
        if let Some(entries) = t.get("entries") {
            for (i, item) in as_array(entries, "providers.entries")?.iter().enumerate() {
                let at = format!("providers.entries[{i}]");
                cfg.providers
                    .push(parse_provider(as_table(item, &at)?, &at)?);
            }
        }
    }
    if let Some(v) = root.get("telemetry") {
        cfg.telemetry = parse_telemetry(as_table(v, "telemetry")?)?;
    }
    Ok(cfg)
}

fn parse_mcp_server(t: &Table, at: &str) -> Result<McpServer, String> {
    check_keys(
        t,
        &[
            "name",
            "transport",
            "command",
            "args",
            "url",
            "headers",
            "reconnect",
        ],
        at,
    )?;
    let name = req_str(t, "name", at)?;
    let transport = match req_str(t, "transport", at)?.as_str() {
        "stdio" => Transport::Stdio,
        "sse" => Transport::Sse,
        "http" => Transport::Http,
        other => {
            return Err(format!(
                "{at}.transport: unsupported transport \"{other}\" \
                 (expected \"stdio\", \"sse\" or \"http\")"
            ))
        }
    };
    Ok(McpServer {
        name,
        transport,
        command: opt_str(t, "command", at)?,
        args: opt_str_array(t, "args", at)?,
        url: opt_str(t, "url", at)?,
        headers: opt_str_map(t, "headers", at)?,
        reconnect: opt_bool(t, "reconnect", at)?.unwrap_or(false),
    })
}

fn parse_provider(t: &Table, at: &str) -> Result<ProviderEntry, String> {
    // Unknown keys inside entries are ignored by contract.
    let name = req_str(t, "name", at)?;
    let kind = match req_str(t, "provider", at)?.as_str() {
        "anthropic" => ProviderKind::Anthropic,
        "openai" => ProviderKind::Openai,
        other => {
            return Err(format!(
                "{at}.provider: unknown provider kind \"{other}\" \
                 (expected \"anthropic\" or \"openai\")"
            ))
        }
    };
    let max_tokens = match t.get("max_tokens") {
        None => DEFAULT_MAX_TOKENS,
        Some(Value::Integer(n)) => u32::try_from(*n).map_err(|_| {
            format!("{at}.max_tokens: {n} is out of range for an unsigned 32-bit integer")
        })?,
        Some(v) => return Err(type_error(at, "max_tokens", "an integer", v)),
    };
    Ok(ProviderEntry {
        name,
        kind,
        base_url: opt_str(t, "base_url", at)?,
        model: req_str(t, "model", at)?,
        auth_token: req_str(t, "auth_token", at)?,
        max_tokens,
    })
}

fn parse_telemetry(t: &Table) -> Result<Telemetry, String> {
    let at = "telemetry";
    check_keys(
        t,
        &[
            "enabled",
            "otlp_endpoint",
            "otlp_headers",
            "sample_ratio",
            "service_name",
            "traces",
            "metrics",
        ],
        "[telemetry]",
    )?;
    let mut tel = Telemetry::default();
    if let Some(b) = opt_bool(t, "enabled", at)? {
        tel.enabled = b;
    }
    tel.otlp_endpoint = opt_str(t, "otlp_endpoint", at)?;
    tel.otlp_headers = opt_str_map(t, "otlp_headers", at)?;
    match t.get("sample_ratio") {
        None => {}
        Some(Value::Float(f)) => tel.sample_ratio = *f,
        Some(Value::Integer(n)) => tel.sample_ratio = *n as f64,
        Some(v) => return Err(type_error(at, "sample_ratio", "a float", v)),
    }
    if let Some(s) = opt_str(t, "service_name", at)? {
        tel.service_name = s;
    }
    if let Some(v) = t.get("traces") {
        let tt = as_table(v, "telemetry.traces")?;
        check_keys(tt, &["enabled"], "[telemetry.traces]")?;
        if let Some(b) = opt_bool(tt, "enabled", "telemetry.traces")? {
            tel.traces_enabled = b;
        }
    }
    if let Some(v) = t.get("metrics") {
        let mt = as_table(v, "telemetry.metrics")?;
        check_keys(mt, &["enabled", "disabled"], "[telemetry.metrics]")?;
        if let Some(b) = opt_bool(mt, "enabled", "telemetry.metrics")? {
            tel.metrics_enabled = b;
        }
        tel.metrics_disabled = opt_str_array(mt, "disabled", "telemetry.metrics")?;
    }
    Ok(tel)
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit_once('\n')
        .map_or(before, |(_, l)| l)
        .chars()
        .count()
        + 1;
    (line, col)
}

fn check_keys(t: &Table, allowed: &[&str], at: &str) -> Result<(), String> {
    match t.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown key \"{k}\" in {at}")),
        None => Ok(()),
    }
}

fn type_error(at: &str, key: &str, expected: &str, found: &Value) -> String {
    format!(
        "{at}.{key}: expected {expected}, found {}",
        found.type_str()
    )
}

fn as_table<'a>(v: &'a Value, at: &str) -> Result<&'a Table, String> {
    v.as_table()
        .ok_or_else(|| format!("{at}: expected a table, found {}", v.type_str()))
}

fn as_array<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
    v.as_array()
        .ok_or_else(|| format!("{at}: expected an array of tables, found {}", v.type_str()))
}

fn opt_str(t: &Table, key: &str, at: &str) -> Result<Option<String>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(type_error(at, key, "a string", v)),
    }
}

fn req_str(t: &Table, key: &str, at: &str) -> Result<String, String> {
    opt_str(t, key, at)?.ok_or_else(|| format!("{at}: missing required field \"{key}\""))
}

fn opt_bool(t: &Table, key: &str, at: &str) -> Result<Option<bool>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(Value::Boolean(b)) => Ok(Some(*b)),
        Some(v) => Err(type_error(at, key, "a boolean", v)),
    }
}

fn opt_str_array(t: &Table, key: &str, at: &str) -> Result<Vec<String>, String> {
    match t.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "{at}.{key}[{i}]: expected a string, found {}",
                    other.type_str()
                )),
            })
            .collect(),
        Some(v) => Err(type_error(at, key, "an array of strings", v)),
    }
}

fn opt_str_map(t: &Table, key: &str, at: &str) -> Result<BTreeMap<String, String>, String> {
    match t.get(key) {
        None => Ok(BTreeMap::new()),
        Some(Value::Table(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(format!(
                    "{at}.{key}.{k}: expected a string, found {}",
                    other.type_str()
                )),
            })
            .collect(),
        Some(v) => Err(type_error(at, key, "a table of strings", v)),
    }
}

// ---------------------------------------------------------------------------
// Phase 2: telemetry values (only when enabled).

fn validate_telemetry(tel: &Telemetry) -> Result<(), ConfigError> {
    if !tel.enabled {
        return Ok(());
    }
    let endpoint = tel.otlp_endpoint.as_deref().unwrap_or("");
    if endpoint.trim().is_empty() {
        return Err(ConfigError::Telemetry(
            "[telemetry] enabled = true requires a non-empty otlp_endpoint".into(),
        ));
    }
    if !is_http_url(endpoint) {
        return Err(ConfigError::Telemetry(format!(
            "[telemetry] otlp_endpoint \"{endpoint}\" must be a valid http:// or https:// URL"
        )));
    }
    let r = tel.sample_ratio;
    if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
        return Err(ConfigError::Telemetry(format!(
            "[telemetry] sample_ratio {r} must be between 0.0 and 1.0"
        )));
    }
    if let Some(bad) = tel
        .metrics_disabled
        .iter()
        .find(|n| !METRIC_NAMES.contains(&n.as_str()))
    {
        return Err(ConfigError::Telemetry(format!(
            "[telemetry.metrics] disabled contains unknown metric \"{bad}\""
        )));
    }
    for name in tel.otlp_headers.keys() {
        check_header_name(name)?;
    }
    Ok(())
}

fn check_header_name(name: &str) -> Result<(), ConfigError> {
    const EXTRA: &[u8] = b"!#$%&'*+-.^_`|~";
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || EXTRA.contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Telemetry(format!(
            "[telemetry] otlp_headers \"{name}\" is not a valid header name"
        )))
    }
}

/// `http://` or `https://` (scheme case-insensitive), no whitespace or
/// control characters, non-empty host, optional numeric port.
fn is_http_url(v: &str) -> bool {
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let rest = match v.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            rest
        }
        _ => return false,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = if let Some(stripped) = host_port.strip_prefix('[') {
        match stripped.split_once(']') {
            Some((h, after)) => match after {
                "" => (h, None),
                p => match p.strip_prefix(':') {
                    Some(p) => (h, Some(p)),
                    None => return false,
                },
            },
            None => return false,
        }
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    let port_ok = match port {
        None => true,
        Some(p) => {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
        }
    };
    !host.is_empty() && port_ok
}

// ---------------------------------------------------------------------------
// Phase 3: registries.

fn validate_registries(cfg: &FileConfig) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for s in &cfg.mcp.servers {
        if s.name.trim().is_empty() {
            return Err(ConfigError::BlankMcpServerName);
        }
        if !seen.insert(s.name.as_str()) {
            return Err(ConfigError::DuplicateMcpServer {
                name: s.name.clone(),
            });
        }
        let (field, value) = match s.transport {
            Transport::Stdio => ("command", &s.command),
            Transport::Sse | Transport::Http => ("url", &s.url),
        };
        if !matches!(value.as_deref(), Some(v) if !v.trim().is_empty()) {
            return Err(ConfigError::McpMissingField {
                name: s.name.clone(),
                transport: s.transport,
                field,
            });
        }
    }
    let mut seen = std::collections::HashSet::new();
    for p in &cfg.providers {
        if p.name.trim().is_empty() {
            return Err(ConfigError::BlankProviderName);
        }
        if !seen.insert(p.name.as_str()) {
            return Err(ConfigError::DuplicateProvider {
                name: p.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        parse_file_str(text, Path::new("/etc/bae-config.toml"))
    }

    fn invalid_detail(text: &str) -> String {
        match parse(text).unwrap_err() {
            ConfigError::InvalidFile { path, detail } => {
                assert_eq!(path, PathBuf::from("/etc/bae-config.toml"));
                detail
            }
            other => panic!("expected InvalidFile, got {other:?}"),
        }
    }

    const FULL: &str = r#"
[mcp]
[[mcp.servers]]
name      = "filesystem"
transport = "stdio"
command   = "npx"
args      = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]

[[mcp.servers]]
name      = "remote-search"
transport = "http"
url       = "https://mcp.example.com/mcp"
headers   = { Authorization = "Bearer ${SEARCH_MCP_TOKEN}" }

[providers]
[[providers.entries]]
name       = "anthropic-sonnet"
provider   = "anthropic"
model      = "claude-sonnet-4-6"
auth_token = "${ANTHROPIC_API_KEY}"

[[providers.entries]]
name       = "local"
provider   = "openai"
base_url   = "http://localhost:11434/"
model      = "llama3"
auth_token = "literal-token"
max_tokens = 1024
future_key = "ignored"

[telemetry]
enabled = true
otlp_endpoint = "http://collector:4317"
otlp_headers = { "x-api-key" = "${OTEL_KEY}" }
sample_ratio = 0.25
service_name = "bae-prod"
[telemetry.traces]
enabled = false
[telemetry.metrics]
enabled = true
disabled = ["bae.events.total", "bae.tool.latency"]
"#;

    #[test]
    fn parses_full_file() {
        let cfg = parse(FULL).unwrap();
        assert_eq!(cfg.mcp.servers.len(), 2);
        let fs = cfg.mcp_server("filesystem").unwrap();
        assert_eq!(fs.transport, Transport::Stdio);
        assert_eq!(fs.command.as_deref(), Some("npx"));
        assert_eq!(fs.args.len(), 3);
        assert!(fs.headers.is_empty());
        let rs = cfg.mcp_server("remote-search").unwrap();
        assert_eq!(rs.transport, Transport::Http);
        assert_eq!(rs.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(rs.headers["Authorization"], "Bearer ${SEARCH_MCP_TOKEN}");

        let a = cfg.provider("anthropic-sonnet").unwrap();
        assert_eq!(a.kind, ProviderKind::Anthropic);
        assert_eq!(a.base_url, None);
        assert_eq!(a.effective_base_url(), "https://api.anthropic.com");
        assert_eq!(a.api_base_url(), "https://api.anthropic.com");
        assert_eq!(a.auth_token, "${ANTHROPIC_API_KEY}");
        assert_eq!(a.max_tokens, 4096);
        let l = cfg.provider("local").unwrap();
        assert_eq!(l.kind, ProviderKind::Openai);
        assert_eq!(l.effective_base_url(), "http://localhost:11434/");
        assert_eq!(l.api_base_url(), "http://localhost:11434");
        assert_eq!(l.max_tokens, 1024);

        let t = &cfg.telemetry;
        assert!(t.enabled);
        assert_eq!(t.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(t.sample_ratio, 0.25);
        assert_eq!(t.service_name, "bae-prod");
        assert!(!t.traces_enabled);
        assert!(t.metrics_enabled);
        assert_eq!(t.metrics_disabled, ["bae.events.total", "bae.tool.latency"]);
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let cfg = parse(FULL).unwrap();
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("literal-token"), "{dbg}");
        assert!(!dbg.contains("SEARCH_MCP_TOKEN"), "{dbg}");
        assert!(!dbg.contains("OTEL_KEY"), "{dbg}");
        assert!(dbg.contains("Authorization"));
    }

    #[test]
    fn empty_inputs_are_empty_config() {
        assert_eq!(parse("").unwrap(), FileConfig::default());
        assert_eq!(parse("# only a comment\n").unwrap(), FileConfig::default());
        assert_eq!(
            parse("[mcp]\n[providers]\n").unwrap(),
            FileConfig::default()
        );
        let t = Telemetry::default();
        assert!(!t.enabled);
        assert_eq!(t.sample_ratio, 1.0);
        assert_eq!(t.service_name, "baesrv");
        assert!(t.traces_enabled && t.metrics_enabled);
    }

    #[test]
    fn missing_file_is_empty_c219() {
        assert_eq!(load_file(None).unwrap(), FileConfig::default());
        let p = std::env::temp_dir().join(format!("bae-no-such-{}.toml", std::process::id()));
        assert_eq!(load_file(Some(&p)).unwrap(), FileConfig::default());
    }

    #[test]
    fn unreadable_and_invalid_files() {
        let dir = std::env::temp_dir().join(format!("bae-cfg-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A directory exists but cannot be read as a file.
        let err = load_file(Some(&dir)).unwrap_err();
        assert!(matches!(err, ConfigError::CannotReadFile { .. }), "{err:?}");
        assert!(err
            .to_string()
            .starts_with(&format!("cannot read config file \"{}\": ", dir.display())));
        assert_eq!(err.exit_code(), 2);

        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[mcp\n").unwrap();
        let err = load_file(Some(&bad)).unwrap_err();
        assert!(err.to_string().starts_with(&format!(
            "invalid config file \"{}\": TOML parse error at line 1",
            bad.display()
        )));
        assert!(!err.to_string().contains('\n'));

        let bin = dir.join("bin.toml");
        std::fs::write(&bin, b"x = \"\xff\"").unwrap();
        assert!(matches!(
            load_file(Some(&bin)).unwrap_err(),
            ConfigError::InvalidFile { .. }
        ));

        let good = dir.join("good.toml");
        std::fs::write(&good, FULL).unwrap();
        assert_eq!(load_file(Some(&good)).unwrap().providers.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mcp_duplicates_and_missing_command_c220() {
        let err = parse(
            r#"
[[mcp.servers]]
name = "a"
transport = "stdio"
command = "x"
[[mcp.servers]]
name = "a"
transport = "sse"
url = "http://h/sse"
"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "duplicate MCP server name \"a\" in [mcp.servers]"
        );
        assert_eq!(err.exit_code(), 2);

        let err = parse("[[mcp.servers]]\nname = \"fs\"\ntransport = \"stdio\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCP server \"fs\" uses transport \"stdio\" but is missing required field \"command\""
        );
        let err =
            parse("[[mcp.servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"  \"\n")
                .unwrap_err();
        assert!(matches!(
            err,
            ConfigError::McpMissingField {
                field: "command",
                ..
            }
        ));
        for t in ["sse", "http"] {
            let err = parse(&format!(
                "[[mcp.servers]]\nname = \"r\"\ntransport = \"{t}\"\nurl = \"\"\n"
            ))
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "MCP server \"r\" uses transport \"{t}\" but is missing required field \"url\""
                )
            );
        }
        let err = parse("[[mcp.servers]]\nname = \" \"\ntransport = \"stdio\"\ncommand = \"x\"\n")
            .unwrap_err();
        assert_eq!(err, ConfigError::BlankMcpServerName);
    }

    #[test]
    fn mcp_schema_errors() {
        let d = invalid_detail("[[mcp.servers]]\nname = \"x\"\ntransport = \"ws\"\n");
        assert_eq!(
            d,
            "mcp.servers[0].transport: unsupported transport \"ws\" (expected \"stdio\", \"sse\" or \"http\")"
        );
        let d = invalid_detail("[[mcp.servers]]\nname = \"x\"\n");
        assert_eq!(d, "mcp.servers[0]: missing required field \"transport\"");
        let d = invalid_detail(
            "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\nargs = [1]\n",
        );
        assert_eq!(
            d,
            "mcp.servers[0].args[0]: expected a string, found integer"
        );
        let d = invalid_detail(
            "[[mcp.servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"u\"\nheaders = { A = 1 }\n",
        );
        assert_eq!(
            d,
            "mcp.servers[0].headers.A: expected a string, found integer"
        );
        let d = invalid_detail("[mcp]\nservers = 3\n");
        assert_eq!(d, "mcp.servers: expected an array of tables, found integer");
        let d = invalid_detail("mcp = \"x\"\n");
        assert_eq!(d, "mcp: expected a table, found string");
    }

    #[test]
    fn unknown_keys_c224() {
        // Unknown top-level tables and keys are ignored.
        let cfg = parse("future = 1\n[sandbox]\nimage = \"x\"\n[compaction.x]\ny = 2\n").unwrap();
        assert_eq!(cfg, FileConfig::default());
        // Unknown key in an mcp.servers entry is an error.
        let d = invalid_detail(
            "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\nenv = {}\n",
        );
        assert_eq!(d, "unknown key \"env\" in mcp.servers[0]");
        assert_eq!(
            invalid_detail("[mcp]\nextra = true\n"),
            "unknown key \"extra\" in [mcp]"
        );
        assert_eq!(
            invalid_detail("[providers]\nextra = true\n"),
            "unknown key \"extra\" in [providers]"
        );
        assert_eq!(
            invalid_detail("[telemetry]\nendpoint = \"x\"\n"),
            "unknown key \"endpoint\" in [telemetry]"
        );
        // Unknown telemetry keys fail even when telemetry is disabled.
        assert_eq!(
            invalid_detail("[telemetry]\nenabled = false\n[telemetry.traces]\nratio = 1\n"),
            "unknown key \"ratio\" in [telemetry.traces]"
        );
        assert_eq!(
            invalid_detail("[telemetry.metrics]\nexclude = []\n"),
            "unknown key \"exclude\" in [telemetry.metrics]"
        );
        // Unknown keys inside providers.entries are ignored.
        let cfg = parse(
            "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\ntemperature = 0.5\n",
        )
        .unwrap();
        assert_eq!(cfg.providers.len(), 1);
    }

    #[test]
    fn provider_errors_c221() {
        let d = invalid_detail(
            "[[providers.entries]]\nname = \"p\"\nprovider = \"gemini\"\nmodel = \"m\"\nauth_token = \"t\"\n",
        );
        assert_eq!(
            d,
            "providers.entries[0].provider: unknown provider kind \"gemini\" (expected \"anthropic\" or \"openai\")"
        );
        let entry = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
        let err = parse(&format!("{entry}{entry}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "duplicate provider name \"p\" in [providers.entries]"
        );
        assert_eq!(err.exit_code(), 2);
        let d = invalid_detail(
            "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nauth_token = \"t\"\n",
        );
        assert_eq!(d, "providers.entries[0]: missing required field \"model\"");
        let d = invalid_detail(
            "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\n",
        );
        assert_eq!(
            d,
            "providers.entries[0]: missing required field \"auth_token\""
        );
        let d = invalid_detail(&format!("{entry}max_tokens = -1\n"));
        assert_eq!(
            d,
            "providers.entries[0].max_tokens: -1 is out of range for an unsigned 32-bit integer"
        );
        assert!(parse(&format!("{entry}max_tokens = 4294967296\n")).is_err());
        assert_eq!(
            parse(&format!("{entry}max_tokens = 4294967295\n"))
                .unwrap()
                .providers[0]
                .max_tokens,
            u32::MAX
        );
        let d = invalid_detail(&format!("{entry}max_tokens = \"10\"\n"));
        assert_eq!(
            d,
            "providers.entries[0].max_tokens: expected an integer, found string"
        );
        let err = parse(
            "[[providers.entries]]\nname = \"\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n",
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::BlankProviderName);
    }

    #[test]
    fn mcp_and_provider_may_share_a_name_c222() {
        let cfg = parse(
            r#"
[[mcp.servers]]
name = "shared"
transport = "stdio"
command = "x"
[[providers.entries]]
name = "shared"
provider = "anthropic"
model = "m"
auth_token = "t"
"#,
        )
        .unwrap();
        assert!(cfg.mcp_server("shared").is_some());
        assert!(cfg.provider("shared").is_some());
    }

    #[test]
    fn telemetry_validation_c223() {
        let err = parse("[telemetry]\nenabled = true\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "[telemetry] enabled = true requires a non-empty otlp_endpoint"
        );
        assert_eq!(err.exit_code(), 2);
        let err = parse("[telemetry]\nenabled = true\notlp_endpoint = \"\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "[telemetry] enabled = true requires a non-empty otlp_endpoint"
        );
        for bad in [
            "collector:4317",
            "grpc://c:4317",
            "http://",
            "http://:4317",
            "http://h:port",
            "http://h:99999",
            "http://a b",
        ] {
            let err = parse(&format!(
                "[telemetry]\nenabled = true\notlp_endpoint = \"{bad}\"\n"
            ))
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "[telemetry] otlp_endpoint \"{bad}\" must be a valid http:// or https:// URL"
                )
            );
        }
        for good in [
            "http://c:4317",
            "HTTPS://otel.example.com",
            "https://u:p@[::1]:4317/v1",
            "http://10.0.0.1",
        ] {
            parse(&format!(
                "[telemetry]\nenabled = true\notlp_endpoint = \"{good}\"\n"
            ))
            .unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let base = "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n";
        let err = parse(&format!("{base}sample_ratio = 1.5\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[telemetry] sample_ratio 1.5 must be between 0.0 and 1.0"
        );
        assert!(parse(&format!("{base}sample_ratio = -0.1\n")).is_err());
        assert!(parse(&format!("{base}sample_ratio = nan\n")).is_err());
        assert!(parse(&format!("{base}sample_ratio = inf\n")).is_err());
        assert_eq!(
            parse(&format!("{base}sample_ratio = 0\n"))
                .unwrap()
                .telemetry
                .sample_ratio,
            0.0
        );
        let err = parse(&format!(
            "{base}[telemetry.metrics]\ndisabled = [\"bae.nope\"]\n"
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "[telemetry.metrics] disabled contains unknown metric \"bae.nope\""
        );
        let err = parse(&format!(
            "{base}otlp_headers = {{ \"bad name\" = \"v\" }}\n"
        ))
        .unwrap_err();
        assert!(matches!(err, ConfigError::Telemetry(_)));

        // Disabled: values are not validated.
        let cfg = parse(
            "[telemetry]\nenabled = false\nsample_ratio = 7.0\notlp_endpoint = \"nope\"\n\
             [telemetry.metrics]\ndisabled = [\"whatever\"]\n",
        )
        .unwrap();
        assert!(!cfg.telemetry.enabled);
        assert_eq!(cfg.telemetry.sample_ratio, 7.0);
        // Absent `enabled` means disabled.
        assert!(parse("[telemetry]\nsample_ratio = 2.0\n").is_ok());
        // Types are still checked when disabled.
        assert_eq!(
            invalid_detail("[telemetry]\nsample_ratio = \"x\"\n"),
            "telemetry.sample_ratio: expected a float, found string"
        );
        assert_eq!(
            invalid_detail("[telemetry]\nenabled = \"yes\"\n"),
            "telemetry.enabled: expected a boolean, found string"
        );
    }

    #[test]
    fn all_metric_names_accepted() {
        let list: Vec<String> = METRIC_NAMES.iter().map(|n| format!("\"{n}\"")).collect();
        let cfg = parse(&format!(
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n\
             [telemetry.metrics]\ndisabled = [{}]\n",
            list.join(", ")
        ))
        .unwrap();
        assert_eq!(cfg.telemetry.metrics_disabled.len(), 15);
    }

    #[test]
    fn error_phase_order() {
        // Schema error beats telemetry error beats registry error.
        let dup = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
        let tel = "[telemetry]\nenabled = true\n";
        let err = parse(&format!("{dup}{dup}{tel}")).unwrap_err();
        assert!(matches!(err, ConfigError::Telemetry(_)));
        let err = parse(&format!("{dup}{dup}{tel}[mcp]\nx = 1\n")).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidFile { .. }));
        // MCP registry errors come before provider registry errors.
        let mcp = "[[mcp.servers]]\nname = \"s\"\ntransport = \"stdio\"\n";
        let err = parse(&format!("{dup}{dup}{mcp}")).unwrap_err();
        assert!(matches!(err, ConfigError::McpMissingField { .. }));
    }

    #[test]
    fn otlp_header_resolution() {
        let tel = parse(
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n\
             otlp_headers = { \"x-api-key\" = \"k-${KEY}\", Tenant = \"t1\" }\n",
        )
        .unwrap()
        .telemetry;
        let get = |n: &str| (n == "KEY").then(|| "secret".to_string());
        let hs = resolve_otlp_headers(&tel, get).unwrap();
        assert_eq!(
            hs,
            vec![
                ("Tenant".to_string(), "t1".to_string()),
                ("x-api-key".to_string(), "k-secret".to_string())
            ]
        );
        let err = resolve_otlp_headers(&tel, |_| None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[telemetry] otlp_headers \"x-api-key\": environment variable KEY is not set"
        );
        assert_eq!(err.exit_code(), 2);
        let err = resolve_otlp_headers(&tel, |_| Some("bad\nvalue".into())).unwrap_err();
        assert!(!err.to_string().contains("bad"), "{err}");

        let mut off = tel.clone();
        off.enabled = false;
        assert!(resolve_otlp_headers(&off, |_| None).unwrap().is_empty());

        let mut unterminated = tel;
        unterminated
            .otlp_headers
            .insert("a".into(), "${OOPS".into());
        assert_eq!(
            resolve_otlp_headers(&unterminated, get)
                .unwrap_err()
                .to_string(),
            "[telemetry] otlp_headers \"a\": unterminated ${...} token"
        );
    }
}
