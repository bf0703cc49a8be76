//! OpenAI Chat Completions streaming (`data:` chunks, then `[DONE]`), as
//! OpenAI and the compatible local servers (llama.cpp, vLLM, Ollama) send
//! it, assembled into the `chat.completion` it describes.
//!
//! The merge follows the official SDKs' accumulation: the first chunk is
//! the skeleton (its `object` becoming `chat.completion`), each choice's
//! first `delta` its `message`, and later deltas merge in (strings
//! appended, objects merged, `tool_calls` entries by their `index`);
//! `finish_reason` and a non-null `usage` (the last chunk, with
//! `stream_options.include_usage`) are set. Only the `index` members the
//! stream numbers tool calls with are removed, since an unstreamed message
//! has none. Unlike the SDKs, an `id` or `type` repeated in every fragment
//! replaces rather than appends (some compatible servers repeat them).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{data_object, push_fragment, DeltaKind, Fragment, StreamError};
use crate::provider::sse::SseEvent;

#[derive(Debug, Default)]
pub(super) struct Reader {
    completion: Option<Map<String, Value>>,
    done: bool,
    /// Whether the first choice has shown text yet (tool blocks follow it).
    text_seen: bool,
    /// The first choice's tool calls: stream index → content block index.
    tools: BTreeMap<u64, usize>,
}

fn malformed(why: impl Into<String>) -> StreamError {
    StreamError::Malformed(why.into())
}

impl Reader {
    pub(super) fn is_complete(&self) -> bool {
        self.done
    }

    /// One event: `[DONE]` or a chunk. Every one is progress.
    pub(super) fn event(
        &mut self,
        ev: &SseEvent,
        out: &mut Vec<Fragment>,
    ) -> Result<bool, StreamError> {
        if self.done {
            return Ok(true);
        }
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let mut chunk = data_object(ev)?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(provider_error(&chunk, &ev.data));
        }
        // Taken out in place: the skeleton keeps the member's position.
        let choices = match chunk.get_mut("choices").map(Value::take) {
            Some(Value::Array(c)) => c,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(malformed("choices is not an array")),
        };
        let completion = match &mut self.completion {
            Some(c) => {
                for (k, v) in chunk {
                    match k.as_str() {
                        "object" | "choices" => {}
                        _ if v.is_null() && c.contains_key(&k) => {}
                        _ => {
                            c.insert(k, v);
                        }
                    }
                }
                c
            }
            None => {
                let mut c = Map::new();
                for (k, v) in chunk {
                    let v = match k.as_str() {
                        "object" => Value::String("chat.completion".into()),
                        "choices" => Value::Array(Vec::new()),
                        _ => v,
                    };
                    c.insert(k, v);
                }
                c.entry("choices").or_insert(Value::Array(Vec::new()));
                self.completion.insert(c)
            }
        };
        let Some(Value::Array(have)) = completion.get_mut("choices") else {
            return Err(malformed("choices is not an array"));
        };
        for (position, choice) in choices.into_iter().enumerate() {
            let Value::Object(choice) = choice else {
                return Err(malformed("a choice is not an object"));
            };
            let index = choice
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            if index == 0 {
                fragments(&choice, &mut self.text_seen, &mut self.tools, out);
            }
            merge_choice(have, index, choice)?;
        }
        Ok(true)
    }

    /// The assembled completion as compact JSON.
    pub(super) fn finish(self) -> Result<String, StreamError> {
        if !self.done {
            return Err(StreamError::Cut("[DONE]"));
        }
        let mut completion = self.completion.unwrap_or_default();
        if let Some(Value::Array(choices)) = completion.get_mut("choices") {
            for choice in choices {
                let calls = choice
                    .get_mut("message")
                    .and_then(|m| m.get_mut("tool_calls"));
                if let Some(Value::Array(calls)) = calls {
                    for call in calls.iter_mut().filter_map(Value::as_object_mut) {
                        call.shift_remove("index");
                    }
                }
            }
        }
        Ok(Value::Object(completion).to_string())
    }
}

/// A chunk with an `error` member (vLLM, llama.cpp, gateways).
fn provider_error(chunk: &Map<String, Value>, raw: &str) -> StreamError {
    let error = chunk.get("error");
    let message = match error {
        Some(Value::String(s)) => s.clone(),
        Some(e) => match e.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => e.to_string(),
        },
        None => String::new(),
    };
    StreamError::Provider {
        message,
        body: raw.to_string(),
    }
}

/// The text pieces of the first choice's delta.
fn fragments(
    choice: &Map<String, Value>,
    text_seen: &mut bool,
    tools: &mut BTreeMap<u64, usize>,
    out: &mut Vec<Fragment>,
) {
    let Some(delta) = choice.get("delta") else {
        return;
    };
    if let Some(text) = delta.get("content").and_then(Value::as_str) {
        if !text.is_empty() {
            *text_seen = true;
            push_fragment(out, 0, DeltaKind::Text, text);
        }
    }
    let Some(Value::Array(calls)) = delta.get("tool_calls") else {
        return;
    };
    for (position, call) in calls.iter().enumerate() {
        let k = (call.get("index").and_then(Value::as_u64)).unwrap_or(position as u64);
        let next = usize::from(*text_seen) + tools.len();
        let block = *tools.entry(k).or_insert(next);
        let args = call
            .get("function")
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str);
        if let Some(args) = args {
            push_fragment(out, block, DeltaKind::InputJson, args);
        }
    }
}

/// Merges one chunk's choice into the assembled choices.
fn merge_choice(
    have: &mut Vec<Value>,
    index: u64,
    choice: Map<String, Value>,
) -> Result<(), StreamError> {
    let found = have
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|c| c.get("index").and_then(Value::as_u64) == Some(index));
    let Some(target) = found else {
        // The first chunk of this choice: `delta` becomes its `message`.
        let mut new = Map::new();
        for (k, v) in choice {
            match k.as_str() {
                "delta" => {
                    let mut message = Map::new();
                    if let Value::Object(d) = v {
                        accumulate(&mut message, d)?;
                    }
                    new.insert("message".into(), Value::Object(message));
                }
                _ => {
                    new.insert(k, v);
                }
            }
        }
        new.entry("index").or_insert(Value::from(index));
        have.push(Value::Object(new));
        return Ok(());
    };
    for (k, v) in choice {
        match (k.as_str(), v) {
            ("delta", Value::Object(d)) => {
                let message = target
                    .entry("message".to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = message {
                    accumulate(m, d)?;
                }
            }
            ("delta" | "index", _) => {}
            (_, Value::Null) => {}
            ("logprobs", Value::Object(new)) => match target.get_mut("logprobs") {
                Some(Value::Object(old)) => {
                    for (lk, lv) in new {
                        match (old.get_mut(&lk), lv) {
                            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
                            (_, lv) => {
                                old.insert(lk, lv);
                            }
                        }
                    }
                }
                _ => {
                    target.insert(k, Value::Object(new));
                }
            },
            (_, v) => {
                target.insert(k, v);
            }
        }
    }
    Ok(())
}

/// Merges a delta into what was assembled (the SDKs' `accumulate_delta`).
fn accumulate(acc: &mut Map<String, Value>, delta: Map<String, Value>) -> Result<(), StreamError> {
    for (key, new) in delta {
        let Some(old) = acc.get_mut(&key) else {
            acc.insert(key, new);
            continue;
        };
        if old.is_null() {
            *old = new;
            continue;
        }
        match (old, new) {
            (_, Value::Null) => {}
            (old, new) if matches!(key.as_str(), "index" | "type" | "id") => *old = new,
            (Value::String(a), Value::String(b)) => a.push_str(&b),
            (Value::Object(a), Value::Object(b)) => accumulate(a, b)?,
            (Value::Array(a), Value::Array(b)) => merge_list(a, b)?,
            (old, new) => *old = new,
        }
    }
    Ok(())
}

/// Lists of scalars grow; lists of objects (tool calls) merge by `index`.
fn merge_list(acc: &mut Vec<Value>, delta: Vec<Value>) -> Result<(), StreamError> {
    if acc.iter().all(|v| !v.is_object()) && delta.iter().all(|v| !v.is_object()) {
        acc.extend(delta);
        return Ok(());
    }
    for entry in delta {
        let Value::Object(entry) = entry else {
            return Err(malformed("a list entry is not an object"));
        };
        let Some(index) = entry.get("index").and_then(Value::as_u64) else {
            return Err(malformed("a list entry without an index"));
        };
        let found = acc
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .find(|e| e.get("index").and_then(Value::as_u64) == Some(index));
        match found {
            Some(e) => accumulate(e, entry)?,
            None => acc.push(Value::Object(entry)),
        }
    }
    Ok(())
}
