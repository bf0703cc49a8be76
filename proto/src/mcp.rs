//! The client side of the Model Context Protocol as `baesrv` speaks it
//! (spec 06 §4): JSON-RPC 2.0 messages for the handshake and `tools/call`,
//! matching a response by id on a line stream or inside a `text/event-stream`
//! body, the `tools/list` → provider-shape mapping and the interpretation of
//! a call's answer. Pure: bytes in, values out; transports live elsewhere.

use serde_json::{json, Map, Value};

/// The protocol version sent in `initialize` (spec 06 §4.2).
pub const PROTOCOL_VERSION: &str = "2024-11-05";

/// Requests the server makes of an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpMethod {
    Initialize,
    ToolsList,
    ToolsCall,
}

impl McpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            McpMethod::Initialize => "initialize",
            McpMethod::ToolsList => "tools/list",
            McpMethod::ToolsCall => "tools/call",
        }
    }
}

/// One compact JSON-RPC request object (no line terminator).
pub fn request(id: u64, method: McpMethod, params: &Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method.as_str(), "params": params});
    msg.to_string().into_bytes()
}

/// `notifications/initialized` with params `{}`.
pub fn initialized_notification() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}"#.to_vec()
}

/// `initialize` params (spec 06 §4.2).
pub fn initialize_params(server_version: &str) -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "baesrv", "version": server_version},
    })
}

/// `tools/call` params.
pub fn call_params(tool: &str, arguments: &Value) -> Value {
    json!({"name": tool, "arguments": arguments})
}

/// A JSON-RPC answer to one of our requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The `result` member (`null` when absent).
    Result(Value),
    /// The `error` member.
    Error { code: i64, message: String },
}

impl Answer {
    /// Failure text of an `error` answer (spec 06 §4.3).
    pub fn error_text(code: i64, message: &str) -> String {
        format!("MCP protocol error: [{code}] {message}")
    }
}

/// The answer to request `id` if `message` is one: a JSON object whose
/// numeric `id` equals `id`. Anything else (non-JSON, notifications, other
/// ids, requests from the server) is `None` and skipped (spec 06 §4.4).
pub fn match_answer(message: &[u8], id: u64) -> Option<Answer> {
    let trimmed = trim_ascii(message);
    if trimmed.first() != Some(&b'{') {
        return None;
    }
    let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(trimmed) else {
        return None;
    };
    if obj.get("id").and_then(Value::as_u64) != Some(id) || obj.contains_key("method") {
        return None;
    }
    if let Some(err) = obj.remove("error") {
        let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = match err.get("message") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        return Some(Answer::Error { code, message });
    }
    Some(Answer::Result(obj.remove("result").unwrap_or(Value::Null)))
}

/// Scans a `text/event-stream` body for the answer to `id`: each event's
/// `data:` lines are joined with `\n` (the SSE rules) and matched like a
/// line-stream message.
pub fn match_answer_in_sse(body: &[u8], id: u64) -> Option<Answer> {
    let mut data: Vec<u8> = Vec::new();
    let mut has_data = false;
    for raw in body.split(|&b| b == b'\n') {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() {
            if has_data {
                if let Some(a) = match_answer(&data, id) {
                    return Some(a);
                }
            }
            data.clear();
            has_data = false;
            continue;
        }
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            if has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(rest);
            has_data = true;
        }
    }
    // A final event without its blank line still counts.
    if has_data {
        return match_answer(&data, id);
    }
    None
}

/// One tool from `tools/list`, in the provider-facing shape (spec 06 §1 row 4).
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub name: String,
    /// `{"name", "description" (default ""), "input_schema" (default
    /// `{"type":"object"}`)}`.
    pub advertised: Value,
}

/// Maps a `tools/list` result: entries with a string `name`, in order
/// (`result.tools` missing → none; no pagination cursor is followed).
pub fn tools_from_list(result: &Value) -> Vec<McpTool> {
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?.to_string();
            let description = t
                .get("description")
                .filter(|d| !d.is_null())
                .cloned()
                .unwrap_or_else(|| Value::String(String::new()));
            let schema = t
                .get("inputSchema")
                .filter(|s| !s.is_null())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            let mut advertised = Map::with_capacity(3);
            advertised.insert("name".into(), Value::String(name.clone()));
            advertised.insert("description".into(), description);
            advertised.insert("input_schema".into(), schema);
            Some(McpTool {
                name,
                advertised: Value::Object(advertised),
            })
        })
        .collect()
}

/// What a `tools/call` came to, as recorded and rendered (spec 06 §2.1,
/// 02 §4.8).
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The server answered with a result (`is_error` = its `isError`).
    Returned { result: Value, is_error: bool },
    /// The call failed: transport, timeout or a JSON-RPC `error`.
    Failed(String),
}

impl CallOutcome {
    /// Interprets the answer to a `tools/call`.
    pub fn from_answer(answer: Answer) -> Self {
        match answer {
            Answer::Error { code, message } => {
                CallOutcome::Failed(Answer::error_text(code, &message))
            }
            Answer::Result(result) => {
                let is_error = result
                    .get("isError")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                CallOutcome::Returned { result, is_error }
            }
        }
    }

    /// The `tool_result` content and `is_error`.
    pub fn rendered(&self) -> (Value, bool) {
        match self {
            CallOutcome::Returned { result, is_error } => {
                let content = match result.get("content") {
                    None | Some(Value::Null) => Value::Array(Vec::new()),
                    Some(c) => c.clone(),
                };
                (content, *is_error)
            }
            CallOutcome::Failed(text) => (error_content(text), true),
        }
    }

    /// The `mcp.response` payload.
    pub fn response_payload(&self, server_name: &str) -> Value {
        match self {
            CallOutcome::Returned { result, is_error } => {
                json!({"server_name": server_name, "ok": !is_error, "result": result})
            }
            CallOutcome::Failed(text) => {
                json!({"server_name": server_name, "ok": false, "error": text})
            }
        }
    }
}

/// `[{"type":"text","text":"MCP error: <text>"}]`.
pub fn error_content(text: &str) -> Value {
    json!([{"type": "text", "text": format!("MCP error: {text}")}])
}

/// The error text of an unroutable tool (spec 06 §2.1).
pub fn unrouted_error(tool: &str) -> String {
    format!("no MCP server is configured for tool '{tool}'")
}

/// Informative failure texts (spec 06 §4.3).
pub mod errors {
    /// `method` is a request method or `notifications/initialized`.
    pub fn timed_out(method: &str) -> String {
        format!("MCP transport error: timed out awaiting {method} response")
    }
    pub const CLOSED: &str = "MCP transport error: MCP server closed the connection";
    pub fn http_status(status: u16) -> String {
        format!("MCP transport error: MCP server returned HTTP {status}")
    }
    pub const NO_SSE_MATCH: &str =
        "MCP protocol error: no matching JSON-RPC response in SSE stream";
    pub const NOT_JSON: &str =
        "MCP protocol error: response body is not a matching JSON-RPC object";
    pub fn transport(detail: &str) -> String {
        format!("MCP transport error: {detail}")
    }
    pub fn connect(detail: &str) -> String {
        format!("MCP connect failed: {detail}")
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    b.get(start..end).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_request_is_exact_spec_06_4_2() {
        let bytes = request(1, McpMethod::Initialize, &initialize_params("1.2.3"));
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion":"2024-11-05","capabilities":{},
                "clientInfo":{"name":"baesrv","version":"1.2.3"}}})
        );
        assert!(!bytes.contains(&b'\n'));
    }

    #[test]
    fn match_skips_everything_but_the_answer() {
        assert_eq!(match_answer(b"", 1), None);
        assert_eq!(match_answer(b"hello", 1), None);
        assert_eq!(match_answer(b"[1]", 1), None);
        assert_eq!(
            match_answer(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#, 1),
            None
        );
        assert_eq!(
            match_answer(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#, 1),
            None
        );
        assert_eq!(
            match_answer(br#"{"jsonrpc":"2.0","id":"1","result":{}}"#, 1),
            None
        );
        // A server-to-client request reusing our id is not an answer.
        assert_eq!(
            match_answer(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 1),
            None
        );
        assert_eq!(
            match_answer(b" {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":1}}\r", 1),
            Some(Answer::Result(json!({"a":1})))
        );
        assert_eq!(
            match_answer(br#"{"jsonrpc":"2.0","id":1}"#, 1),
            Some(Answer::Result(Value::Null))
        );
        assert_eq!(
            match_answer(
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}"#,
                1
            ),
            Some(Answer::Error {
                code: -32601,
                message: "nope".into()
            })
        );
    }

    #[test]
    fn sse_scan_joins_data_lines_and_skips_other_events() {
        let body = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\r\n\r\n\
data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{\"ok\":true}}\n\n";
        assert_eq!(
            match_answer_in_sse(body, 7),
            Some(Answer::Result(json!({"ok": true})))
        );
        assert_eq!(match_answer_in_sse(body, 8), None);
        // No trailing blank line.
        assert_eq!(
            match_answer_in_sse(b"data:{\"id\":3,\"result\":1}", 3),
            Some(Answer::Result(json!(1)))
        );
        assert_eq!(match_answer_in_sse(b"", 3), None);
    }

    #[test]
    fn tools_list_maps_to_provider_shape_with_defaults() {
        let result = json!({"tools": [
            {"name": "a", "description": "d", "inputSchema": {"type":"object","properties":{}}},
            {"name": "b"},
            {"description": "no name"},
            {"name": 5},
        ], "nextCursor": "ignored"});
        let tools = tools_from_list(&result);
        assert_eq!(tools.len(), 2);
        assert_eq!(
            tools[0].advertised,
            json!({"name":"a","description":"d","input_schema":{"type":"object","properties":{}}})
        );
        assert_eq!(
            tools[1].advertised,
            json!({"name":"b","description":"","input_schema":{"type":"object"}})
        );
        assert!(tools_from_list(&json!({})).is_empty());
        assert!(tools_from_list(&Value::Null).is_empty());
    }

    #[test]
    fn call_outcomes_render_per_spec_06_2_1() {
        let ok = CallOutcome::from_answer(Answer::Result(
            json!({"content":[{"type":"text","text":"hi"}]}),
        ));
        assert_eq!(ok.rendered(), (json!([{"type":"text","text":"hi"}]), false));
        assert_eq!(
            ok.response_payload("s"),
            json!({"server_name":"s","ok":true,"result":{"content":[{"type":"text","text":"hi"}]}})
        );
        let tool_err = CallOutcome::from_answer(Answer::Result(json!({"isError": true})));
        assert_eq!(tool_err.rendered(), (json!([]), true));
        assert_eq!(tool_err.response_payload("s")["ok"], json!(false));
        assert!(tool_err.response_payload("s").get("result").is_some());
        let proto_err = CallOutcome::from_answer(Answer::Error {
            code: -32602,
            message: "bad".into(),
        });
        assert_eq!(
            proto_err.rendered(),
            (
                json!([{"type":"text","text":"MCP error: MCP protocol error: [-32602] bad"}]),
                true
            )
        );
        assert_eq!(
            proto_err.response_payload("s"),
            json!({"server_name":"s","ok":false,"error":"MCP protocol error: [-32602] bad"})
        );
        assert_eq!(
            errors::timed_out(McpMethod::ToolsCall.as_str()),
            "MCP transport error: timed out awaiting tools/call response"
        );
    }
}
