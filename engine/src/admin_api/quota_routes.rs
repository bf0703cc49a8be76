//! Quotas on the admin port (extension, docs/extensions.md "Quotas"):
//! `GET|PUT|DELETE /admin/v1/{keys|profiles}/{id}/quota` and the listing
//! `GET /admin/v1/quotas`, and the refusals the client port answers. The
//! catalogue owns the quotas (`crate::quotas`); a budget's usage in its
//! window is read from the stored usage rows (at start, on `PUT` and on
//! `GET`, so an answer is exact across restarts and replicas).

use proto::http::Request;
use proto::wire::problem::ProblemType;
use serde_json::json;

use crate::conn::{AdminRead, PendingRead};
use crate::model::Catalog;
use crate::quotas::{Refusal, Scope};
use crate::services::Services;
use crate::store::{QuotaRow, ReadError, ReadResult, StoreRead, StoreWrite, UsageScope};
use crate::ConnId;

impl Catalog {
    /// `GET|PUT|DELETE /admin/v1/{keys|profiles}/{id}/quota`.
    pub(crate) fn quota_request(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        scope: Scope,
    ) {
        let known = match &scope {
            Scope::Key(id) => self.is_client_key(id),
            Scope::Profile(id) => self.live_profile(id).is_some(),
        };
        if !known {
            let detail = match &scope {
                Scope::Key(id) => format!("no active client key {id}"),
                Scope::Profile(id) => format!("no profile {id}"),
            };
            return svc.problem(conn, ProblemType::NotFound, &detail);
        }
        match req.method {
            proto::http::Method::Get => {
                if self.quotas.get(&scope).is_none() {
                    return no_quota(svc, conn, &scope);
                }
                self.answer_or_seed(svc, conn, scope);
            }
            proto::http::Method::Put => {
                let quota = serde_json::from_slice::<serde_json::Value>(&req.body)
                    .map_err(|_| crate::quotas::QuotaError::NotAnObject)
                    .and_then(|v| crate::quotas::parse(&v));
                let quota = match quota {
                    Ok(q) => q,
                    Err(e) => return svc.problem(conn, ProblemType::BadRequest, &e.to_string()),
                };
                svc.write(StoreWrite::PutQuota(QuotaRow {
                    scope: scope.clone(),
                    quota: proto::wire::json::text(&quota.to_json()),
                    updated_at: svc.timestamp(),
                }));
                self.quotas.set(scope.clone(), quota, svc.now.mono);
                self.answer_or_seed(svc, conn, scope);
            }
            proto::http::Method::Delete => {
                if !self.quotas.remove(&scope) {
                    return no_quota(svc, conn, &scope);
                }
                svc.write(StoreWrite::DeleteQuota(scope));
                svc.respond(conn, 204, None, b"");
            }
            _ => svc.problem(conn, ProblemType::MethodNotAllowed, "method not allowed"),
        }
    }

    /// `GET /admin/v1/quotas`: every quota with its consumption, and the
    /// refusals so far by kind.
    pub(crate) fn list_quotas(&mut self, svc: &mut Services, conn: ConnId) {
        let quotas: Vec<_> = (self.quotas.status(svc.now.mono, svc.now.unix).iter())
            .map(|s| s.to_json())
            .collect();
        let refused: serde_json::Map<_, _> = (crate::quotas::Kind::ALL.iter())
            .zip(self.quotas.refused())
            .map(|(k, n)| (k.as_str().to_string(), json!(n)))
            .collect();
        svc.respond_value(conn, 200, &json!({"quotas": quotas, "refused": refused}));
    }

    /// Answers a quota's status, after reading its budget's usage from
    /// the store when it has one.
    fn answer_or_seed(&mut self, svc: &mut Services, conn: ConnId, scope: Scope) {
        if self.quotas.window_start(&scope, svc.now.unix).is_some() {
            return self.read_usage(svc, scope, Some(conn));
        }
        self.answer_quota(svc, conn, &scope);
    }

    fn answer_quota(&mut self, svc: &mut Services, conn: ConnId, scope: &Scope) {
        match self.quotas.status_of(scope, svc.now.mono, svc.now.unix) {
            Some(s) => svc.respond_value(conn, 200, &s.to_json()),
            // Deleted while its usage was read.
            None => no_quota(svc, conn, scope),
        }
    }

    /// Replica mode: a quota another replica set (a catalogue notice).
    pub(crate) fn quota_changed_elsewhere(&mut self, svc: &mut Services, row: QuotaRow) {
        match crate::quotas::from_stored(&row.quota) {
            Ok(q) if self.quotas.get(&row.scope) == Some(q) => {}
            Ok(q) => {
                self.quotas.set(row.scope.clone(), q, svc.now.mono);
                self.read_usage(svc, row.scope, None);
            }
            Err(e) => tracing::error!(scope = ?row.scope, error = %e, "stored quota skipped"),
        }
    }

    /// Replica mode: every budget's window usage read again from the
    /// store when due, so that other replicas' turns count here too.
    pub(crate) fn refresh_quotas(&mut self, svc: &mut Services) {
        for scope in self.quotas.take_refresh(svc.now.mono) {
            self.read_usage(svc, scope, None);
        }
    }

    /// Reads a budgeted scope's usage in its current window (at start).
    pub(crate) fn seed_quota(&mut self, svc: &mut Services, scope: Scope) {
        self.read_usage(svc, scope, None);
    }

    fn read_usage(&mut self, svc: &mut Services, scope: Scope, conn: Option<ConnId>) {
        let Some(since_ms) = self.quotas.window_start(&scope, svc.now.unix) else {
            if let Some(conn) = conn {
                self.answer_quota(svc, conn, &scope);
            }
            return;
        };
        let usage_scope = match &scope {
            Scope::Key(id) => UsageScope::ClientKey(id.clone()),
            Scope::Profile(id) => UsageScope::Profile(id.clone()),
        };
        let read = StoreRead::Usage {
            scope: usage_scope,
            since_ms: Some(since_ms),
            until_ms: None,
            by_turn: false,
        };
        let then = AdminRead::QuotaUsage {
            scope,
            since_ms,
            conn,
        };
        svc.read(read, PendingRead::Admin(then));
    }

    /// The store's usage of a scope since its window started.
    pub(crate) fn on_quota_usage(
        &mut self,
        svc: &mut Services,
        (scope, since_ms, conn): (Scope, u64, Option<ConnId>),
        result: Result<ReadResult, ReadError>,
    ) {
        match result {
            Ok(ReadResult::Usage(sums)) => {
                let used = (sums.iter())
                    .map(|s| crate::quotas::billed(&s.tokens))
                    .fold(0u64, u64::saturating_add);
                self.quotas.seed(&scope, since_ms, used);
            }
            other => {
                let e = ReadError::of(other);
                tracing::error!(error = %e, "quota usage read failed");
                if let Some(conn) = conn {
                    return svc.problem(conn, ProblemType::Internal, "internal error");
                }
                return;
            }
        }
        if let Some(conn) = conn {
            self.answer_quota(svc, conn, &scope);
        }
    }

    /// A request of a client key past its rate (`None` when it may go
    /// on): the key's own and its profile's buckets.
    pub(crate) fn quota_rate(&mut self, svc: &Services, key_id: &str) -> Option<Refusal> {
        if !self.quotas.is_on() {
            return None;
        }
        let profile = self.keys.get(key_id).and_then(|k| k.profile_id.clone());
        let profile = profile.as_ref().map(|p| p.as_str());
        self.quotas
            .admit_request(key_id, profile, svc.now.mono)
            .err()
    }

    /// A new turn of `key_id` in `session_id` past a token budget (the
    /// key's or the session's profile's); `None` when it may start.
    pub(crate) fn quota_turn(
        &mut self,
        svc: &Services,
        session_id: &str,
        key_id: &str,
    ) -> Option<Refusal> {
        if !self.quotas.is_on() {
            return None;
        }
        let profile = self.sessions.get(session_id).map(|s| s.profile_id.clone());
        let profile = profile.as_ref().map(|p| p.as_str());
        self.quotas.admit_turn(key_id, profile, svc.now.unix).err()
    }

    /// [`Catalog::quota_rate`] on a REST route: `429` answered, `false`.
    pub(crate) fn admit_rest(&mut self, svc: &mut Services, conn: ConnId, key_id: &str) -> bool {
        match self.quota_rate(svc, key_id) {
            None => true,
            Some(r) => {
                quota_problem(svc, conn, &r);
                false
            }
        }
    }
}

fn no_quota(svc: &mut Services, conn: ConnId, scope: &Scope) {
    let detail = format!("no quota set for {} {}", scope.kind(), scope.id());
    svc.problem(conn, ProblemType::NotFound, &detail);
}

/// `429 quota_exceeded`: the problem's members with the refusal's data,
/// and `Retry-After` when a retry can pass at a known time.
pub(crate) fn quota_problem(svc: &mut Services, conn: ConnId, r: &Refusal) {
    let mut body = json!({
        "type": "quota_exceeded",
        "title": "Too Many Requests",
        "status": 429,
        "detail": r.detail(),
    });
    if let (Some(obj), serde_json::Value::Object(data)) = (body.as_object_mut(), r.data()) {
        obj.extend(data);
    }
    let retry_after = r.retry_after_s().map(|s| s.to_string());
    let headers: Vec<(&str, &str)> = match &retry_after {
        Some(s) => vec![("retry-after", s.as_str())],
        None => Vec::new(),
    };
    let close = svc.closes_after(conn);
    svc.log_request(conn, 429);
    let bytes = proto::http::encode_response(
        429,
        Some("application/json"),
        &headers,
        proto::wire::json::text(&body).as_bytes(),
        close,
    );
    svc.send(conn, bytes);
    svc.finish_request(conn);
}
