//! Admin-port REST surface (spec 03): profiles, client keys and the
//! revocation cascade, read-only sessions and events, registry snapshots.
//! Profiles and client keys are the catalogue's own (`registry.rs`).

mod quota_routes;
mod registry;

pub(crate) use quota_routes::quota_problem;

use proto::http::{Method, Request};
use proto::wire::problem::ProblemType;
use serde_json::{json, Value};

use crate::conn::{AdminRead, AnswerRead, LoadFor, PendingRead};
use crate::model::Catalog;
use crate::services::Services;
use crate::store::{
    KeyRole, ProfileRow, ReadError, ReadResult, SessionState, StoreRead, StoreWrite,
};
use crate::{transfer, ConnId, Engine};

enum Route<'a> {
    Profiles,
    Profile(&'a str),
    Keys,
    Key(&'a str),
    Sessions,
    SessionEvents(&'a str),
    /// Extension: an operator cancels the turn holding a session's gate.
    CancelTurn(&'a str),
    /// Extensions (`crate::transfer`): export, import, fork, rewind and
    /// the family tree.
    Export(&'a str),
    Import,
    Fork(&'a str, bool),
    Lineage(&'a str),
    /// Extension: provider tokens of a session, a client key or a profile.
    Usage(crate::store::UsageScope),
    McpServers,
    Providers,
    Config,
    SandboxStatus,
    /// Extension: provider queues, retries and overload figures.
    Traffic,
    /// Extension: a client key's or a profile's quota, and all of them.
    Quota(crate::quotas::Scope),
    Quotas,
}

fn route(path: &str) -> Option<Route<'_>> {
    let rest = path.strip_prefix("/admin/v1/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["profiles"] => Some(Route::Profiles),
        ["profiles", id] if !id.is_empty() => Some(Route::Profile(id)),
        ["keys"] => Some(Route::Keys),
        ["keys", id] if !id.is_empty() => Some(Route::Key(id)),
        ["sessions"] => Some(Route::Sessions),
        ["sessions", id, "events"] if !id.is_empty() => Some(Route::SessionEvents(id)),
        ["sessions", id, "cancel-turn"] if !id.is_empty() => Some(Route::CancelTurn(id)),
        ["sessions", "import"] => Some(Route::Import),
        ["sessions", id, "export"] if !id.is_empty() => Some(Route::Export(id)),
        ["sessions", id, "fork"] if !id.is_empty() => Some(Route::Fork(id, false)),
        ["sessions", id, "rewind"] if !id.is_empty() => Some(Route::Fork(id, true)),
        ["sessions", id, "lineage"] if !id.is_empty() => Some(Route::Lineage(id)),
        [kind, id, "usage"] if !id.is_empty() => {
            use crate::store::UsageScope;
            let id = (*id).to_string();
            match *kind {
                "sessions" => Some(Route::Usage(UsageScope::Session(id))),
                "keys" => Some(Route::Usage(UsageScope::ClientKey(id))),
                "profiles" => Some(Route::Usage(UsageScope::Profile(id))),
                _ => None,
            }
        }
        ["keys", id, "quota"] if !id.is_empty() => {
            Some(Route::Quota(crate::quotas::Scope::Key((*id).to_string())))
        }
        ["profiles", id, "quota"] if !id.is_empty() => Some(Route::Quota(
            crate::quotas::Scope::Profile((*id).to_string()),
        )),
        ["quotas"] => Some(Route::Quotas),
        ["mcp-servers"] => Some(Route::McpServers),
        ["providers"] => Some(Route::Providers),
        ["config"] => Some(Route::Config),
        ["sandbox-status"] => Some(Route::SandboxStatus),
        ["traffic"] => Some(Route::Traffic),
        _ => None,
    }
}

impl Engine {
    pub(crate) fn route_admin(&mut self, conn: ConnId, req: Request) {
        self.route_admin_with(conn, req, false);
    }

    /// [`Engine::route_admin`] once the session it names was loaded.
    pub(crate) fn route_admin_ready(&mut self, conn: ConnId, req: Request) {
        self.route_admin_with(conn, req, true);
    }

    fn route_admin_with(&mut self, conn: ConnId, req: Request, ready: bool) {
        let path = req.path().to_owned();
        if path == "/metrics" {
            return self.catalog.metrics_request(&mut self.svc, conn, &req);
        }
        if crate::admin_ui::is_ui_path(&path) {
            return self.svc.reply(conn, crate::admin_ui::serve(&req));
        }
        let Some(r) = route(&path) else {
            return self
                .svc
                .problem(conn, ProblemType::NotFound, "no such route");
        };
        if !self.catalog.auth_admin(&mut self.svc, conn, &req) {
            return;
        }
        // A session-scoped route loads its session first; all but the
        // usage route (which answers its own 404) need it to exist.
        let scoped = match &r {
            Route::SessionEvents(id)
            | Route::CancelTurn(id)
            | Route::Export(id)
            | Route::Fork(id, _)
            | Route::Lineage(id) => Some((*id, true)),
            Route::Usage(crate::store::UsageScope::Session(id)) => Some((id.as_str(), false)),
            _ => None,
        };
        if let Some((id, must_exist)) = scoped {
            let (catalog, svc) = (&mut self.catalog, &mut self.svc);
            if !ready && (self.residency).load_first(catalog, svc, conn, &req, id, LoadFor::Admin) {
                return;
            }
            if must_exist && !self.catalog.sessions.contains_key(id) {
                return self
                    .svc
                    .problem(conn, ProblemType::NotFound, &format!("no session {id}"));
            }
        }
        match (r, &req.method) {
            (Route::Profiles, Method::Post) => {
                if let Some(id) = self.catalog.create_profile(&mut self.svc, conn, &req) {
                    self.sandbox_cx().provision_profile(&id);
                }
            }
            (Route::Profiles, Method::Get) => self.catalog.list_profiles(&mut self.svc, conn, &req),
            (Route::Profile(id), Method::Get) => self.catalog.get_profile(&mut self.svc, conn, id),
            (Route::Profile(id), Method::Put) => {
                if (self.catalog).replace_profile(&mut self.svc, conn, &req, id) {
                    self.sandbox_cx().provision_profile(id);
                }
            }
            (Route::Profile(id), Method::Delete) => {
                self.catalog.delete_profile(&mut self.svc, conn, id)
            }
            (Route::Keys, Method::Post) => self.catalog.create_key(&mut self.svc, conn, &req),
            (Route::Keys, Method::Get) => self.catalog.list_keys(&mut self.svc, conn, &req),
            (Route::Key(id), Method::Delete) => self.revoke_key(conn, id),
            (Route::Sessions, Method::Get) => self.svc.list_sessions(conn, &req),
            (Route::SessionEvents(id), Method::Get) => self.svc.events_page(conn, &req, id),
            (Route::Export(id), Method::Get) => self.export_session(conn, id),
            (Route::Import, Method::Post) => self.import_session(conn, &req),
            (Route::Fork(id, rewind), Method::Post) => {
                self.fork_session(conn, &req.body, id, None, rewind)
            }
            (Route::Lineage(id), Method::Get) => {
                let outs = self.transfers.lineage(conn, id);
                self.run_transfer(conn, outs);
            }
            (Route::CancelTurn(id), Method::Post) => {
                let sid = self.catalog.session_id(id);
                let body = match self.live().cancel_gate(&sid, None) {
                    crate::turn::Cancelled::Running => {
                        json!({"cancelled": true, "state": "running"})
                    }
                    crate::turn::Cancelled::Paused => {
                        json!({"cancelled": true, "state": "paused"})
                    }
                    crate::turn::Cancelled::Compaction => {
                        json!({"cancelled": false, "reason": "a compaction is running; it cannot be cancelled"})
                    }
                    _ => json!({"cancelled": false}),
                };
                self.svc.respond_value(conn, 200, &body);
            }
            (Route::McpServers, Method::Get) => {
                let body = self.svc.config.admin_mcp_servers_json.clone();
                self.svc.respond_json(conn, 200, body.as_bytes());
            }
            (Route::Providers, Method::Get) => {
                let body = self.svc.config.admin_providers_json.clone();
                self.svc.respond_json(conn, 200, body.as_bytes());
            }
            (Route::Config, Method::Get) => {
                let body = self.svc.config.admin_config_json.clone();
                self.svc.respond_json(conn, 200, body.as_bytes());
            }
            (Route::SandboxStatus, Method::Get) => self.sandbox_cx().sandbox_status(conn),
            (Route::Traffic, Method::Get) => {
                let entries = self.provider_limits.status(self.svc.now.mono);
                let retry = |name: &str| {
                    let p = self.svc.config.provider(name)?.retry.as_ref()?;
                    Some(json!({
                        "max_retries": p.max_retries,
                        "max_wait_ms": p.max_wait_ms,
                        "backoff_ms": p.backoff_ms,
                        "statuses": p.statuses,
                        "transport": p.transport,
                    }))
                };
                let status = self.overload.status();
                let body = crate::metrics::traffic::status_json(&entries, retry, &status);
                self.svc.respond_value(conn, 200, &body);
            }
            (Route::Quota(scope), _) => {
                self.catalog.quota_request(&mut self.svc, conn, &req, scope)
            }
            (Route::Quotas, Method::Get) => self.catalog.list_quotas(&mut self.svc, conn),
            (Route::Usage(scope), Method::Get) => {
                self.catalog.usage_request(&mut self.svc, conn, &req, scope)
            }
            _ => self
                .svc
                .problem(conn, ProblemType::MethodNotAllowed, "method not allowed"),
        }
    }

    /// Revocation cascade (spec 03 §4.2), in one batch of writes. When the
    /// catalogue may not hold every session, the sessions the key's
    /// session keys reach are read first (evictions wait meanwhile, so none
    /// slips between the read and the cascade).
    fn revoke_key(&mut self, conn: ConnId, id: &str) {
        if !self.catalog.is_client_key(id) {
            return self.svc.no_client_key(conn, id);
        }
        if !self.residency.lazy() {
            return self.revoke_now(conn, id);
        }
        self.residency.hold();
        let read = StoreRead::SessionsOfClient {
            client_id: id.to_string(),
            drivers_since: self.svc.drivers_since(),
        };
        let key_id = id.to_string();
        self.svc
            .read(read, PendingRead::Admin(AdminRead::Revoke { conn, key_id }));
    }

    pub(crate) fn on_revoke_read(
        &mut self,
        conn: ConnId,
        key_id: &str,
        result: Result<ReadResult, ReadError>,
    ) {
        self.residency.release();
        let stored = match result {
            Ok(ReadResult::Sessions(s)) => s,
            other => {
                let e = ReadError::of(other);
                tracing::error!(error = %e, "revocation read failed");
                return self
                    .svc
                    .problem(conn, ProblemType::Internal, "internal error");
            }
        };
        for s in stored {
            self.residency.insert_stored(&mut self.catalog, s);
        }
        // Revoked meanwhile by another request: that one answered 204.
        if !self.catalog.is_client_key(key_id) {
            return self.svc.no_client_key(conn, key_id);
        }
        self.revoke_now(conn, key_id);
    }

    fn revoke_now(&mut self, conn: ConnId, id: &str) {
        let at = self.svc.timestamp();
        self.catalog.remove_key(id);
        // A revoked key's quota goes with it.
        let scope = crate::quotas::Scope::Key(id.to_string());
        if self.catalog.quotas.remove(&scope) {
            self.svc.write(StoreWrite::DeleteQuota(scope));
        }
        self.svc.write(StoreWrite::RevokeKey {
            id: id.to_string(),
            at: at.clone(),
        });
        let session_keys: Vec<(String, String)> = self
            .catalog
            .keys
            .values()
            .filter(|k| k.role == KeyRole::Session && k.client_id.as_deref() == Some(id))
            .map(|k| (k.id.to_string(), k.name.to_string()))
            .collect();
        if self.replicas.is_some() {
            // Session keys minted on other replicas may not be known here.
            self.svc.write(StoreWrite::RevokeSessionKeysOf {
                client_id: id.to_string(),
                at: at.clone(),
            });
        }
        let mut session_keys = session_keys;
        session_keys.sort();
        let mut touched: Vec<String> = Vec::new();
        for (key_id, session_id) in session_keys {
            self.catalog.remove_key(&key_id);
            self.svc.write(StoreWrite::RevokeKey {
                id: key_id,
                at: at.clone(),
            });
            if !touched.contains(&session_id) {
                touched.push(session_id);
            }
        }
        // Closes in creation order.
        let created =
            |c: &crate::model::Catalog, s: &str| (c.sessions.get(s)).map(|s| s.created_at.text());
        touched.sort_by_cached_key(|s| (created(&self.catalog, s), s.clone()));
        for session_id in touched {
            let open = self
                .catalog
                .sessions
                .get(session_id.as_str())
                .map(|s| s.state)
                == Some(SessionState::Open);
            let orphaned = self
                .catalog
                .session_keys
                .get(session_id.as_str())
                .is_none_or(|v| v.is_empty());
            // Replica mode: only a session's owner writes its log; the
            // revocation's notice reaches every replica, and the owner (or,
            // for a session nobody holds, the first replica to take its
            // lease) closes it (`placement.rs`).
            if open && orphaned && self.owns_session(&session_id) {
                self.close_session(&session_id, id, "client_key_revoked");
            }
        }
        self.svc.respond(conn, 204, None, b"");
    }

    pub(crate) fn answer_metrics(&mut self, conn: ConnId, rt: &crate::metrics::RuntimeStats) {
        let gauges = self.gauges();
        let mut body = self.svc.metrics.render(&gauges, rt);
        let entries = self.provider_limits.status(self.svc.now.mono);
        let watched = |name: &str| {
            (self.svc.config.provider(name))
                .is_some_and(|p| p.limits.is_some() || p.retry.is_some())
        };
        let status = self.overload.status();
        crate::metrics::traffic::render_prometheus(&mut body, &entries, watched, &status);
        let q = &self.catalog.quotas;
        let refused: Vec<(&str, u64)> = (crate::quotas::Kind::ALL.iter())
            .zip(q.refused())
            .map(|(k, n)| (k.as_str(), n))
            .collect();
        crate::metrics::traffic::render_quota_refusals(&mut body, q.is_on(), &refused);
        let content_type = "text/plain; version=0.0.4; charset=utf-8";
        self.svc
            .respond(conn, 200, Some(content_type), body.as_bytes());
    }

    /// The instruments of spec 04 §7.2 now (those `[telemetry.metrics]
    /// disabled` names are left out), for the driver's OTLP exporter.
    pub fn metrics_snapshot(&self) -> Vec<crate::metrics::Instrument> {
        self.svc.metrics.instruments(&self.gauges())
    }

    /// The gauges, read from the engine's state.
    fn gauges(&self) -> crate::metrics::Gauges {
        let c = &self.catalog;
        // Held sessions are counted here, the others as the store has them.
        let stored = self.residency.stored;
        crate::metrics::Gauges {
            sessions_open: stored.open
                + c.sessions
                    .values()
                    .filter(|s| s.state == crate::store::SessionState::Open)
                    .count() as u64,
            sessions_total: stored.total + c.sessions.len() as u64,
            events_total: self.svc.log.events_total(),
            profiles: c.profiles.values().filter(|p| p.is_live()).count() as u64,
            client_keys: c.client_key_order.len() as u64,
            mcp_sessions_live: self.mcp.live_sessions() as u64,
            turns_pending: (self.sessions.cores())
                .filter(|l| matches!(l.gate.holder(), crate::turn::Holder::Paused(_)))
                .count() as u64,
            sandboxes_live: self.sessions.live_sandboxes() as u64,
            subagents_active: self.sessions.active_subagents() as u64,
            drivers_registered: stored.drivers
                + c.drivers.values().map(|d| d.len() as u64).sum::<u64>(),
            connections: self.svc.conns.len() as u64,
        }
    }
    // ---- Forks, exports and imports (`crate::transfer`) ----------------

    /// `GET /admin/v1/sessions/{id}/export`: the export document, streamed.
    fn export_session(&mut self, conn: ConnId, id: &str) {
        let Some(session) = self.catalog.sessions.get(id).map(|s| s.to_row()) else {
            return self
                .svc
                .problem(conn, ProblemType::NotFound, &format!("no session {id}"));
        };
        let start = transfer::ExportStart {
            profile: (self.catalog.profiles.get(session.profile_id.as_str()))
                .map(|p| p.row.clone()),
            session,
            server_version: self.svc.config.version.clone(),
            exported_at: self.svc.timestamp(),
        };
        let outs = self.transfers.export(conn, start);
        self.run_transfer(conn, outs);
    }

    /// `POST /admin/v1/sessions/import?client_key_id=…[&profile_id=…][&keep_id=true]`.
    fn import_session(&mut self, conn: ConnId, req: &Request) {
        let Some(key_id) = req.query_param("client_key_id") else {
            let detail = "client_key_id is required: the client key that gets the session";
            return self.svc.problem(conn, ProblemType::BadRequest, detail);
        };
        let keep_id = match req.query_param("keep_id").as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(_) => {
                let detail = "keep_id must be true or false";
                return self.svc.problem(conn, ProblemType::BadRequest, detail);
            }
        };
        let own = (self.catalog.keys.get(key_id.as_str())).and_then(|k| k.profile_id.clone());
        let profile_id = (req.query_param("profile_id"))
            .or_else(|| own.map(|p| p.to_string()))
            .unwrap_or_default();
        if !self.copy_target(conn, &key_id, &profile_id, None) {
            return;
        }
        let target = transfer::ImportTarget {
            creator: key_id,
            profile_id,
            keep_id,
        };
        let outs = self.transfers.import(conn, &req.body, &target);
        self.run_transfer(conn, outs);
    }

    /// `POST …/sessions/{id}/fork` or `…/rewind` on either port; `creator`
    /// is the client port's authenticated creator (who gets the fork).
    pub(crate) fn fork_session(
        &mut self,
        conn: ConnId,
        body: &[u8],
        parent_id: &str,
        creator: Option<&str>,
        rewind: bool,
    ) {
        let body = match proto::wire::fork::parse_fork(body, rewind) {
            Ok(b) => b,
            Err(detail) => return self.svc.problem(conn, ProblemType::BadRequest, &detail),
        };
        if creator.is_some() && (body.client_key_id.is_some() || body.profile_id.is_some()) {
            let detail = "client_key_id and profile_id are for the admin API: a creator's fork \
                          keeps the session's profile and key";
            return self.svc.problem(conn, ProblemType::BadRequest, detail);
        }
        let Some(parent) = self.catalog.sessions.get(parent_id) else {
            return self.svc.problem(
                conn,
                ProblemType::NotFound,
                &format!("no session {parent_id}"),
            );
        };
        let owner = &parent.creator;
        let declarations = transfer::Declarations {
            tools: parent.client_tools.get(owner).to_vec(),
            sandbox_tools: parent.sandbox_tools.get(owner).to_vec(),
            subagent_tools: parent.subagent_tools.get(owner).to_vec(),
        };
        let start = transfer::ForkStart {
            parent_id: parent_id.to_string(),
            at: body.at,
            client_version: parent.client_version.as_deref().map(String::from),
            compaction: parent.compaction.clone(),
            creator: (creator.map(String::from).or(body.client_key_id))
                .unwrap_or_else(|| owner.to_string()),
            profile_id: body
                .profile_id
                .unwrap_or_else(|| parent.profile_id.to_string()),
            declarations,
            admin: creator.is_none(),
        };
        let (key, profile) = (start.creator.clone(), start.profile_id.clone());
        if self.copy_target(conn, &key, &profile, Some(&start.declarations)) {
            let outs = self.transfers.fork(conn, start);
            self.run_transfer(conn, outs);
        }
    }

    /// Whether client key `key_id` may hold a new session of `profile_id`
    /// with `declarations` (the checks of a create); answers the problem
    /// when not.
    pub(crate) fn copy_target(
        &mut self,
        conn: ConnId,
        key_id: &str,
        profile_id: &str,
        declarations: Option<&transfer::Declarations>,
    ) -> bool {
        let key = (self.catalog.keys.get(key_id)).filter(|k| k.role == KeyRole::Client);
        let Some(key) = key else {
            let detail = format!("no active client key {key_id}");
            self.svc.problem(conn, ProblemType::NotFound, &detail);
            return false;
        };
        let mismatch = key.profile_id.as_deref() != Some(profile_id);
        let Some(profile) = self.catalog.live_profile(profile_id) else {
            let detail = format!("no active profile {profile_id}");
            self.svc
                .problem(conn, ProblemType::ProfileUnavailable, &detail);
            return false;
        };
        let checked = match declarations.map(transfer::Declarations::typed) {
            None => Ok(()),
            Some(Ok((t, s, a))) => crate::model::check_declarations(profile, &t, &s, &a),
            Some(Err(e)) => Err((ProblemType::InvalidDocument, e.to_string())),
        };
        let primary = profile.row.primary_provider.clone();
        if mismatch {
            let detail =
                format!("client key {key_id} belongs to another profile than {profile_id}");
            self.svc
                .problem(conn, ProblemType::ProfileMismatch, &detail);
        } else if self.svc.provider(&primary).is_none() {
            let detail =
                format!("primary provider \"{primary}\" is not configured in bae-config.toml");
            self.svc
                .problem(conn, ProblemType::PrimaryProviderUnavailable, &detail);
        } else if let Err((kind, detail)) = checked {
            self.svc.problem(conn, kind, &detail);
        } else {
            return true;
        }
        false
    }

    /// Performs a transfer's outputs for the request on `conn`.
    pub(crate) fn run_transfer(&mut self, conn: ConnId, outs: Vec<transfer::Out>) {
        use transfer::Out;
        for out in outs {
            match out {
                Out::Read(read) => self
                    .svc
                    .read(read, PendingRead::Admin(AdminRead::Transfer { conn })),
                Out::StreamHead(name) => {
                    let close = self.svc.closes_after(conn);
                    self.svc.log_request(conn, 200);
                    let disposition = format!("attachment; filename=\"{name}\"");
                    let extra = [("Content-Disposition", disposition.as_str())];
                    let head = proto::http::encode_stream_head_with(
                        200,
                        "application/x-ndjson",
                        &extra,
                        close,
                    );
                    self.svc.send(conn, head);
                }
                Out::Chunk(bytes) => self.svc.send(conn, bytes),
                Out::Finish => {
                    self.svc.send(conn, proto::http::LAST_CHUNK.to_vec());
                    self.svc.finish_request(conn);
                }
                Out::Abort => self.svc.close_conn(conn),
                Out::Json(status, body) => self.svc.respond_json(conn, status, body.as_bytes()),
                Out::Problem(kind, detail) => self.svc.problem(conn, kind, &detail),
                Out::Create(plan) => self.create_copy(conn, *plan),
            }
        }
    }
}

impl Services {
    pub(crate) fn page_params(&mut self, conn: ConnId, req: &Request) -> Option<(usize, usize)> {
        let cursor = req.query_param("cursor");
        let limit = req.query_param("limit");
        match proto::wire::parse_page_query(cursor.as_deref(), limit.as_deref()) {
            Ok((after, limit)) => Some((after.unwrap_or(0) as usize, limit)),
            Err(detail) => {
                self.problem(conn, ProblemType::BadRequest, &detail);
                None
            }
        }
    }

    pub(crate) fn profile_view(&self, row: &ProfileRow) -> Value {
        json!({
            "id": row.id,
            "name": row.name,
            "primary_provider": row.primary_provider,
            "fallback_providers": row.fallback_providers,
            "mcp_servers": row.mcp_servers,
            "allowed_tools": row.allowed_tools,
            "available_sandboxes": row.available_sandboxes,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
        })
    }

    pub(crate) fn no_client_key(&mut self, conn: ConnId, id: &str) {
        let detail = format!("no active client key {id}");
        self.problem(conn, ProblemType::NotFound, &detail);
    }

    pub(crate) fn list_sessions(&mut self, conn: ConnId, req: &Request) {
        let filter = match req.query_param("state").as_deref() {
            None | Some("") => None,
            Some(v) => match SessionState::parse(v) {
                Some(s) => Some(s),
                None => {
                    let detail = format!(
                        "invalid state filter \"{v}\"; expected one of open, closed, error"
                    );
                    return self.problem(conn, ProblemType::BadRequest, &detail);
                }
            },
        };
        let Some((after, limit)) = self.page_params(conn, req) else {
            return;
        };
        // The store holds every session (the catalogue may not); the
        // cursor is the last row's position there.
        let read = StoreRead::SessionList {
            after: after as u64,
            limit,
            state: filter,
        };
        self.read(read, PendingRead::Answer(AnswerRead::SessionList { conn }));
    }

    pub(crate) fn on_usage(
        &mut self,
        conn: ConnId,
        scope: &str,
        result: Result<ReadResult, ReadError>,
    ) {
        let Ok(ReadResult::Usage(sums)) = result else {
            if let Err(e) = &result {
                tracing::error!(error = %e, "usage read failed");
            }
            return self.problem(conn, ProblemType::Internal, "internal error");
        };
        let prices = |name: &str| self.config.provider(name).and_then(|p| p.prices);
        let body = crate::usage::render(scope, &sums, prices);
        self.respond_json(conn, 200, body.as_bytes());
    }

    pub(crate) fn on_session_list(&mut self, conn: ConnId, result: Result<ReadResult, ReadError>) {
        let Ok(ReadResult::SessionList { rows, more }) = result else {
            if let Err(e) = &result {
                tracing::error!(error = %e, "session list read failed");
            }
            return self.problem(conn, ProblemType::Internal, "internal error");
        };
        let next = rows.last().filter(|_| more).map(|(pos, _)| pos.to_string());
        let items: Vec<Value> = rows
            .into_iter()
            .map(|(_, s)| {
                json!({
                    "id": s.id,
                    "profile_id": s.profile_id,
                    "state": s.state.as_str(),
                    "client_version": s.client_version,
                    "created_at": s.created_at,
                    "closed_at": s.closed_at,
                })
            })
            .collect();
        self.respond_value(conn, 200, &json!({"items": items, "next_cursor": next}));
    }
}

impl Catalog {
    /// Admin scope on the bearer key, unless admin auth is disabled.
    pub(crate) fn auth_admin(&mut self, svc: &mut Services, conn: ConnId, req: &Request) -> bool {
        svc.config.admin_auth_disabled
            || self
                .auth_bearer(svc, conn, req, crate::model::KeyScope::Admin)
                .is_some()
    }

    /// `GET /metrics` (Prometheus text format): admin auth unless
    /// `BAE_METRICS_NO_AUTH`; the store thread adds process figures.
    pub(crate) fn metrics_request(&mut self, svc: &mut Services, conn: ConnId, req: &Request) {
        if req.method != Method::Get {
            return svc.problem(conn, ProblemType::MethodNotAllowed, "method not allowed");
        }
        if !svc.config.metrics_no_auth && !self.auth_admin(svc, conn, req) {
            return;
        }
        svc.read(
            crate::store::StoreRead::Runtime,
            PendingRead::Admin(AdminRead::Metrics { conn }),
        );
    }
}
