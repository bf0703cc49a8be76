//! Provider wire formats (Anthropic Messages, OpenAI Chat Completions).
//!
//! Everything here is a pure function over [`serde_json::Value`]: the caller
//! resolves credentials, performs the HTTP call and logs events; this module
//! only decides what goes on the wire and how a response body reads back as
//! canonical (Anthropic-shaped) content (`05-profiles-and-providers.md`
//! §5–§8).
//!
//! Canonical history is a list of `{"role", "content"}` messages whose
//! content is a string or an array of blocks. Block types this module does
//! not understand pass through verbatim (Anthropic) or are dropped (OpenAI,
//! per the §6.2 translation table).

mod anthropic;
mod anthropic_reply;
mod history_text;
mod message;
mod normalize;
mod openai;
mod request_text;
pub mod retry;
pub mod sse;
pub mod stream;

use std::borrow::Cow;
use std::fmt;

use serde_json::{json, Value};

pub use history_text::HistoryText;
pub use message::{HistoryItem, Message};
pub use normalize::{normalize_anthropic, Normalized};
pub use request_text::{
    build as build_request, Built, Cache, Caching, Spec, BYTES_PER_TOKEN, DEFAULT_MIN_CACHE_TOKENS,
    EXTENDED_TTL_BETA,
};

/// Default Anthropic base URL (§2).
pub const DEFAULT_ANTHROPIC_BASE: &str = "https://api.anthropic.com";
/// Default OpenAI base URL (§2).
pub const DEFAULT_OPENAI_BASE: &str = "https://api.openai.com";
/// Text of the user message prepended by the Anthropic normaliser (§6.1
/// step 2) and of the compaction preamble (`07-compaction.md` §2).
pub const PREAMBLE_TEXT: &str =
    "The earlier part of this conversation was compacted. A summary follows.";
/// Value of the `anthropic-version` request header.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Wire kind of a provider registry entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Anthropic,
    Openai,
}

impl Kind {
    /// `"anthropic"` / `"openai"`, as logged in `provider.request.provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Anthropic => "anthropic",
            Kind::Openai => "openai",
        }
    }

    /// Parses the configuration spelling (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "anthropic" => Some(Kind::Anthropic),
            "openai" => Some(Kind::Openai),
            _ => None,
        }
    }

    /// The kind's default base URL.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Kind::Anthropic => DEFAULT_ANTHROPIC_BASE,
            Kind::Openai => DEFAULT_OPENAI_BASE,
        }
    }

    /// Versioned request path appended to the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Anthropic => "/v1/messages",
            Kind::Openai => "/v1/chat/completions",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Effective base URL (§2): the configured `base_url` verbatim when set
/// (an empty string counts as unset), otherwise the kind default; trailing
/// `/` characters are trimmed. This is also the value logged as
/// `provider.request.base_url`.
pub fn effective_base_url(kind: Kind, base_url: Option<&str>) -> String {
    let base = match base_url {
        Some(b) if !b.is_empty() => b,
        _ => kind.default_base_url(),
    };
    base.trim_end_matches('/').to_string()
}

/// Full request URL: `{base}/v1/messages` or `{base}/v1/chat/completions`,
/// never with a doubled slash (C-097).
pub fn endpoint_url(kind: Kind, base: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), kind.path())
}

/// Where the resolved credential goes. The token itself never enters a
/// [`PreparedRequest`]; the I/O layer resolves it right before the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthHeader {
    /// `x-api-key: <token>` (Anthropic, C-088).
    XApiKey,
    /// `authorization: Bearer <token>` (OpenAI, C-089).
    Bearer,
}

impl AuthHeader {
    /// Lower-case header name.
    pub fn name(self) -> &'static str {
        match self {
            AuthHeader::XApiKey => "x-api-key",
            AuthHeader::Bearer => "authorization",
        }
    }

    /// Header value carrying `token`.
    pub fn value(self, token: &str) -> String {
        match self {
            AuthHeader::XApiKey => token.to_string(),
            AuthHeader::Bearer => format!("Bearer {token}"),
        }
    }

    /// `(name, value)` pair carrying `token`.
    pub fn header(self, token: &str) -> (String, String) {
        (self.name().to_string(), self.value(token))
    }
}

/// One attempt's request, minus the credential.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedRequest {
    /// Full POST URL.
    pub url: String,
    /// Request headers (lower-case names) WITHOUT the credential header.
    pub headers: Vec<(String, String)>,
    /// Where the resolved token goes.
    pub auth: AuthHeader,
    /// Serialized JSON body.
    pub body: Vec<u8>,
    /// What `provider.request.messages` logs, as JSON text: the canonical
    /// list sent on this attempt (stripped, and for Anthropic normalised).
    /// Text, because the caller splices it into the event payload as is:
    /// the history is serialised once per attempt and never copied as a
    /// value tree.
    pub logged_messages_json: String,
    /// `provider.request.normalized`; `None` means the member is absent.
    pub normalized: Option<Value>,
}

impl PreparedRequest {
    /// [`PreparedRequest::logged_messages_json`] parsed back (tests and
    /// tools; the server itself only moves the text).
    pub fn logged_messages(&self) -> Vec<Value> {
        serde_json::from_str(&self.logged_messages_json).unwrap_or_default()
    }
}

/// Removes the server-internal `dispatch` and `caller` members from every
/// `tool_use` block of every message (§6.1 step 1, C-093). Everything else,
/// including member order, is preserved.
pub fn strip_internal<'a>(messages: impl IntoIterator<Item = &'a Value>) -> Vec<Value> {
    strip_borrowed(messages)
        .into_iter()
        .map(Cow::into_owned)
        .collect()
}

/// [`strip_internal`] that copies only the messages it changes: most of a
/// history carries no internal member and is borrowed as it is.
fn strip_borrowed<'a>(messages: impl IntoIterator<Item = &'a Value>) -> Vec<Cow<'a, Value>> {
    messages.into_iter().map(strip_one).collect()
}

/// One message of [`strip_borrowed`].
fn strip_one(m: &Value) -> Cow<'_, Value> {
    if !has_internal(m) {
        return Cow::Borrowed(m);
    }
    let mut m = m.clone();
    if let Some(Value::Array(blocks)) = m.get_mut("content") {
        for b in blocks.iter_mut() {
            if let Value::Object(obj) = b {
                if obj.get("type").and_then(Value::as_str) == Some("tool_use") {
                    obj.shift_remove("dispatch");
                    obj.shift_remove("caller");
                }
            }
        }
    }
    Cow::Owned(m)
}

/// Whether a `tool_use` block of `m` carries `dispatch` or `caller`.
fn has_internal(m: &Value) -> bool {
    let Some(Value::Array(blocks)) = m.get("content") else {
        return false;
    };
    blocks.iter().any(|b| {
        b.get("type").and_then(Value::as_str) == Some("tool_use")
            && (b.get("dispatch").is_some() || b.get("caller").is_some())
    })
}

/// Builds the request for one attempt of `kind` (§6.1/§6.2).
///
/// `base_url` is the effective base (see [`effective_base_url`]);
/// `history` is the canonical message list (§8) and `tools` the canonical
/// tool list (`{name, description, input_schema}`).
pub fn prepare_request<'a, M: HistoryItem + ?Sized + 'a>(
    kind: Kind,
    base_url: &str,
    model: &str,
    max_tokens: u32,
    history: impl IntoIterator<Item = &'a M>,
    tools: &[Value],
) -> PreparedRequest {
    let tools_json = to_json_text(tools);
    prepare_request_with(
        kind,
        base_url,
        model,
        max_tokens,
        history,
        tools,
        &tools_json,
    )
}

/// [`prepare_request`] with the tool list's compact JSON already rendered
/// (`tools_json`, the text of `tools`): a turn renders it once per round
/// for its logged `provider.request` and its request body alike.
pub fn prepare_request_with<'a, M: HistoryItem + ?Sized + 'a>(
    kind: Kind,
    base_url: &str,
    model: &str,
    max_tokens: u32,
    history: impl IntoIterator<Item = &'a M>,
    tools: &[Value],
    tools_json: &str,
) -> PreparedRequest {
    let items: Vec<&M> = history.into_iter().collect();
    let url = endpoint_url(kind, base_url);
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    match kind {
        Kind::Anthropic => {
            headers.push(("anthropic-version".into(), ANTHROPIC_VERSION.into()));
            // Messages that keep their text are not serialised again.
            let (logged, record) = message::messages_text(&items, true);
            // §10.3: omitting an empty `tools` is safer than `[]`.
            let tools = (!tools.is_empty()).then(|| anthropic::wire_tools_text(tools, tools_json));
            PreparedRequest {
                url,
                headers,
                auth: AuthHeader::XApiKey,
                body: body_bytes(model, max_tokens, &logged, tools.as_deref()),
                logged_messages_json: logged,
                normalized: record,
            }
        }
        Kind::Openai => {
            let stripped = strip_borrowed(items.iter().map(|m| m.value()));
            let translated = to_json_text(&openai::translate_messages(&stripped));
            let tools = (!tools.is_empty()).then(|| to_json_text(&openai::translate_tools(tools)));
            PreparedRequest {
                url,
                headers,
                auth: AuthHeader::Bearer,
                body: body_bytes(model, max_tokens, &translated, tools.as_deref()),
                logged_messages_json: message::messages_text(&items, false).0,
                normalized: None,
            }
        }
    }
}

/// Compact JSON text of a serialisable value made of JSON values.
fn to_json_text<T: serde::Serialize + ?Sized>(v: &T) -> String {
    // Serializing string-keyed JSON values cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

/// `{"model","max_tokens","messages","tools"?}` with the messages' JSON
/// text spliced in: the history is serialised once for both the body and
/// the logged event, never copied into a body value.
fn body_bytes(model: &str, max_tokens: u32, messages: &str, tools: Option<&str>) -> Vec<u8> {
    let extra = tools.map_or(0, |t| t.len() + 9);
    let mut body = Vec::with_capacity(messages.len() + model.len() + extra + 64);
    body.extend_from_slice(b"{\"model\":");
    body.extend_from_slice(to_json_text(model).as_bytes());
    body.extend_from_slice(b",\"max_tokens\":");
    body.extend_from_slice(max_tokens.to_string().as_bytes());
    body.extend_from_slice(b",\"messages\":");
    body.extend_from_slice(messages.as_bytes());
    if let Some(t) = tools {
        body.extend_from_slice(b",\"tools\":");
        body.extend_from_slice(t.as_bytes());
    }
    body.push(b'}');
    body
}

/// Why a 2xx response body was unusable (§5.2). `Display` yields the exact
/// `provider.response.error` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The body is not JSON; carries the parser's message.
    NonJson(String),
    /// OpenAI body without an object at `choices[0].message`.
    MissingMessage,
    /// OpenAI `tool_calls` entry without a string `function.name`.
    MissingFunctionName,
    /// OpenAI `function.arguments` is a string that is not JSON.
    NonJsonArguments { name: String, error: String },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NonJson(e) => write!(f, "provider returned non-JSON body: {e}"),
            ParseError::MissingMessage => {
                f.write_str("provider response is missing choices[0].message")
            }
            ParseError::MissingFunctionName => {
                f.write_str("tool_calls entry is missing function.name")
            }
            ParseError::NonJsonArguments { name, error } => write!(
                f,
                "tool_calls entry \"{name}\" has non-JSON function.arguments: {error}"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// Token usage of one successful call (§7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    /// `{"input_tokens": …, "output_tokens": …}`.
    pub fn to_json(&self) -> Value {
        json!({"input_tokens": self.input_tokens, "output_tokens": self.output_tokens})
    }

    /// `input_tokens + output_tokens` (saturating), compared with the auto
    /// compaction `size`.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The tokens one successful call was billed for, by kind (usage
/// accounting): `input` is what was neither written to nor read from the
/// provider's prompt cache, so the four add up to the prompt and the
/// reply. Anthropic reports each; OpenAI's `prompt_tokens` includes its
/// `prompt_tokens_details.cached_tokens` (read) and it bills no writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

impl Tokens {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
    }

    /// The prompt: input, cache writes and cache reads.
    pub fn prompt(&self) -> u64 {
        (self.input)
            .saturating_add(self.cache_write)
            .saturating_add(self.cache_read)
    }
}

/// A successful (2xx, usable) provider response.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderResponse {
    /// Compact JSON of the body as received (parsed, then serialised once
    /// before its content moved out); logged as `provider.response.body`.
    pub body_json: String,
    /// Canonical content blocks (`[]` when the body has none).
    pub content: Vec<Value>,
    /// `None` is logged as `usage: null` (C-079).
    pub usage: Option<Usage>,
    /// The same usage by kind (`None` exactly when `usage` is).
    pub tokens: Option<Tokens>,
    /// `Some("stop_reason max_tokens")` / `Some("finish_reason length")`
    /// when the provider cut the reply off (§7.2); compaction reports
    /// `summary truncated: <this>`.
    pub truncated: Option<&'static str>,
}

/// Parses a 2xx response body of `kind` (§6.1/§6.2 responses, §7).
pub fn parse_response(kind: Kind, body: &[u8]) -> Result<ProviderResponse, ParseError> {
    if kind == Kind::Anthropic {
        if let Some(resp) = anthropic_reply::parse(body) {
            return Ok(resp);
        }
    }
    let raw: Value =
        serde_json::from_slice(body).map_err(|e| ParseError::NonJson(e.to_string()))?;
    match kind {
        Kind::Anthropic => Ok(anthropic::parse(raw)),
        Kind::Openai => openai::parse(raw),
    }
}

/// `provider.response.error` for a non-2xx status (§5.2).
pub fn http_error_text(status: u16) -> String {
    format!("provider returned HTTP {status}")
}

/// The `tool_use` blocks of `content`: objects with `type == "tool_use"`
/// and a string `name` (§9 step 3c), in block order.
pub fn tool_uses(content: &[Value]) -> Vec<&Value> {
    content
        .iter()
        .filter(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool_use")
                && b.get("name").is_some_and(Value::is_string)
        })
        .collect()
}

/// Provider-facing history entry for one message event (§8 step 3).
///
/// `role` is `payload.role` when it is a string, otherwise `"user"` for
/// `client.message.send` rows and `"assistant"` for any other (server) row.
/// `content` is `payload.content` verbatim (`null` when absent). No other
/// payload member is carried.
pub fn history_message(event_type: &str, payload: &Value) -> Value {
    let role = history_role(event_type, payload).to_string();
    let content = payload.get("content").cloned().unwrap_or(Value::Null);
    json!({"role": role, "content": content})
}

/// [`history_message`] of a payload the caller no longer needs: its
/// content is moved, not copied.
pub fn into_history_message(event_type: &str, mut payload: Value) -> Value {
    let role = history_role(event_type, &payload).to_string();
    let content = match payload.as_object_mut() {
        Some(o) => o.shift_remove("content").unwrap_or(Value::Null),
        None => Value::Null,
    };
    json!({"role": role, "content": content})
}

fn history_role<'a>(event_type: &str, payload: &'a Value) -> &'a str {
    match payload.get("role").and_then(Value::as_str) {
        Some(r) => r,
        None if event_type == "client.message.send" => "user",
        None => "assistant",
    }
}

/// Content as a block array (§6.1 step 3): a string becomes one `text`
/// block, an array its elements, `null`/absent nothing, and any other value
/// is kept as a single element verbatim.
pub(crate) fn content_blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![text_block(s)],
        Some(Value::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    }
}

pub(crate) fn text_block(s: &str) -> Value {
    json!({"type": "text", "text": s})
}

/// The `text` of every `text` block, joined with `\n` (§6.2).
pub(crate) fn joined_text(blocks: &[Value]) -> String {
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}
