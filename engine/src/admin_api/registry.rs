//! The admin API's profiles and client keys (spec 03 §4.1, §4.2 up to the
//! revocation cascade): the catalogue validates, records and answers them
//! itself through the [`Services`]; what follows elsewhere (a profile's
//! images to provision) is returned to the router.

use proto::http::Request;
use proto::wire::ids::{IdKind, SecretKind};
use proto::wire::problem::ProblemType;
use serde_json::{json, Value};

use crate::auth;
use crate::conn::{AnswerRead, PendingRead};
use crate::model::{Catalog, Key, StoredHash};
use crate::services::Services;
use crate::store::{KeyRole, KeyRow, ProfileRow, StoreRead, StoreWrite};
use crate::ConnId;

/// A page of an append-only ordering: the cursor is the position after the
/// last item returned, so later inserts and removals never shift it.
pub(super) fn page_of<T, Id: std::ops::Deref<Target = str>>(
    order: &[Id],
    after: usize,
    limit: usize,
    mut item: impl FnMut(&str) -> Option<T>,
) -> (Vec<T>, Option<String>) {
    let mut items = Vec::new();
    let mut pos = after;
    while let Some(id) = order.get(pos) {
        if let Some(v) = item(id) {
            if items.len() == limit {
                return (items, Some(pos.to_string()));
            }
            items.push(v);
        }
        pos += 1;
    }
    (items, None)
}

impl Catalog {
    pub(crate) fn create_profile(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
    ) -> Option<String> {
        let body = match proto::wire::admin::ProfileBody::parse(&req.body) {
            Ok(b) => b,
            Err(detail) => {
                svc.problem(conn, ProblemType::BadRequest, &detail);
                return None;
            }
        };
        if self.profile_names.contains(&body.name) {
            svc.problem(
                conn,
                ProblemType::DuplicateName,
                "a profile with that name already exists",
            );
            return None;
        }
        let now = svc.timestamp();
        let row = ProfileRow {
            id: svc.new_id(IdKind::Profile),
            name: body.name,
            primary_provider: body.primary_provider,
            fallback_providers: body.fallback_providers,
            mcp_servers: body.mcp_servers,
            allowed_tools: body.allowed_tools.into_iter().map(Value::String).collect(),
            available_sandboxes: body.available_sandboxes,
            created_at: now.clone(),
            updated_at: now,
            deleted_at: None,
        };
        let created = json!({"id": row.id, "name": row.name, "created_at": row.created_at});
        let id = row.id.clone();
        svc.write(StoreWrite::InsertProfile(row.clone()));
        self.insert_profile(row);
        svc.respond_value(conn, 201, &created);
        Some(id)
    }

    pub(crate) fn list_profiles(&mut self, svc: &mut Services, conn: ConnId, req: &Request) {
        let Some((after, limit)) = svc.page_params(conn, req) else {
            return;
        };
        let (items, next) = page_of(&self.profile_order, after, limit, |id| {
            self.live_profile(id).map(|p| svc.profile_view(&p.row))
        });
        svc.respond_value(conn, 200, &json!({"items": items, "next_cursor": next}));
    }

    pub(crate) fn get_profile(&mut self, svc: &mut Services, conn: ConnId, id: &str) {
        match self.live_profile(id) {
            Some(p) => {
                let view = svc.profile_view(&p.row);
                svc.respond_value(conn, 200, &view);
            }
            None => svc.problem(conn, ProblemType::NotFound, &format!("no profile {id}")),
        }
    }

    pub(crate) fn replace_profile(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        id: &str,
    ) -> bool {
        let body = match proto::wire::admin::ProfileBody::parse(&req.body) {
            Ok(b) => b,
            Err(detail) => {
                svc.problem(conn, ProblemType::BadRequest, &detail);
                return false;
            }
        };
        let Some(current) = self.live_profile(id).map(|p| p.row.clone()) else {
            svc.problem(conn, ProblemType::NotFound, &format!("no profile {id}"));
            return false;
        };
        if body.name != current.name && self.profile_names.contains(&body.name) {
            svc.problem(
                conn,
                ProblemType::DuplicateName,
                "a profile with that name already exists",
            );
            return false;
        }
        let row = ProfileRow {
            id: current.id.clone(),
            name: body.name,
            primary_provider: body.primary_provider,
            fallback_providers: body.fallback_providers,
            mcp_servers: body.mcp_servers,
            allowed_tools: body.allowed_tools.into_iter().map(Value::String).collect(),
            available_sandboxes: body.available_sandboxes,
            created_at: current.created_at.clone(),
            updated_at: svc.timestamp(),
            deleted_at: None,
        };
        // The old name stays reserved, exactly like the UNIQUE column would
        // keep it only if another row held it; a renamed row frees it.
        self.profile_names.remove(&current.name);
        self.profile_names.insert(row.name.clone());
        let view = svc.profile_view(&row);
        svc.write(StoreWrite::UpdateProfile(row.clone()));
        if let Some(p) = self.profiles.get_mut(id) {
            p.row = row;
        }
        svc.respond_value(conn, 200, &view);
        true
    }

    pub(crate) fn delete_profile(&mut self, svc: &mut Services, conn: ConnId, id: &str) {
        let Some(mut row) = self.live_profile(id).map(|p| p.row.clone()) else {
            return svc.problem(conn, ProblemType::NotFound, &format!("no profile {id}"));
        };
        let in_use = self
            .keys
            .values()
            .filter(|k| k.role == KeyRole::Client && k.profile_id.as_deref() == Some(id))
            .count();
        if in_use > 0 {
            let detail =
                format!("profile has {in_use} active client key(s); revoke them before deleting");
            return svc.problem(conn, ProblemType::ProfileInUse, &detail);
        }
        row.deleted_at = Some(svc.timestamp());
        svc.write(StoreWrite::UpdateProfile(row.clone()));
        if let Some(p) = self.profiles.get_mut(id) {
            p.row = row;
        }
        svc.respond(conn, 204, None, b"");
    }

    pub(crate) fn create_key(&mut self, svc: &mut Services, conn: ConnId, req: &Request) {
        let body = match proto::wire::admin::CreateKeyBody::parse(&req.body) {
            Ok(b) => b,
            Err(detail) => return svc.problem(conn, ProblemType::BadRequest, &detail),
        };
        if self.live_profile(&body.profile_id).is_none() {
            let detail = format!("no active profile {}", body.profile_id);
            return svc.problem(conn, ProblemType::ProfileUnavailable, &detail);
        }
        let secret = svc.new_secret(SecretKind::Client);
        let row = KeyRow {
            id: svc.new_id(IdKind::Key),
            name: body.name,
            key_hash: auth::digest_hex(&secret),
            key_prefix: secret[..8].to_string(),
            role: KeyRole::Client,
            profile_id: Some(body.profile_id),
            client_id: None,
            created_at: svc.timestamp(),
            last_used_at: None,
            deleted_at: None,
        };
        let created = json!({
            "id": row.id,
            "name": row.name,
            "key": secret,
            "prefix": row.key_prefix,
            "profile_id": row.profile_id,
            "created_at": row.created_at,
        });
        let mut key = Key::from_row(&row, self);
        key.hash = StoredHash::Sha256(auth::digest(&secret));
        svc.write(StoreWrite::InsertKey(row));
        self.insert_key(key);
        svc.respond_value(conn, 201, &created);
    }

    pub(crate) fn list_keys(&mut self, svc: &mut Services, conn: ConnId, req: &Request) {
        let Some((after, limit)) = svc.page_params(conn, req) else {
            return;
        };
        let (items, next) = page_of(&self.client_key_order, after, limit, |id| {
            self.keys
                .get(id)
                .filter(|k| k.role == KeyRole::Client)
                .map(|k| {
                    json!({
                        "id": k.id,
                        "name": k.name,
                        "prefix": k.prefix,
                        "profile_id": k.profile_id,
                        "created_at": k.created_at,
                        "last_used_at": k.last_used_at,
                    })
                })
        });
        svc.respond_value(conn, 200, &json!({"items": items, "next_cursor": next}));
    }

    pub(crate) fn is_client_key(&self, id: &str) -> bool {
        (self.keys.get(id)).is_some_and(|k| k.role == KeyRole::Client)
    }
}

impl Catalog {
    /// `GET /admin/v1/{sessions|keys|profiles}/{id}/usage[?since=&until=]`
    /// (extension, docs/extensions.md "Usage accounting"): sums of the
    /// stored usage rows, a session's by turn too.
    pub(crate) fn usage_request(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        scope: crate::store::UsageScope,
    ) {
        use crate::store::UsageScope;
        let mut window = [None, None];
        for (slot, name) in window.iter_mut().zip(["since", "until"]) {
            if let Some(v) = req.query_param(name) {
                match crate::usage::parse_instant(&v) {
                    Some(ms) => *slot = Some(ms),
                    None => {
                        let detail = format!(
                            "{name}: expected a UTC time like 2026-01-02, 2026-01-02T03:04:05Z or 2026-01-02T03:04:05.000Z"
                        );
                        return svc.problem(conn, ProblemType::BadRequest, &detail);
                    }
                }
            }
        }
        let scope_json = match &scope {
            UsageScope::Session(id) => {
                if !self.sessions.contains_key(id.as_str()) {
                    return svc.problem(conn, ProblemType::NotFound, &format!("no session {id}"));
                }
                format!("\"session_id\":{}", proto::wire::json::string(id))
            }
            UsageScope::ClientKey(id) => format!("\"key_id\":{}", proto::wire::json::string(id)),
            UsageScope::Profile(id) => {
                format!("\"profile_id\":{}", proto::wire::json::string(id))
            }
        };
        let scope_json = crate::usage::scope_members(&scope_json, window);
        let by_turn = matches!(scope, UsageScope::Session(_));
        let read = StoreRead::Usage {
            scope,
            since_ms: window[0],
            until_ms: window[1],
            by_turn,
        };
        svc.read(
            read,
            PendingRead::Answer(AnswerRead::Usage { conn, scope_json }),
        );
    }
}
