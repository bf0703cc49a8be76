//! Opt-in turn control (docs/extensions.md): `session.cancelTurn` (and the
//! admin API's cancel), and `session.queue` position notifications. Only a
//! client that named the extension at registration sees any of it.

use proto::jsonrpc::{self, Extension};
use proto::wire::json;
use serde_json::json;

use crate::turn::Holder;
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

/// Terminal error of a request whose turn (or queued request) was cancelled.
pub const CANCELLED: i64 = jsonrpc::codes::TURN_CANCELLED;

/// What a cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cancelled {
    Nothing,
    Running,
    Paused,
    Queued(usize),
    /// A compaction holds the gate; it is not cancellable.
    Compaction,
}

impl Engine {
    /// `session.cancelTurn` (extension `turn.cancel`): the caller's running
    /// or paused turn, else its queued requests.
    pub(crate) fn cancel_turn(&mut self, conn: ConnId, session_id: &str, key_id: &str) {
        if !self.require_driver(conn, session_id, key_id, "session.cancelTurn") {
            return;
        }
        let outcome = self.cancel_gate(session_id, Some(key_id));
        let body = match outcome {
            Cancelled::Nothing => json!({"cancelled": false}),
            Cancelled::Running => json!({"cancelled": true, "state": "running"}),
            Cancelled::Paused => json!({"cancelled": true, "state": "paused"}),
            Cancelled::Queued(n) => json!({"cancelled": true, "state": "queued", "requests": n}),
            Cancelled::Compaction => {
                return self.terminal_error(
                    conn,
                    codes::APPLICATION_ERROR,
                    "a compaction is running; it cannot be cancelled",
                )
            }
        };
        self.terminal_result(conn, &json::text(&body));
    }

    /// Cancels what holds the session's gate (only if `owner` holds it,
    /// when given), else `owner`'s queued requests.
    pub(crate) fn cancel_gate(&mut self, session_id: &str, owner: Option<&str>) -> Cancelled {
        let mine = |k: &str| owner.is_none() || owner == Some(k);
        if let Some(Holder::Running) = self.live.get(session_id).map(|l| l.gate.holder()) {
            let running = (self.live.get(session_id))
                .and_then(|c| c.turn())
                .map(|t| (t.key_id.clone(), t.is_compaction()));
            match running {
                Some((_, true)) => return Cancelled::Compaction,
                Some((key, false)) if mine(&key) => {
                    self.cancel_running(session_id);
                    return Cancelled::Running;
                }
                _ => {}
            }
        }
        let cancelled = (self.live.get_mut(session_id)).and_then(|l| l.gate.cancel_pause(owner));
        if let Some(owner_key) = cancelled {
            // Logged now; the next arrival (the owner's too) retires it
            // with error results for every open tool_use.
            self.log_abandoned(session_id, &owner_key);
            self.fire_gate_deadlines();
            return Cancelled::Paused;
        }
        let Some(owner) = owner else {
            return Cancelled::Nothing;
        };
        let Some(live) = self.live.get_mut(session_id) else {
            return Cancelled::Nothing;
        };
        let theirs = live.gate.remove_queued_of(owner);
        if theirs.is_empty() {
            return Cancelled::Nothing;
        }
        for w in &theirs {
            for conn in w.streams() {
                if let Some(s) = self.stream_mut(conn) {
                    s.kind = crate::rpc::StreamKind::Single;
                }
                self.terminal_error(
                    conn,
                    CANCELLED,
                    "turn_cancelled: the request was cancelled while queued",
                );
            }
        }
        self.tell_queue_positions(session_id);
        Cancelled::Queued(theirs.len())
    }

    /// Stops a running chat turn: its provider or tool call is abandoned
    /// (a late reply is dropped), its request ends with [`CANCELLED`], the
    /// gate passes on. Nothing of the turn's in-memory tool rounds reaches
    /// the history, so no `tool_use` is left without a result.
    fn cancel_running(&mut self, session_id: &str) {
        let Some(mut t) = self.take_turn(session_id) else {
            return;
        };
        // The provider stops generating what nobody will read.
        self.abort_calls(session_id);
        if let Some(request) = t.streaming_deltas() {
            let reason = Some(jsonrpc::DiscardReason::Cancelled);
            self.deltas_ended(session_id, &request, reason);
        }
        let tokens: Vec<_> = self
            .mcp_calls
            .iter()
            .filter(|(_, (_, turn))| *turn == t.id)
            .map(|(token, _)| *token)
            .collect();
        for token in tokens {
            self.mcp_calls.remove(&token);
            self.mcp.abandon(token);
        }
        tracing::info!(session = %session_id, "turn cancelled");
        self.retire_steers(std::mem::take(&mut t.steers), "the turn was cancelled");
        let msg = "turn_cancelled: the turn was cancelled";
        self.idem_finished(session_id, &t, || {
            serde_json::json!({"error": {"code": CANCELLED, "message": msg}}).to_string()
        });
        for conn in t.streams() {
            self.terminal_error(conn, CANCELLED, msg);
        }
        self.release_gate(session_id);
    }

    /// Extension `turn.queue`: every opted-in waiter whose position changed
    /// hears its new one.
    pub(crate) fn tell_queue_positions(&mut self, session_id: &str) {
        let Some(live) = self.live.get_mut(session_id) else {
            return;
        };
        for (conn, position) in live.gate.position_changes() {
            if self.stream_has(conn, Extension::TurnQueue) {
                self.frame(conn, &jsonrpc::queue_frame(position));
            }
        }
    }
}
