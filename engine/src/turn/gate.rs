//! The engine's side of the FIFO turn gate (spec 01 §8): it routes the
//! session core's gate answers (admit, refuse) to turns and streams, fires
//! the abandonment timer, forgets departed waiters, and drops it all when a
//! session closes. The gate's rules live in `session_core`. Also the
//! opt-in turn control (docs/extensions.md): `session.cancelTurn` (and the
//! admin API's cancel) retire what holds or waits on the gate, and
//! `turn.queue` waiters hear their new positions; only a client that named
//! the extension at registration sees any of it. After a start, the first
//! arrival rebuilds the gate (history and any parked pause) from the log.

use proto::jsonrpc;
use proto::wire::json;
use serde_json::json;

use super::{Holder, Pause, Waiter};
use crate::conn::{LiveRead, PendingRead};
use crate::history_load::HistoryLoad;
use crate::ids::{KeyId, SessionId};
use crate::live::LiveCx;
use crate::session_core::recovery;
use crate::store::{ReadError, ReadResult, StoreRead};
use crate::streams::StreamKind;
use crate::ConnId;
use proto::jsonrpc::codes;

/// Events read after a paused message (its tool rounds are bounded by the
/// number of tool_use blocks; this is generous).
const PAUSE_SCAN: usize = 4096;

/// Terminal error of a request whose turn (or queued request) was cancelled.
const CANCELLED: i64 = jsonrpc::codes::TURN_CANCELLED;

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

impl LiveCx<'_> {
    /// Frees the gate and admits the next live waiter.
    pub(crate) fn release_gate(&mut self, session_id: &SessionId) {
        let now = self.svc.now.mono;
        let conns = &self.svc.conns;
        let Some(live) = self.sessions.core_mut(session_id) else {
            return;
        };
        let start = live.gate.release(now, |c| conns.contains_key(&c));
        if !live.gate.has_waiters() {
            self.sessions.unwait(session_id);
        }
        match start {
            Some(start) => self.start_admitted(session_id, start),
            None => self
                .sessions
                .note_gate_idle(self.catalog, session_id, self.svc.now.mono),
        }
    }

    /// The engine's own abandonment timer: a waiter behind an expired pause
    /// retires it without needing a new arrival.
    pub(crate) fn fire_gate_deadlines(&mut self) {
        let now = self.svc.now.mono;
        for session_id in self.sessions.due_gates(now) {
            let conns = &self.svc.conns;
            let start = self
                .sessions
                .core_mut(session_id.as_str())
                .and_then(|l| l.gate.tick(now, |c| conns.contains_key(&c)));
            if let Some(start) = start {
                self.start_admitted(&session_id, start);
            }
        }
    }

    /// Session closed or revoked: drop the gate, the pause and the waiters
    /// (who then fail the post-gate state check).
    pub(crate) fn drop_live(&mut self, session_id: &SessionId) {
        // A closed session is terminal: its in-flight turn stops here (a
        // late provider reply is ignored) and its stream ends without a
        // terminal frame, like every other stream of the session.
        if let Some(mut t) = self.sessions.take_turn(self.routes, session_id) {
            self.svc
                .retire_steers(std::mem::take(&mut t.steers), "the session closed");
            self.abort_calls(session_id);
            self.routes.forget_mcp_calls(session_id);
            for conn in t.streams() {
                self.svc.end_stream(conn);
            }
        }
        let Some(mut live) = self.sessions.drop_core(session_id) else {
            return;
        };
        let waiters: Vec<Waiter> = live.gate.drain();
        for w in waiters {
            let msg = self
                .catalog
                .open_state_error(session_id)
                .unwrap_or_else(|| "session no longer exists".into());
            for conn in w.streams() {
                if let Some(s) = self.svc.stream_mut(conn) {
                    s.kind = StreamKind::Single;
                }
                self.svc
                    .terminal_error(conn, codes::APPLICATION_ERROR, &msg);
            }
        }
    }

    /// `session.cancelTurn` (extension `turn.cancel`): the caller's running
    /// or paused turn, else its queued requests.
    pub(crate) fn cancel_turn(&mut self, conn: ConnId, session_id: &SessionId, key_id: &KeyId) {
        if !self
            .catalog
            .require_driver(self.svc, conn, session_id, key_id, "session.cancelTurn")
        {
            return;
        }
        let outcome = self.cancel_gate(session_id, Some(key_id));
        let body = match outcome {
            Cancelled::Nothing => json!({"cancelled": false}),
            Cancelled::Running => json!({"cancelled": true, "state": "running"}),
            Cancelled::Paused => json!({"cancelled": true, "state": "paused"}),
            Cancelled::Queued(n) => json!({"cancelled": true, "state": "queued", "requests": n}),
            Cancelled::Compaction => {
                return self.svc.terminal_error(
                    conn,
                    codes::APPLICATION_ERROR,
                    "a compaction is running; it cannot be cancelled",
                )
            }
        };
        self.svc.terminal_result(conn, &json::text(&body));
    }

    /// Cancels what holds the session's gate (only if `owner` holds it,
    /// when given), else `owner`'s queued requests.
    pub(crate) fn cancel_gate(&mut self, session_id: &SessionId, owner: Option<&str>) -> Cancelled {
        let mine = |k: &str| owner.is_none() || owner == Some(k);
        if let Some(Holder::Running) = self.sessions.core(session_id).map(|l| l.gate.holder()) {
            let running = (self.sessions.core(session_id))
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
        let cancelled =
            (self.sessions.core_mut(session_id)).and_then(|l| l.gate.cancel_pause(owner));
        if let Some(owner_key) = cancelled {
            // Logged now; the next arrival (the owner's too) retires it
            // with error results for every open tool_use.
            let fanout = self.sessions.streams_mut(session_id);
            self.svc.log_abandoned(fanout, session_id, &owner_key);
            self.fire_gate_deadlines();
            return Cancelled::Paused;
        }
        let Some(owner) = owner else {
            return Cancelled::Nothing;
        };
        let Some(live) = self.sessions.core_mut(session_id) else {
            return Cancelled::Nothing;
        };
        let theirs = live.gate.remove_queued_of(owner);
        if theirs.is_empty() {
            return Cancelled::Nothing;
        }
        for w in &theirs {
            for conn in w.streams() {
                if let Some(s) = self.svc.stream_mut(conn) {
                    s.kind = StreamKind::Single;
                }
                self.svc.terminal_error(
                    conn,
                    CANCELLED,
                    "turn_cancelled: the request was cancelled while queued",
                );
            }
        }
        self.sessions.tell_queue_positions(self.svc, session_id);
        Cancelled::Queued(theirs.len())
    }

    /// Stops a running chat turn: its provider or tool call is abandoned
    /// (a late reply is dropped), its request ends with [`CANCELLED`], the
    /// gate passes on. Nothing of the turn's in-memory tool rounds reaches
    /// the history, so no `tool_use` is left without a result.
    fn cancel_running(&mut self, session_id: &SessionId) {
        let Some(mut t) = self.sessions.take_turn(self.routes, session_id) else {
            return;
        };
        // The provider stops generating what nobody will read.
        self.abort_calls(session_id);
        if let Some(request) = t.streaming_deltas() {
            let reason = Some(jsonrpc::DiscardReason::Cancelled);
            let fanout = self.sessions.fanout(session_id);
            self.svc.deltas_ended(&fanout, session_id, &request, reason);
        }
        for token in self.routes.end_mcp_calls_of(t.id) {
            let hub = &mut *self.mcp;
            (self.sessions).with_mcp(session_id, |set| set.abandon(hub, token));
        }
        tracing::info!(session = %session_id, "turn cancelled");
        self.svc
            .retire_steers(std::mem::take(&mut t.steers), "the turn was cancelled");
        let msg = "turn_cancelled: the turn was cancelled";
        self.sessions.idem_finished(self.svc, session_id, &t, || {
            serde_json::json!({"error": {"code": CANCELLED, "message": msg}}).to_string()
        });
        for conn in t.streams() {
            self.svc.terminal_error(conn, CANCELLED, msg);
        }
        self.release_gate(session_id);
    }

    // ---- Recovery after a start ----------------------------------------
    // The first arrival after a start rebuilds the session's history and
    // any parked pause from the log (`session_core::recovery`); the owner
    // of a restored pause gets a fresh `BAE_TURN_TIMEOUT` from then.

    pub(crate) fn on_recover(
        &mut self,
        session_id: &SessionId,
        result: Result<HistoryLoad, ReadError>,
    ) {
        let load = match result {
            Ok(load) => load,
            Err(e) => {
                tracing::error!(error = %e, %session_id, "history recovery read failed");
                return self.recovery_failed(session_id);
            }
        };
        let paused_seq = recovery::paused_seq(&load);
        let after_seq = recovery::scan_from(&load);
        let history = crate::history_load::history_text(&load);
        let live = self.sessions.core_of(self.catalog, session_id);
        live.history = Some(history);
        live.newest_usage = load.newest_usage.flatten();
        self.sessions.history_built(session_id);
        let Some(paused_seq) = paused_seq else {
            return self.recovered(session_id, None);
        };
        let read = StoreRead::Events {
            session_id: session_id.to_string(),
            after_seq,
            limit: PAUSE_SCAN,
        };
        let session_id = session_id.clone();
        (self.svc).read(
            read,
            PendingRead::Live(LiveRead::RecoverPause {
                session_id,
                paused_seq,
            }),
        );
    }

    pub(crate) fn on_recover_pause(
        &mut self,
        session_id: &SessionId,
        paused_seq: u64,
        result: Result<ReadResult, ReadError>,
    ) {
        let logged = match result {
            Ok(ReadResult::Events(rows)) => recovery::restore_pause(&rows, paused_seq),
            _ => None,
        };
        let Some(logged) = logged else {
            return self.recovery_failed(session_id);
        };
        // A pause cancelled before the restart stays cancelled: the next
        // arrival retires it at once.
        let deadline = match logged.cancelled {
            true => crate::MonoMs(0),
            false => self.svc.now.mono + self.svc.config.turn_timeout_ms,
        };
        let pause = Pause {
            owner: self.catalog.key_id(&logged.owner),
            deadline,
            expected: logged.expected,
            server_results: logged.server_results,
            auto_trigger: None,
            cancelled: logged.cancelled,
        };
        tracing::info!(%session_id, owner = %pause.owner, "restored a paused turn from the log");
        self.recovered(session_id, Some(pause));
    }

    /// Recovery done: queued arrivals go through the arrival rules in order.
    fn recovered(&mut self, session_id: &SessionId, pause: Option<Pause>) {
        let waiters: Vec<Waiter> = self
            .sessions
            .core_of(self.catalog, session_id)
            .gate
            .recovered(pause);
        for w in waiters {
            if self.svc.conns.contains_key(&w.conn) {
                self.arrive(w.conn, session_id, &w.key_id, w.op);
            }
        }
        self.sessions
            .note_gate_idle(self.catalog, session_id, self.svc.now.mono);
    }

    fn recovery_failed(&mut self, session_id: &SessionId) {
        self.sessions.history_forget(session_id);
        let live = self.sessions.core_of(self.catalog, session_id);
        live.history = None;
        let waiters: Vec<Waiter> = live.gate.recovery_failed();
        // Idempotent retries attached to a waiter are answered too (found
        // by sim seed 2732: one waited until the server shut down).
        for w in waiters {
            for conn in w.streams() {
                self.svc
                    .terminal_error(conn, codes::APPLICATION_ERROR, "session loop failed");
            }
        }
    }
}
