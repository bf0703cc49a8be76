//! Sessions into and out of the catalogue (`crate::residency`): a request
//! naming a session the catalogue does not hold waits for one store read
//! that brings it back; idle sessions beyond the budget are evicted after
//! every input.

use proto::http::Request;

use crate::conn::{LoadFor, PendingRead};
use crate::model::{Key, Session};
use crate::residency::PINNED_PER_PASS;
use crate::store::{KeyRole, ReadResult, SessionState, StoreRead, StoredSession};
use crate::{ConnId, Engine};

impl Engine {
    /// Puts a new or loaded session into the catalogue as its most recent.
    pub(crate) fn admit_session(&mut self, mut session: Session) {
        session.touched = self.residency.touch(&session.id);
        self.catalog.insert_session(session);
        self.residency.added();
    }

    /// Whether a request naming `session_id` must wait for the session to
    /// be loaded: the catalogue may not hold every stored session, and
    /// this one is not held, or requests that came before this one still
    /// wait for it (reads are answered in order, so requests reach the
    /// session in the order they arrived). Otherwise the session (if held)
    /// is touched.
    pub(crate) fn load_first(
        &mut self,
        conn: ConnId,
        req: &Request,
        session_id: &str,
        then: LoadFor,
    ) -> bool {
        if !self.residency.is_loading(session_id) {
            if let Some(s) = self.catalog.sessions.get_mut(session_id) {
                s.touched = self.residency.touch(&s.id);
                return false;
            }
        }
        if !self.residency.lazy() {
            return false;
        }
        let read = StoreRead::LoadSession {
            session_id: session_id.to_string(),
            drivers_since: self.drivers_since(),
        };
        let pending = PendingRead::LoadSession {
            session_id: session_id.to_string(),
            conn,
            req: Box::new(req.clone()),
            then,
        };
        self.residency.loading(session_id);
        self.read(read, pending);
        true
    }

    /// The answer to a [`Engine::load_first`] read: the session (if it
    /// exists) joins the catalogue and the request is routed again.
    pub(crate) fn on_session_loaded(
        &mut self,
        session_id: &str,
        (conn, req, then): (ConnId, Request, LoadFor),
        result: Result<ReadResult, String>,
    ) {
        // Still counted while the session joins and the request runs: the
        // eviction pass after this input sees the rest of the loads.
        self.residency.loaded_answer(session_id);
        match result {
            Ok(ReadResult::Session(found)) => {
                if let Some(stored) = found {
                    self.insert_stored(*stored);
                }
            }
            other => {
                let e = other.err().unwrap_or_else(|| "unexpected answer".into());
                tracing::error!(error = %e, "session load failed");
                if self.conns.get(&conn).is_some() {
                    use proto::wire::problem::ProblemType;
                    self.problem(conn, ProblemType::Internal, "internal error");
                }
                return;
            }
        }
        if self.conns.get(&conn).is_none() {
            return;
        }
        match then {
            LoadFor::Client => self.route_client_ready(conn, req),
            LoadFor::Admin => self.route_admin_ready(conn, req),
        }
    }

    /// A stored session joins the catalogue with its session keys and (if
    /// open) its driver registrations, unless it is held already (then the
    /// catalogue's record is the newer).
    pub(crate) fn insert_stored(&mut self, stored: StoredSession) {
        if self
            .catalog
            .sessions
            .contains_key(stored.session.id.as_str())
        {
            return;
        }
        let state = stored.session.state;
        let session = self.catalog.session_from_row(&stored.session);
        let sid = session.id.clone();
        self.admit_session(session);
        let own = |k: &&crate::store::KeyRow| {
            k.role == KeyRole::Session && k.name == *sid && k.deleted_at.is_none()
        };
        for row in stored.keys.iter().filter(own) {
            let key = Key::from_row(row, &self.catalog);
            self.catalog.insert_key(key);
        }
        let mut drivers = 0;
        if state == SessionState::Open {
            for d in &stored.drivers {
                let kid = self.catalog.key_id(d);
                let set = self.catalog.drivers.entry(sid.clone()).or_default();
                drivers += usize::from(set.insert(kid));
            }
        }
        self.residency.loaded(state, drivers);
    }

    /// Registrations a loaded session brings back: those made since this
    /// process started, or all of them with durable drivers.
    pub(crate) fn drivers_since(&self) -> u64 {
        if self.config.durable_drivers {
            0
        } else {
            self.boot_seq
        }
    }

    /// Evicts the least recently used idle sessions beyond the budget.
    /// Pinned sessions go to the back of the queue; a pass that meets only
    /// pinned ones gives up until a session is added or a second passes.
    pub(crate) fn evict_idle_sessions(&mut self) {
        let now = self.now.mono;
        let mut excess = self.residency.excess(self.catalog.sessions.len(), now);
        if excess == 0 {
            return;
        }
        // Give up after one round of the held sessions, or a bounded part.
        let patience = PINNED_PER_PASS.min(self.catalog.sessions.len());
        let mut pinned = 0;
        while excess > 0 {
            let Some((tick, id)) = self.residency.pop() else {
                break;
            };
            if self.catalog.sessions.get(&id).map(|s| s.touched) != Some(tick) {
                continue;
            }
            if self.pinned(&id) {
                let t = self.residency.touch(&id);
                if let Some(s) = self.catalog.sessions.get_mut(&id) {
                    s.touched = t;
                }
                pinned += 1;
                if pinned >= patience {
                    self.residency.stall(now);
                    break;
                }
                continue;
            }
            // An idle runtime entry holds only a cached history: it goes too.
            if self.live.remove(id.as_str()).is_some() {
                self.history_cache.forget(&id);
            }
            if let Some((s, drivers)) = self.catalog.remove_session(&id) {
                self.residency.evicted(s.state, drivers);
            }
            excess -= 1;
        }
        let sessions = &self.catalog.sessions;
        self.residency.compact(sessions.len(), |t, id| {
            sessions.get(id).is_some_and(|s| s.touched == t)
        });
    }

    /// Whether anything still refers to the session (it must stay). A
    /// runtime entry does unless it is idle with nothing but a cached
    /// history (a cache: eviction drops it, as the history cache would).
    fn pinned(&self, id: &str) -> bool {
        let busy = |l: &crate::session_core::SessionCore| {
            !matches!(l.gate.holder(), crate::turn::Holder::Free)
                || l.gate.has_waiters()
                || l.backoff.is_some()
        };
        self.live.get(id).is_some_and(busy)
            || self.streams.has_session(id)
            || self.mcp.has_session(id)
            || self.sandbox.tracks(id)
            || self.pending_creates.contains_key(id)
            || self.mcp_restoring.contains_key(id)
            || self.residency.is_loading(id)
    }
}
