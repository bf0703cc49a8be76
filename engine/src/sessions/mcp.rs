//! The sessions' MCP connection sets: the table holds each set in its
//! session's entry, and these methods hand it the endpoint's [`McpHub`]
//! (ids, routing, deadline index, output queues) for one operation. A set
//! with nothing left is dropped with the operation that emptied it.

use super::Sessions;
use crate::ids::SessionId;
use crate::mcp::{McpConnId, McpEvent, McpHub, SessionMcp};
use crate::sandbox::SessionSandbox;
use crate::session_core::SessionCore;
use crate::MonoMs;

impl Sessions {
    /// `id`'s MCP connection set.
    pub(crate) fn mcp(&self, id: &str) -> Option<&SessionMcp> {
        self.table.get(id)?.mcp.as_ref()
    }

    pub(crate) fn has_mcp(&self, id: &str) -> bool {
        self.mcp(id).is_some()
    }

    /// Connects `servers` for `id` (a create, or a restore before a turn):
    /// the set lives in the session's entry from now on.
    pub(crate) fn connect_mcp(
        &mut self,
        hub: &mut McpHub,
        id: &SessionId,
        servers: Vec<crate::mcp::McpServerSpec>,
        now: MonoMs,
    ) {
        let Some(set) = hub.connect_session(id, servers, now) else {
            return;
        };
        let old = self.table.entry(id.clone()).or_default().mcp.replace(set);
        // Never reached (a session connects once): close rather than leak.
        if let Some(old) = old {
            old.close(hub);
        }
    }

    /// Runs `f` on `id`'s set, then drops the set if nothing of it is left.
    pub(crate) fn with_mcp<R>(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut SessionMcp) -> R,
    ) -> Option<R> {
        let s = self.table.get_mut(id)?;
        let set = s.mcp.as_mut()?;
        let r = f(set);
        if set.is_done() {
            s.mcp = None;
            self.prune(id);
        }
        Some(r)
    }

    /// Session DELETE, revocation-close or `error`: every connection of
    /// `id` goes down (a create waiting on them is released).
    pub(crate) fn close_mcp(&mut self, hub: &mut McpHub, id: &str) {
        let Some(set) = self.table.get_mut(id).and_then(|s| s.mcp.take()) else {
            return;
        };
        set.close(hub);
        self.prune(id);
    }

    /// A transport event, routed to the set that owns `conn`.
    pub(crate) fn mcp_event(
        &mut self,
        hub: &mut McpHub,
        conn: McpConnId,
        event: McpEvent,
        now: MonoMs,
    ) {
        let Some(id) = hub.owner(conn).cloned() else {
            return;
        };
        self.with_mcp(&id, |set| set.handle(hub, conn, event, now));
    }

    /// Fires every MCP request deadline due at `now`.
    pub(crate) fn mcp_timeout(&mut self, hub: &mut McpHub, now: MonoMs) {
        for conn in hub.due(now) {
            let Some(id) = hub.owner(conn).cloned() else {
                continue;
            };
            self.with_mcp(&id, |set| set.expire(hub, conn, now));
        }
    }

    /// `id`'s core beside its MCP set and sandbox box (a turn decides with
    /// their routes and handle in view).
    pub(crate) fn core_and_parts(
        &mut self,
        id: &str,
    ) -> Option<(
        &mut SessionCore,
        Option<&SessionMcp>,
        Option<&SessionSandbox>,
    )> {
        let s = self.table.get_mut(id)?;
        Some((s.core.as_mut()?, s.mcp.as_ref(), s.sandbox.as_ref()))
    }
}
