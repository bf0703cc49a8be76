//! The engine's side of the FIFO turn gate (spec 01 §8): it routes the
//! session core's gate answers (admit, refuse) to turns and streams, fires
//! the abandonment timer, forgets departed waiters, and drops it all when a
//! session closes. The gate's rules live in `session_core`.

use super::Waiter;
use crate::rpc::StreamKind;
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

impl Engine {
    /// Frees the gate and admits the next live waiter.
    pub(crate) fn release_gate(&mut self, session_id: &str) {
        let now = self.now.mono;
        let conns = &self.conns;
        let Some(live) = self.live.get_mut(session_id) else {
            return;
        };
        let start = live.gate.release(now, |c| conns.contains_key(&c));
        if !live.gate.has_waiters() {
            self.waiting.remove(session_id);
        }
        match start {
            Some(start) => self.start_admitted(session_id, start),
            None => self.note_gate_idle(session_id),
        }
    }

    /// Records that `session_id`'s gate may now have waiters.
    pub(crate) fn note_waiting(&mut self, session_id: &str) {
        if !self.waiting.contains(session_id) {
            let id = match self.live.get_key_value(session_id) {
                Some((id, _)) => id.clone(),
                None => self.catalog.session_id(session_id),
            };
            self.waiting.insert(id);
        }
    }

    /// Earliest pause deadline with someone waiting behind it.
    pub(crate) fn next_gate_deadline(&self) -> Option<crate::MonoMs> {
        (self.waiting.iter())
            .filter_map(|id| self.live.get(id)?.gate.deadline())
            .min()
    }

    /// The engine's own abandonment timer: a waiter behind an expired pause
    /// retires it without needing a new arrival.
    pub(crate) fn fire_gate_deadlines(&mut self) {
        let now = self.now.mono;
        let live = &self.live;
        self.waiting
            .retain(|id| live.get(id).is_some_and(|l| l.gate.has_waiters()));
        let due: Vec<crate::ids::SessionId> = (self.waiting.iter())
            .filter(|id| {
                let deadline = live.get(id.as_str()).and_then(|l| l.gate.deadline());
                deadline.is_some_and(|d| d <= now)
            })
            .cloned()
            .collect();
        for session_id in due {
            let conns = &self.conns;
            let start = self
                .live
                .get_mut(session_id.as_str())
                .and_then(|l| l.gate.tick(now, |c| conns.contains_key(&c)));
            if let Some(start) = start {
                self.start_admitted(&session_id, start);
            }
        }
    }

    /// A connection went away: it leaves any queue; a running turn keeps
    /// going without its consumer.
    pub(crate) fn forget_conn_in_turns(&mut self, conn: ConnId) {
        let mut moved = Vec::new();
        let mut emptied = Vec::new();
        for id in &self.waiting {
            let Some(live) = self.live.get_mut(id) else {
                emptied.push(id.clone());
                continue;
            };
            if live.gate.forget(conn) {
                moved.push(id.clone());
            }
            if !live.gate.has_waiters() {
                emptied.push(id.clone());
            }
        }
        for id in emptied {
            self.waiting.remove(&id);
        }
        for id in moved {
            self.tell_queue_positions(&id);
        }
        let Engine { running, live, .. } = self;
        for session_id in running.values() {
            if let Some(t) = live.get_mut(session_id).and_then(|c| c.turn_mut()) {
                t.forget_stream(conn);
            }
        }
    }

    /// Session closed or revoked: drop the gate, the pause and the waiters
    /// (who then fail the post-gate state check).
    pub(crate) fn drop_live(&mut self, session_id: &str) {
        // A closed session is terminal: its in-flight turn stops here (a
        // late provider reply is ignored) and its stream ends without a
        // terminal frame, like every other stream of the session.
        if let Some(mut t) = self.take_turn(session_id) {
            self.retire_steers(std::mem::take(&mut t.steers), "the session closed");
            self.abort_calls(session_id);
            self.mcp_calls.retain(|_, (s, _)| **s != *session_id);
            for conn in t.streams() {
                self.end_stream(conn);
            }
        }
        self.waiting.remove(session_id);
        self.history_cache.forget(session_id);
        let Some(mut live) = self.live.remove(session_id) else {
            return;
        };
        let waiters: Vec<Waiter> = live.gate.drain();
        for w in waiters {
            let msg = self
                .open_state_error(session_id)
                .unwrap_or_else(|| "session no longer exists".into());
            for conn in w.streams() {
                if let Some(s) = self.stream_mut(conn) {
                    s.kind = StreamKind::Single;
                }
                self.terminal_error(conn, codes::APPLICATION_ERROR, &msg);
            }
        }
    }
}
