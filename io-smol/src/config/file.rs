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
use super::traffic;
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

/// Provider wire format (`provider = "anthropic" | "openai"`): the one
/// kind the engine and the codecs use too.
pub use proto::provider::Kind as ProviderKind;

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
    /// Extension `[providers.entries.retry]` (`config/traffic.rs`).
    pub retry: Option<engine::RetryPolicy>,
    /// Extension `[providers.entries.limits]`.
    pub limits: Option<engine::provider_limits::EntryLimits>,
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
            .field("retry", &self.retry)
            .field("limits", &self.limits)
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
    /// `otlp_protocol` as written (an addition beyond spec 04: `"grpc"`,
    /// the default, or `"http/protobuf"`); see [`Telemetry::protocol`].
    pub otlp_protocol: Option<String>,
}

/// The OTLP transport (`[telemetry] otlp_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

impl Telemetry {
    /// The validated transport (`Grpc` when unset).
    pub fn protocol(&self) -> Option<OtlpProtocol> {
        match self.otlp_protocol.as_deref() {
            None | Some("grpc") => Some(OtlpProtocol::Grpc),
            Some("http/protobuf") => Some(OtlpProtocol::HttpProtobuf),
            Some(_) => None,
        }
    }
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
            otlp_protocol: None,
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
            .field("otlp_protocol", &self.otlp_protocol)
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
        retry: traffic::table::<traffic::RetryTable>(t, "retry", at)?
            .map(|r| r.policy(&format!("{at}.retry")))
            .transpose()?,
        limits: traffic::table::<traffic::LimitsTable>(t, "limits", at)?
            .map(|l| l.limits(&format!("{at}.limits")))
            .transpose()?,
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
            "otlp_protocol",
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
    tel.otlp_protocol = opt_str(t, "otlp_protocol", at)?;
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
    check_ascii_host("[telemetry] otlp_endpoint".into(), endpoint)?;
    if tel.protocol().is_none() {
        return Err(ConfigError::Telemetry(format!(
            "[telemetry] otlp_protocol \"{}\" must be \"grpc\" or \"http/protobuf\"",
            tel.otlp_protocol.as_deref().unwrap_or("")
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
    match host_and_port(rest) {
        Some((host, port)) => {
            let port_ok = match port {
                None => true,
                Some(p) => {
                    !p.is_empty()
                        && p.bytes().all(|b| b.is_ascii_digit())
                        && p.parse::<u16>().is_ok()
                }
            };
            !host.is_empty() && port_ok
        }
        None => false,
    }
}

/// The host and optional port of what follows `scheme://`; `None` when a
/// bracketed IPv6 host is malformed.
fn host_and_port(rest: &str) -> Option<(&str, Option<&str>)> {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    if let Some(stripped) = host_port.strip_prefix('[') {
        let (h, after) = stripped.split_once(']')?;
        match after {
            "" => Some((h, None)),
            p => Some((h, Some(p.strip_prefix(':')?))),
        }
    } else {
        Some(match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        })
    }
}

/// Host names are resolved as written: the URL parser is built without
/// Unicode tables (docs/performance.md, "Binary size"), so an
/// internationalised name must be given in its ASCII (`xn--`) form. Checked
/// at load so the mistake is one clear line, not an error on every call.
fn check_ascii_host(at: String, url: &str) -> Result<(), ConfigError> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    match host_and_port(rest) {
        Some((host, _)) if !host.is_ascii() => Err(ConfigError::NonAsciiHost {
            at,
            host: host.to_string(),
        }),
        _ => Ok(()),
    }
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
        if let (Transport::Sse | Transport::Http, Some(url)) = (s.transport, &s.url) {
            check_ascii_host(format!("[[mcp.servers]] \"{}\" url", s.name), url)?;
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
        if let Some(url) = &p.base_url {
            check_ascii_host(
                format!("[[providers.entries]] \"{}\" base_url", p.name),
                url,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
