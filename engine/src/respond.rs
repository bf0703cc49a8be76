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

    /// Renders `{"items":[EventView…],"next_cursor":…}` from `limit + 1`
    /// fetched rows (the extra row only signals that more exist).
    pub(crate) fn answer_events_page(
        &mut self,
        conn: ConnId,
        limit: usize,
        mut rows: Vec<EventRow>,
    ) {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let mut body = String::with_capacity(64 + rows.len() * 256);
        body.push_str("{\"items\":[");
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&event_json(r));
        }
        body.push_str("],\"next_cursor\":");
        match (more, rows.last()) {
            (true, Some(last)) => {
                body.push('"');
                body.push_str(&last.seq.to_string());
                body.push('"');
            }
            _ => body.push_str("null"),
        }
        body.push('}');
        self.respond_json(conn, 200, body.as_bytes());
    }
}

/// The EventView JSON of a stored row.
pub(crate) fn event_json(r: &EventRow) -> String {
    proto::wire::event::event_view_json(
        &r.id,
        &r.session_id,
        r.client_key_id.as_deref(),
        &r.event_type,
        &r.payload,
        &r.created_at,
    )
}
