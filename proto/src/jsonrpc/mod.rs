//! JSON-RPC 2.0 envelope decoding and NDJSON frame encoding for
//! `POST /api/v1/sessions/{id}/rpc` (spec 01 §5–§6, seed "JSON-RPC session
//! loop").
//!
//! Decoding is two-stage: [`decode_call`] validates the envelope (spec 01
//! §5.2 steps 1–6) and yields a [`Call`]; [`Call::typed_params`] parses its
//! `params` for its method into a [`MethodParams`] (step 7, serde derives
//! in `params.rs`), whose parse errors the engine answers after its own
//! checks. Every frame builder returns one compact JSON object terminated
//! by `\n`.

use std::fmt::Display;

use serde_json::{Map, Value};

use crate::wire::event::EventType;
use crate::wire::json::{invalid_type, push_str};
use crate::wire::session::{tool_not_allowed_detail, ClientToolDef, REMOTE_SUBAGENT_STATUS};

/// The twelve supported method names.
pub const METHODS: [&str; 12] = [
    "session.registerDriver",
    "session.sendMessage",
    "session.compact",
    "session.subscribe",
    "session.unsubscribe",
    "session.startRemoteSandbox",
    "session.stopRemoteSandbox",
    "session.execRemoteSandbox",
    "session.reportLocalSandbox",
    "session.reportLocalSubagent",
    "session.cancelSubagent",
    "session.updateClientTools",
];

/// Methods of opt-in extensions (docs/extensions.md).
pub const EXTENSION_METHODS: [&str; 2] = ["session.cancelTurn", "session.steerTurn"];

/// JSON-RPC error codes used on `/rpc` (spec 01 §6.6).
pub mod codes {
    /// Body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Batch, non-object, bad `jsonrpc`, missing `method`.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Missing / ill-typed params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Storage failures (message always `Internal error`).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Generic application error.
    pub const APPLICATION_ERROR: i64 = -32000;
    /// `driver_not_registered`.
    pub const DRIVER_NOT_REGISTERED: i64 = -32001;
    /// `sandbox_image_not_allowed`.
    pub const SANDBOX_IMAGE_NOT_ALLOWED: i64 = -32011;
    /// `sandbox_start_failed`.
    pub const SANDBOX_START_FAILED: i64 = -32012;
    /// `sandbox_not_running`.
    pub const SANDBOX_NOT_RUNNING: i64 = -32013;
    /// `subagent_not_found`.
    pub const SUBAGENT_NOT_FOUND: i64 = -32014;
    /// `tool_not_allowed`.
    pub const TOOL_NOT_ALLOWED: i64 = -32015;
    /// `turn_in_progress`.
    pub const TURN_IN_PROGRESS: i64 = -32020;
    /// Extension `turn.cancel`: the request's turn (or its place in the
    /// queue) was cancelled.
    pub const TURN_CANCELLED: i64 = -32021;
    /// Extension `turn.steer`: the steer was refused or never applied.
    pub const STEER_REJECTED: i64 = -32022;
    /// Extension `send.idempotent`: the key was used with another message.
    pub const IDEMPOTENCY_KEY_REUSED: i64 = -32023;
    /// Extension `send.idempotent`: the key's turn was interrupted by a
    /// restart before it answered.
    pub const IDEMPOTENT_TURN_INTERRUPTED: i64 = -32024;
    /// Extension quotas: a client key's or profile's request rate or
    /// token budget is used up (the error carries `data`).
    pub const QUOTA_EXCEEDED: i64 = -32025;
}

/// The supported methods, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `session.registerDriver`
    RegisterDriver,
    /// `session.sendMessage`
    SendMessage,
    /// `session.compact`
    Compact,
    /// `session.subscribe`
    Subscribe,
    /// `session.unsubscribe`
    Unsubscribe,
    /// `session.startRemoteSandbox`
    StartRemoteSandbox,
    /// `session.stopRemoteSandbox`
    StopRemoteSandbox,
    /// `session.execRemoteSandbox`
    ExecRemoteSandbox,
    /// `session.reportLocalSandbox`
    ReportLocalSandbox,
    /// `session.reportLocalSubagent`
    ReportLocalSubagent,
    /// `session.cancelSubagent`
    CancelSubagent,
    /// `session.updateClientTools`
    UpdateClientTools,
    /// `session.cancelTurn` (extension `turn.cancel`).
    CancelTurn,
    /// `session.steerTurn` (extension `turn.steer`).
    SteerTurn,
}

impl Method {
    /// All methods, in [`METHODS`] order.
    pub const ALL: [Method; 12] = [
        Method::RegisterDriver,
        Method::SendMessage,
        Method::Compact,
        Method::Subscribe,
        Method::Unsubscribe,
        Method::StartRemoteSandbox,
        Method::StopRemoteSandbox,
        Method::ExecRemoteSandbox,
        Method::ReportLocalSandbox,
        Method::ReportLocalSubagent,
        Method::CancelSubagent,
        Method::UpdateClientTools,
    ];

    /// The extension methods, in [`EXTENSION_METHODS`] order.
    pub const EXTENSIONS: [Method; 2] = [Method::CancelTurn, Method::SteerTurn];

    /// Wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::CancelTurn => EXTENSION_METHODS[0],
            Method::SteerTurn => EXTENSION_METHODS[1],
            // The reference variants are declared in `METHODS` order.
            #[allow(clippy::indexing_slicing)]
            reference => METHODS[reference as usize],
        }
    }

    /// Parse a wire name (exact), reference and extension methods alike.
    pub fn parse(s: &str) -> Option<Self> {
        Method::ALL
            .into_iter()
            .chain(Method::EXTENSIONS)
            .find(|m| m.as_str() == s)
    }

    /// An opt-in extension method (docs/extensions.md): unknown to a client
    /// that did not opt in.
    pub const fn is_extension(self) -> bool {
        matches!(self, Method::CancelTurn | Method::SteerTurn)
    }

    /// Gated by `session.registerDriver` (`-32001`, checked first).
    pub const fn requires_driver(self) -> bool {
        !matches!(
            self,
            Method::RegisterDriver | Method::Subscribe | Method::Unsubscribe
        )
    }

    /// Checks the session is `open` (`-32000 session is <state>, not open`)
    /// before doing anything (spec 01 §6.1).
    pub const fn checks_open_state(self) -> bool {
        matches!(
            self,
            Method::RegisterDriver
                | Method::SendMessage
                | Method::Compact
                | Method::StartRemoteSandbox
                | Method::UpdateClientTools
        )
    }

    /// Streams `session.event` frames (sendMessage, compact, subscribe).
    pub const fn is_streaming(self) -> bool {
        matches!(
            self,
            Method::SendMessage | Method::Compact | Method::Subscribe
        )
    }

    /// Serialized on the per-session turn gate.
    pub const fn uses_turn_gate(self) -> bool {
        matches!(self, Method::SendMessage | Method::Compact)
    }
}

impl Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded request envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `None` = notification (no `id` member); `Some(Value::Null)` for
    /// `"id": null` (a request, echoed as `null`).
    pub id: Option<Value>,
    /// A reference method or an extension one (the engine answers the
    /// latter as unknown unless the caller opted in).
    pub method: Method,
    /// `params`; absent (or `null`) is `{}`.
    pub params: Value,
}

impl Call {
    /// Whether this is a notification (no terminal frame may be written).
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The terminal result frame for this call, or `None` for a
    /// notification.
    pub fn result_frame(&self, result_json: &str) -> Option<String> {
        self.id.as_ref().map(|id| result_frame(id, result_json))
    }

    /// The terminal error frame for this call, or `None` for a notification.
    pub fn error_frame(&self, code: i64, message: &str) -> Option<String> {
        self.id
            .as_ref()
            .map(|id| error_frame(Some(id), code, message))
    }
}

/// An envelope-level failure (spec 01 §5.2 steps 1–6).
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeError {
    /// The id to echo (`Some(Null)` for steps 1–3; the request's id, or
    /// `None` when it had none, for steps 4–6).
    pub id: Option<Value>,
    /// JSON-RPC code.
    pub code: i64,
    /// JSON-RPC message.
    pub message: String,
    /// Steps 1–3: the frame is written even without an id.
    pub always_answer: bool,
}

impl EnvelopeError {
    fn anonymous(code: i64, message: &str) -> Self {
        EnvelopeError {
            id: Some(Value::Null),
            code,
            message: message.to_owned(),
            always_answer: true,
        }
    }

    /// The frame to write, or `None` when it must not be written (a
    /// notification failing at step 4 or later: empty body, C-057).
    pub fn frame(&self) -> Option<String> {
        match (&self.id, self.always_answer) {
            (Some(id), _) => Some(error_frame(Some(id), self.code, &self.message)),
            (None, true) => Some(error_frame(Some(&Value::Null), self.code, &self.message)),
            (None, false) => None,
        }
    }
}

impl Display for EnvelopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for EnvelopeError {}

/// `-32700` message.
pub const MSG_PARSE_ERROR: &str = "Parse error";
/// `-32600` message for a batch array (C-052).
pub const MSG_BATCH: &str = "Invalid Request: batch requests are not supported";
/// `-32600` message for a non-object body (C-053).
pub const MSG_INVALID_REQUEST: &str = "Invalid Request";
/// `-32600` message for a missing / wrong `jsonrpc` (C-054).
pub const MSG_BAD_VERSION: &str = "Invalid Request: missing or wrong \"jsonrpc\" version";
/// `-32600` message for a missing / non-string `method` (C-055).
pub const MSG_MISSING_METHOD: &str = "Invalid Request: missing \"method\"";
/// `-32603` message (always this text).
pub const MSG_INTERNAL: &str = "Internal error";

/// Default nesting limit for [`decode_call_limited`].
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Decode and validate one request envelope (spec 01 §5.2 steps 1–6).
///
/// 1. not JSON → `-32700 Parse error`, id null;
/// 2. array → `-32600 Invalid Request: batch requests are not supported`, id null;
/// 3. non-object → `-32600 Invalid Request`, id null;
/// 4. `jsonrpc` ≠ `"2.0"` → `-32600 Invalid Request: missing or wrong "jsonrpc" version`, echoed id;
/// 5. `method` missing / not a string → `-32600 Invalid Request: missing "method"`, echoed id;
/// 6. unknown method → `-32601 Method not found: <method>`, echoed id.
///
/// Steps 1–3 always answer; steps 4–6 answer only when an `id` member was
/// present. Absent or `null` params become `{}` (C-062).
pub fn decode_call(body: &[u8]) -> Result<Call, EnvelopeError> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            return Err(EnvelopeError::anonymous(
                codes::PARSE_ERROR,
                MSG_PARSE_ERROR,
            ))
        }
    };
    let mut obj = match value {
        Value::Object(m) => m,
        Value::Array(_) => return Err(EnvelopeError::anonymous(codes::INVALID_REQUEST, MSG_BATCH)),
        _ => {
            return Err(EnvelopeError::anonymous(
                codes::INVALID_REQUEST,
                MSG_INVALID_REQUEST,
            ))
        }
    };
    let id = obj.shift_remove("id");
    let fail = |id: Option<Value>, code: i64, message: String| EnvelopeError {
        id,
        code,
        message,
        always_answer: false,
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(fail(id, codes::INVALID_REQUEST, MSG_BAD_VERSION.to_owned()));
    }
    let method = match obj.shift_remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Err(fail(
                id,
                codes::INVALID_REQUEST,
                MSG_MISSING_METHOD.to_owned(),
            ))
        }
    };
    // Extension methods pass the envelope; the engine answers them exactly
    // like an unknown method unless the caller opted in.
    let Some(method) = Method::parse(&method) else {
        let message = format!("Method not found: {method}");
        return Err(fail(id, codes::METHOD_NOT_FOUND, message));
    };
    let params = match obj.shift_remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p) => p,
    };
    Ok(Call { id, method, params })
}

/// [`decode_call`] preceded by a [`check_depth`] guard: a body nested deeper
/// than `max_depth` is answered (always, id null) with
/// `-32600 Invalid Request: JSON nested deeper than <max_depth> levels`
/// without ever being handed to the recursive parser.
pub fn decode_call_limited(body: &[u8], max_depth: usize) -> Result<Call, EnvelopeError> {
    if !check_depth(body, max_depth) {
        return Err(EnvelopeError::anonymous(
            codes::INVALID_REQUEST,
            &format!("Invalid Request: JSON nested deeper than {max_depth} levels"),
        ));
    }
    decode_call(body)
}

/// Whether the array/object nesting of `body` never exceeds `max_depth`
/// (`{}` and `[]` are depth 1; scalars depth 0). Brackets inside strings
/// (including after `\"` escapes) are ignored. Linear, non-recursive; does
/// not otherwise validate the JSON.
pub fn check_depth(body: &[u8], max_depth: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

// ---------------------------------------------------------------------------
// Frames

/// The lagged-subscriber notification (no id; the stream ends after it).
pub const LAGGED_FRAME: &str =
    "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"lagged; reconnect with since_event_id\"}}\n";

/// The replay-failure frame of `session.subscribe`.
pub const REPLAY_FAILED_FRAME: &str =
    "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"replay failed\"}}\n";

fn push_id(out: &mut String, id: &Value) {
    match id {
        Value::String(s) => push_str(out, s),
        Value::Null => out.push_str("null"),
        other => out.push_str(&serde_json::to_string(other).unwrap_or_else(|_| "null".into())),
    }
}

/// `{"jsonrpc":"2.0","method":"session.event","params":<event>}\n`; the
/// EventView JSON is inserted verbatim.
pub fn event_frame(event_view_json: &str) -> String {
    let mut out = String::with_capacity(EVENT_FRAME_HEAD.len() + event_view_json.len() + 2);
    out.push_str(EVENT_FRAME_HEAD);
    out.push_str(event_view_json);
    out.push_str(EVENT_FRAME_TAIL);
    out
}

/// What precedes the EventView in [`event_frame`].
pub const EVENT_FRAME_HEAD: &str = "{\"jsonrpc\":\"2.0\",\"method\":\"session.event\",\"params\":";
/// What follows it.
pub const EVENT_FRAME_TAIL: &str = "}\n";

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}\n`; the result JSON is
/// inserted verbatim and the id echoed verbatim (C-059, C-060).
pub fn result_frame(id: &Value, result_json: &str) -> String {
    let mut out = result_frame_head(id, result_json.len());
    out.push_str(result_json);
    out.push_str(RESULT_FRAME_TAIL);
    out
}

/// What precedes the result in [`result_frame`]:
/// `{"jsonrpc":"2.0","id":<id>,"result":`, with room for `reserve` more
/// bytes (a frame sent in parts writes the result after it).
pub fn result_frame_head(id: &Value, reserve: usize) -> String {
    let mut out = String::with_capacity(40 + reserve);
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    push_id(&mut out, id);
    out.push_str(",\"result\":");
    out
}

/// What follows the result in [`result_frame`].
pub const RESULT_FRAME_TAIL: &str = "}\n";

/// `{"jsonrpc":"2.0","id":<id>,"error":{"code":<c>,"message":<m>}}\n`; with
/// `id == None` the `id` member is omitted (the lagged shape). The error
/// object never has a `data` member (C-063).
pub fn error_frame(id: Option<&Value>, code: i64, message: &str) -> String {
    error_frame_with(id, code, message, None)
}

/// [`error_frame`] with a `data` member (already JSON): only extension
/// errors a deployment switched on carry one (quotas).
pub fn error_frame_with_data(id: Option<&Value>, code: i64, message: &str, data: &str) -> String {
    error_frame_with(id, code, message, Some(data))
}

fn error_frame_with(id: Option<&Value>, code: i64, message: &str, data: Option<&str>) -> String {
    let mut out = String::with_capacity(64 + message.len());
    out.push_str("{\"jsonrpc\":\"2.0\",");
    if let Some(id) = id {
        out.push_str("\"id\":");
        push_id(&mut out, id);
        out.push(',');
    }
    out.push_str("\"error\":{\"code\":");
    out.push_str(&code.to_string());
    out.push_str(",\"message\":");
    push_str(&mut out, message);
    if let Some(data) = data {
        out.push_str(",\"data\":");
        out.push_str(data);
    }
    out.push_str("}}\n");
    out
}

// ---------------------------------------------------------------------------
// Application errors

/// A JSON-RPC error object `{code, message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    /// Code (see [`codes`]).
    pub code: i64,
    /// Message.
    pub message: String,
}

impl From<(i64, String)> for RpcError {
    fn from((code, message): (i64, String)) -> Self {
        RpcError { code, message }
    }
}

impl Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for RpcError {}

/// Reason text for a resume when no pause is parked (C-110).
pub const NO_PAUSED_TURN_REASON: &str =
    "no paused turn is awaiting tool results (it may have timed out and been retired)";

impl RpcError {
    /// Any code / message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// The terminal frame for `id` (`None` = notification → nothing).
    pub fn frame(&self, id: Option<&Value>) -> Option<String> {
        id.map(|id| error_frame(Some(id), self.code, &self.message))
    }

    /// `-32602 Invalid params: <detail>`.
    pub fn invalid_params(detail: impl Display) -> Self {
        invalid_params(detail).into()
    }

    /// Wrap a `*Params::parse` error (already a full message) as `-32602`.
    pub fn params(full_message: String) -> Self {
        RpcError::new(codes::INVALID_PARAMS, full_message)
    }

    /// `-32603 Internal error`.
    pub fn internal() -> Self {
        RpcError::new(codes::INTERNAL_ERROR, MSG_INTERNAL)
    }

    /// `-32000 <message>`.
    pub fn application(message: impl Into<String>) -> Self {
        RpcError::new(codes::APPLICATION_ERROR, message)
    }

    /// `-32001 call session.registerDriver before <method>`.
    pub fn driver_not_registered(method: &str) -> Self {
        RpcError::new(
            codes::DRIVER_NOT_REGISTERED,
            format!("call session.registerDriver before {method}"),
        )
    }

    /// `-32000 session is <state>, not open`.
    pub fn not_open(state: &str) -> Self {
        Self::application(format!("session is {state}, not open"))
    }

    /// `-32000 session no longer exists`.
    pub fn session_gone() -> Self {
        Self::application("session no longer exists")
    }

    /// `-32000 profile_unavailable: the profile bound to this session is no longer available`.
    pub fn profile_unavailable() -> Self {
        Self::application(
            "profile_unavailable: the profile bound to this session is no longer available",
        )
    }

    /// `-32000 tool result merge invalid: <reason>`.
    pub fn merge_invalid(reason: impl Display) -> Self {
        Self::application(format!("tool result merge invalid: {reason}"))
    }

    /// `-32000 session loop failed`.
    pub fn loop_failed() -> Self {
        Self::application("session loop failed")
    }

    /// `-32000 compaction failed: <detail>`.
    pub fn compaction_failed(detail: impl Display) -> Self {
        Self::application(format!("compaction failed: {detail}"))
    }

    /// `-32020 turn in progress: resolve the paused turn before compacting`.
    pub fn turn_in_progress() -> Self {
        RpcError::new(
            codes::TURN_IN_PROGRESS,
            "turn in progress: resolve the paused turn before compacting",
        )
    }

    /// `-32011 sandbox_image_not_allowed: image "<image>" is not in this session profile's available_sandboxes`.
    pub fn sandbox_image_not_allowed(image: &str) -> Self {
        RpcError::new(
            codes::SANDBOX_IMAGE_NOT_ALLOWED,
            format!(
                "sandbox_image_not_allowed: image \"{image}\" is not in this session profile's available_sandboxes"
            ),
        )
    }

    /// `-32000 a remote sandbox is already running for this session; call session.stopRemoteSandbox first`.
    pub fn sandbox_already_running() -> Self {
        Self::application(
            "a remote sandbox is already running for this session; call session.stopRemoteSandbox first",
        )
    }

    /// `-32012 sandbox_start_failed: <detail>`.
    pub fn sandbox_start_failed(detail: impl Display) -> Self {
        RpcError::new(
            codes::SANDBOX_START_FAILED,
            format!("sandbox_start_failed: {detail}"),
        )
    }

    /// `-32013 sandbox_not_running: no remote sandbox is running for this session`.
    pub fn sandbox_not_running() -> Self {
        RpcError::new(
            codes::SANDBOX_NOT_RUNNING,
            "sandbox_not_running: no remote sandbox is running for this session",
        )
    }

    /// `-32000 sandbox stop failed: <detail>`.
    pub fn sandbox_stop_failed(detail: impl Display) -> Self {
        Self::application(format!("sandbox stop failed: {detail}"))
    }

    /// `-32000 sandbox exec failed: <detail>`.
    pub fn sandbox_exec_failed(detail: impl Display) -> Self {
        Self::application(format!("sandbox exec failed: {detail}"))
    }

    /// `-32014 subagent_not_found: no tracked subagent "<id>" for this session`.
    pub fn subagent_not_found(id: &str) -> Self {
        RpcError::new(
            codes::SUBAGENT_NOT_FOUND,
            format!("subagent_not_found: no tracked subagent \"{id}\" for this session"),
        )
    }

    /// `-32015 tool_not_allowed: tool "<name>" is not in the profile's allowlist`.
    pub fn tool_not_allowed(name: &str) -> Self {
        RpcError::new(
            codes::TOOL_NOT_ALLOWED,
            format!("tool_not_allowed: {}", tool_not_allowed_detail(name)),
        )
    }
}

/// `(-32602, "Invalid params: <detail>")`.
pub fn invalid_params(detail: impl Display) -> (i64, String) {
    (codes::INVALID_PARAMS, format!("Invalid params: {detail}"))
}

// ---------------------------------------------------------------------------
// Results

/// Fixed / small terminal `result` bodies.
pub mod results {
    use crate::wire::json::{push_opt_str, push_str};

    /// `session.registerDriver`.
    pub const REGISTERED: &str = "{\"registered\":true}";
    /// `session.unsubscribe`.
    pub const UNSUBSCRIBED: &str = "{\"unsubscribed\":true}";
    /// `session.updateClientTools`.
    pub const UPDATED: &str = "{\"updated\":true}";
    /// `session.reportLocalSandbox` / `session.reportLocalSubagent`.
    pub const REPORTED: &str = "{\"reported\":true}";

    /// `{"message":<message>,"events":[<event>…]}` (sendMessage); all
    /// arguments are already-serialized JSON.
    pub fn send_message<S: AsRef<str>>(message_json: &str, events_json: &[S]) -> String {
        let cap = message_json.len()
            + events_json
                .iter()
                .map(|e| e.as_ref().len() + 1)
                .sum::<usize>()
            + 24;
        let mut out = String::with_capacity(cap);
        out.push_str("{\"message\":");
        out.push_str(message_json);
        out.push_str(",\"events\":[");
        for (i, e) in events_json.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(e.as_ref());
        }
        out.push_str("]}");
        out
    }

    /// `{"sandbox_id","image","started_at"|null}` (startRemoteSandbox).
    pub fn sandbox_started(sandbox_id: &str, image: &str, started_at: Option<&str>) -> String {
        let mut out = String::from("{\"sandbox_id\":");
        push_str(&mut out, sandbox_id);
        out.push_str(",\"image\":");
        push_str(&mut out, image);
        out.push_str(",\"started_at\":");
        push_opt_str(&mut out, started_at);
        out.push('}');
        out
    }

    /// `{"stopped":true,"image","sandbox_id"}` (stopRemoteSandbox).
    pub fn sandbox_stopped(image: &str, sandbox_id: &str) -> String {
        let mut out = String::from("{\"stopped\":true,\"image\":");
        push_str(&mut out, image);
        out.push_str(",\"sandbox_id\":");
        push_str(&mut out, sandbox_id);
        out.push('}');
        out
    }

    /// `{"stdout","stderr","exit_code"}` (execRemoteSandbox).
    pub fn exec(stdout: &str, stderr: &str, exit_code: i64) -> String {
        let mut out = String::from("{\"stdout\":");
        push_str(&mut out, stdout);
        out.push_str(",\"stderr\":");
        push_str(&mut out, stderr);
        out.push_str(",\"exit_code\":");
        out.push_str(&exit_code.to_string());
        out.push('}');
        out
    }

    /// `{"cancelled":true,"subagent_id","was_running"}` (cancelSubagent).
    pub fn subagent_cancelled(subagent_id: &str, was_running: bool) -> String {
        let mut out = String::from("{\"cancelled\":true,\"subagent_id\":");
        push_str(&mut out, subagent_id);
        out.push_str(",\"was_running\":");
        out.push_str(if was_running { "true" } else { "false" });
        out.push('}');
        out
    }
}

mod extensions;
mod line_separators;
mod params;
mod params_error;
pub use extensions::*;
pub use line_separators::escape_line_separators;
pub use params::*;
pub use params_error::ParamsError;
