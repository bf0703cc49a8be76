//! Response and frame values built without the engine: a complete
//! buffered [`Reply`] (sent by the HTTP edge, `conn.rs`), the EventView
//! rendering of a stored row, and a chat turn's result as frame parts.

use proto::wire::problem::{Problem, ProblemType};

use std::borrow::Cow;
use std::sync::Arc;

use crate::bytes::Bytes;
use crate::store::EventRow;
use crate::streams::EventJson;

/// A complete buffered response built without the engine (by a pure front
/// layer, e.g. the console's files), sent by `Services::reply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    /// Headers after `Content-Type`.
    pub headers: &'static [(&'static str, &'static str)],
    pub body: Cow<'static, [u8]>,
}

impl Reply {
    /// An RFC 7807 error body (`type`, `title`, `status`, `detail`).
    pub fn problem(kind: ProblemType, detail: &str) -> Reply {
        Reply {
            status: kind.status(),
            content_type: "application/json",
            headers: &[],
            body: Problem::new(kind, detail).to_json().into(),
        }
    }
}

/// The EventView JSON of a stored row.
pub(crate) fn event_json(r: &EventRow) -> String {
    r.view_json()
}

/// `json` with NDJSON line separators escaped, shared: the form an
/// event's rendering is kept in (every use of it goes into a frame).
pub(crate) fn escaped(json: String) -> EventJson {
    match proto::jsonrpc::escape_line_separators(&json) {
        std::borrow::Cow::Borrowed(_) => Arc::new(json),
        std::borrow::Cow::Owned(escaped) => Arc::new(escaped),
    }
}

/// `{"message": …, "events": [...]}`, the result of a chat turn, as the
/// parts of a frame, line separators escaped (`events` already are): a
/// large event (a `provider.request` carrying the history) is the shared
/// rendering its live frames use, not a copy, so the engine's work for a
/// turn's answer does not grow with the size of its history.
pub(crate) fn turn_result_parts(message_json: &str, events: &[EventJson]) -> Vec<Bytes> {
    /// Smaller events are copied into the surrounding part: fewer, larger
    /// writes.
    const SHARE_FROM: usize = 4096;
    let mut parts = Vec::new();
    let mut buf = String::with_capacity(256);
    buf.push_str("{\"message\":");
    buf.push_str(&proto::jsonrpc::escape_line_separators(message_json));
    buf.push_str(",\"events\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            buf.push(',');
        }
        if e.len() < SHARE_FROM {
            buf.push_str(e);
            continue;
        }
        parts.push(Bytes::Owned(std::mem::take(&mut buf).into_bytes()));
        parts.push(Bytes::Text(e.clone()));
    }
    buf.push_str("]}");
    parts.push(Bytes::Owned(buf.into_bytes()));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::wire::json;

    /// The whole result as one text, the way it was built before parts.
    fn turn_result(message: &serde_json::Value, events: &[String]) -> String {
        format!(
            "{{\"message\":{message},\"events\":[{}]}}",
            events.join(",")
        )
    }

    /// The parts join to the whole result text, escaped.
    #[test]
    fn turn_result_parts_join_to_the_whole_result() {
        let big = format!("{{\"payload\":\"{}\"}}", "x".repeat(5000));
        let events: Vec<String> = vec!["{\"a\":1}".into(), big, "{\"b\":\"\\u2028\"}".into()];
        let shared: Vec<EventJson> = events.iter().map(|e| Arc::new(e.clone())).collect();
        let message = serde_json::json!({"role": "assistant", "content": "l\u{2028}s"});
        let parts = turn_result_parts(&json::text(&message), &shared);
        assert!(
            parts.iter().any(|p| matches!(p, Bytes::Text(_))),
            "the large event is shared"
        );
        let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let whole = turn_result(&message, &events);
        let escaped = proto::jsonrpc::escape_line_separators(&whole);
        assert_eq!(String::from_utf8(joined).unwrap(), escaped);
        let none = turn_result_parts(&json::text(&message), &[]);
        assert_eq!(none.len(), 1);
    }
}
