//! Content-block helpers.
//!
//! Message `content` is a plain string or an array of typed blocks. Unknown
//! block types must pass through verbatim, so `serde_json::Value` stays the
//! carrier; this module classifies and edits blocks in place.
//!
//! ```json
//! {"type": "text",        "text": "…"}
//! {"type": "tool_use",    "id": "tu_…", "name": "…", "input": {…}, "dispatch": "client"}
//! {"type": "tool_result", "tool_use_id": "tu_…", "content": <string|block[]>, "is_error": false}
//! ```

use serde_json::{Map, Value};

static NULL: Value = Value::Null;

/// Server-internal `tool_use` members stripped before a provider sees a block.
pub const INTERNAL_TOOL_USE_MEMBERS: [&str; 2] = ["dispatch", "caller"];

/// Dispatch classes tagged on paused `tool_use` blocks and tool events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// Executed by the acting client harness.
    Client,
    /// Auto-mode sandbox tool run by the server.
    Sandbox,
    /// Remote subagent launch / status tool run by the server.
    Subagent,
    /// MCP tool (also every unknown name).
    Mcp,
}

impl Dispatch {
    /// Every class, in priority order.
    pub const ALL: [Dispatch; 4] = [
        Dispatch::Client,
        Dispatch::Sandbox,
        Dispatch::Subagent,
        Dispatch::Mcp,
    ];

    /// Wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Dispatch::Client => "client",
            Dispatch::Sandbox => "sandbox",
            Dispatch::Subagent => "subagent",
            Dispatch::Mcp => "mcp",
        }
    }

    /// Parse a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "client" => Some(Dispatch::Client),
            "sandbox" => Some(Dispatch::Sandbox),
            "subagent" => Some(Dispatch::Subagent),
            "mcp" => Some(Dispatch::Mcp),
            _ => None,
        }
    }
}

/// A borrowed, classified view of one block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Block<'a> {
    /// `{"type":"text","text":<string>}`
    Text(&'a str),
    /// `{"type":"tool_use","id":<string>,"name":<string>,"input":…}`;
    /// `input` is `null` when absent.
    ToolUse {
        /// Provider tool-use id.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Tool input.
        input: &'a Value,
    },
    /// `{"type":"tool_result","tool_use_id":<string>,"content":…,"is_error":…}`;
    /// `content` is `null` when absent, `is_error` is `true` only for a
    /// literal `true`.
    ToolResult {
        /// Echoed tool-use id.
        tool_use_id: &'a str,
        /// Result content (string or blocks).
        content: &'a Value,
        /// Error flag (absent = false).
        is_error: bool,
    },
    /// Anything else (unknown types, malformed known types, non-objects).
    Other,
}

impl<'a> Block<'a> {
    /// Classify one block value.
    pub fn classify(block: &'a Value) -> Block<'a> {
        let Some(obj) = block.as_object() else {
            return Block::Other;
        };
        match obj.get("type").and_then(Value::as_str) {
            Some("text") => match obj.get("text").and_then(Value::as_str) {
                Some(t) => Block::Text(t),
                None => Block::Other,
            },
            Some("tool_use") => {
                let id = obj.get("id").and_then(Value::as_str);
                let name = obj.get("name").and_then(Value::as_str);
                match (id, name) {
                    (Some(id), Some(name)) => Block::ToolUse {
                        id,
                        name,
                        input: obj.get("input").unwrap_or(&NULL),
                    },
                    _ => Block::Other,
                }
            }
            Some("tool_result") => match obj.get("tool_use_id").and_then(Value::as_str) {
                Some(tool_use_id) => Block::ToolResult {
                    tool_use_id,
                    content: obj.get("content").unwrap_or(&NULL),
                    is_error: obj.get("is_error").and_then(Value::as_bool) == Some(true),
                },
                None => Block::Other,
            },
            _ => Block::Other,
        }
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// The blocks of `content`: the array elements, or nothing for a string or
/// any other value.
pub fn blocks(content: &Value) -> &[Value] {
    match content {
        Value::Array(a) => a.as_slice(),
        _ => &[],
    }
}

/// `block.type == "text"`.
pub fn is_text(block: &Value) -> bool {
    block_type(block) == Some("text")
}

/// `block.type == "tool_use"`.
pub fn is_tool_use(block: &Value) -> bool {
    block_type(block) == Some("tool_use")
}

/// `block.type == "tool_result"`.
pub fn is_tool_result(block: &Value) -> bool {
    block_type(block) == Some("tool_result")
}

/// Whether `content` is an array holding at least one `tool_result` block.
pub fn has_tool_result(content: &Value) -> bool {
    blocks(content).iter().any(is_tool_result)
}

/// Whether `content` is an array holding at least one `tool_use` block.
pub fn has_tool_use(content: &Value) -> bool {
    blocks(content).iter().any(is_tool_use)
}

/// The string `id`s of the `tool_use` blocks of `content`, in order.
pub fn tool_use_ids(content: &Value) -> Vec<&str> {
    blocks(content)
        .iter()
        .filter(|b| is_tool_use(b))
        .filter_map(|b| b.get("id").and_then(Value::as_str))
        .collect()
}

/// The string `tool_use_id`s of the `tool_result` blocks of `content`, in
/// order.
pub fn tool_result_ids(content: &Value) -> Vec<&str> {
    blocks(content)
        .iter()
        .filter(|b| is_tool_result(b))
        .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
        .collect()
}

/// Remove the server-internal members (`dispatch`, `caller`) from a
/// `tool_use` block, in place. Other blocks are untouched. Member order of
/// the remaining members is preserved.
pub fn strip_internal(block: &mut Value) {
    if !is_tool_use(block) {
        return;
    }
    if let Some(obj) = block.as_object_mut() {
        for m in INTERNAL_TOOL_USE_MEMBERS {
            obj.shift_remove(m);
        }
    }
}

/// [`strip_internal`] over every block of `content` (no-op for strings).
pub fn strip_internal_content(content: &mut Value) {
    if let Value::Array(items) = content {
        items.iter_mut().for_each(strip_internal);
    }
}

/// [`strip_internal_content`] over the `content` of every message
/// (`{"role","content"}` objects) of a provider-facing list.
pub fn strip_internal_messages(messages: &mut [Value]) {
    for m in messages {
        if let Some(c) = m.get_mut("content") {
            strip_internal_content(c);
        }
    }
}

/// Set (or replace) `dispatch` on a `tool_use` block, in place.
pub fn set_dispatch(block: &mut Value, dispatch: Dispatch) {
    if !is_tool_use(block) {
        return;
    }
    if let Some(obj) = block.as_object_mut() {
        obj.insert("dispatch".into(), Value::String(dispatch.as_str().into()));
    }
}

/// `{"type":"text","text":s}`.
pub fn text_block(s: impl Into<String>) -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("type".into(), Value::String("text".into()));
    m.insert("text".into(), Value::String(s.into()));
    Value::Object(m)
}

/// `{"type":"tool_result","tool_use_id":id,"content":content,"is_error":is_error}`.
pub fn tool_result_block(tool_use_id: impl Into<String>, content: Value, is_error: bool) -> Value {
    let mut m = Map::with_capacity(4);
    m.insert("type".into(), Value::String("tool_result".into()));
    m.insert("tool_use_id".into(), Value::String(tool_use_id.into()));
    m.insert("content".into(), content);
    m.insert("is_error".into(), Value::Bool(is_error));
    Value::Object(m)
}

/// `{"role":role,"content":content}`.
pub fn message(role: impl Into<String>, content: Value) -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("role".into(), Value::String(role.into()));
    m.insert("content".into(), content);
    Value::Object(m)
}

/// Content as a block array: a string becomes one text block (an empty
/// string becomes no block), an array is returned as-is, anything else is
/// wrapped as a single element.
pub fn into_blocks(content: Value) -> Vec<Value> {
    match content {
        Value::Array(a) => a,
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![text_block(s)],
        other => vec![other],
    }
}

/// The concatenated `text` of the text blocks of `content` (or the string
/// itself), joined without separator.
pub fn joined_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|b| match Block::classify(b) {
                Block::Text(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => String::new(),
    }
}
