//! Anthropic message normaliser (`05-profiles-and-providers.md` §6.1 steps
//! 2–4, C-094).

use serde_json::{json, Value};

use super::{content_blocks, text_block, PREAMBLE_TEXT};

/// Result of [`normalize_anthropic`].
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// The list to place in the request body and log verbatim.
    pub messages: Vec<Value>,
    /// `provider.request.normalized`: `{"prepended_user": true,
    /// "merged": [[i, j, …], …]}` with each member present only when that
    /// step changed something; `None` when the list is unchanged.
    pub record: Option<Value>,
}

/// Applies §6.1 steps 2–4 to an already stripped list.
///
/// 1. If the first message's `role` is not `"user"`, a user message with
///    [`PREAMBLE_TEXT`] is inserted at index 0.
/// 2. Every run of two or more consecutive messages with equal `role` is
///    folded into one message whose content is the concatenation of the
///    members' block arrays (a string content becomes one `text` block).
///    The folded message keeps the first member's other members. The
///    0-based positions (after the prepend) of each folded run are recorded.
///
/// An empty list is returned unchanged.
pub fn normalize_anthropic(stripped: Vec<Value>) -> Normalized {
    let mut input = stripped;
    let mut prepended = false;
    if let Some(first) = input.first() {
        if first.get("role").and_then(Value::as_str) != Some("user") {
            input.insert(
                0,
                json!({"role": "user", "content": [text_block(PREAMBLE_TEXT)]}),
            );
            prepended = true;
        }
    }

    let mut messages: Vec<Value> = Vec::with_capacity(input.len());
    let mut merged: Vec<Value> = Vec::new();
    let mut i = 0;
    while let Some(first) = input.get(i) {
        let role = first.get("role");
        let run = input
            .iter()
            .skip(i)
            .take_while(|m| m.get("role") == role)
            .count();
        let j = i + run;
        if run == 1 {
            messages.push(first.clone());
        } else {
            let mut blocks = Vec::new();
            for m in input.iter().skip(i).take(run) {
                blocks.extend(content_blocks(m.get("content")));
            }
            let folded = match first {
                Value::Object(obj) => {
                    let mut obj = obj.clone();
                    obj.insert("content".into(), Value::Array(blocks));
                    Value::Object(obj)
                }
                // Non-object messages have no role; keep the shape minimal.
                _ => json!({"content": blocks}),
            };
            messages.push(folded);
            merged.push(Value::Array((i..j).map(Value::from).collect()));
        }
        i = j;
    }

    let record = if prepended || !merged.is_empty() {
        let mut rec = serde_json::Map::new();
        if prepended {
            rec.insert("prepended_user".into(), Value::Bool(true));
        }
        if !merged.is_empty() {
            rec.insert("merged".into(), Value::Array(merged));
        }
        Some(Value::Object(rec))
    } else {
        None
    };
    Normalized { messages, record }
}
