//! The other side: an unstreamed reply body rendered as the event stream a
//! provider would send for it, for the mock provider, the simulator and
//! tests. [`super::Assembler`] reads these events back into exactly the
//! body given (same members, same order), which is what the property tests
//! check; the mock's output is also read by the official SDKs' parsers
//! (testkit), so these shapes are the providers' wire, not only ours.

use serde_json::{json, Map, Value};

use crate::provider::Kind;

/// `s` cut into runs of at most `max_chars` characters (at least one run,
/// possibly empty).
pub fn pieces(s: &str, max_chars: usize) -> Vec<&str> {
    let max = max_chars.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for (count, (i, _)) in s.char_indices().enumerate() {
        if count > 0 && count % max == 0 {
            out.push(s.get(start..i).unwrap_or_default());
            start = i;
        }
    }
    out.push(s.get(start..).unwrap_or_default());
    out
}

/// One SSE event: `event: <name>` (when given) and the data on one line.
pub fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// A keep-alive of the kind's stream: Anthropic's `ping` event, an SSE
/// comment for OpenAI-style servers.
pub fn ping(kind: Kind) -> String {
    match kind {
        Kind::Anthropic => sse(Some("ping"), &json!({"type": "ping"})),
        Kind::Openai => ": ping\n\n".to_string(),
    }
}

/// An in-stream error event of the kind (Anthropic `error`; an OpenAI-style
/// chunk with an `error` object, as vLLM and gateways send).
pub fn error(kind: Kind, error_type: &str, message: &str) -> String {
    let error = json!({"type": error_type, "message": message});
    match kind {
        Kind::Anthropic => sse(Some("error"), &json!({"type": "error", "error": error})),
        Kind::Openai => sse(None, &json!({"error": error})),
    }
}

/// The events of `body` (a reply body of `kind`), each a complete SSE
/// event, text split into runs of at most `max_chars` characters.
pub fn events(kind: Kind, body: &Value, max_chars: usize) -> Vec<String> {
    match kind {
        Kind::Anthropic => anthropic(body, max_chars),
        Kind::Openai => openai(body, max_chars),
    }
}

fn anthropic(body: &Value, max_chars: usize) -> Vec<String> {
    let Value::Object(body) = body else {
        return vec![sse(Some("message_stop"), &json!({"type": "message_stop"}))];
    };
    let blocks = match body.get("content") {
        Some(Value::Array(b)) => b.clone(),
        _ => Vec::new(),
    };
    let mut start = body.clone();
    let mut delta = Map::new();
    for (k, v) in start.iter_mut() {
        match k.as_str() {
            "content" if v.is_array() => *v = json!([]),
            "stop_reason" | "stop_sequence" => {
                delta.insert(k.clone(), v.take());
            }
            _ => {}
        }
    }
    let mut usage_delta = Map::new();
    if let Some(Value::Object(usage)) = start.get_mut("usage") {
        // A reply billed through the prompt cache repeats every counter in
        // `message_delta`, as the API does today; others send the output
        // count only, as it used to.
        if usage.keys().any(|k| k.starts_with("cache_")) {
            usage_delta = usage.clone();
        }
        if let Some(out) = usage.get_mut("output_tokens") {
            usage_delta.insert("output_tokens".into(), out.clone());
            *out = json!(1);
        }
    }
    let mut events = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": start}),
    )];
    for (index, block) in blocks.iter().enumerate() {
        anthropic_block(index, block, max_chars, &mut events);
    }
    let mut md = Map::new();
    md.insert("type".into(), json!("message_delta"));
    md.insert("delta".into(), Value::Object(delta));
    if !usage_delta.is_empty() {
        md.insert("usage".into(), Value::Object(usage_delta));
    }
    let md = Value::Object(md);
    events.push(sse(Some("message_delta"), &md));
    events.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    events
}

/// `content_block_start`, its deltas and `content_block_stop`.
fn anthropic_block(index: usize, block: &Value, max_chars: usize, events: &mut Vec<String>) {
    let mut start = block.clone();
    // (member emptied at the start, delta type, delta member)
    let mut streamed: Vec<(String, &str, &str)> = Vec::new();
    let mut signature = None;
    if let Value::Object(b) = &mut start {
        let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "text" if b.get("text").is_some_and(Value::is_string) => {
                if let Some(Value::String(t)) = b.get_mut("text") {
                    streamed.push((std::mem::take(t), "text_delta", "text"));
                }
            }
            "thinking" => {
                if let Some(Value::String(t)) = b.get_mut("thinking") {
                    streamed.push((std::mem::take(t), "thinking_delta", "thinking"));
                }
                if let Some(Value::String(s)) = b.get_mut("signature") {
                    signature = Some(std::mem::take(s));
                }
            }
            _ if ty.ends_with("tool_use") && b.contains_key("input") => {
                if let Some(input) = b.get_mut("input") {
                    let text = input.to_string();
                    *input = json!({});
                    if text != "{}" {
                        streamed.push((text, "input_json_delta", "partial_json"));
                    }
                }
            }
            _ => {}
        }
    }
    events.push(sse(
        Some("content_block_start"),
        &json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    for (text, delta_type, member) in &streamed {
        for piece in pieces(text, max_chars) {
            if piece.is_empty() {
                continue;
            }
            let mut delta = Map::new();
            delta.insert("type".into(), json!(delta_type));
            delta.insert(member.to_string(), json!(piece));
            events.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
    }
    if let Some(sig) = signature {
        events.push(sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": sig}}),
        ));
    }
    events.push(sse(
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": index}),
    ));
}

fn openai(body: &Value, max_chars: usize) -> Vec<String> {
    let Value::Object(body) = body else {
        return vec!["data: [DONE]\n\n".to_string()];
    };
    let choices = match body.get("choices") {
        Some(Value::Array(c)) => c.clone(),
        _ => Vec::new(),
    };
    // The chunk skeleton: the body's members in order, `usage` null until
    // the last chunk.
    let has_usage = body.contains_key("usage");
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut c = Map::new();
        for (k, v) in body {
            let v = match k.as_str() {
                "object" => json!("chat.completion.chunk"),
                "choices" => choices.clone(),
                "usage" => usage.cloned().unwrap_or(Value::Null),
                _ => v.clone(),
            };
            c.insert(k.clone(), v);
        }
        sse(None, &Value::Object(c))
    };
    let mut events = Vec::new();
    for (position, choice) in choices.iter().enumerate() {
        let Value::Object(choice) = choice else {
            continue;
        };
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let with_delta = |delta: Value, finish: Option<&Value>| {
            let mut c = Map::new();
            for (k, v) in choice {
                match k.as_str() {
                    "message" => c.insert("delta".into(), delta.clone()),
                    "finish_reason" => c.insert(k.clone(), finish.cloned().unwrap_or(Value::Null)),
                    _ => c.insert(k.clone(), v.clone()),
                };
            }
            c.entry("index").or_insert(index.clone());
            json!([c])
        };
        let message = match choice.get("message") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let (first, rest) = openai_deltas(&message, max_chars);
        events.push(chunk(with_delta(first, None), None));
        for delta in rest {
            events.push(chunk(with_delta(delta, None), None));
        }
        let finish = choice.get("finish_reason");
        events.push(chunk(with_delta(json!({}), finish), None));
    }
    if has_usage {
        events.push(chunk(json!([]), body.get("usage")));
    }
    events.push("data: [DONE]\n\n".to_string());
    events
}

/// A message as its first delta (every member in place, the content
/// empty; the first tool call started there too when there is no text, as
/// OpenAI sends it) and the deltas after it (text, then the tool calls).
fn openai_deltas(message: &Map<String, Value>, max_chars: usize) -> (Value, Vec<Value>) {
    let has_text = message
        .get("content")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    let mut first = Map::new();
    let mut rest = Vec::new();
    let mut calls_rest = Vec::new();
    for (k, v) in message {
        match (k.as_str(), v) {
            ("content", Value::String(s)) => {
                first.insert(k.clone(), json!(""));
                for piece in pieces(s, max_chars).into_iter().filter(|p| !p.is_empty()) {
                    rest.push(json!({"content": piece}));
                }
            }
            ("tool_calls", Value::Array(calls)) => {
                for (i, call) in calls.iter().enumerate() {
                    let (start, args) = tool_call_start(i, call, max_chars);
                    if i == 0 && !has_text {
                        first.insert(k.clone(), json!([start]));
                    } else {
                        calls_rest.push(json!({"tool_calls": [start]}));
                    }
                    calls_rest.extend(args);
                }
                if calls.is_empty() {
                    first.insert(k.clone(), v.clone());
                }
            }
            _ => {
                first.insert(k.clone(), v.clone());
            }
        }
    }
    rest.extend(calls_rest);
    (Value::Object(first), rest)
}

/// A tool call's first fragment (`index`, its members, empty `arguments`)
/// and its argument pieces.
fn tool_call_start(i: usize, call: &Value, max_chars: usize) -> (Value, Vec<Value>) {
    let mut start = Map::new();
    start.insert("index".into(), json!(i));
    let mut args = Vec::new();
    if let Value::Object(call) = call {
        for (k, v) in call {
            let mut v = v.clone();
            if k == "function" {
                if let Some(Value::String(a)) = v.get_mut("arguments") {
                    for piece in pieces(a, max_chars).into_iter().filter(|p| !p.is_empty()) {
                        args.push(json!({"tool_calls": [
                            {"index": i, "function": {"arguments": piece}}
                        ]}));
                    }
                    a.clear();
                }
            }
            start.insert(k.clone(), v);
        }
    }
    (Value::Object(start), args)
}
