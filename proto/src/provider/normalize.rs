//! Anthropic message normaliser (`05-profiles-and-providers.md` §6.1 steps
//! 2–4, C-094).

use std::borrow::Cow;

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
    let (messages, record) = normalize_cow(stripped.into_iter().map(Cow::Owned).collect());
    let messages = messages.into_iter().map(Cow::into_owned).collect();
    Normalized { messages, record }
}

/// [`normalize_anthropic`] over borrowed-or-owned messages: a message that
/// is not folded moves through untouched (no copy of a borrowed history);
/// only the members of a folded run are copied into the folded message.
pub(super) fn normalize_cow(stripped: Vec<Cow<'_, Value>>) -> (Vec<Cow<'_, Value>>, Option<Value>) {
    let mut input = stripped;
    let mut prepended = false;
    if let Some(first) = input.first() {
        if first.get("role").and_then(Value::as_str) != Some("user") {
            input.insert(
                0,
                Cow::Owned(json!({"role": "user", "content": [text_block(PREAMBLE_TEXT)]})),
            );
            prepended = true;
        }
    }

    // Runs of equal roles, decided before anything is moved.
    let mut runs: Vec<usize> = Vec::new();
    let mut i = 0;
    while let Some(first) = input.get(i) {
        let role = first.get("role");
        let run = input
            .iter()
            .skip(i)
            .take_while(|m| m.get("role") == role)
            .count();
        runs.push(run);
        i += run;
    }

    let mut messages: Vec<Cow<'_, Value>> = Vec::with_capacity(runs.len());
    let mut merged: Vec<Value> = Vec::new();
    let mut input = input.into_iter();
    let mut at = 0;
    for run in runs {
        let Some(first) = input.next() else { break };
        if run == 1 {
            messages.push(first);
        } else {
            let mut blocks = content_blocks(first.get("content"));
            for m in input.by_ref().take(run - 1) {
                blocks.extend(content_blocks(m.get("content")));
            }
            let folded = match first.into_owned() {
                Value::Object(mut obj) => {
                    obj.insert("content".into(), Value::Array(blocks));
                    Value::Object(obj)
                }
                // Non-object messages have no role; keep the shape minimal.
                _ => json!({"content": blocks}),
            };
            messages.push(Cow::Owned(folded));
            merged.push(Value::Array((at..at + run).map(Value::from).collect()));
        }
        at += run;
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
    (messages, record)
}
