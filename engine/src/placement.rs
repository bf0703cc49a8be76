//! Where a session lives: whether this process holds it, and bringing it
//! here. Residency (`crate::residency`): a request naming a session the
//! catalogue does not hold waits for one store read that brings it back;
//! idle sessions beyond the budget are evicted after every input. New
//! sessions (creates, forks, imports) are admitted here; a new session's
//! MCP servers are connected after its row and `session.open` exist and
//! before its `201` goes out (spec 06 §4.1). Replica mode (docs/scaling.md,
//! `crate::replicas`): a session-scoped request runs here only once this
//! replica holds the session's lease; otherwise it claims the lease through
//! the store, and forwards the request to the owner when another replica
//! holds it. Catalogue rows committed by other replicas arrive as
//! [`crate::Input::Catalog`] and are merged here.

use proto::http::Request;

use crate::conn::{LoadFor, PendingRead, PlaceRead};
use crate::ids::SessionId;
use crate::mcp::McpServerSpec;
use crate::model::{Catalog, Key, Session};
use crate::replicas::{self, ClaimFor, Forward, FORWARDED_HEADER};
use crate::residency::{Residency, PINNED_PER_PASS};
use crate::services::Services;
use crate::sessions::PendingCreate;
use crate::store::{
    CatalogUpdate, Claimed, KeyRole, Lease, ReadError, ReadResult, SessionState, StoreRead,
    StoredSession,
};
use crate::{ConnId, Engine, Output};

impl Engine {
    /// The answer to a [`Residency::load_first`] read: the session (if it
    /// exists) joins the catalogue and the request is routed again.
    pub(crate) fn on_session_loaded(
        &mut self,
        session_id: &SessionId,
        (conn, req, then): (ConnId, Request, LoadFor),
        result: Result<ReadResult, ReadError>,
    ) {
        // Still counted while the session joins and the request runs: the
        // eviction pass after this input sees the rest of the loads.
        self.residency.loaded_answer(session_id);
        match result {
            Ok(ReadResult::Session(found)) => {
                if let Some(stored) = found {
                    self.residency.insert_stored(&mut self.catalog, *stored);
                }
            }
            other => {
                let e = ReadError::of(other);
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
        let streams = || {
            !(self.svc.streams)
                .of_session(&self.sessions.fanout(id), id)
                .is_empty()
        };
        self.sessions.holds(id) || streams() || self.residency.is_loading(id)
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
        let session_id = SessionId::from(match plan.keep_id.take() {
            Some(id) => id,
            None => self.svc.new_id(IdKind::Session),
        });
        let mut session = Session {
            id: session_id.clone(),
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
        self.residency.admit(&mut self.catalog, session);
        self.lease_new_session(&session_id);
        if plan.state == SessionState::Open {
            (self.catalog.quotas).session_opened(&key.id, &profile_id);
            (self.svc.telemetry).session_open(&session_id, &profile_id, &key.id);
        }
        let session_key = self
            .catalog
            .mint_session_key(&mut self.svc, &session_id, &key);
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
        // Before the events: a reader of the writes (the simulator's
        // checker) knows them as copied when it meets them. It names the
        // last copied seq: registrations up to it are the parent's, and
        // the store recovers none of them (issue 38).
        let copied_through = rows.last().map_or(0, |r| r.seq);
        let lineage = plan.lineage(&session_id, &self.svc.timestamp(), copied_through);
        self.svc.write(crate::StoreWrite::InsertLineage(lineage));
        for row in rows {
            self.svc.write(crate::StoreWrite::InsertEvent(row));
        }
        // The client port answers as a create does, with the profile.
        let open = matches!(plan.answer, Answer::Fork { admin: false, .. }).then(|| {
            self.catalog
                .open_answer(&self.svc, &session_id, &session_key, &profile_id)
        });
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
        session_id: &SessionId,
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
        let now = self.svc.now.mono;
        (self.sessions).connect_mcp(&mut self.mcp, session_id, servers, now);
        (self.sessions).park_create(session_id.clone(), PendingCreate { conn, body });
    }

    pub(crate) fn release_create(&mut self, session_id: &SessionId) {
        if let Some(PendingCreate { conn, body }) = self.sessions.take_create(session_id) {
            if self.svc.conns.contains_key(&conn) {
                self.svc.respond_json(conn, 201, &body);
            }
        }
        if let Some(turn_id) = self.sessions.take_mcp_wait(session_id) {
            if self.sessions.running_turn_id(session_id) == Some(turn_id) {
                self.live()
                    .with_core(session_id, |core, world, _| core.mcp_ready(world));
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

// ---- Replica mode: lease claims, adoption, catalogue notices ----------

impl Engine {
    pub(crate) fn owns_session(&self, session_id: &str) -> bool {
        self.replicas.as_ref().is_none_or(|r| r.owns(session_id))
    }

    /// Replica mode: whether `req` must wait for a lease claim first
    /// (`owner_only`: it changes the session or needs its live state;
    /// otherwise it only needs the session to be known here).
    /// `session_id` is the request path's text, unchecked: it is typed
    /// once a claim names it.
    pub(crate) fn claim_first(
        &mut self,
        conn: ConnId,
        req: &Request,
        session_id: &str,
        owner_only: bool,
    ) -> bool {
        if self.owns_session(session_id)
            || (!owner_only && self.catalog.sessions.contains_key(session_id))
        {
            return false;
        }
        self.svc.claim(
            &SessionId::new(session_id),
            ClaimFor::Request {
                conn,
                req: Box::new(req.clone()),
            },
        );
        true
    }

    /// Replica mode: a session created here is served here (its MCP
    /// connections and history cache are here already).
    pub(crate) fn lease_new_session(&mut self, session_id: &SessionId) {
        let Some(r) = self.replicas.as_mut() else {
            return;
        };
        r.adopt(session_id);
        self.svc.write(crate::StoreWrite::LeaseNewSession {
            session_id: session_id.to_string(),
        });
    }

    pub(crate) fn on_claim_done(
        &mut self,
        session_id: &SessionId,
        then: ClaimFor,
        result: Result<ReadResult, ReadError>,
    ) {
        let lease = match result {
            Ok(ReadResult::Lease(l)) => Ok(l),
            Ok(_) => Err(ReadError::Unexpected),
            Err(e) => Err(e),
        };
        if let Ok(Lease::Mine(claimed)) = &lease {
            self.adopt_session(claimed);
            let by = match &then {
                ClaimFor::Cascade { by } => by.clone(),
                ClaimFor::Request { .. } => claimed.session.client_key_id.clone(),
            };
            self.close_if_orphaned(session_id, &by);
        }
        let ClaimFor::Request { conn, req } = then else {
            return;
        };
        if self.svc.conns.get(&conn).is_none() {
            return;
        }
        match lease {
            Ok(Lease::Mine(_)) | Ok(Lease::NoSession) => self.route_client_ready(conn, *req),
            Ok(Lease::Elsewhere { addr }) => self.svc.forward(conn, &req, session_id, addr),
            Err(e) => {
                tracing::error!(session = %session_id, error = %e, "session lease claim failed");
                self.svc
                    .unavailable(conn, "the session's owner could not be determined; retry");
            }
        }
    }

    /// The lease of a session is ours: replace what the catalogue knew of
    /// it with the stored rows (its previous owner may have changed them),
    /// forget any cached history (rebuilt from the log on first use, as
    /// after a restart) and move the seq counter past its log.
    fn adopt_session(&mut self, c: &Claimed) {
        let Some(r) = self.replicas.as_mut() else {
            return;
        };
        let id = c.session.id.as_str();
        if r.owns(id) {
            return;
        }
        r.adopt(id);
        self.svc.log.skip_past(c.max_seq, |seq| r.align(seq));
        let known = self.catalog.sessions.contains_key(id);
        let session = self.catalog.session_from_row(&c.session);
        if known {
            if let Some(s) = self.catalog.sessions.get_mut(id) {
                **s = session;
            }
        } else {
            self.catalog.insert_session(session);
        }
        let held: Vec<String> = (self.catalog.session_candidates(id).iter())
            .map(|k| k.to_string())
            .collect();
        for k in held {
            self.catalog.remove_key(&k);
        }
        for row in c.keys.iter().filter(|k| k.role == KeyRole::Session) {
            let key = Key::from_row(row, &self.catalog);
            self.catalog.insert_key(key);
        }
        if self.sessions.core(id).is_some_and(|l| l.history.is_some()) {
            self.sessions.drop_core(id);
        }
        // Registrations live with the owner: drivers register again after
        // a move, unless they are durable (`BAE_DURABLE_DRIVERS`): then the
        // claim read them from the log, exactly as a restart does (and,
        // as after a restart, without their opted-in extensions).
        self.catalog.drivers.remove(id);
        self.sessions.forget_drivers(id);
        if c.session.state == SessionState::Open && !c.drivers.is_empty() {
            let sid = self.catalog.session_id(id);
            for d in &c.drivers {
                let kid = self.catalog.key_id(d);
                self.catalog
                    .drivers
                    .entry(sid.clone())
                    .or_default()
                    .insert(kid);
            }
        }
        self.sessions.adopt_keys(&self.catalog, &c.idempotency);
    }

    /// The revocation cascade's last step (spec 03 §4.2) for a session this
    /// replica owns: open, and every session key bound to it revoked.
    fn close_if_orphaned(&mut self, session_id: &SessionId, by: &str) {
        let open =
            self.catalog.sessions.get(session_id).map(|s| s.state) == Some(SessionState::Open);
        let orphaned = self.catalog.session_candidates(session_id).is_empty();
        if open && orphaned && self.owns_session(session_id) {
            self.close_session(session_id, by, "client_key_revoked");
        }
    }

    /// Rows another replica committed. Monotone merge: rows are added or
    /// replaced, revoked keys removed; a session this replica owns keeps
    /// its own state (only its owner writes it), except that revoking its
    /// keys runs the cascade here.
    pub(crate) fn on_catalog(&mut self, u: CatalogUpdate) {
        for p in u.profiles {
            let id = p.id.as_str();
            match self.catalog.profiles.get_mut(id) {
                Some(held) => {
                    if held.row.deleted_at.is_none() {
                        self.catalog.profile_names.insert(p.name.clone());
                        held.row = p;
                    }
                }
                None => {
                    let live = p.deleted_at.is_none() && !p.available_sandboxes.is_empty();
                    let id = p.id.clone();
                    self.catalog.insert_profile(p);
                    if live {
                        self.sandbox_cx().provision_profile(&id);
                    }
                }
            }
        }
        for s in u.sessions {
            let id = s.id.as_str();
            if self.owns_session(id) {
                continue;
            }
            let ended = s.state != SessionState::Open;
            // Open-session quotas count what other replicas open and close.
            let was = self.catalog.sessions.get(id).map(|h| h.state);
            if !u.full {
                match (was, ended) {
                    (None, false) => {
                        (self.catalog.quotas).session_opened(&s.client_key_id, &s.profile_id)
                    }
                    (Some(SessionState::Open), true) => {
                        (self.catalog.quotas).session_closed(&s.client_key_id, &s.profile_id)
                    }
                    _ => {}
                }
            }
            let session = self.catalog.session_from_row(&s);
            match self.catalog.sessions.get_mut(id) {
                Some(held) => **held = session,
                None => self.catalog.insert_session(session),
            }
            if ended {
                // MCP connections opened here at its creation (the owner
                // records the close; the hub writes no events).
                self.sessions.close_mcp(&mut self.mcp, &s.id);
            }
        }
        for scope in u.quotas_removed {
            self.catalog.quotas.remove(&scope);
        }
        for q in u.quotas {
            (self.catalog).quota_changed_elsewhere(&mut self.svc, q);
        }
        for k in u.keys {
            let owned_session_key = k.role == KeyRole::Session && self.owns_session(&k.name);
            if self.catalog.keys.contains_key(k.id.as_str()) || owned_session_key {
                continue;
            }
            let key = Key::from_row(&k, &self.catalog);
            self.catalog.insert_key(key);
        }
        // The cascade of revoked session keys (spec 03 §4.2): the owner
        // closes an orphaned session; a session nobody holds is claimed
        // (one replica wins) and closed by the winner.
        let mut cascade: Vec<(String, String)> = Vec::new();
        for k in u.revoked {
            self.catalog.remove_key(&k.id);
            let closed = (self.catalog.sessions.get(k.name.as_str()))
                .is_some_and(|s| s.state != SessionState::Open);
            if k.role == KeyRole::Session && !closed && !u.full {
                cascade.push((k.name, k.client_id.unwrap_or_default()));
            }
        }
        cascade.sort();
        cascade.dedup_by(|a, b| a.0 == b.0);
        for (name, by) in cascade {
            let session_id = self.catalog.session_id(&name);
            if self.owns_session(&session_id) {
                self.close_if_orphaned(&session_id, &by);
            } else {
                self.svc.claim(&session_id, ClaimFor::Cascade { by });
            }
        }
    }
}

impl Services {
    pub(crate) fn claim(&mut self, session_id: &SessionId, then: ClaimFor) {
        // Durable registrations follow the session to its new owner, as
        // they survive a restart; otherwise drivers register again.
        let drivers_since = match self.config.durable_drivers {
            true => 0,
            false => u64::MAX,
        };
        let read = StoreRead::ClaimLease {
            session_id: session_id.to_string(),
            drivers_since,
        };
        let session_id = session_id.clone();
        self.read(
            read,
            PendingRead::Place(PlaceRead::Claim { session_id, then }),
        );
    }

    /// A `503 replica_unavailable` answer that finishes the request.
    pub(crate) fn unavailable(&mut self, conn: ConnId, detail: &str) {
        let close = self.closes_after(conn);
        self.log_request(conn, 503);
        self.send(conn, replicas::unavailable(detail, close));
        self.finish_request(conn);
    }

    /// Hands `conn` with `req` to the owner at `addr`.
    pub(crate) fn forward(
        &mut self,
        conn: ConnId,
        req: &Request,
        session_id: &SessionId,
        addr: String,
    ) {
        if req.header(FORWARDED_HEADER).is_some() {
            // The replica that sent it saw us as the owner; the lease moved
            // since. The client retries through the load balancer.
            return self.unavailable(conn, "the session is moving between replicas; retry");
        }
        tracing::info!(
            target: "baesrv::client",
            method = %req.method.as_str(),
            path = %req.path(),
            session = %session_id,
            to = %addr,
            "forwarded to the session's owner"
        );
        self.conns.take_current(conn);
        self.telemetry.http_end(conn);
        self.conns.remove(conn);
        self.streams.end(conn);
        let request = replicas::forward_request(req, &self.config.version);
        let unreachable = replicas::unavailable("the session's owner is unreachable; retry", true);
        self.outputs.push_back(Output::Forward(Forward {
            conn,
            to: addr,
            request,
            unreachable,
        }));
    }
}

/// Residency's side of placement: admitting a session to the catalogue.
impl Residency {
    /// Puts a new or loaded session into the catalogue as its most recent.
    pub(crate) fn admit(&mut self, catalog: &mut Catalog, mut session: Session) {
        session.touched = self.touch(&session.id);
        catalog.insert_session(session);
        self.added();
    }

    /// Whether a request naming `session_id` must wait for the session to
    /// be loaded: the catalogue may not hold every stored session, and
    /// this one is not held, or requests that came before this one still
    /// wait for it (reads are answered in order, so requests reach the
    /// session in the order they arrived). Otherwise the session (if held)
    /// is touched. `session_id` is the request path's text, as in
    /// [`Engine::claim_first`].
    pub(crate) fn load_first(
        &mut self,
        catalog: &mut Catalog,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        session_id: &str,
        then: LoadFor,
    ) -> bool {
        if !self.is_loading(session_id) {
            if let Some(s) = catalog.sessions.get_mut(session_id) {
                s.touched = self.touch(&s.id);
                return false;
            }
        }
        if !self.lazy() {
            return false;
        }
        let read = StoreRead::LoadSession {
            session_id: session_id.to_string(),
            drivers_since: svc.drivers_since(),
        };
        let pending = PlaceRead::LoadSession {
            session_id: SessionId::new(session_id),
            conn,
            req: Box::new(req.clone()),
            then,
        };
        self.loading(session_id);
        svc.read(read, PendingRead::Place(pending));
        true
    }

    /// A stored session joins the catalogue with its session keys and (if
    /// open) its driver registrations, unless it is held already (then the
    /// catalogue's record is the newer).
    pub(crate) fn insert_stored(&mut self, catalog: &mut Catalog, stored: StoredSession) {
        if catalog.sessions.contains_key(stored.session.id.as_str()) {
            return;
        }
        let state = stored.session.state;
        let session = catalog.session_from_row(&stored.session);
        let sid = session.id.clone();
        self.admit(catalog, session);
        let own = |k: &&crate::store::KeyRow| {
            k.role == KeyRole::Session && k.name == *sid && k.deleted_at.is_none()
        };
        for row in stored.keys.iter().filter(own) {
            let key = Key::from_row(row, catalog);
            catalog.insert_key(key);
        }
        let mut drivers = 0;
        if state == SessionState::Open {
            for d in &stored.drivers {
                let kid = catalog.key_id(d);
                let set = catalog.drivers.entry(sid.clone()).or_default();
                drivers += usize::from(set.insert(kid));
            }
        }
        self.loaded(state, drivers);
    }
}
