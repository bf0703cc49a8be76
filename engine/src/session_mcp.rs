//! The engine's side of MCP (spec 06 §4.1): a new session's servers are
//! connected after its row and `session.open` exist and before the `201`
//! goes out; the hub's notices are routed to creates and turns; teardown
//! closes the set.

use crate::mcp::{McpNotice, McpServerSpec};
use crate::sessions::PendingCreate;
use crate::{ConnId, Engine, Output};

impl Engine {
    /// Moves the sub-state machines' commands to the outputs and routes
    /// their notices until all are drained (a notice may make a turn start
    /// the next call).
    pub(crate) fn pump_mcp(&mut self) {
        loop {
            if let Some(notice) = self.mcp.poll_notice() {
                match notice {
                    McpNotice::SessionReady { session_id } => self.release_create(&session_id),
                    McpNotice::CallDone { token, outcome } => self.on_mcp_call_done(token, outcome),
                }
                continue;
            }
            if let Some(notice) = self.sandbox.poll_notice() {
                self.on_sandbox_notice(notice);
                continue;
            }
            if let Some(cmd) = self.mcp.poll_command() {
                self.svc.outputs.push_back(Output::Mcp(cmd));
                continue;
            }
            match self.sandbox.poll_command() {
                Some(cmd) => self.svc.outputs.push_back(Output::Sandbox(cmd)),
                None => return,
            }
        }
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

    fn release_create(&mut self, session_id: &str) {
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

    /// Extension (`reconnect = true` servers): a session that existed
    /// before this process started has no MCP connections; its first chat
    /// turn connects the profile's reconnecting servers before the first
    /// provider call. Returns whether turn `turn_id` now waits for them.
    pub(crate) fn restore_mcp(&mut self, session_id: &str, turn_id: crate::turn::TurnId) -> bool {
        let session_id = self.catalog.session_id(session_id);
        let Some(session) = self.catalog.sessions.get(session_id.as_str()) else {
            return false;
        };
        // A session created by this process connected them at open.
        if session.mcp_checked {
            return false;
        }
        let profile_id = session.profile_id.clone();
        if let Some(s) = self.catalog.sessions.get_mut(session_id.as_str()) {
            s.mcp_checked = true;
        }
        let names = self
            .catalog
            .live_profile(&profile_id)
            .map(|p| p.row.mcp_servers.clone())
            .unwrap_or_default();
        let servers: Vec<McpServerSpec> = names
            .iter()
            .filter_map(|n| self.svc.config.mcp_servers.iter().find(|s| &s.name == n))
            .filter(|s| s.reconnect)
            .cloned()
            .collect();
        if servers.is_empty() || self.mcp.has_session(&session_id) {
            return false;
        }
        self.sessions.await_mcp(session_id.clone(), turn_id);
        let now = self.svc.now.mono;
        self.mcp.connect_session(&session_id, servers, now);
        true
    }
}
