//! The engine's side of the history cache (`history_cache`): it weighs
//! each session's cached provider-facing history as it is built and grows,
//! tells the cache when a session's gate goes idle or is in use, and drops
//! the histories the cache gives up. A dropped history is rebuilt from the
//! log by the session's next arrival (`recover`).

use super::Holder;
use crate::Engine;

impl Engine {
    /// `session_id`'s cached history was just (re)built: weigh it.
    pub(crate) fn history_built(&mut self, session_id: &str) {
        let Some((id, live)) = self.live.get_key_value(session_id) else {
            return;
        };
        match live.history.as_ref() {
            Some(h) => self.history_cache.loaded(id, h.weight()),
            None => self.history_cache.forget(session_id),
        }
    }

    /// A gate's state changed: when nothing holds it or waits, the session
    /// is idle as of now, and the cache may give histories up.
    pub(crate) fn note_gate_idle(&mut self, session_id: &str) {
        let Some(live) = self.live.get(session_id) else {
            return;
        };
        if matches!(live.gate.holder(), Holder::Free) && !live.gate.has_waiters() {
            self.history_cache.idle(session_id, self.now.mono);
            self.drop_idle_histories();
        }
    }

    /// Drops the histories the cache gives up (too long idle, or over its
    /// budget). Runs on every timer tick and whenever a session goes idle.
    pub(crate) fn drop_idle_histories(&mut self) {
        for id in self.history_cache.evictions(self.now.mono) {
            let Some(live) = self.live.get_mut(&id) else {
                continue;
            };
            if !matches!(live.gate.holder(), Holder::Free) || live.gate.has_waiters() {
                // Not idle after all: keep it, and weigh it again.
                self.history_built(&id);
                continue;
            }
            live.history = None;
            live.newest_usage = None;
            // Nothing else of the entry is needed unless a compaction
            // backoff is armed: drop it too (its gate is free and empty).
            if live.backoff.is_none() {
                self.live.remove(&id);
            }
            // The next arrival must read the log: the session is no longer
            // known to be empty.
            if let Some(s) = self.catalog.sessions.get_mut(&id) {
                s.fresh = false;
            }
        }
    }
}
