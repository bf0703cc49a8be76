//! Driver registrations in the catalogue and the pre-gate checks of the
//! session methods (spec 01 §6.1: `-32001` before anything else, then the
//! open-state check), the client-reported lifecycle claims and
//! `session.updateClientTools`: the catalogue answers them through the
//! [`Services`] itself.

use proto::jsonrpc::{self, codes, Parsed};
use serde_json::Value;

use crate::ids::{KeyId, SessionId};
use crate::model::Catalog;
use crate::services::Services;
use crate::ConnId;

impl Catalog {
    pub(crate) fn is_driver(&self, session_id: &str, key_id: &str) -> bool {
        self.drivers
            .get(session_id)
            .is_some_and(|d| d.contains(key_id))
    }
}

impl Catalog {
    /// The first check of every gated method: `-32001` unless the caller
    /// registered as a driver.
    pub(crate) fn require_driver(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        method: &str,
    ) -> bool {
        if self.is_driver(session_id, key_id) {
            return true;
        }
        svc.terminal_error(
            conn,
            codes::DRIVER_NOT_REGISTERED,
            format_args!("call session.registerDriver before {method}"),
        );
        false
    }

    /// `-32001`, then `-32000` unless the session is open (the pre-checks of
    /// the methods with an open-state check, spec 01 §6.1).
    pub(crate) fn require_open_driver(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        method: &str,
    ) -> bool {
        if !self.require_driver(svc, conn, session_id, key_id, method) {
            return false;
        }
        match self.open_state_error(session_id) {
            Some(msg) => {
                svc.terminal_error(conn, codes::APPLICATION_ERROR, &msg);
                false
            }
            None => true,
        }
    }

    /// `session.updateClientTools` (spec 06 §3.2): full replacement of the
    /// caller's own client tools, used from its next provider call.
    pub(crate) fn update_client_tools(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: Parsed<jsonrpc::UpdateClientToolsParams>,
    ) {
        if !self.require_open_driver(svc, conn, session_id, key_id, "session.updateClientTools") {
            return;
        }
        let parsed = match params {
            Ok(p) => p,
            Err(msg) => return svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        let profile_id = self.profile_of(session_id);
        let Some(allowed) = self.live_profile(&profile_id).map(|p| {
            p.row
                .allowed_tools
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        }) else {
            return svc.terminal_error(conn, codes::INTERNAL_ERROR, "Internal error");
        };
        if let Err(e) = parsed.check_allowed(&allowed) {
            return svc.terminal_error(conn, e.code, &e.message);
        }
        let Some(session) = self.sessions.get_mut(session_id) else {
            return svc.terminal_error(conn, codes::INTERNAL_ERROR, "Internal error");
        };
        let tools: Vec<Value> = parsed.tools.iter().map(|t| t.to_value()).collect();
        session.client_tools.set(&mut self.decls, key_id, &tools);
        let row = session.to_row();
        svc.write(crate::store::StoreWrite::SetSessionTools {
            id: row.id,
            client_tools: row.client_tools,
            sandbox_tools: row.sandbox_tools,
            subagent_tools: row.subagent_tools,
        });
        svc.terminal_result(conn, r#"{"updated":true}"#);
    }

    /// The profile a session is bound to; empty (no live profile has that
    /// id) when the session is unknown, so callers take their
    /// profile-unavailable path instead of panicking.
    pub(crate) fn profile_of(&self, session_id: &str) -> String {
        (self.sessions.get(session_id))
            .map(|s| s.profile_id.to_string())
            .unwrap_or_default()
    }

    /// `"session is <state>, not open"` unless the session is open.
    pub(crate) fn open_state_error(&self, session_id: &str) -> Option<String> {
        self.open_error(session_id)
    }
}
