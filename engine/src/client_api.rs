//! Client-port REST surface (seed "Client API", spec 01 §1–§4): health,
//! meta, session create/join/participants/events/close, and the hand-off of
//! `/rpc` to the JSON-RPC layer.

use proto::http::{Method, Request};
use proto::wire::ids::{IdKind, SecretKind};
use proto::wire::json;
use proto::wire::problem::ProblemType;
use serde_json::{json, Map, Value};

use crate::conn::{AnswerRead, LoadFor, PendingRead};
use crate::ids::SessionId;
use crate::model::{check_declarations, set_declarations};
use crate::model::{Catalog, Key, Session, StoredHash};
use crate::services::Services;
use crate::store::{KeyRole, KeyRow, SessionRow, SessionState, StoreRead, StoreWrite};
use crate::time::Stamp;
use crate::{auth, ConnId, Engine};
use proto::wire::EventType;

/// Client-port routes.
enum Route<'a> {
    Health,
    Meta,
    Sessions,
    Join(&'a str),
    Participants(&'a str),
    Events(&'a str),
    Session(&'a str),
    Rpc(&'a str),
    /// Extension (`crate::transfer`): the creator forks or rewinds.
    Fork(&'a str, bool),
}

fn route(path: &str) -> Option<Route<'_>> {
    match path {
        "/healthz" => return Some(Route::Health),
        "/api/v1/meta" => return Some(Route::Meta),
        "/api/v1/sessions" => return Some(Route::Sessions),
        _ => {}
    }
    let rest = path.strip_prefix("/api/v1/sessions/")?;
    let mut parts = rest.splitn(2, '/');
    let id = parts.next().filter(|s| !s.is_empty())?;
    match parts.next() {
        None => Some(Route::Session(id)),
        Some("join") => Some(Route::Join(id)),
        Some("participants") => Some(Route::Participants(id)),
        Some("events") => Some(Route::Events(id)),
        Some("rpc") => Some(Route::Rpc(id)),
        Some("fork") => Some(Route::Fork(id, false)),
        Some("rewind") => Some(Route::Fork(id, true)),
        Some(_) => None,
    }
}

/// Which method each route answers (others get 405).
fn allowed(r: &Route<'_>) -> Method {
    match r {
        Route::Health | Route::Meta | Route::Participants(_) | Route::Events(_) => Method::Get,
        Route::Sessions | Route::Join(_) | Route::Rpc(_) | Route::Fork(..) => Method::Post,
        Route::Session(_) => Method::Delete,
    }
}

impl Engine {
    pub(crate) fn route_client(&mut self, conn: ConnId, req: Request) {
        self.route_client_with(conn, req, false);
    }

    /// [`Engine::route_client`] once the session it names is here: a
    /// replica's lease claim or a stored session's load was answered.
    pub(crate) fn route_client_ready(&mut self, conn: ConnId, req: Request) {
        self.route_client_with(conn, req, true);
    }

    fn route_client_with(&mut self, conn: ConnId, req: Request, ready: bool) {
        let path = req.path().to_owned();
        let Some(r) = route(&path) else {
            return self
                .svc
                .problem(conn, ProblemType::NotFound, "no such route");
        };
        if req.method != allowed(&r) {
            return self
                .svc
                .problem(conn, ProblemType::MethodNotAllowed, "method not allowed");
        }
        // Overload: refused before any work, probes excepted.
        if !ready && !matches!(r, Route::Health | Route::Meta) && self.refuse_if_overloaded(conn) {
            return;
        }
        // Replica mode: a session's requests run at its owner; reading its
        // event log only needs the session to be known here.
        let scoped = match r {
            Route::Join(id) | Route::Participants(id) | Route::Session(id) | Route::Rpc(id) => {
                Some((id, true))
            }
            // A fork only reads the parent's log.
            Route::Events(id) | Route::Fork(id, _) => Some((id, false)),
            Route::Health | Route::Meta | Route::Sessions => None,
        };
        if let Some((id, owner_only)) = scoped.filter(|_| !ready) {
            if self.replicas.is_some() {
                if self.claim_first(conn, &req, id, owner_only) {
                    return;
                }
            } else if auth::bearer(req.header("authorization")).is_ok()
                && self.residency.load_first(
                    &mut self.catalog,
                    &mut self.svc,
                    conn,
                    &req,
                    id,
                    LoadFor::Client,
                )
            {
                // (A request without a usable bearer gets its 401 without
                // costing a store read.)
                return;
            }
        }
        match r {
            Route::Health => {
                tracing::debug!("GET /healthz");
                self.svc.respond_ungated(conn, 200, None, b"");
            }
            Route::Meta => {
                let body = json!({"version": self.svc.config.version, "api_versions": ["v1"]});
                let body = json::text(&body);
                self.svc
                    .respond_ungated(conn, 200, Some("application/json"), body.as_bytes());
            }
            Route::Sessions => self.create_session(conn, &req),
            Route::Join(id) => self.join_session(conn, &req, id),
            Route::Participants(id) => self.catalog.participants(&mut self.svc, conn, &req, id),
            Route::Events(id) => self.catalog.session_events(&mut self.svc, conn, &req, id),
            Route::Session(id) => self.close_session_rest(conn, &req, id),
            Route::Rpc(id) => self.live().rpc_request(conn, req, id),
            Route::Fork(id, rewind) => self.fork_client(conn, &req, id, rewind),
        }
    }

    /// Past an overload bound (`BAE_OVERLOAD_*`): `503 overloaded` with
    /// `Retry-After`, and `true`.
    fn refuse_if_overloaded(&mut self, conn: ConnId) -> bool {
        if !self.overload.is_on() {
            return false;
        }
        let waiting = match self.overload.watches_waiting() {
            true => self.sessions.queued_requests(),
            false => 0,
        };
        let Some(cause) = self.overload.check(waiting) else {
            return false;
        };
        let p = proto::wire::problem::Problem {
            type_: "overloaded".into(),
            title: "Service Unavailable".into(),
            status: 503,
            detail: cause.detail().into(),
        };
        let retry_after = self.overload.retry_after();
        let headers = [("retry-after", retry_after.as_str())];
        // Reveals nothing stored: not held behind other clients' commits.
        let close = self.svc.closes_after(conn);
        self.svc.log_request(conn, 503);
        let bytes = proto::http::encode_response(
            503,
            Some("application/json"),
            &headers,
            &p.to_json(),
            close,
        );
        self.svc.send_ungated(conn, bytes);
        self.svc.finish_request(conn);
        true
    }

    fn create_session(&mut self, conn: ConnId, req: &Request) {
        // 1. Auth before the body is even looked at (C-011).
        let Some(key) = self.catalog.auth_client(&mut self.svc, conn, req) else {
            return;
        };
        // 2. Body shape.
        if let Err(detail) = require_json(req) {
            return self.svc.problem(conn, ProblemType::BadRequest, detail);
        }
        let body = match proto::wire::parse_open(&req.body) {
            Ok(b) => b,
            Err(detail) => return self.svc.problem(conn, ProblemType::BadRequest, &detail),
        };
        // 3. The compaction minimum is checked by `parse_open`, before the
        // profile is loaded: no audit row (C-018).
        // 4–5. Profile and primary provider (audited failures).
        let profile_id = key.profile_id.clone().unwrap_or_default();
        let Some(profile) =
            self.usable_profile(conn, &key.id, &profile_id, &body.tools, "client key")
        else {
            return;
        };
        // 6–8. Tool declarations.
        if let Err((kind, detail)) = check_declarations(
            &profile,
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        ) {
            return self.svc.problem(conn, kind, &detail);
        }
        // Quotas: past the key's (or its profile's) open sessions, `429`.
        if let Err(r) = (self.catalog.quotas).admit_session(&key.id, Some(&profile_id)) {
            return crate::admin_api::quota_problem(&mut self.svc, conn, &r);
        }
        // 9. Session row, session key and `session.open`, atomically.
        let session_id = SessionId::from(self.svc.new_id(IdKind::Session));
        let mut session = Session {
            id: session_id.clone(),
            creator: key.id.clone(),
            profile_id: self.catalog.profile_id(&profile_id),
            state: SessionState::Open,
            client_version: body.client_version.as_deref().map(Box::from),
            client_tools: Default::default(),
            sandbox_tools: Default::default(),
            subagent_tools: Default::default(),
            compaction: body.compaction.clone(),
            created_at: Stamp::At(self.svc.now.unix),
            closed_at: None,
            fresh: true,
            mcp_checked: true,
            touched: 0,
        };
        set_declarations(
            &mut session,
            &mut self.catalog.decls,
            &key.id,
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        );
        self.svc.write(StoreWrite::InsertSession(session.to_row()));
        (self.catalog.quotas).session_opened(&key.id, &profile_id);
        self.residency.admit(&mut self.catalog, session);
        self.lease_new_session(&session_id);
        (self.svc.telemetry).session_open(&session_id, &profile_id, &key.id);

        let session_key = self
            .catalog
            .mint_session_key(&mut self.svc, &session_id, &key);
        let payload = declaration_payload(
            body.client_version.as_deref(),
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        );
        let fanout = self.sessions.streams_mut(&session_id);
        let (key_id, open) = (Some(key.id.as_str()), EventType::SessionOpen);
        (self.svc).append_event_text(fanout, &session_id, key_id, open, payload);
        let response = self
            .catalog
            .open_answer(&self.svc, &session_id, &session_key, &profile_id);
        // 10. MCP servers connect before the 201 (spec 06 §4.1).
        self.connect_mcp_then_respond(
            conn,
            &session_id,
            &profile.row.mcp_servers,
            response.into_bytes(),
        );
    }

    fn join_session(&mut self, conn: ConnId, req: &Request, session_id: &str) {
        // 1. Auth.
        let Some(key) = self.catalog.auth_client(&mut self.svc, conn, req) else {
            return;
        };
        // 2–3. Body, then the compaction key in any form (C-031, C-032).
        if let Err(detail) = require_json(req) {
            return self.svc.problem(conn, ProblemType::BadRequest, detail);
        }
        let body = match proto::wire::parse_join(&req.body) {
            Ok(b) => b,
            Err(detail) => return self.svc.problem(conn, ProblemType::BadRequest, &detail),
        };
        if body.compaction_present {
            return self.svc.problem(
                conn,
                ProblemType::BadRequest,
                "compaction is a session-level setting fixed at creation and cannot be set on join",
            );
        }
        // 4–5. Session lookup and state.
        let Some(session) = self.catalog.sessions.get(session_id) else {
            return self.svc.problem(
                conn,
                ProblemType::NotFound,
                &format!("no session {session_id}"),
            );
        };
        if session.state != SessionState::Open {
            let detail = format!("session is already {}", session.state.as_str());
            return self.svc.problem(conn, ProblemType::SessionClosed, &detail);
        }
        // 6. Profile boundary: nothing logged, nothing minted (C-036).
        let profile_id = session.profile_id.clone();
        if key.profile_id.as_deref() != Some(&*profile_id) {
            return self.svc.problem(
                conn,
                ProblemType::ProfileMismatch,
                "this client key belongs to a different profile than the session",
            );
        }
        // 7–8. Profile and primary provider (audited on a separate row).
        let Some(profile) = self.usable_profile(conn, &key.id, &profile_id, &body.tools, "session")
        else {
            return;
        };
        // 9. Declarations of the joiner, checked on their own (C-039).
        if let Err((kind, detail)) = check_declarations(
            &profile,
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        ) {
            return self.svc.problem(conn, kind, &detail);
        }
        // 10. Replace the joiner's entries, mint its key, log the join.
        let catalog = &mut self.catalog;
        let Some(session) = catalog.sessions.get_mut(session_id) else {
            return self
                .svc
                .problem(conn, ProblemType::Internal, "internal error");
        };
        set_declarations(
            session,
            &mut catalog.decls,
            &key.id,
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        );
        let row = session.to_row();
        self.svc.write(StoreWrite::SetSessionTools {
            id: row.id.clone(),
            client_tools: row.client_tools,
            sandbox_tools: row.sandbox_tools,
            subagent_tools: row.subagent_tools,
        });
        let session_key = self
            .catalog
            .mint_session_key(&mut self.svc, session_id, &key);
        let payload = declaration_payload(
            body.client_version.as_deref(),
            &body.tools,
            &body.sandbox_tools,
            &body.subagent_tools,
        );
        let fanout = self.sessions.streams_mut(session_id);
        let (key_id, join) = (Some(key.id.as_str()), EventType::SessionJoin);
        (self.svc).append_event_text(fanout, session_id, key_id, join, payload);
        let response = self
            .catalog
            .open_answer(&self.svc, session_id, &session_key, &profile_id);
        self.svc.respond_json(conn, 201, response.as_bytes());
    }

    /// `POST /api/v1/sessions/{id}/fork|rewind`: only the session key of
    /// the session's creator may fork it here (the admin API may too).
    fn fork_client(&mut self, conn: ConnId, req: &Request, session_id: &str, rewind: bool) {
        let Some(key) = self
            .catalog
            .auth_session(&mut self.svc, conn, req, session_id)
        else {
            return;
        };
        let creator = self
            .catalog
            .sessions
            .get(session_id)
            .map(|s| s.creator.clone());
        match (key.client_id, creator) {
            (Some(client), Some(creator)) if client == creator => {
                self.fork_session(conn, &req.body, session_id, Some(&client), rewind)
            }
            _ => self.svc.problem(
                conn,
                ProblemType::ForkNotAllowed,
                "only the session's creator may fork it (or the admin API)",
            ),
        }
    }

    fn close_session_rest(&mut self, conn: ConnId, req: &Request, session_id: &str) {
        if self
            .catalog
            .auth_session(&mut self.svc, conn, req, session_id)
            .is_none()
        {
            return;
        }
        let session = self.catalog.sessions.get(session_id);
        let (state, creator) = (session.map(|s| s.state), session.map(|s| s.creator.clone()));
        match state {
            Some(SessionState::Open) => {
                let creator = creator.unwrap_or_default();
                self.close_session(session_id, &creator, "client_close");
                let body = json!({"session_id": session_id, "state": "closed"});
                self.svc.respond_value(conn, 200, &body);
            }
            Some(other) => {
                self.teardown_session(session_id);
                let detail = format!("session is already {}", other.as_str());
                self.svc.problem(conn, ProblemType::SessionClosed, &detail);
            }
            None => self
                .svc
                .problem(conn, ProblemType::Unauthorized, "invalid session key"),
        }
    }

    /// `open → closed` with its `session.close` event, then runtime teardown.
    pub(crate) fn close_session(&mut self, session_id: &str, attributed_to: &str, reason: &str) {
        let at = self.svc.timestamp();
        let was_open = (self.catalog.sessions.get(session_id))
            .filter(|s| s.state == SessionState::Open)
            .map(|s| (s.creator.clone(), s.profile_id.clone()));
        if let Some((creator, profile)) = was_open {
            (self.catalog.quotas).session_closed(&creator, &profile);
        }
        if let Some(s) = self.catalog.sessions.get_mut(session_id) {
            s.state = SessionState::Closed;
            s.closed_at = Some(Stamp::At(self.svc.now.unix));
        }
        self.svc.write(StoreWrite::SetSessionState {
            id: session_id.to_string(),
            state: SessionState::Closed,
            closed_at: Some(at),
        });
        self.svc.append_event(
            self.sessions.streams_mut(session_id),
            session_id,
            Some(attributed_to),
            EventType::SessionClose,
            json!({ "reason": reason }),
        );
        self.svc.telemetry.session_end(session_id, false);
        self.teardown_session(session_id);
    }

    /// Drops every piece of runtime state of a session (drivers, gate,
    /// streams, parked pause).
    pub(crate) fn teardown_session(&mut self, session_id: &str) {
        let sid = self.catalog.session_id(session_id);
        self.catalog.drivers.remove(session_id);
        self.sessions.forget_drivers(session_id);
        self.sandbox_cx().teardown_sandbox(&sid);
        if let Some(streams) = self.sessions.streams_mut(&sid) {
            streams.end_subscriptions(&mut self.svc, &sid);
        }
        self.live().drop_live(&sid);
        self.sessions.close_mcp(&mut self.mcp, session_id);
    }

    /// Create/join steps "profile" and "primary provider": each failure is
    /// answered 422 and recorded as an audit session (spec 01 §4.4); the
    /// provider failure is logged on every attempt.
    fn usable_profile(
        &mut self,
        conn: ConnId,
        key_id: &str,
        profile_id: &str,
        tools: &[proto::wire::ClientToolDef],
        bound_to: &str,
    ) -> Option<crate::model::Profile> {
        let tool_names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let Some(profile) = self.catalog.live_profile(profile_id).cloned() else {
            self.audit_session(key_id, profile_id, &tool_names, None);
            let detail = format!("the profile bound to this {bound_to} is no longer available");
            self.svc
                .problem(conn, ProblemType::ProfileUnavailable, &detail);
            return None;
        };
        if self.svc.provider(&profile.row.primary_provider).is_some() {
            return Some(profile);
        }
        let primary = profile.row.primary_provider.clone();
        tracing::error!(profile_id, primary_provider = %primary, "primary provider is not configured in the [providers] registry");
        self.audit_session(key_id, profile_id, &tool_names, Some(&primary));
        let detail = format!("primary provider \"{primary}\" is not configured in bae-config.toml");
        self.svc
            .problem(conn, ProblemType::PrimaryProviderUnavailable, &detail);
        None
    }

    /// A separate `error` session recording a rejected create/join (spec 01
    /// §4.4). No session key is minted for it.
    fn audit_session(
        &mut self,
        key_id: &str,
        profile_id: &str,
        tools: &[&str],
        primary: Option<&str>,
    ) {
        let id = self.svc.new_id(IdKind::Session);
        let named: Vec<Value> = tools.iter().map(|n| json!({ "name": n })).collect();
        let per_key = |list: Value| {
            let mut m = Map::new();
            m.insert(key_id.to_string(), list);
            json::text(&Value::Object(m))
        };
        let row = SessionRow {
            id: id.clone(),
            client_key_id: key_id.to_string(),
            profile_id: profile_id.to_string(),
            state: SessionState::Error,
            client_version: None,
            client_tools: per_key(Value::Array(named)),
            sandbox_tools: per_key(json!([])),
            subagent_tools: per_key(json!([])),
            compaction: None,
            created_at: self.svc.timestamp(),
            closed_at: None,
        };
        self.svc.write(StoreWrite::InsertSession(row.clone()));
        let session = self.catalog.session_from_row(&row);
        self.residency.admit(&mut self.catalog, session);
        let payload = match primary {
            None => json!({"reason": "profile_unavailable", "profile_id": profile_id}),
            Some(p) => json!({
                "reason": "primary_provider_unavailable",
                "profile_id": profile_id,
                "primary_provider": p,
            }),
        };
        let fanout = self.sessions.streams_mut(&id);
        (self.svc).append_event(fanout, &id, Some(key_id), EventType::SessionError, payload);
    }
}

impl Services {
    /// Shared by both ports: validates `cursor`/`limit` and reads one page.
    pub(crate) fn events_page(&mut self, conn: ConnId, req: &Request, session_id: &str) {
        let cursor = req.query_param("cursor");
        let limit = req.query_param("limit");
        let (after, limit) =
            match proto::wire::parse_page_query(cursor.as_deref(), limit.as_deref()) {
                Ok(v) => v,
                Err(detail) => return self.problem(conn, ProblemType::BadRequest, &detail),
            };
        self.read(
            StoreRead::EventsPage {
                session_id: session_id.to_string(),
                after_seq: after.unwrap_or(0),
                limit,
                max_bytes: self.config.max_page_bytes,
            },
            PendingRead::Answer(AnswerRead::EventsPage { conn }),
        );
    }

    pub(crate) fn provider(&self, name: &str) -> Option<&crate::ProviderEntry> {
        self.config.provider(name)
    }
}

/// Create/join bodies must be declared JSON (the reference's rejection text).
fn require_json(req: &Request) -> Result<(), &'static str> {
    let ok = req
        .header("content-type")
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(|v| {
            let essence = v.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        })
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err("Expected request with `Content-Type: application/json`")
    }
}

/// `session.open` / `session.join` payload: names only, declaration order.
fn declaration_payload(
    client_version: Option<&str>,
    tools: &[proto::wire::ClientToolDef],
    sandbox_tools: &[proto::wire::ClientToolDef],
    subagent_tools: &[proto::wire::SubagentToolDef],
) -> String {
    // Written as text: the bytes serde_json gives for the same object.
    let mut out = String::with_capacity(96);
    out.push_str("{\"client_version\":");
    json::push_opt_str(&mut out, client_version);
    out.push_str(",\"tools\":");
    json::push_str_array(&mut out, tools.iter().map(|t| t.name.as_str()));
    out.push_str(",\"sandbox_tools\":");
    json::push_str_array(&mut out, sandbox_tools.iter().map(|t| t.name.as_str()));
    out.push_str(",\"subagent_tools\":");
    json::push_str_array(&mut out, subagent_tools.iter().map(|t| t.name.as_str()));
    out.push('}');
    out
}

impl Catalog {
    pub(crate) fn participants(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        session_id: &str,
    ) {
        if self.auth_session(svc, conn, req, session_id).is_none() {
            return;
        }
        let drivers: Vec<String> = self
            .drivers
            .get(session_id)
            .map(|d| d.iter().map(|k| k.to_string()).collect())
            .unwrap_or_default();
        svc.respond_value(conn, 200, &json!({ "drivers": drivers }));
    }

    pub(crate) fn session_events(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        session_id: &str,
    ) {
        if self.auth_session(svc, conn, req, session_id).is_none() {
            return;
        }
        svc.events_page(conn, req, session_id);
    }

    /// Inserts a session key bound to `session_id` for `client`; returns the
    /// plaintext (shown once).
    pub(crate) fn mint_session_key(
        &mut self,
        svc: &mut Services,
        session_id: &str,
        client: &Key,
    ) -> String {
        let secret = svc.new_secret(SecretKind::Session);
        let id = svc.new_id(IdKind::Key);
        let row = KeyRow {
            id,
            name: session_id.to_string(),
            key_hash: auth::digest_hex(&secret),
            key_prefix: secret[..8].to_string(),
            role: KeyRole::Session,
            profile_id: client.profile_id.as_deref().map(String::from),
            client_id: Some(client.id.to_string()),
            created_at: svc.timestamp(),
            last_used_at: None,
            deleted_at: None,
        };
        let mut key = Key::from_row(&row, self);
        key.hash = StoredHash::Sha256(auth::digest(&secret));
        svc.write(StoreWrite::InsertKey(row));
        self.insert_key(key);
        secret
    }

    /// The create and join answer, `{"session_id", "session_key",
    /// "profile"}`, written as text: the bytes `serde_json` gives for the
    /// same object, without building it (an open is a hot path).
    pub(crate) fn open_answer(
        &self,
        svc: &Services,
        session_id: &str,
        session_key: &str,
        profile_id: &str,
    ) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("{\"session_id\":");
        json::push_str(&mut out, session_id);
        out.push_str(",\"session_key\":");
        json::push_str(&mut out, session_key);
        out.push_str(",\"profile\":");
        self.push_sanitized_profile(svc, &mut out, profile_id);
        out.push('}');
        out
    }

    /// The client-facing profile: no tokens, no env names, no base URL, no
    /// fallbacks; the primary provider only as its kind and model.
    pub(crate) fn push_sanitized_profile(
        &self,
        svc: &Services,
        out: &mut String,
        profile_id: &str,
    ) {
        let Some(p) = self.profiles.get(profile_id) else {
            return out.push_str("null");
        };
        out.push_str("{\"id\":");
        json::push_str(out, &p.row.id);
        out.push_str(",\"name\":");
        json::push_str(out, &p.row.name);
        out.push_str(",\"allowed_tools\":");
        // Raw values of any type (the reference does not check them).
        out.push_str(&serde_json::to_string(&p.row.allowed_tools).unwrap_or_default());
        out.push_str(",\"mcp_servers\":");
        json::push_str_array(out, p.row.mcp_servers.iter().map(String::as_str));
        out.push_str(",\"provider\":");
        match svc.provider(&p.row.primary_provider) {
            Some(e) => {
                out.push_str("{\"provider\":");
                json::push_str(out, e.kind.as_str());
                out.push_str(",\"model\":");
                json::push_str(out, &e.model);
                out.push('}');
            }
            None => out.push_str("{\"provider\":null,\"model\":null}"),
        }
        out.push('}');
    }
}
