//! The engine's side of MCP (spec 06 §4.1): a new session's servers are
//! connected after its row and `session.open` exist and before the `201`
//! goes out; the hub's notices are routed to creates and turns; teardown
//! closes the set.

use crate::mcp::{McpNotice, McpServerSpec};
use crate::{ConnId, Engine, Output};

impl Engine {
    /// Moves the hub's commands to the outputs and routes its notices until
    /// both are drained (a notice may make a turn start the next call).
    pub(crate) fn pump_mcp(&mut self) {
        loop {
            if let Some(notice) = self.mcp.poll_notice() {
                match notice {
                    McpNotice::SessionReady { session_id } => self.release_create(&session_id),
                    McpNotice::CallDone { token, outcome } => self.on_mcp_call_done(token, outcome),
                }
                continue;
            }
            match self.mcp.poll_command() {
                Some(cmd) => self.outputs.push_back(Output::Mcp(cmd)),
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
            match self.config.mcp_servers.iter().find(|s| &s.name == name) {
                Some(spec) => servers.push(spec.clone()),
                None => tracing::error!(
                    server = %name,
                    session = %session_id,
                    "profile references an MCP server that is not in [mcp.servers]; skipped"
                ),
            }
        }
        if servers.is_empty() {
            return self.respond_json(conn, 201, &body);
        }
        self.pending_creates
            .insert(session_id.to_string(), (conn, body));
        let now = self.now.mono_ms;
        self.mcp.connect_session(session_id, servers, now);
    }

    fn release_create(&mut self, session_id: &str) {
        if let Some((conn, body)) = self.pending_creates.remove(session_id) {
            if self.conns.contains_key(&conn) {
                self.respond_json(conn, 201, &body);
            }
        }
    }
}
