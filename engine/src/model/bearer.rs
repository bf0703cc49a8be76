//! The catalogue's bearer check on every authenticated route: the key of
//! the right scope, `401` with the reference detail texts otherwise,
//! `last_used_at` stamped on success.

use proto::http::Request;
use proto::wire::problem::ProblemType;

use super::{Catalog, Key, KeyScope};
use crate::auth::bearer;
use crate::services::Services;
use crate::store::StoreWrite;
use crate::time::Stamp;
use crate::ConnId;

/// The catalogue checks bearers against the keys it holds and answers
/// `401` through the services itself.
impl Catalog {
    /// Authenticates a client key (`bae_…`); answers 401 on failure.
    pub(crate) fn auth_client(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
    ) -> Option<Key> {
        let key = self.auth_bearer(svc, conn, req, KeyScope::Client)?;
        // Quotas: past the key's rate, `429` (off unless a quota is set).
        self.admit_rest(svc, conn, &key.id).then_some(key)
    }

    /// Authenticates a session key bound to `session_id`; 401 on failure
    /// (also for an unknown session: the key cannot match anything).
    pub(crate) fn auth_session(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        session_id: &str,
    ) -> Option<Key> {
        let key = self.auth_bearer(svc, conn, req, KeyScope::Session(session_id))?;
        let acting = key.client_id.clone().unwrap_or_else(|| key.id.clone());
        self.admit_rest(svc, conn, &acting).then_some(key)
    }

    /// Bearer authentication against the keys of one scope: `401` with the
    /// reference detail texts on failure, `last_used_at` stamped on success.
    pub(crate) fn auth_bearer(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        req: &Request,
        scope: KeyScope<'_>,
    ) -> Option<Key> {
        let token = match bearer(req.header("authorization")) {
            Ok(t) => t,
            Err(e) => {
                svc.problem(conn, ProblemType::Unauthorized, e.detail());
                return None;
            }
        };
        let invalid = match scope {
            KeyScope::Client => "invalid client key",
            KeyScope::Session(_) => "invalid session key",
            KeyScope::Admin => "invalid admin key",
        };
        match self.authenticate(scope, token, svc.now.mono) {
            Some((k, upgrade)) => {
                if let Some(w) = upgrade {
                    svc.write(w);
                }
                self.touch_key(svc, &k.id);
                Some(k)
            }
            None => {
                svc.problem(conn, ProblemType::Unauthorized, invalid);
                None
            }
        }
    }

    /// Stamps `last_used_at` (best effort, never a durability point).
    pub(crate) fn touch_key(&mut self, svc: &mut Services, key_id: &str) {
        let at = svc.timestamp();
        if let Some(k) = self.keys.get_mut(key_id) {
            k.last_used_at = Some(Stamp::At(svc.now.unix));
        }
        svc.write(StoreWrite::TouchKey {
            id: key_id.to_string(),
            at,
        });
    }
}
