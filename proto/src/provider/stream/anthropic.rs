//! Anthropic Messages streaming events (`message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`,
//! `message_stop`, `ping`, `error`) assembled into the message they
//! describe. Event types and delta types this reader does not know are
//! skipped, as the API's versioning policy asks of clients.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{data_object, push_fragment, DeltaKind, Fragment, StreamError};
use crate::provider::sse::SseEvent;

#[derive(Debug, Default)]
pub(super) struct Reader {
    /// The message of `message_start`, filled in as events arrive.
    message: Option<Map<String, Value>>,
    /// Per content block: its `input_json_delta` text so far.
    json: Vec<Option<String>>,
    stopped: bool,
}

fn malformed(why: impl Into<String>) -> StreamError {
    StreamError::Malformed(why.into())
}

impl Reader {
    pub(super) fn is_complete(&self) -> bool {
        self.stopped
    }

    /// One event; `Ok(true)` unless it was a ping.
    pub(super) fn event(
        &mut self,
        ev: &SseEvent,
        out: &mut Vec<Fragment>,
    ) -> Result<bool, StreamError> {
        if let Some(done) = self.text_delta(ev, out) {
            return done;
        }
        let mut data = data_object(ev)?;
        let kind = match data.get("type").and_then(Value::as_str) {
            Some(t) => t.to_string(),
            None => ev.event.clone(),
        };
        match kind.as_str() {
            "ping" => return Ok(false),
            "error" => return Err(provider_error(&data, &ev.data)),
            _ if self.stopped => return Ok(true),
            "message_start" => {
                if self.message.is_some() {
                    return Err(malformed("a second message_start"));
                }
                match data.remove("message") {
                    Some(Value::Object(m)) => self.message = Some(m),
                    _ => return Err(malformed("message_start without a message object")),
                }
                return Ok(true);
            }
            _ => {}
        }
        let Some(message) = self.message.as_mut() else {
            return Err(malformed(format!("{kind} before message_start")));
        };
        match kind.as_str() {
            "content_block_start" => {
                let index = index_of(&data)?;
                let Some(Value::Array(content)) = message.get_mut("content") else {
                    return Err(malformed("message_start without a content array"));
                };
                if index != content.len() {
                    return Err(malformed(format!("content block {index} out of order")));
                }
                match data.remove("content_block") {
                    Some(block @ Value::Object(_)) => content.push(block),
                    _ => return Err(malformed("content_block_start without a block")),
                }
                self.json.push(None);
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let block = block_mut(message, index)?;
                let Some(Value::Object(delta)) = data.get("delta") else {
                    return Err(malformed("content_block_delta without a delta"));
                };
                let json = self.json.get_mut(index);
                apply_delta(block, delta, json, index, out)?;
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                let json = self.json.get_mut(index).and_then(Option::take);
                end_block(block_mut(message, index)?, json, index)?;
            }
            "message_delta" => {
                if let Some(Value::Object(delta)) = data.get("delta") {
                    for (k, v) in delta {
                        message.insert(k.clone(), v.clone());
                    }
                }
                if let Some(Value::Object(usage)) = data.get("usage") {
                    merge_usage(message, usage);
                }
            }
            "message_stop" => {
                // A block left open by a server that skipped its stop.
                for (index, json) in self.json.iter_mut().enumerate() {
                    if let Some(json) = json.take() {
                        end_block(block_mut(message, index)?, Some(json), index)?;
                    }
                }
                self.stopped = true;
            }
            _ => {}
        }
        Ok(true)
    }

    /// A well-formed `content_block_delta` of text, thinking or input
    /// JSON (nearly every event of a stream) read without building a JSON
    /// tree; `None` for anything else, which [`Reader::event`] reads as
    /// before (so every error stays its own).
    fn text_delta(
        &mut self,
        ev: &SseEvent,
        out: &mut Vec<Fragment>,
    ) -> Option<Result<bool, StreamError>> {
        // Objects only: serde would also take a struct from an array.
        if !ev.data.trim_start().starts_with('{') {
            return None;
        }
        let d: FastDelta<'_> = serde_json::from_str(&ev.data).ok()?;
        if d.ty != "content_block_delta" || !d.delta.get().starts_with('{') {
            return None;
        }
        let delta: FastInner<'_> = serde_json::from_str(d.delta.get()).ok()?;
        if self.stopped {
            return Some(Ok(true));
        }
        let index = usize::try_from(d.index).ok()?;
        let (key, kind, text) = match delta.ty {
            "text_delta" => ("text", DeltaKind::Text, delta.text?),
            "thinking_delta" => ("thinking", DeltaKind::Thinking, delta.thinking?),
            "input_json_delta" => ("", DeltaKind::InputJson, delta.partial_json?),
            _ => return None,
        };
        let block = match block_mut(self.message.as_mut()?, index) {
            Ok(b) => b,
            Err(_) => return None,
        };
        if kind == DeltaKind::InputJson {
            if let Some(json) = self.json.get_mut(index) {
                json.get_or_insert_with(String::new).push_str(&text);
            }
        } else if let Err(e) = append(block, key, &text) {
            return Some(Err(e));
        }
        push_fragment(out, index, kind, &text);
        Some(Ok(true))
    }

    /// The assembled message as compact JSON.
    pub(super) fn finish(self) -> Result<String, StreamError> {
        match (self.message, self.stopped) {
            (Some(m), true) => Ok(Value::Object(m).to_string()),
            _ => Err(StreamError::Cut("message_stop")),
        }
    }
}

/// A `content_block_delta` event's data, borrowed where it can be.
#[derive(Deserialize)]
struct FastDelta<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    index: u64,
    #[serde(borrow)]
    delta: &'a RawValue,
}

/// Its `delta` object (members other than these are ignored, as by the
/// tree reader).
#[derive(Deserialize)]
struct FastInner<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow)]
    partial_json: Option<Cow<'a, str>>,
}

/// `error` event: `"<error.type>: <error.message>"` when it has them.
pub(super) fn provider_error(data: &Map<String, Value>, raw: &str) -> StreamError {
    let error = data.get("error");
    let ty = error.and_then(|e| e.get("type")).and_then(Value::as_str);
    let text = error.and_then(|e| e.get("message")).and_then(Value::as_str);
    let message = match (ty, text) {
        (Some(t), Some(m)) => format!("{t}: {m}"),
        (None, Some(m)) => m.to_string(),
        (Some(t), None) => t.to_string(),
        (None, None) => "an error event".to_string(),
    };
    StreamError::Provider {
        message,
        body: raw.to_string(),
    }
}

fn index_of(data: &Map<String, Value>) -> Result<usize, StreamError> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| malformed("a content block event without an index"))
}

fn block_mut(
    message: &mut Map<String, Value>,
    index: usize,
) -> Result<&mut Map<String, Value>, StreamError> {
    match message.get_mut("content") {
        Some(Value::Array(content)) => match content.get_mut(index) {
            Some(Value::Object(b)) => Ok(b),
            _ => Err(malformed(format!(
                "content block {index} was never started"
            ))),
        },
        _ => Err(malformed("message_start without a content array")),
    }
}

/// Appends `piece` to the string member `key` of `block` (created empty).
fn append(block: &mut Map<String, Value>, key: &str, piece: &str) -> Result<(), StreamError> {
    match block
        .entry(key.to_string())
        .or_insert_with(|| Value::String(String::new()))
    {
        Value::String(s) => {
            s.push_str(piece);
            Ok(())
        }
        _ => Err(malformed(format!(
            "a delta for a block whose {key} is not text"
        ))),
    }
}

fn apply_delta(
    block: &mut Map<String, Value>,
    delta: &Map<String, Value>,
    json: Option<&mut Option<String>>,
    index: usize,
    out: &mut Vec<Fragment>,
) -> Result<(), StreamError> {
    let text = |key: &str| {
        delta
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("a delta without its {key}")))
    };
    match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => {
            let t = text("text")?;
            append(block, "text", t)?;
            push_fragment(out, index, DeltaKind::Text, t);
        }
        Some("thinking_delta") => {
            let t = text("thinking")?;
            append(block, "thinking", t)?;
            push_fragment(out, index, DeltaKind::Thinking, t);
        }
        Some("input_json_delta") => {
            let t = text("partial_json")?;
            if let Some(json) = json {
                json.get_or_insert_with(String::new).push_str(t);
            }
            push_fragment(out, index, DeltaKind::InputJson, t);
        }
        Some("signature_delta") => {
            let s = text("signature")?;
            block.insert("signature".into(), Value::String(s.to_string()));
        }
        Some("citations_delta") => {
            let citation = delta.get("citation").cloned().unwrap_or(Value::Null);
            match block
                .entry("citations".to_string())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                Value::Array(a) => a.push(citation),
                other => *other = Value::Array(vec![citation]),
            }
        }
        _ => {}
    }
    Ok(())
}

/// A block ends: its input JSON, if any arrived, becomes its `input`.
fn end_block(
    block: &mut Map<String, Value>,
    json: Option<String>,
    index: usize,
) -> Result<(), StreamError> {
    let Some(json) = json.filter(|j| !j.trim().is_empty()) else {
        return Ok(());
    };
    let input: Value = serde_json::from_str(&json).map_err(|e| {
        malformed(format!(
            "the input of content block {index} is not JSON: {e}"
        ))
    })?;
    block.insert("input".into(), input);
    Ok(())
}

/// `message_delta.usage`: each member it carries replaces the message's
/// (later API versions send every counter there, older ones the output
/// count only); `null` members change nothing.
fn merge_usage(message: &mut Map<String, Value>, usage: &Map<String, Value>) {
    let slot = message
        .entry("usage".to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(have) = slot {
        for (k, v) in usage {
            if !v.is_null() {
                have.insert(k.clone(), v.clone());
            }
        }
    }
}
