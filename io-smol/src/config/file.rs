//! `bae-config.toml` loading and validation (spec 04 §3).
//!
//! Loading runs in three phases whose order decides which error wins
//! (spec 04 §5): (1) TOML syntax and schema — strict key sets, types and enum
//! values, declared as serde derives on the types below (`deny_unknown_fields`
//! where spec 04 makes unknown keys errors) — reported as
//! `invalid config file "<path>": <detail>`;
//! (2) `[telemetry]` value validation, only when `enabled = true`;
//! (3) MCP then provider registry validation (blank/duplicate names, fields
//! required by the transport).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use url::Url;

use super::subst::{substitute, SubstError};
use super::toml_de;
use super::traffic;
use super::ConfigError;

/// Default provider `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default `[telemetry] service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "baesrv";
/// The closed set of metric instrument names (spec 04 §7.2), usable in
/// `[telemetry.metrics] disabled`.
pub const METRIC_NAMES: [&str; 16] = [
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
    "bae.provider.tokens",
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
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub struct McpConfig {
    #[serde(default, deserialize_with = "toml_de::tables")]
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
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub struct McpServer {
    pub name: String,
    pub transport: Transport,
    pub command: Option<String>,
    #[serde(default, deserialize_with = "toml_de::strings")]
    pub args: Vec<String>,
    pub url: Option<String>,
    #[serde(default, deserialize_with = "toml_de::string_map")]
    pub headers: BTreeMap<String, String>,
    /// Extension `reconnect = true`: a broken server is reconnected on the
    /// next call (bounded backoff) instead of staying broken for the
    /// session. Default false, as the spec says.
    #[serde(default)]
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
/// Unknown keys inside entries are ignored by contract (spec 04 §3).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(from = "ProviderEntryTable")]
pub struct ProviderEntry {
    pub name: String,
    #[serde(rename = "provider", deserialize_with = "provider_kind")]
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
    /// Extension: prompt caching (`prompt_cache = true`; `None`: off).
    /// Read by `caching.rs` from the entry's table after the derive (so
    /// its keys keep their own messages), see [`parse_document`].
    pub cache: Option<proto::provider::Caching>,
    /// Extension: prices per million tokens (`None`: no cost estimates).
    pub prices: Option<engine::usage::Prices>,
    /// `stream = true` (extension): replies are streamed. `None`: off.
    pub stream: Option<ProviderStream>,
}

/// The stream settings of a `[[providers.entries]]` entry with
/// `stream = true` (docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderStream {
    /// `stream_first_byte_timeout`, whole seconds (default 120).
    pub first_byte_timeout_secs: u64,
    /// `stream_idle_timeout`, whole seconds (default 60).
    pub idle_timeout_secs: u64,
    /// `stream_max_bytes` (default 64 MiB).
    pub max_bytes: u64,
}

impl Default for ProviderStream {
    fn default() -> Self {
        ProviderStream {
            first_byte_timeout_secs: 120,
            idle_timeout_secs: 60,
            max_bytes: 64 * 1024 * 1024,
        }
    }
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
            .field("cache", &self.cache)
            .field("prices", &self.prices)
            .field("stream", &self.stream)
            .finish()
    }
}

/// `[telemetry]`, `[telemetry.traces]`, `[telemetry.metrics]`. `Default` is
/// the disabled configuration. `Debug` redacts `otlp_headers` values.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(from = "TelemetryTable")]
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
// Phase 1: syntax, then the schema (the serde derives above, run by
// `toml_de` so the errors keep the documented wording).

fn parse_document(text: &str) -> Result<FileConfig, String> {
    let root: toml::Table = text.parse().map_err(|e: toml::de::Error| {
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
    // The derive has no say over the caching keys; they are read from the
    // entries' own tables, once the entries themselves are known good.
    let raw_entries = root
        .get("providers")
        .and_then(|p| p.get("entries"))
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut doc: Document = toml_de::from_table(root)?;
    for (i, (entry, raw)) in doc
        .providers
        .entries
        .iter_mut()
        .zip(&raw_entries)
        .enumerate()
    {
        if let Some(t) = raw.as_table() {
            let at = format!("providers.entries[{i}]");
            (entry.cache, entry.prices) = super::caching::parse(t, &at, entry.kind)?;
        }
    }
    Ok(FileConfig {
        mcp: doc.mcp,
        providers: doc.providers.entries,
        telemetry: doc.telemetry,
    })
}

/// The file's top level. Unknown top-level keys are ignored (forward
/// compatibility), so no `deny_unknown_fields` here.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Document {
    mcp: McpConfig,
    providers: Providers,
    telemetry: Telemetry,
}

/// `[providers]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct Providers {
    #[serde(default, deserialize_with = "toml_de::tables")]
    entries: Vec<ProviderEntry>,
}

/// One `[[providers.entries]]` entry as written; [`ProviderEntry`] folds
/// the `stream*` keys into one optional value (the `retry` and `limits`
/// tables are read by `config/traffic.rs`). Unknown keys are ignored by
/// contract, so no `deny_unknown_fields`.
#[derive(Deserialize)]
#[serde(expecting = "a table")]
struct ProviderEntryTable {
    name: String,
    #[serde(rename = "provider", deserialize_with = "provider_kind")]
    kind: ProviderKind,
    base_url: Option<String>,
    model: String,
    auth_token: String,
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
    #[serde(default, deserialize_with = "traffic::retry")]
    retry: Option<engine::RetryPolicy>,
    #[serde(default, deserialize_with = "traffic::limits")]
    limits: Option<engine::provider_limits::EntryLimits>,
    #[serde(default)]
    stream: bool,
    // The settings apply only with `stream = true`, and are checked either way.
    #[serde(default, deserialize_with = "positive")]
    stream_first_byte_timeout: Option<u64>,
    #[serde(default, deserialize_with = "positive")]
    stream_idle_timeout: Option<u64>,
    #[serde(default, deserialize_with = "positive")]
    stream_max_bytes: Option<u64>,
}

impl From<ProviderEntryTable> for ProviderEntry {
    fn from(t: ProviderEntryTable) -> Self {
        let d = ProviderStream::default();
        let settings = ProviderStream {
            first_byte_timeout_secs: t
                .stream_first_byte_timeout
                .unwrap_or(d.first_byte_timeout_secs),
            idle_timeout_secs: t.stream_idle_timeout.unwrap_or(d.idle_timeout_secs),
            max_bytes: t.stream_max_bytes.unwrap_or(d.max_bytes),
        };
        ProviderEntry {
            name: t.name,
            kind: t.kind,
            base_url: t.base_url,
            model: t.model,
            auth_token: t.auth_token,
            max_tokens: t.max_tokens,
            retry: t.retry,
            limits: t.limits,
            // Read from the entry's table after the derive (caching.rs).
            cache: None,
            prices: None,
            stream: t.stream.then_some(settings),
        }
    }
}

/// An integer of at least 1 (`expected a positive integer, found …`).
fn positive<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Positive;
    impl serde::de::Visitor<'_> for Positive {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a positive integer")
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u64, E> {
            match u64::try_from(n) {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(E::invalid_type(serde::de::Unexpected::Signed(n), &self)),
            }
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u64, E> {
            match n {
                0 => Err(E::invalid_type(serde::de::Unexpected::Unsigned(n), &self)),
                n => Ok(n),
            }
        }
    }
    d.deserialize_any(Positive).map(Some)
}

/// `[telemetry]` as written; [`Telemetry`] flattens the two sub-tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct TelemetryTable {
    #[serde(default)]
    enabled: bool,
    otlp_endpoint: Option<String>,
    #[serde(default, deserialize_with = "toml_de::string_map")]
    otlp_headers: BTreeMap<String, String>,
    otlp_protocol: Option<String>,
    sample_ratio: Option<f64>,
    service_name: Option<String>,
    #[serde(default)]
    traces: TracesTable,
    #[serde(default)]
    metrics: MetricsTable,
}

/// `[telemetry.traces]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct TracesTable {
    #[serde(default = "yes")]
    enabled: bool,
}

/// `[telemetry.metrics]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct MetricsTable {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default, deserialize_with = "toml_de::strings")]
    disabled: Vec<String>,
}

impl Default for TracesTable {
    fn default() -> Self {
        TracesTable { enabled: true }
    }
}

impl Default for MetricsTable {
    fn default() -> Self {
        MetricsTable {
            enabled: true,
            disabled: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_max_tokens() -> u32 {
    DEFAULT_MAX_TOKENS
}

impl From<TelemetryTable> for Telemetry {
    fn from(t: TelemetryTable) -> Self {
        let d = Telemetry::default();
        Telemetry {
            enabled: t.enabled,
            otlp_endpoint: t.otlp_endpoint,
            otlp_headers: t.otlp_headers,
            sample_ratio: t.sample_ratio.unwrap_or(d.sample_ratio),
            service_name: t.service_name.unwrap_or(d.service_name),
            traces_enabled: t.traces.enabled,
            metrics_enabled: t.metrics.enabled,
            metrics_disabled: t.metrics.disabled,
            otlp_protocol: t.otlp_protocol,
        }
    }
}

impl<'de> Deserialize<'de> for Transport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "stdio" => Ok(Transport::Stdio),
            "sse" => Ok(Transport::Sse),
            "http" => Ok(Transport::Http),
            other => Err(serde::de::Error::custom(format_args!(
                "unsupported transport \"{other}\" (expected \"stdio\", \"sse\" or \"http\")"
            ))),
        }
    }
}

fn provider_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ProviderKind, D::Error> {
    match String::deserialize(d)?.as_str() {
        "anthropic" => Ok(ProviderKind::Anthropic),
        "openai" => Ok(ProviderKind::Openai),
        other => Err(serde::de::Error::custom(format_args!(
            "unknown provider kind \"{other}\" (expected \"anthropic\" or \"openai\")"
        ))),
    }
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
    check_ascii_host("[telemetry] otlp_endpoint".into(), endpoint)?;
    if !is_http_url(endpoint) {
        return Err(ConfigError::Telemetry(format!(
            "[telemetry] otlp_endpoint \"{endpoint}\" must be a valid http:// or https:// URL"
        )));
    }
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

/// An `http://` or `https://` URL with a host, as the URL parser reads it
/// (scheme case-insensitive, port a number that fits). Whitespace or a
/// control character anywhere is refused too: the parser would trim or
/// encode it, and the value is sent as written.
fn is_http_url(v: &str) -> bool {
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    Url::parse(v).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
    })
}

/// Host names are resolved as written: the URL parser is built without
/// Unicode tables (docs/performance.md, "Binary size"), so an
/// internationalised name must be given in its ASCII (`xn--`) form. Checked
/// at load so the mistake is one clear line, not an error on every call.
fn check_ascii_host(at: String, url: &str) -> Result<(), ConfigError> {
    match non_ascii_host(url) {
        Some(host) => Err(ConfigError::NonAsciiHost { at, host }),
        None => Ok(()),
    }
}

/// The host of `url` as written, when it is not ASCII. A URL of a scheme
/// without special rules keeps its host as written (percent-encoded, no
/// IDNA), so the parser reads it under such a scheme; when that finds no
/// host (a bad port, `http:\\host`), it is cut out by hand. A non-ASCII
/// host must never reach IDNA (the table-less adapter's debug assertion).
fn non_ascii_host(url: &str) -> Option<String> {
    let (_, rest) = url.split_once(':')?;
    let opaque = Url::parse(&format!("opaque:{rest}")).ok();
    let written = match opaque.as_ref().and_then(Url::host_str) {
        Some(host) => host,
        None => raw_host(rest),
    };
    // Bytes that are not UTF-8 decode to U+FFFD, as the URL parser reads them.
    let host = percent_encoding::percent_decode_str(written).decode_utf8_lossy();
    (!host.is_ascii()).then(|| host.into_owned())
}

/// The host after a URL's scheme, as special schemes read it: past any
/// `/` or `\\`, up to `/`, `\\`, `?` or `#`, without user info and port.
fn raw_host(rest: &str) -> &str {
    let rest = rest.trim_start_matches(['/', '\\']);
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.starts_with('[') {
        return host_port.split_once(']').map_or(host_port, |(h, _)| h);
    }
    host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)
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
