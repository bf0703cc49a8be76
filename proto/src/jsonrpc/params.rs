//! The params of each method (spec 01 §6, step 7 of the envelope), as
//! serde derives, and [`MethodParams`]: a call's params typed by method.
//!
//! Where serde's own wording is the documented error (`Invalid params:
//! missing field \`content\``, `invalid type: integer \`5\`, expected a
//! string`), the derive produces it. Where the spec words an error itself
//! and fixes the order of the checks (spec 06 §5.7, §6.6), members are read
//! as [`Member`]s, which never fail, and the checks run in that order.

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;

use super::*;

/// Deserializes a method's params. A params value that is not an object
/// (positional params) has no members.
fn from_params<T: DeserializeOwned>(params: &Value) -> Parsed<T> {
    let empty;
    let object = if params.is_object() {
        params
    } else {
        empty = Value::Object(Map::new());
        &empty
    };
    T::deserialize(object).map_err(|e| ParamsError::Serde(e.to_string()))
}

/// One member of the params as sent: absent, `null`, a valid `T`, or
/// something else. Reading one never fails, so a method can check its
/// members in its documented order with its documented texts.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Member<T> {
    #[default]
    Absent,
    Null,
    Valid(T),
    Invalid,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Member<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Null => Member::Null,
            v => T::deserialize(v).map_or(Member::Invalid, Member::Valid),
        })
    }
}

impl<T> Member<T> {
    /// The value when valid.
    pub fn valid(self) -> Option<T> {
        match self {
            Member::Valid(v) => Some(v),
            _ => None,
        }
    }

    /// Absent or `null` (how the reference reads optional members).
    pub fn is_missing(&self) -> bool {
        matches!(self, Member::Absent | Member::Null)
    }
}

impl Member<String> {
    /// A string that is not blank.
    fn non_blank(self) -> Option<String> {
        self.valid().filter(|s| !s.trim().is_empty())
    }
}

/// `v` as a `T` that serde reads from an object. The derive alone would
/// also take an array (its members by position); the wire never did, and
/// answers serde's `invalid type: …, expected <name>` instead.
fn object<T: DeserializeOwned>(v: Value, name: &str) -> Result<T, serde_json::Error> {
    if v.is_object() {
        T::deserialize(v)
    } else {
        Err(serde_json::Error::custom(invalid_type(&v, name)))
    }
}

// ---------------------------------------------------------------------------
// Method params

/// `session.sendMessage` params: `{"message":{"role"?,"content"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SendMessageParams {
    /// `role`, default `"user"` (C-076).
    pub role: String,
    /// `content`: string, block array, or any other JSON value (kept as-is).
    pub content: Value,
}

#[derive(Deserialize)]
struct SendMessageWire {
    #[serde(default, deserialize_with = "message")]
    message: Option<MessageWire>,
}

#[derive(Deserialize)]
struct MessageWire {
    role: Option<String>,
    content: Value,
}

fn message<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MessageWire>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => object(v, "struct Message")
            .map(Some)
            .map_err(D::Error::custom),
    }
}

impl SendMessageParams {
    /// Errors: `message` absent / `null` → `Invalid params: missing "message"`
    /// (C-070); `message` not an object → `Invalid params: invalid type: …,
    /// expected struct Message`; `content` absent →
    /// `Invalid params: missing field \`content\``; non-string `role` →
    /// `Invalid params: invalid type: …, expected a string`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: SendMessageWire = from_params(params)?;
        let Some(m) = wire.message else {
            return Err(ParamsError::Missing("message"));
        };
        Ok(SendMessageParams {
            role: m.role.unwrap_or_else(|| "user".to_owned()),
            content: m.content,
        })
    }
}

/// Longest `idempotency_key` accepted (extension `send.idempotent`).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

#[derive(Deserialize)]
struct IdempotencyKeyWire {
    #[serde(default)]
    idempotency_key: Member<String>,
}

/// `params.idempotency_key` of `session.sendMessage` (extension
/// `send.idempotent`): absent or `null` = none; anything but a string of
/// 1 to 255 characters is `Invalid params: "idempotency_key" must be a
/// non-empty string of at most 255 characters`.
pub fn idempotency_key(params: &Value) -> Parsed<Option<String>> {
    let wire: IdempotencyKeyWire = from_params(params)?;
    match wire.idempotency_key {
        Member::Absent | Member::Null => Ok(None),
        Member::Valid(k) if !k.is_empty() && k.chars().count() <= MAX_IDEMPOTENCY_KEY_CHARS => {
            Ok(Some(k))
        }
        _ => Err(ParamsError::IdempotencyKey),
    }
}

/// `session.compact` params: `{"prompt"?: string|null}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct CompactParams {
    /// Call-level instruction (wins over the stored one when present).
    pub prompt: Option<String>,
}

impl CompactParams {
    /// Error: `prompt` neither string nor `null` →
    /// `Invalid params: invalid type: …, expected a string` (C-167).
    pub fn parse(params: &Value) -> Parsed<Self> {
        from_params(params)
    }
}

/// `extensions` of `session.registerDriver` and `session.subscribe`
/// (docs/extensions.md): absent = none; unknown names are ignored (a
/// client may ask for ones a server does not have); anything but an array
/// of strings (`null` included) is an error.
fn extension_set(m: Member<Vec<String>>) -> Parsed<Option<Extensions>> {
    match m {
        Member::Absent => Ok(None),
        Member::Valid(names) => Ok(Some(
            names
                .iter()
                .filter_map(|n| Extension::parse(n))
                .fold(Extensions::default(), Extensions::with),
        )),
        Member::Null | Member::Invalid => Err(ParamsError::Extensions),
    }
}

#[derive(Deserialize)]
struct ExtensionsWire {
    #[serde(default)]
    extensions: Member<Vec<String>>,
}

impl Extensions {
    /// `params.extensions`: see [`RegisterDriverParams`].
    pub fn from_params(params: &Value) -> Parsed<Option<Self>> {
        extension_set(from_params::<ExtensionsWire>(params)?.extensions)
    }
}

/// `session.registerDriver` params: `{"extensions"?: [string…]}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegisterDriverParams {
    /// The extensions asked for; `None` when the member is absent (the
    /// reference answer, without an `extensions` member).
    pub extensions: Option<Extensions>,
}

impl RegisterDriverParams {
    /// Error: `extensions` not an array of strings → `Invalid params:
    /// "extensions" must be an array of strings`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        Ok(RegisterDriverParams {
            extensions: Extensions::from_params(params)?,
        })
    }
}

/// `session.subscribe` params: `{"since_event_id"?: string, "extensions"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscribeParams {
    /// Replay after this event id (unknown → from the first event).
    pub since_event_id: Option<String>,
    /// Extensions asked for on this stream (none when absent).
    pub extensions: Extensions,
}

#[derive(Deserialize)]
struct SubscribeWire {
    #[serde(default)]
    since_event_id: Member<String>,
    #[serde(default)]
    extensions: Member<Vec<String>>,
}

impl SubscribeParams {
    /// Errors, in order: `since_event_id` neither string nor `null` →
    /// `Invalid params: since_event_id must be a string`; then those of
    /// `extensions` (see [`RegisterDriverParams`]).
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: SubscribeWire = from_params(params)?;
        let since_event_id = match wire.since_event_id {
            Member::Absent | Member::Null => None,
            Member::Valid(s) => Some(s),
            Member::Invalid => return Err(ParamsError::SinceEventId),
        };
        Ok(SubscribeParams {
            since_event_id,
            extensions: extension_set(wire.extensions)?.unwrap_or_default(),
        })
    }
}

/// `session.updateClientTools` params: `{"tools": [ClientToolDef…]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateClientToolsParams {
    /// Full replacement list (may be empty).
    pub tools: Vec<ClientToolDef>,
}

#[derive(Deserialize)]
struct UpdateClientToolsWire {
    #[serde(default, deserialize_with = "tool_defs")]
    tools: Option<Vec<ClientToolDef>>,
}

fn tool_defs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<ClientToolDef>>, D::Error> {
    let Some(items) = Option::<Vec<Value>>::deserialize(d)? else {
        return Ok(None);
    };
    items
        .into_iter()
        .map(|item| object(item, "struct ClientToolDef").map_err(D::Error::custom))
        .collect::<Result<_, _>>()
        .map(Some)
}

impl UpdateClientToolsParams {
    /// Errors (C-115): `tools` absent / `null` →
    /// `Invalid params: missing "tools"`; not an array of tool objects with
    /// string `name` → `Invalid params: <serde error>`; a blank name →
    /// `Invalid params: every tool requires a non-empty "name"`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: UpdateClientToolsWire = from_params(params)?;
        let Some(tools) = wire.tools else {
            return Err(ParamsError::Missing("tools"));
        };
        if tools.iter().any(|t| t.name.trim().is_empty()) {
            return Err(ParamsError::BlankToolName);
        }
        Ok(UpdateClientToolsParams { tools })
    }

    /// Allowlist check (spec 06 §3.2 steps 6–7): a reserved name anywhere
    /// wins, then the first name not in `allowed`; both `-32015`
    /// (C-113, C-114).
    pub fn check_allowed(&self, allowed: &[String]) -> Result<(), RpcError> {
        if self.tools.iter().any(|t| t.name == REMOTE_SUBAGENT_STATUS) {
            return Err(RpcError::tool_not_allowed(REMOTE_SUBAGENT_STATUS));
        }
        match crate::wire::session::first_disallowed(&self.tools, allowed) {
            Some(name) => Err(RpcError::tool_not_allowed(name)),
            None => Ok(()),
        }
    }
}

/// `session.startRemoteSandbox` params: `{"image": <non-blank string>}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartRemoteSandboxParams {
    /// Image name (as given).
    pub image: String,
}

#[derive(Deserialize)]
struct ImageWire {
    #[serde(default)]
    image: Member<String>,
}

impl StartRemoteSandboxParams {
    /// Error: missing, non-string or blank → `Invalid params: missing "image"` (C-138).
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: ImageWire = from_params(params)?;
        match wire.image.non_blank() {
            Some(image) => Ok(StartRemoteSandboxParams { image }),
            None => Err(ParamsError::Missing("image")),
        }
    }
}

/// `session.execRemoteSandbox` params: `{"command": <string>}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRemoteSandboxParams {
    /// Shell command (`sh -c`).
    pub command: String,
}

#[derive(Deserialize)]
struct CommandWire {
    #[serde(default)]
    command: Member<String>,
}

impl ExecRemoteSandboxParams {
    /// Error: missing or non-string → `Invalid params: missing "command"` (C-144).
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: CommandWire = from_params(params)?;
        match wire.command.valid() {
            Some(command) => Ok(ExecRemoteSandboxParams { command }),
            None => Err(ParamsError::Missing("command")),
        }
    }
}

/// Local sandbox states a client may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalSandboxState {
    /// `running`
    Running,
    /// `stopped`
    Stopped,
    /// `error`
    Error,
}

impl LocalSandboxState {
    /// Wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            LocalSandboxState::Running => "running",
            LocalSandboxState::Stopped => "stopped",
            LocalSandboxState::Error => "error",
        }
    }

    /// Parse a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Self::deserialize(serde::de::value::StrDeserializer::<serde_json::Error>::new(
            s,
        ))
        .ok()
    }

    /// The `session.sandbox.<state>` event type.
    pub const fn event_type(self) -> EventType {
        match self {
            LocalSandboxState::Running => EventType::SessionSandboxRunning,
            LocalSandboxState::Stopped => EventType::SessionSandboxStopped,
            LocalSandboxState::Error => EventType::SessionSandboxError,
        }
    }
}

/// `session.reportLocalSandbox` params.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportLocalSandboxParams {
    /// Reported state.
    pub state: LocalSandboxState,
    /// Image (`None` exactly when `unsandboxed`).
    pub image: Option<String>,
    /// Host execution without a container.
    pub unsandboxed: bool,
    /// Copied verbatim (default `null`).
    pub container_id: Value,
    /// Copied verbatim (default `null`).
    pub detail: Value,
}

#[derive(Deserialize)]
struct ReportLocalSandboxWire {
    #[serde(default)]
    state: Member<LocalSandboxState>,
    #[serde(default)]
    unsandboxed: Member<bool>,
    #[serde(default)]
    image: Member<String>,
    #[serde(default)]
    container_id: Value,
    #[serde(default)]
    detail: Value,
}

impl ReportLocalSandboxParams {
    /// Checks in order (spec 06 §5.7; C-149, C-150):
    /// 1. `state` ∉ running|stopped|error → `Invalid params: "state" must be "running", "stopped", or "error"`;
    /// 2. `unsandboxed` present (non-null) and not a boolean → `Invalid params: "unsandboxed" must be a boolean`;
    /// 3. unsandboxed with a non-null `image` → `Invalid params: "image" must be null when "unsandboxed" is true`;
    ///    otherwise `image` absent/`null` → `Invalid params: missing "image"`,
    ///    non-string → `Invalid params: "image" must be a string or null`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        let w: ReportLocalSandboxWire = from_params(params)?;
        let state = (w.state.valid()).ok_or(ParamsError::SandboxState)?;
        let unsandboxed = match w.unsandboxed {
            Member::Absent | Member::Null => false,
            Member::Valid(b) => b,
            Member::Invalid => return Err(ParamsError::Unsandboxed),
        };
        let image = match (unsandboxed, w.image) {
            (true, i) if i.is_missing() => None,
            (true, _) => return Err(ParamsError::ImageWhenUnsandboxed),
            (false, Member::Valid(s)) => Some(s),
            (false, Member::Invalid) => return Err(ParamsError::StringOrNull("image")),
            (false, _) => return Err(ParamsError::Missing("image")),
        };
        Ok(ReportLocalSandboxParams {
            state,
            image,
            unsandboxed,
            container_id: w.container_id,
            detail: w.detail,
        })
    }

    /// The event type to insert.
    pub fn event_type(&self) -> EventType {
        self.state.event_type()
    }

    /// `{"dispatch":"local","image","unsandboxed","container_id","detail"}`.
    pub fn payload(&self) -> Value {
        let mut m = Map::with_capacity(5);
        m.insert("dispatch".into(), Value::String("local".into()));
        m.insert(
            "image".into(),
            self.image.clone().map_or(Value::Null, Value::String),
        );
        m.insert("unsandboxed".into(), Value::Bool(self.unsandboxed));
        m.insert("container_id".into(), self.container_id.clone());
        m.insert("detail".into(), self.detail.clone());
        Value::Object(m)
    }
}

/// Local subagent states a client may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalSubagentState {
    /// `start`
    Start,
    /// `running`
    Running,
    /// `completed`
    Completed,
    /// `failed`
    Failed,
    /// `cancelled`
    Cancelled,
}

impl LocalSubagentState {
    /// Wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            LocalSubagentState::Start => "start",
            LocalSubagentState::Running => "running",
            LocalSubagentState::Completed => "completed",
            LocalSubagentState::Failed => "failed",
            LocalSubagentState::Cancelled => "cancelled",
        }
    }

    /// Parse a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Self::deserialize(serde::de::value::StrDeserializer::<serde_json::Error>::new(
            s,
        ))
        .ok()
    }

    /// The `session.subagent.<state>` event type.
    pub const fn event_type(self) -> EventType {
        match self {
            LocalSubagentState::Start => EventType::SessionSubagentStart,
            LocalSubagentState::Running => EventType::SessionSubagentRunning,
            LocalSubagentState::Completed => EventType::SessionSubagentCompleted,
            LocalSubagentState::Failed => EventType::SessionSubagentFailed,
            LocalSubagentState::Cancelled => EventType::SessionSubagentCancelled,
        }
    }
}

/// `session.reportLocalSubagent` params (spec 06 §6.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportLocalSubagentParams {
    /// Reported state.
    pub state: LocalSubagentState,
    /// `sba_…` (not format-checked).
    pub subagent_id: String,
    /// Harness name.
    pub harness: String,
    /// Model name.
    pub model: String,
    /// Optional detail.
    pub detail: Option<String>,
    /// Optional reason (echoed without validation).
    pub reason: Option<String>,
    /// Optional exit code (`null` accepted, C-163).
    pub exit_code: Option<i64>,
}

#[derive(Deserialize)]
struct ReportLocalSubagentWire {
    #[serde(default)]
    state: Member<LocalSubagentState>,
    #[serde(default)]
    subagent_id: Member<String>,
    #[serde(default)]
    harness: Member<String>,
    #[serde(default)]
    model: Member<String>,
    #[serde(default)]
    detail: Member<String>,
    #[serde(default)]
    reason: Member<String>,
    #[serde(default)]
    exit_code: Member<i64>,
}

/// An optional string member: absent or `null` is none, a string is kept,
/// anything else is `"<name>" must be a string or null`.
fn opt_string(m: Member<String>, name: &'static str) -> Parsed<Option<String>> {
    match m {
        Member::Absent | Member::Null => Ok(None),
        Member::Valid(s) => Ok(Some(s)),
        Member::Invalid => Err(ParamsError::StringOrNull(name)),
    }
}

impl ReportLocalSubagentParams {
    /// Checks in order (C-162, C-163):
    /// 1. `state` → `Invalid params: "state" must be "start", "running", "completed", "failed", or "cancelled"`;
    /// 2. `subagent_id`/`harness`/`model` → `Invalid params: "subagent_id", "harness", and "model" must be non-empty strings`;
    /// 3. `detail` then `reason` → `Invalid params: "<name>" must be a string or null`;
    /// 4. `exit_code` neither integer nor `null` → `Invalid params: "exit_code" must be an integer`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        let w: ReportLocalSubagentWire = from_params(params)?;
        let state = w.state.valid().ok_or(ParamsError::SubagentState)?;
        let (Some(subagent_id), Some(harness), Some(model)) = (
            w.subagent_id.non_blank(),
            w.harness.non_blank(),
            w.model.non_blank(),
        ) else {
            return Err(ParamsError::SubagentNames);
        };
        let detail = opt_string(w.detail, "detail")?;
        let reason = opt_string(w.reason, "reason")?;
        let exit_code = match w.exit_code {
            Member::Absent | Member::Null => None,
            Member::Valid(n) => Some(n),
            Member::Invalid => return Err(ParamsError::ExitCode),
        };
        Ok(ReportLocalSubagentParams {
            state,
            subagent_id,
            harness,
            model,
            detail,
            reason,
            exit_code,
        })
    }

    /// The event type to insert.
    pub fn event_type(&self) -> EventType {
        self.state.event_type()
    }

    /// `{"dispatch":"local","subagent_id","harness","model","detail"}`, plus
    /// `reason` (failed, cancelled) and `exit_code` (completed, failed,
    /// cancelled), copied or `null`.
    pub fn payload(&self) -> Value {
        let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
        let mut m = Map::with_capacity(7);
        m.insert("dispatch".into(), Value::String("local".into()));
        m.insert(
            "subagent_id".into(),
            Value::String(self.subagent_id.clone()),
        );
        m.insert("harness".into(), Value::String(self.harness.clone()));
        m.insert("model".into(), Value::String(self.model.clone()));
        m.insert("detail".into(), opt(&self.detail));
        if matches!(
            self.state,
            LocalSubagentState::Failed | LocalSubagentState::Cancelled
        ) {
            m.insert("reason".into(), opt(&self.reason));
        }
        if matches!(
            self.state,
            LocalSubagentState::Completed
                | LocalSubagentState::Failed
                | LocalSubagentState::Cancelled
        ) {
            m.insert(
                "exit_code".into(),
                self.exit_code.map_or(Value::Null, Value::from),
            );
        }
        Value::Object(m)
    }
}

/// `session.cancelSubagent` params: `{"subagent_id": <non-blank string>}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelSubagentParams {
    /// The remote task id.
    pub subagent_id: String,
}

#[derive(Deserialize)]
struct SubagentIdWire {
    #[serde(default)]
    subagent_id: Member<String>,
}

impl CancelSubagentParams {
    /// Error: missing, non-string or blank → `Invalid params: missing "subagent_id"`.
    pub fn parse(params: &Value) -> Parsed<Self> {
        let wire: SubagentIdWire = from_params(params)?;
        match wire.subagent_id.non_blank() {
            Some(subagent_id) => Ok(CancelSubagentParams { subagent_id }),
            None => Err(ParamsError::Missing("subagent_id")),
        }
    }
}

// ---------------------------------------------------------------------------
// Typed by method

/// A parse result: the params, or why not (rendered as the complete
/// `Invalid params: …` text).
pub type Parsed<T> = Result<T, ParamsError>;

/// `session.sendMessage`'s params: the message, and the extension
/// `send.idempotent`'s key (read only for a caller that opted in).
#[derive(Debug, Clone, PartialEq)]
pub struct SendMessageCall {
    pub message: Parsed<SendMessageParams>,
    pub idempotency_key: Parsed<Option<String>>,
}

/// A call's params typed by its method. Each holds its parse result rather
/// than failing at once: the engine answers a parse error only after its
/// own checks (driver registered, session open), as spec 01 §6 orders them.
#[derive(Debug, Clone, PartialEq)]
pub enum MethodParams {
    RegisterDriver(Parsed<RegisterDriverParams>),
    SendMessage(SendMessageCall),
    Compact(Parsed<CompactParams>),
    Subscribe(Parsed<SubscribeParams>),
    Unsubscribe,
    StartRemoteSandbox(Parsed<StartRemoteSandboxParams>),
    StopRemoteSandbox,
    ExecRemoteSandbox(Parsed<ExecRemoteSandboxParams>),
    ReportLocalSandbox(Parsed<ReportLocalSandboxParams>),
    ReportLocalSubagent(Parsed<ReportLocalSubagentParams>),
    CancelSubagent(Parsed<CancelSubagentParams>),
    UpdateClientTools(Parsed<UpdateClientToolsParams>),
    /// Extension `turn.cancel`: no params.
    CancelTurn,
    /// Extension `turn.steer`: a `session.sendMessage` message.
    SteerTurn(Parsed<SendMessageParams>),
}

impl MethodParams {
    /// Parses `params` as `method`'s.
    pub fn parse(method: Method, params: &Value) -> Self {
        use Method as M;
        match method {
            M::RegisterDriver => Self::RegisterDriver(RegisterDriverParams::parse(params)),
            M::SendMessage => Self::SendMessage(SendMessageCall {
                message: SendMessageParams::parse(params),
                idempotency_key: idempotency_key(params),
            }),
            M::Compact => Self::Compact(CompactParams::parse(params)),
            M::Subscribe => Self::Subscribe(SubscribeParams::parse(params)),
            M::Unsubscribe => Self::Unsubscribe,
            M::StartRemoteSandbox => {
                Self::StartRemoteSandbox(StartRemoteSandboxParams::parse(params))
            }
            M::StopRemoteSandbox => Self::StopRemoteSandbox,
            M::ExecRemoteSandbox => Self::ExecRemoteSandbox(ExecRemoteSandboxParams::parse(params)),
            M::ReportLocalSandbox => {
                Self::ReportLocalSandbox(ReportLocalSandboxParams::parse(params))
            }
            M::ReportLocalSubagent => {
                Self::ReportLocalSubagent(ReportLocalSubagentParams::parse(params))
            }
            M::CancelSubagent => Self::CancelSubagent(CancelSubagentParams::parse(params)),
            M::UpdateClientTools => Self::UpdateClientTools(UpdateClientToolsParams::parse(params)),
            M::CancelTurn => Self::CancelTurn,
            M::SteerTurn => Self::SteerTurn(SendMessageParams::parse(params)),
        }
    }
}

impl Call {
    /// This call's params, typed by its method.
    pub fn typed_params(&self) -> MethodParams {
        MethodParams::parse(self.method, &self.params)
    }
}
