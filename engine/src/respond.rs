//! Buffered REST responses: JSON bodies, RFC 7807 problems, event pages.

use proto::wire::problem::{Problem, ProblemType};

use std::sync::Arc;

use crate::bytes::Bytes;
use crate::store::EventRow;
use crate::{ConnId, Engine};

impl Engine {
    /// Writes a complete response and finishes the request.
    pub(crate) fn respond(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        self.respond_with(conn, status, content_type, &[], body);
    }

    /// A complete response that reveals no stored state (`/healthz`,
    /// `/api/v1/meta`): never held behind other clients' commits.
    pub(crate) fn respond_ungated(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        self.respond_gated(conn, status, content_type, &[], body, false);
    }

    /// [`Engine::respond`] with `extra` headers after `Content-Type`.
    pub(crate) fn respond_with(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        extra: &[(&str, &str)],
        body: &[u8],
    ) {
        self.respond_gated(conn, status, content_type, extra, body, true);
    }

    /// One complete response; `gated`: held until earlier writes commit.
    fn respond_gated(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        extra: &[(&str, &str)],
        body: &[u8],
        gated: bool,
    ) {
        let close = self.closes_after(conn);
        self.log_request(conn, status);
        let bytes = proto::http::encode_response(status, content_type, extra, body, close);
        if gated {
            self.send(conn, bytes);
        } else {
            self.send_ungated(conn, bytes);
        }
        self.finish_request(conn);
    }

    pub(crate) fn respond_json(&mut self, conn: ConnId, status: u16, body: &[u8]) {
        self.respond(conn, status, Some("application/json"), body);
    }

    pub(crate) fn respond_value<T: serde::Serialize>(
        &mut self,
        conn: ConnId,
        status: u16,
        value: &T,
    ) {
        match serde_json::to_vec(value) {
            Ok(body) => self.respond_json(conn, status, &body),
            Err(_) => self.problem(conn, ProblemType::Internal, "internal error"),
        }
    }

    /// An RFC 7807 error body (`type`, `title`, `status`, `detail`).
    pub(crate) fn problem(&mut self, conn: ConnId, kind: ProblemType, detail: &str) {
        let p = Problem::new(kind, detail);
        let status = kind.status();
        self.respond_json(conn, status, &p.to_json());
    }

    /// A complete response whose body is already built (an events page
    /// rendered by the store): a large body goes out as its own write
    /// instead of being copied behind the head.
    pub(crate) fn respond_owned(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: &str,
        body: Vec<u8>,
    ) {
        const COPY_BELOW: usize = 16 * 1024;
        if body.len() < COPY_BELOW {
            return self.respond(conn, status, Some(content_type), &body);
        }
        let close = self.closes_after(conn);
        self.log_request(conn, status);
        let head =
            proto::http::encode_response_head(status, Some(content_type), &[], body.len(), close);
        self.send(conn, head);
        self.send(conn, body);
        self.finish_request(conn);
    }
}

/// The EventView JSON of a stored row.
pub(crate) fn event_json(r: &EventRow) -> String {
    r.view_json()
}

/// `json` with NDJSON line separators escaped, shared: the form an
/// event's rendering is kept in (every use of it goes into a frame).
pub(crate) fn escaped(json: String) -> Arc<str> {
    match proto::jsonrpc::escape_line_separators(&json) {
        std::borrow::Cow::Borrowed(_) => json.into(),
        std::borrow::Cow::Owned(escaped) => escaped.into(),
    }
}

/// `{"message": …, "events": [...]}`, the result of a chat turn, as the
/// parts of a frame, line separators escaped (`events` already are): a
/// large event (a `provider.request` carrying the history) is the shared
/// rendering its live frames use, not a copy, so the engine's work for a
/// turn's answer does not grow with the size of its history.
pub(crate) fn turn_result_parts(message_json: &str, events: &[Arc<str>]) -> Vec<Bytes> {
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
        parts.push(Bytes::Shared(Arc::<[u8]>::from(e.clone())));
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
        let shared: Vec<Arc<str>> = events.iter().map(|e| Arc::from(e.as_str())).collect();
        let message = serde_json::json!({"role": "assistant", "content": "l\u{2028}s"});
        let parts = turn_result_parts(&json::text(&message), &shared);
        assert!(
            parts.iter().any(|p| matches!(p, Bytes::Shared(_))),
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
