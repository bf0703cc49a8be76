//! Replica mode in the engine (docs/scaling.md): a session-scoped request
//! runs here only once this replica holds the session's lease; otherwise it
//! claims the lease through the store, and forwards the request to the
//! owner when another replica holds it. Catalogue rows committed by other
//! replicas arrive as [`crate::Input::Catalog`] and are merged here.

use proto::http::Request;

use crate::conn::PendingRead;
use crate::model::Key;
use crate::replicas::{self, ClaimFor, Forward, FORWARDED_HEADER};
use crate::services::Services;
use crate::store::{CatalogUpdate, Claimed, KeyRole, Lease, ReadResult, SessionState, StoreRead};
use crate::{ConnId, Engine, Output};

impl Engine {
    pub(crate) fn replica_mode(&self) -> bool {
        self.replicas.is_some()
    }

    pub(crate) fn owns_session(&self, session_id: &str) -> bool {
        self.replicas.as_ref().is_none_or(|r| r.owns(session_id))
    }

    /// Replica mode: whether `req` must wait for a lease claim first
    /// (`owner_only`: it changes the session or needs its live state;
    /// otherwise it only needs the session to be known here).
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
            session_id,
            ClaimFor::Request {
                conn,
                req: Box::new(req.clone()),
            },
        );
        true
    }

    /// Replica mode: a session created here is served here (its MCP
    /// connections and history cache are here already).
    pub(crate) fn lease_new_session(&mut self, session_id: &str) {
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
        session_id: &str,
        then: ClaimFor,
        result: Result<ReadResult, String>,
    ) {
        let lease = match result {
            Ok(ReadResult::Lease(l)) => Ok(l),
            Ok(_) => Err("unexpected answer".to_string()),
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
                tracing::error!(session = session_id, error = %e, "session lease claim failed");
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
        self.idem.adopt(&c.idempotency);
    }

    /// The revocation cascade's last step (spec 03 §4.2) for a session this
    /// replica owns: open, and every session key bound to it revoked.
    fn close_if_orphaned(&mut self, session_id: &str, by: &str) {
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
            let session = self.catalog.session_from_row(&s);
            match self.catalog.sessions.get_mut(id) {
                Some(held) => **held = session,
                None => self.catalog.insert_session(session),
            }
            if ended {
                // MCP connections opened here at its creation (the owner
                // records the close; the hub writes no events).
                self.mcp.close_session(&s.id);
            }
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
        for (session_id, by) in cascade {
            if self.owns_session(&session_id) {
                self.close_if_orphaned(&session_id, &by);
            } else {
                self.svc.claim(&session_id, ClaimFor::Cascade { by });
            }
        }
    }
}

impl Services {
    pub(crate) fn claim(&mut self, session_id: &str, then: ClaimFor) {
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
        let session_id = session_id.to_string();
        self.read(read, PendingRead::Claim { session_id, then });
    }

    /// A `503 replica_unavailable` answer that finishes the request.
    pub(crate) fn unavailable(&mut self, conn: ConnId, detail: &str) {
        let close = self.closes_after(conn);
        self.log_request(conn, 503);
        self.send(conn, replicas::unavailable(detail, close));
        self.finish_request(conn);
    }

    /// Hands `conn` with `req` to the owner at `addr`.
    pub(crate) fn forward(&mut self, conn: ConnId, req: &Request, session_id: &str, addr: String) {
        if req.header(FORWARDED_HEADER).is_some() {
            // The replica that sent it saw us as the owner; the lease moved
            // since. The client retries through the load balancer.
            return self.unavailable(conn, "the session is moving between replicas; retry");
        }
        tracing::info!(
            target: "baesrv::client",
            method = %req.method.as_str(),
            path = %req.path(),
            session = session_id,
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
