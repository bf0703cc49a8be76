//! Buffered REST responses: JSON bodies, RFC 7807 problems, event pages.

use proto::wire::problem::{Problem, ProblemType};

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

    /// [`Engine::respond`] with `extra` headers after `Content-Type`.
    pub(crate) fn respond_with(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        extra: &[(&str, &str)],
        body: &[u8],
    ) {
        let close = self.closes_after(conn);
        self.log_request(conn, status);
        let bytes = proto::http::encode_response(status, content_type, extra, body, close);
        self.send(conn, bytes);
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

/// `{"message": …, "events": [...]}`: the result of a chat turn.
pub(crate) fn turn_result(message: &serde_json::Value, events: &[String]) -> String {
    let mut result = String::with_capacity(256 + events.iter().map(String::len).sum::<usize>());
    result.push_str("{\"message\":");
    result.push_str(&message.to_string());
    result.push_str(",\"events\":[");
    result.push_str(&events.join(","));
    result.push_str("]}");
    result
}
