//! Extension `turn.steer` (docs/extensions.md): `session.steerTurn`'s
//! checks of the request; the session core queues the steer for the
//! running turn's next provider call, or refuses it
//! (`session_core/steer.rs`, which also says where a steer lands).

use proto::jsonrpc::codes::STEER_REJECTED;
use proto::jsonrpc::{Parsed, SendMessageParams};

use crate::session_core::SteerRefusal;
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

impl Engine {
    /// `session.steerTurn {"message": {"role"?: "user", "content": …}}`.
    pub(crate) fn steer_turn(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: Parsed<SendMessageParams>,
    ) {
        if !self.require_open_driver(conn, session_id, key_id, "session.steerTurn") {
            return;
        }
        let message = match params {
            Ok(m) => m,
            Err(msg) => return self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        if message.role != "user" {
            return self.terminal_error(
                conn,
                codes::INVALID_PARAMS,
                "Invalid params: a steer's \"role\" must be \"user\"",
            );
        }
        if crate::session_core::merge::has_tool_result(&message.content) {
            return self.terminal_error(
                conn,
                codes::INVALID_PARAMS,
                "Invalid params: a steer must not contain tool_result blocks",
            );
        }
        let steered = match self.live.get_mut(session_id) {
            Some(core) => core.steer(conn, key_id, message.content),
            None => Err(SteerRefusal::NotRunning),
        };
        if let Err(why) = steered {
            let msg = format!("steer_rejected: {}", why.why());
            self.terminal_error(conn, STEER_REJECTED, &msg);
        }
    }
}
