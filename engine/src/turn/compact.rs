//! `session.compact` (spec 07 §4.2): checks, then the request waits on the
//! turn gate like a `sendMessage`; the session core runs it.

use proto::jsonrpc::{CompactParams, Parsed};

use super::Op;
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

impl Engine {
    /// `session.compact` (spec 07 §4.2).
    pub(crate) fn compact(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: Parsed<CompactParams>,
    ) {
        if !self.require_open_driver(conn, session_id, key_id, "session.compact") {
            return;
        }
        let prompt = match params {
            Ok(p) => p.prompt,
            Err(msg) => return self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        self.arrive(conn, session_id, key_id, Op::Compact(prompt));
    }
}
