//! The bodies of the replies the mock renders, in the wire format of the
//! endpoint hit.

use serde_json::{json, Value};

use super::{Endpoint, Reply};

fn anthropic_body(
    seq: u64,
    content: Vec<Value>,
    stop_reason: &str,
    usage: Option<(u64, u64)>,
) -> Value {
    let mut v = json!({
        "id": format!("msg_mock_{seq:06}"),
        "type": "message",
        "role": "assistant",
        "model": "mock",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
    });
    if let Some((i, o)) = usage {
        v["usage"] = json!({"input_tokens": i, "output_tokens": o});
    }
    v
}

fn openai_body(
    seq: u64,
    content: Option<String>,
    tool_calls: Vec<Value>,
    finish_reason: &str,
    usage: Option<(u64, u64)>,
) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let mut v = json!({
        "id": format!("chatcmpl-mock-{seq:06}"),
        "object": "chat.completion",
        "created": 0,
        "model": "mock",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if let Some((i, o)) = usage {
        v["usage"] = json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o});
    }
    v
}

/// Render a body-producing reply for `endpoint` (Unknown renders as Anthropic).
pub(super) fn render(reply: Reply, endpoint: Endpoint, seq: u64) -> Value {
    let openai = endpoint == Endpoint::Openai;
    match reply {
        Reply::Text {
            text,
            usage,
            truncated,
        } => {
            if openai {
                let finish = if truncated { "length" } else { "stop" };
                openai_body(seq, Some(text), vec![], finish, usage)
            } else {
                let stop = if truncated { "max_tokens" } else { "end_turn" };
                anthropic_body(
                    seq,
                    vec![json!({"type": "text", "text": text})],
                    stop,
                    usage,
                )
            }
        }
        Reply::ToolUse { text, calls, usage } => {
            if openai {
                let calls = calls
                    .into_iter()
                    .map(|(id, name, input)| {
                        json!({"id": id, "type": "function",
                               "function": {"name": name, "arguments": input.to_string()}})
                    })
                    .collect();
                openai_body(seq, text, calls, "tool_calls", usage)
            } else {
                let mut blocks: Vec<Value> = text
                    .into_iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect();
                blocks.extend(
                    calls
                        .into_iter()
                        .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})),
                );
                anthropic_body(seq, blocks, "tool_use", usage)
            }
        }
        Reply::AnthropicText {
            text,
            usage,
            stop_reason,
        } => anthropic_body(
            seq,
            vec![json!({"type": "text", "text": text})],
            &stop_reason,
            usage,
        ),
        Reply::AnthropicToolUse { blocks, usage } => anthropic_body(seq, blocks, "tool_use", usage),
        Reply::OpenaiText {
            text,
            usage,
            finish_reason,
        } => openai_body(seq, text, vec![], &finish_reason, usage),
        Reply::OpenaiToolCalls {
            content,
            calls,
            usage,
        } => openai_body(seq, content, calls, "tool_calls", usage),
        Reply::Json { body, .. } => body,
        Reply::Raw { body, .. } => Value::String(body),
        Reply::Delay(_, inner) => render(*inner, endpoint, seq),
        Reply::Stream(s) => render(s.reply, endpoint, seq),
        Reply::Hang | Reply::Close | Reply::Limited(_) => Value::Null,
    }
}
