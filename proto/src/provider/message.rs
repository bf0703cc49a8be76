//! History messages that remember their request text.
//!
//! Every provider call sends the whole history, and a long session's
//! history is hundreds of kilobytes: serialising it again for every call
//! cost the engine thread milliseconds per call. A [`Message`] renders its
//! stripped JSON (§6.1 step 1) once, the first time a request needs it;
//! a request's `messages` text is then those texts joined, and only the
//! messages the Anthropic normaliser folds together (rare: a history
//! alternates roles) are serialised again.

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::Value;

use super::normalize::{fold, needs_preamble, preamble, record, role_runs};
use super::{strip_one, to_json_text};

/// A message of the provider-facing history.
#[derive(Debug, Clone, Default)]
pub struct Message {
    value: Value,
    /// Compact JSON of the stripped message, once rendered.
    text: OnceCell<Box<str>>,
}

impl Message {
    pub fn new(value: Value) -> Self {
        Message {
            value,
            text: OnceCell::new(),
        }
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn into_value(self) -> Value {
        self.value
    }

    /// Bytes of request text held (0 until a request rendered it).
    pub fn text_len(&self) -> usize {
        self.text.get().map_or(0, |t| t.len())
    }
}

impl From<Value> for Message {
    fn from(value: Value) -> Self {
        Message::new(value)
    }
}

impl std::ops::Deref for Message {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// A history entry a request can be prepared from: a plain value, or a
/// [`Message`] that keeps its text.
pub trait HistoryItem {
    fn value(&self) -> &Value;
    /// Compact JSON of the message with `dispatch`/`caller` stripped.
    fn stripped_text(&self) -> Cow<'_, str>;
}

impl HistoryItem for Value {
    fn value(&self) -> &Value {
        self
    }
    fn stripped_text(&self) -> Cow<'_, str> {
        Cow::Owned(to_json_text(&strip_one(self)))
    }
}

impl HistoryItem for Message {
    fn value(&self) -> &Value {
        &self.value
    }
    fn stripped_text(&self) -> Cow<'_, str> {
        let text = self
            .text
            .get_or_init(|| to_json_text(&strip_one(&self.value)).into_boxed_str());
        Cow::Borrowed(text)
    }
}

/// `[…]` of the items' stripped texts, as sent: plain for OpenAI's logged
/// list, normalised (§6.1 steps 2–4) for Anthropic, with its record.
pub(super) fn messages_text<M: HistoryItem + ?Sized>(
    items: &[&M],
    normalise: bool,
) -> (String, Option<Value>) {
    let mut parts: Vec<Cow<'_, str>> = Vec::with_capacity(items.len() + 1);
    let mut normalized = None;
    if normalise {
        let prepended = needs_preamble(items.first().map(|m| m.value()));
        // Positions count the preamble, as the record does.
        let mut at = 0;
        if prepended {
            // A user message before a first item that is not: it never
            // folds with what follows.
            parts.push(Cow::Owned(to_json_text(&preamble())));
            at = 1;
        }
        let mut merged = Vec::new();
        let mut rest: &[&M] = items;
        for run in role_runs(items.iter().map(|m| m.value())) {
            let (members, tail) = rest.split_at(run.min(rest.len()));
            rest = tail;
            if let [one] = members {
                parts.push(one.stripped_text());
            } else {
                let stripped = members.iter().map(|m| strip_one(m.value())).collect();
                parts.push(Cow::Owned(to_json_text(&fold(stripped))));
                merged.push(Value::Array((at..at + run).map(Value::from).collect()));
            }
            at += run;
        }
        normalized = record(prepended, merged);
    } else {
        parts.extend(items.iter().map(|m| m.stripped_text()));
    }
    let len = 2 + parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut out = String::with_capacity(len);
    out.push('[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(p);
    }
    out.push(']');
    (out, normalized)
}
