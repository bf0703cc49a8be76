//! OpenAI Chat Completions translation (`05-profiles-and-providers.md`
//! §6.2, §7).

use serde_json::{json, Map, Value};

use super::{joined_text, text_block, to_json_text, ParseError, ProviderResponse, Tokens, Usage};

/// Canonical messages → Chat Completions messages (§6.2 table).
pub(super) fn translate_messages<M: std::borrow::Borrow<Value>>(messages: &[M]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages.iter().map(M::borrow) {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user")
            .to_string();
        match m.get("content") {
            Some(Value::String(s)) => out.push(json!({"role": role, "content": s})),
            Some(Value::Array(blocks)) if role == "assistant" => {
                out.push(assistant_message(blocks));
            }
            Some(Value::Array(blocks)) => {
                for b in blocks.iter().filter(|b| is_type(b, "tool_result")) {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                        "content": flatten_tool_result(b.get("content")),
                    }));
                }
                let text = joined_text(blocks);
                if !text.is_empty() {
                    out.push(json!({"role": role, "content": text}));
                }
            }
            _ => out.push(json!({"role": role, "content": ""})),
        }
    }
    out
}

fn is_type(b: &Value, ty: &str) -> bool {
    b.get("type").and_then(Value::as_str) == Some(ty)
}

fn assistant_message(blocks: &[Value]) -> Value {
    let text = joined_text(blocks);
    let mut msg = Map::new();
    msg.insert("role".into(), "assistant".into());
    msg.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    let calls: Vec<Value> = blocks
        .iter()
        .filter(|b| is_type(b, "tool_use"))
        .map(|b| {
            let input = match b.get("input") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(v) => v.clone(),
            };
            json!({
                "id": b.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": b.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": input.to_string(),
                },
            })
        })
        .collect();
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(msg)
}

/// §6.2 flattening of a `tool_result` content.
fn flatten_tool_result(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => {
            let text = joined_text(a);
            if text.is_empty() && !a.is_empty() {
                Value::Array(a.clone()).to_string()
            } else {
                text
            }
        }
        Some(other) => other.to_string(),
    }
}

/// Canonical tools → `{"type":"function","function":{…}}`; a `null` or
/// absent description is omitted (§10.1); `parameters` defaults to `{}`.
pub(super) fn translate_tools(tools: &[Value]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("name".into(), t.get("name").cloned().unwrap_or(Value::Null));
                if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
                    f.insert("description".into(), d.clone());
                }
                let params = match t.get("input_schema") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(s) => s.clone(),
                };
                f.insert("parameters".into(), params);
                json!({"type": "function", "function": Value::Object(f)})
            })
            .collect(),
    )
}

/// Chat Completions response → canonical content (§6.2), usage (§7.1) and
/// truncation (§7.2).
pub(super) fn parse(raw: Value) -> Result<ProviderResponse, ParseError> {
    let choice = raw.get("choices").and_then(|c| c.get(0));
    let message = choice
        .and_then(|c| c.get("message"))
        .filter(|m| m.is_object())
        .ok_or(ParseError::MissingMessage)?;

    let mut content = Vec::new();
    if let Some(s) = message.get("content").and_then(Value::as_str) {
        if !s.is_empty() {
            content.push(text_block(s));
        }
    }
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            let function = call.get("function");
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or(ParseError::MissingFunctionName)?;
            let input = match function.and_then(|f| f.get("arguments")) {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                Some(Value::String(s)) => {
                    serde_json::from_str(s).map_err(|e| ParseError::NonJsonArguments {
                        name: name.to_string(),
                        error: e.to_string(),
                    })?
                }
                // Some gateways send the arguments already decoded.
                Some(other) => other.clone(),
            };
            content.push(json!({
                "type": "tool_use",
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": name,
                "input": input,
            }));
        }
    }

    let truncated = (choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        == Some("length"))
    .then_some("finish_reason length");
    let usage = raw.get("usage").and_then(|u| {
        Some(Usage {
            input_tokens: u.get("prompt_tokens")?.as_u64()?,
            output_tokens: u.get("completion_tokens")?.as_u64()?,
        })
    });
    let tokens = usage.map(|u| {
        // Cached prompt tokens are part of `prompt_tokens`; a count larger
        // than the prompt is taken as the whole prompt.
        let cached = (raw.get("usage"))
            .and_then(|u| u.get("prompt_tokens_details"))
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(u.input_tokens);
        Tokens {
            input: u.input_tokens - cached,
            output: u.output_tokens,
            cache_write: 0,
            cache_read: cached,
        }
    });
    Ok(ProviderResponse {
        body_json: to_json_text(&raw),
        content,
        usage,
        tokens,
        truncated,
    })
}
