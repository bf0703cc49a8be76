//! Sessions into and out of the catalogue (`crate::residency`): a request
//! naming a session the catalogue does not hold waits for one store read
//! that brings it back; idle sessions beyond the budget are evicted after
//! every input. A new session's MCP servers are connected after its row
//! and `session.open` exist and before its `201` goes out (spec 06 §4.1).

use proto::http::Request;

use crate::conn::{LoadFor, PendingRead};
use crate::mcp::McpServerSpec;
use crate::model::{Key, Session};
use crate::residency::PINNED_PER_PASS;
use crate::services::Services;
use crate::sessions::PendingCreate;
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
            drivers_since: self.svc.drivers_since(),
        };
        let pending = PendingRead::LoadSession {
            session_id: session_id.to_string(),
            conn,
            req: Box::new(req.clone()),
            then,
        };
        self.residency.loading(session_id);
        self.svc.read(read, pending);
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
                if self.svc.conns.get(&conn).is_some() {
                    use proto::wire::problem::ProblemType;
                    self.svc
                        .problem(conn, ProblemType::Internal, "internal error");
                }
                return;
            }
        }
        if self.svc.conns.get(&conn).is_none() {
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

    /// Evicts the least recently used idle sessions beyond the budget.
    /// Pinned sessions go to the back of the queue; a pass that meets only
    /// pinned ones gives up until a session is added or a second passes.
    pub(crate) fn evict_idle_sessions(&mut self) {
        let now = self.svc.now.mono;
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
            self.sessions.drop_core(&id);
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
        self.sessions.holds(id)
            || self.svc.streams.has_session(id)
            || self.mcp.has_session(id)
            || self.sandbox.tracks(id)
            || self.residency.is_loading(id)
    }
    /// Creates the session of a fork or an import (`crate::transfer`) in
    /// one batch of writes (its row, its creator's session key, every
    /// copied event with a new id and seq, its lineage row), then connects
    /// its MCP servers as a create does and answers `201`. The target is
    /// checked again: it may have changed while the log was read.
    pub(crate) fn create_copy(&mut self, conn: ConnId, mut plan: crate::transfer::NewSession) {
        use crate::transfer::Answer;
        use proto::wire::ids::IdKind;
        use proto::wire::problem::ProblemType;
        let (key_id, profile_id) = (plan.creator.clone(), plan.profile_id.clone());
        if !self.copy_target(conn, &key_id, &profile_id, Some(&plan.declarations)) {
            return;
        }
        let (Some(key), Some(profile)) = (
            self.catalog
                .keys
                .get(key_id.as_str())
                .map(|k| (**k).clone()),
            self.catalog.live_profile(&profile_id).cloned(),
        ) else {
            return self
                .svc
                .problem(conn, ProblemType::Internal, "internal error");
        };
        if let Some(id) = plan.keep_id.as_deref() {
            if self.catalog.sessions.contains_key(id) || self.residency.is_loading(id) {
                let detail = format!("session {id} exists; import without keep_id to get a new id");
                return self.svc.problem(conn, ProblemType::SessionExists, &detail);
            }
        }
        let session_id = match plan.keep_id.take() {
            Some(id) => id,
            None => self.svc.new_id(IdKind::Session),
        };
        let mut session = Session {
            id: crate::ids::SessionId::new(&session_id),
            creator: key.id.clone(),
            profile_id: self.catalog.profile_id(&profile_id),
            state: plan.state,
            client_version: plan.client_version.as_deref().map(Box::from),
            client_tools: Default::default(),
            sandbox_tools: Default::default(),
            subagent_tools: Default::default(),
            compaction: plan.compaction.clone(),
            created_at: crate::time::Stamp::At(self.svc.now.unix),
            closed_at: plan.closed_at.as_deref().map(crate::time::Stamp::from_text),
            // Its history is in the copied log (read on first use), and its
            // MCP servers are connected below, as at a create.
            fresh: false,
            mcp_checked: true,
            touched: 0,
        };
        let pool = &mut self.catalog.decls;
        let d = &plan.declarations;
        session.client_tools.set(pool, &key.id, &d.tools);
        session.sandbox_tools.set(pool, &key.id, &d.sandbox_tools);
        session.subagent_tools.set(pool, &key.id, &d.subagent_tools);
        self.svc
            .write(crate::StoreWrite::InsertSession(session.to_row()));
        // Before the events: a reader of the writes (the simulator's
        // checker) knows them as copied when it meets them.
        let lineage = plan.lineage(&session_id, &self.svc.timestamp());
        self.svc.write(crate::StoreWrite::InsertLineage(lineage));
        self.admit_session(session);
        self.lease_new_session(&session_id);
        if plan.state == SessionState::Open {
            (self.svc.telemetry).session_open(&session_id, &profile_id, &key.id);
        }
        let session_key = self.mint_session_key(&session_id, &key);
        let ids: Vec<String> = (0..plan.events.len())
            .map(|_| self.svc.new_id(IdKind::Event))
            .collect();
        let mut ids = ids.into_iter();
        let log = &mut self.svc.log;
        let rows = plan.rows(
            &session_id,
            || ids.next().unwrap_or_default(),
            || log.next_seq(),
        );
        let events = rows.len();
        for row in rows {
            self.svc.write(crate::StoreWrite::InsertEvent(row));
        }
        // The client port answers as a create does, with the profile.
        let open = matches!(plan.answer, Answer::Fork { admin: false, .. })
            .then(|| self.open_answer(&session_id, &session_key, &profile_id));
        let body = plan.answer_json(&session_id, &session_key, events, open);
        let body = body.into_bytes();
        if plan.state != SessionState::Open {
            // An ended session (an import of one) takes no turn.
            return self.svc.respond_json(conn, 201, &body);
        }
        self.connect_mcp_then_respond(conn, &session_id, &profile.row.mcp_servers, body);
    }

    /// Answers a create with `body` once the profile's MCP servers are
    /// connected (all at once; unknown names are logged and skipped, and
    /// nothing fails the create).
    pub(crate) fn connect_mcp_then_respond(
        &mut self,
        conn: ConnId,
        session_id: &str,
        names: &[String],
        body: Vec<u8>,
    ) {
        let mut servers: Vec<McpServerSpec> = Vec::with_capacity(names.len());
        for name in names {
            match self.svc.config.mcp_servers.iter().find(|s| &s.name == name) {
                Some(spec) => servers.push(spec.clone()),
                None => tracing::error!(
                    server = %name,
                    session = %session_id,
                    "profile references an MCP server that is not in [mcp.servers]; skipped"
                ),
            }
        }
        if servers.is_empty() {
            return self.svc.respond_json(conn, 201, &body);
        }
        let id = self.catalog.session_id(session_id);
        self.sessions.park_create(id, PendingCreate { conn, body });
        let now = self.svc.now.mono;
        self.mcp.connect_session(session_id, servers, now);
    }

    pub(crate) fn release_create(&mut self, session_id: &str) {
        if let Some(PendingCreate { conn, body }) = self.sessions.take_create(session_id) {
            if self.svc.conns.contains_key(&conn) {
                self.svc.respond_json(conn, 201, &body);
            }
        }
        if let Some(turn_id) = self.sessions.take_mcp_wait(session_id) {
            if self.running_turn_id(session_id) == Some(turn_id) {
                self.with_core(session_id, |core, world, _| core.mcp_ready(world));
            }
        }
    }
}

impl Services {
    /// Registrations a loaded session brings back: those made since this
    /// process started, or all of them with durable drivers.
    pub(crate) fn drivers_since(&self) -> u64 {
        if self.config.durable_drivers {
            0
        } else {
            self.log.boot_seq()
        }
    }
}
