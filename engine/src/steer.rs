//! Extension `turn.steer` (docs/extensions.md): the owner of a running chat
//! turn adds user guidance, applied at the turn's next provider round trip.
//!
//! Where it lands: the guidance is logged as a `client.message.send` when it
//! is applied, so it sits after the tool results it follows in the log and
//! in `result.events`. The session's cached history gets it at that point
//! too (which is exactly what a rebuild from the log gives), while this
//! turn's own requests send it after its in-memory tool rounds, where the
//! model should read it: `Turn::steers_in_cache` trailing cache entries are
//! held back from the cached part of those requests.

use proto::jsonrpc::codes::STEER_REJECTED;
use serde_json::{json, Value};

use crate::turn::{Holder, Mode, PendingSteer, TurnId};
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;
use proto::wire::EventType;

/// Steers that may wait on one turn; more are refused.
pub const MAX_PENDING_STEERS: usize = 16;

impl Engine {
    /// `session.steerTurn {"message": {"role"?: "user", "content": …}}`.
    pub(crate) fn steer_turn(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_open_driver(conn, session_id, key_id, "session.steerTurn") {
            return;
        }
        let message = match proto::jsonrpc::SendMessageParams::parse(params) {
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
        if crate::turn::merge::has_tool_result(&message.content) {
            return self.terminal_error(
                conn,
                codes::INVALID_PARAMS,
                "Invalid params: a steer must not contain tool_result blocks",
            );
        }
        let refuse = |why: &str| format!("steer_rejected: {why}");
        let holder = self.live.get(session_id).map(|l| l.gate.holder());
        let why = match holder {
            Some(Holder::Running) => None,
            Some(Holder::Paused(_)) => Some(
                "the turn is paused for client tool results; send them with session.sendMessage",
            ),
            _ => Some("no turn is running"),
        };
        if let Some(why) = why {
            return self.terminal_error(conn, STEER_REJECTED, &refuse(why));
        }
        let running = self
            .turns
            .iter_mut()
            .find(|(_, t)| t.session_id == session_id);
        let Some((_, t)) = running else {
            return self.terminal_error(conn, STEER_REJECTED, &refuse("no turn is running"));
        };
        let why = if matches!(t.mode, Mode::Compaction(_)) {
            Some("a compaction is running")
        } else if t.key_id != key_id {
            Some("only the driver whose turn is running may steer it")
        } else if t.steers.len() >= MAX_PENDING_STEERS {
            Some("too many steers are waiting for this turn's next provider call")
        } else {
            None
        };
        if let Some(why) = why {
            return self.terminal_error(conn, STEER_REJECTED, &refuse(why));
        }
        t.steers.push(PendingSteer {
            conn,
            content: message.content,
        });
    }

    /// At a provider round-trip boundary: records the waiting steers and
    /// adds them to the turn's in-memory tail, after its tool rounds.
    pub(crate) fn apply_steers(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        if t.steers.is_empty() {
            return;
        }
        let steers = std::mem::take(&mut t.steers);
        for steer in steers {
            let payload = json!({"role": "user", "content": steer.content});
            let message = proto::provider::history_message("client.message.send", &payload);
            let Some(ev) = self.turn_event(turn_id, EventType::ClientMessageSend, payload) else {
                return;
            };
            if let Some(t) = self.turns.get_mut(&turn_id) {
                t.tail.push(message);
                t.steers_in_cache += 1;
            }
            let body = json!({"steered": true, "event_id": ev.id});
            self.terminal_result(steer.conn, &body.to_string());
        }
    }

    /// The turn ended before its next provider call: its waiting steers
    /// were never applied.
    pub(crate) fn retire_steers(&mut self, steers: Vec<PendingSteer>, why: &str) {
        for steer in steers {
            let msg = format!("steer_rejected: not applied: {why}");
            self.terminal_error(steer.conn, STEER_REJECTED, &msg);
        }
    }
}
