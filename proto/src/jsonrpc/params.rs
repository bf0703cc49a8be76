//! The params of each method (spec 01 §6, step 7 of the envelope).

use super::*;

// ---------------------------------------------------------------------------
// Method params

fn member<'a>(params: &'a Value, name: &str) -> Option<&'a Value> {
    match params.get(name) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v),
    }
}

fn non_blank_str<'a>(params: &'a Value, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// `session.sendMessage` params: `{"message":{"role"?,"content"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SendMessageParams {
    /// `role`, default `"user"` (C-076).
    pub role: String,
    /// `content`: string, block array, or any other JSON value (kept as-is).
    pub content: Value,
}

impl SendMessageParams {
    /// Errors: `message` absent / `null` → `Invalid params: missing "message"`
    /// (C-070); `message` not an object → `Invalid params: invalid type: …,
    /// expected struct Message`; `content` absent →
    /// `Invalid params: missing field \`content\``; non-string `role` →
    /// `Invalid params: invalid type: …, expected a string`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        let Some(message) = member(params, "message") else {
            return Err(ip("missing \"message\""));
        };
        if !message.is_object() {
            return Err(ip(invalid_type(message, "struct Message")));
        }
        let role = match member(message, "role") {
            None => "user".to_owned(),
            Some(Value::String(r)) => r.clone(),
            Some(other) => return Err(ip(invalid_type(other, "a string"))),
        };
        let Some(content) = message.get("content") else {
            return Err(ip("missing field `content`"));
        };
        Ok(SendMessageParams {
            role,
            content: content.clone(),
        })
    }
}

/// Longest `idempotency_key` accepted (extension `send.idempotent`).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// `params.idempotency_key` of `session.sendMessage` (extension
/// `send.idempotent`): absent or `null` = none; anything but a string of
/// 1 to 255 characters is `Invalid params: "idempotency_key" must be a
/// non-empty string of at most 255 characters`.
pub fn idempotency_key(params: &Value) -> Result<Option<String>, String> {
    match member(params, "idempotency_key") {
        None => Ok(None),
        Some(Value::String(k))
            if !k.is_empty() && k.chars().count() <= MAX_IDEMPOTENCY_KEY_CHARS =>
        {
            Ok(Some(k.clone()))
        }
        Some(_) => Err(ip(
            "\"idempotency_key\" must be a non-empty string of at most 255 characters",
        )),
    }
}

/// `session.compact` params: `{"prompt"?: string|null}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompactParams {
    /// Call-level instruction (wins over the stored one when present).
    pub prompt: Option<String>,
}

impl CompactParams {
    /// Error: `prompt` neither string nor `null` →
    /// `Invalid params: invalid type: …, expected a string` (C-167).
    pub fn parse(params: &Value) -> Result<Self, String> {
        match member(params, "prompt") {
            None => Ok(CompactParams { prompt: None }),
            Some(Value::String(p)) => Ok(CompactParams {
                prompt: Some(p.clone()),
            }),
            Some(other) => Err(ip(invalid_type(other, "a string"))),
        }
    }
}

/// `session.subscribe` params: `{"since_event_id"?: string}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscribeParams {
    /// Replay after this event id (unknown → from the first event).
    pub since_event_id: Option<String>,
}

impl SubscribeParams {
    /// Error: `since_event_id` neither string nor `null` →
    /// `Invalid params: invalid type: …, expected a string`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        match member(params, "since_event_id") {
            None => Ok(SubscribeParams::default()),
            Some(Value::String(s)) => Ok(SubscribeParams {
                since_event_id: Some(s.clone()),
            }),
            Some(other) => Err(ip(invalid_type(other, "a string"))),
        }
    }
}

/// `session.updateClientTools` params: `{"tools": [ClientToolDef…]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateClientToolsParams {
    /// Full replacement list (may be empty).
    pub tools: Vec<ClientToolDef>,
}

impl UpdateClientToolsParams {
    /// Errors (C-115): `tools` absent / `null` →
    /// `Invalid params: missing "tools"`; not an array of tool objects with
    /// string `name` → `Invalid params: <serde error>`; a blank name →
    /// `Invalid params: every tool requires a non-empty "name"`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        let Some(tools) = member(params, "tools") else {
            return Err(ip("missing \"tools\""));
        };
        let Value::Array(items) = tools else {
            return Err(ip(invalid_type(tools, "a sequence")));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if !item.is_object() {
                return Err(ip(invalid_type(item, "struct ClientToolDef")));
            }
            let def: ClientToolDef = serde_json::from_value(item.clone()).map_err(ip)?;
            out.push(def);
        }
        if out.iter().any(|t| t.name.trim().is_empty()) {
            return Err(ip("every tool requires a non-empty \"name\""));
        }
        Ok(UpdateClientToolsParams { tools: out })
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

impl StartRemoteSandboxParams {
    /// Error: missing, non-string or blank → `Invalid params: missing "image"` (C-138).
    pub fn parse(params: &Value) -> Result<Self, String> {
        match non_blank_str(params, "image") {
            Some(image) => Ok(StartRemoteSandboxParams {
                image: image.to_owned(),
            }),
            None => Err(ip("missing \"image\"")),
        }
    }
}

/// `session.execRemoteSandbox` params: `{"command": <string>}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRemoteSandboxParams {
    /// Shell command (`sh -c`).
    pub command: String,
}

impl ExecRemoteSandboxParams {
    /// Error: missing or non-string → `Invalid params: missing "command"` (C-144).
    pub fn parse(params: &Value) -> Result<Self, String> {
        match params.get("command").and_then(Value::as_str) {
            Some(c) => Ok(ExecRemoteSandboxParams {
                command: c.to_owned(),
            }),
            None => Err(ip("missing \"command\"")),
        }
    }
}

/// Local sandbox states a client may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        match s {
            "running" => Some(LocalSandboxState::Running),
            "stopped" => Some(LocalSandboxState::Stopped),
            "error" => Some(LocalSandboxState::Error),
            _ => None,
        }
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

impl ReportLocalSandboxParams {
    /// Checks in order (spec 06 §5.7; C-149, C-150):
    /// 1. `state` ∉ running|stopped|error → `Invalid params: "state" must be "running", "stopped", or "error"`;
    /// 2. `unsandboxed` present (non-null) and not a boolean → `Invalid params: "unsandboxed" must be a boolean`;
    /// 3. unsandboxed with a non-null `image` → `Invalid params: "image" must be null when "unsandboxed" is true`;
    ///    otherwise `image` absent/`null` → `Invalid params: missing "image"`,
    ///    non-string → `Invalid params: "image" must be a string or null`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        let state = params
            .get("state")
            .and_then(Value::as_str)
            .and_then(LocalSandboxState::parse)
            .ok_or_else(|| ip("\"state\" must be \"running\", \"stopped\", or \"error\""))?;
        let unsandboxed = match member(params, "unsandboxed") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ip("\"unsandboxed\" must be a boolean")),
        };
        let image = match (unsandboxed, member(params, "image")) {
            (true, None) => None,
            (true, Some(_)) => {
                return Err(ip("\"image\" must be null when \"unsandboxed\" is true"))
            }
            (false, None) => return Err(ip("missing \"image\"")),
            (false, Some(Value::String(s))) => Some(s.clone()),
            (false, Some(_)) => return Err(ip("\"image\" must be a string or null")),
        };
        Ok(ReportLocalSandboxParams {
            state,
            image,
            unsandboxed,
            container_id: params.get("container_id").cloned().unwrap_or(Value::Null),
            detail: params.get("detail").cloned().unwrap_or(Value::Null),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        match s {
            "start" => Some(LocalSubagentState::Start),
            "running" => Some(LocalSubagentState::Running),
            "completed" => Some(LocalSubagentState::Completed),
            "failed" => Some(LocalSubagentState::Failed),
            "cancelled" => Some(LocalSubagentState::Cancelled),
            _ => None,
        }
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

impl ReportLocalSubagentParams {
    /// Checks in order (C-162, C-163):
    /// 1. `state` → `Invalid params: "state" must be "start", "running", "completed", "failed", or "cancelled"`;
    /// 2. `subagent_id`/`harness`/`model` → `Invalid params: "subagent_id", "harness", and "model" must be non-empty strings`;
    /// 3. `detail` then `reason` → `Invalid params: "<name>" must be a string or null`;
    /// 4. `exit_code` neither integer nor `null` → `Invalid params: "exit_code" must be an integer`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        let state = params
            .get("state")
            .and_then(Value::as_str)
            .and_then(LocalSubagentState::parse)
            .ok_or_else(|| {
                ip("\"state\" must be \"start\", \"running\", \"completed\", \"failed\", or \"cancelled\"")
            })?;
        let (Some(subagent_id), Some(harness), Some(model)) = (
            non_blank_str(params, "subagent_id"),
            non_blank_str(params, "harness"),
            non_blank_str(params, "model"),
        ) else {
            return Err(ip(
                "\"subagent_id\", \"harness\", and \"model\" must be non-empty strings",
            ));
        };
        let opt_str = |name: &str| -> Result<Option<String>, String> {
            match member(params, name) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(ip(format!("\"{name}\" must be a string or null"))),
            }
        };
        let detail = opt_str("detail")?;
        let reason = opt_str("reason")?;
        let exit_code = match member(params, "exit_code") {
            None => None,
            Some(v) => match v.as_i64() {
                Some(n) => Some(n),
                None => return Err(ip("\"exit_code\" must be an integer")),
            },
        };
        Ok(ReportLocalSubagentParams {
            state,
            subagent_id: subagent_id.to_owned(),
            harness: harness.to_owned(),
            model: model.to_owned(),
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

impl CancelSubagentParams {
    /// Error: missing, non-string or blank → `Invalid params: missing "subagent_id"`.
    pub fn parse(params: &Value) -> Result<Self, String> {
        match non_blank_str(params, "subagent_id") {
            Some(id) => Ok(CancelSubagentParams {
                subagent_id: id.to_owned(),
            }),
            None => Err(ip("missing \"subagent_id\"")),
        }
    }
}
