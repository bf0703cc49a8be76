//! The FIFO turn gate (spec 01 §8): handing a free gate to the oldest live
//! waiter, retiring expired pauses (the engine's own abandonment timer),
//! forgetting departed waiters, and dropping it all when a session closes.

use super::{Holder, Op, Takeover, TurnId, Waiter};
use crate::rpc::StreamKind;
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

impl Engine {
    /// Frees the gate and admits the next live waiter.
    pub(crate) fn release_gate(&mut self, session_id: &str) {
        let Some(live) = self.live.get_mut(session_id) else {
            return;
        };
        live.holder = Holder::Free;
        self.admit_next(session_id);
    }

    /// Hands a free gate to the oldest waiter whose connection is still
    /// there; with a parked pause, only an expired one may be retired.
    fn admit_next(&mut self, session_id: &str) {
        let now = self.now.mono_ms;
        loop {
            let Some(live) = self.live.get_mut(session_id) else {
                return;
            };
            let takeover = match &live.holder {
                Holder::Free => Takeover::Fresh,
                Holder::Paused(p) if p.deadline <= now => Takeover::Retire(p.clone()),
                _ => return,
            };
            #[cfg(feature = "planted-bugs")]
            let w = if self.config.planted == Some(crate::planted::Bug::AdmitNewestWaiter) {
                live.queue.pop_back()
            } else {
                live.queue.pop_front()
            };
            #[cfg(not(feature = "planted-bugs"))]
            let w = live.queue.pop_front();
            let Some(w) = w else {
                return;
            };
            if !self.conns.contains_key(&w.conn) {
                continue;
            }
            let message = match w.op {
                Op::Send(m) => m,
                Op::Compact(prompt) => {
                    let reclaimed = match takeover {
                        Takeover::Retire(p) => {
                            self.live_mut(session_id).holder = Holder::Free;
                            Some(p)
                        }
                        _ => None,
                    };
                    return self
                        .acquire_compaction(w.conn, session_id, &w.key_id, prompt, reclaimed);
                }
            };
            if let Takeover::Retire(p) = &takeover {
                self.live_mut(session_id).holder = Holder::Free;
                if !p.cancelled {
                    self.log_abandoned(session_id, &p.owner);
                }
            }
            return self.acquire(w.conn, session_id, &w.key_id, message, takeover);
        }
    }

    /// Earliest pause deadline with someone waiting behind it.
    pub(crate) fn next_gate_deadline(&self) -> Option<u64> {
        self.live
            .values()
            .filter(|l| !l.queue.is_empty())
            .filter_map(|l| match &l.holder {
                Holder::Paused(p) => Some(p.deadline),
                _ => None,
            })
            .min()
    }

    /// The engine's own abandonment timer: a waiter behind an expired pause
    /// retires it without needing a new arrival.
    pub(crate) fn fire_gate_deadlines(&mut self) {
        let now = self.now.mono_ms;
        let due: Vec<String> = self
            .live
            .iter()
            .filter(|(_, l)| {
                !l.queue.is_empty() && matches!(&l.holder, Holder::Paused(p) if p.deadline <= now)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for session_id in due {
            self.admit_next(&session_id);
        }
    }

    /// A connection went away: it leaves any queue; a running turn keeps
    /// going without its consumer.
    pub(crate) fn forget_conn_in_turns(&mut self, conn: ConnId) {
        let mut moved = Vec::new();
        for (id, live) in self.live.iter_mut() {
            let before = live.queue.len();
            for w in live.queue.iter_mut() {
                w.forget(conn);
            }
            live.queue.retain(|w| w.conn != conn);
            if live.queue.len() != before {
                moved.push(id.clone());
            }
        }
        for id in moved {
            self.tell_queue_positions(&id);
        }
        for t in self.turns.values_mut() {
            if t.conn == Some(conn) {
                t.conn = None;
            }
            if let Some(idem) = t.idem.as_mut() {
                idem.watchers.retain(|w| *w != conn);
            }
        }
    }

    /// Session closed or revoked: drop the gate, the pause and the waiters
    /// (who then fail the post-gate state check).
    pub(crate) fn drop_live(&mut self, session_id: &str) {
        // A closed session is terminal: its in-flight turn stops here (a
        // late provider reply is ignored) and its stream ends without a
        // terminal frame, like every other stream of the session.
        let cancelled: Vec<TurnId> = self
            .turns
            .iter()
            .filter(|(_, t)| t.session_id == session_id)
            .map(|(id, _)| *id)
            .collect();
        for id in cancelled {
            if let Some(mut t) = self.turns.remove(&id) {
                self.retire_steers(std::mem::take(&mut t.steers), "the session closed");
                self.calls.retain(|_, turn| *turn != id);
                self.mcp_calls.retain(|_, turn| *turn != id);
                for conn in t.streams() {
                    self.end_stream(conn);
                }
            }
        }
        let Some(mut live) = self.live.remove(session_id) else {
            return;
        };
        let waiters: Vec<Waiter> = live.queue.drain(..).collect();
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
