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
    let prepended = needs_preamble(input.first().map(|m| &**m));
    if prepended {
        input.insert(0, Cow::Owned(preamble()));
    }
    let runs = role_runs(input.iter().map(|m| &**m));
    let mut messages: Vec<Cow<'_, Value>> = Vec::with_capacity(runs.len());
    let mut merged: Vec<Value> = Vec::new();
    let mut input = input.into_iter();
    let mut at = 0;
    for run in runs {
        if run == 1 {
            messages.extend(input.next());
        } else {
            messages.push(Cow::Owned(fold(input.by_ref().take(run).collect())));
            merged.push(Value::Array((at..at + run).map(Value::from).collect()));
        }
        at += run;
    }
    (messages, record(prepended, merged))
}

/// Whether a list starting with `first` gets the preamble user message.
pub(super) fn needs_preamble(first: Option<&Value>) -> bool {
    first.is_some_and(|m| m.get("role").and_then(Value::as_str) != Some("user"))
}

/// The user message step 2 prepends.
pub(super) fn preamble() -> Value {
    json!({"role": "user", "content": [text_block(PREAMBLE_TEXT)]})
}

/// The lengths of the runs of equal `role`, in order.
pub(super) fn role_runs<'a>(messages: impl IntoIterator<Item = &'a Value>) -> Vec<usize> {
    let mut runs: Vec<usize> = Vec::new();
    let mut last: Option<Option<&Value>> = None;
    for m in messages {
        let role = m.get("role");
        match (last, runs.last_mut()) {
            (Some(r), Some(n)) if r == role => *n += 1,
            _ => runs.push(1),
        }
        last = Some(role);
    }
    runs
}

/// One message for a run of two or more: the first member with the
/// concatenated content blocks of all of them.
pub(super) fn fold(members: Vec<Cow<'_, Value>>) -> Value {
    let mut members = members.into_iter();
    let Some(first) = members.next() else {
        return json!({"content": []});
    };
    let mut blocks = content_blocks(first.get("content"));
    for m in members {
        blocks.extend(content_blocks(m.get("content")));
    }
    match first.into_owned() {
        Value::Object(mut obj) => {
            obj.insert("content".into(), Value::Array(blocks));
            Value::Object(obj)
        }
        // Non-object messages have no role; keep the shape minimal.
        _ => json!({"content": blocks}),
    }
}

/// `provider.request.normalized`, when anything changed.
pub(super) fn record(prepended: bool, merged: Vec<Value>) -> Option<Value> {
    if !prepended && merged.is_empty() {
        return None;
    }
    let mut rec = serde_json::Map::new();
    if prepended {
        rec.insert("prepended_user".into(), Value::Bool(true));
    }
    if !merged.is_empty() {
        rec.insert("merged".into(), Value::Array(merged));
    }
    Some(Value::Object(rec))
}
