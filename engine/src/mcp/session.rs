//! One session's MCP connection set ([`SessionMcp`]): its connections in
//! profile order, the tools they advertise and the route from each tool
//! name to the connection that runs it. It lives in the session's own
//! entry of the sessions table; the [`McpHub`] only hands out connection
//! ids, routes transport events and deadlines to the owning session, and
//! queues what every set emits.

use std::collections::BTreeMap;

use proto::mcp::{CallOutcome, McpTool};
use serde_json::Value;

use super::conn::{Conn, PendingCall, Step};
use super::{CallToken, McpConnId, McpEvent, McpHub, McpNotice};
use crate::ids::SessionId;
use crate::MonoMs;

/// One session's connection set (see the module docs).
pub struct SessionMcp {
    session_id: SessionId,
    /// Connections in profile order (a connect that failed stays listed
    /// until the last connect of the set is done).
    order: Vec<McpConnId>,
    conns: BTreeMap<McpConnId, Conn>,
    /// Connects not finished yet.
    connecting: usize,
    /// Tools advertised to the provider, in connect order, one per name
    /// (the route winner's definition).
    tools: Vec<Value>,
    /// Tool name → connection (a later server overwrites an earlier one).
    routes: BTreeMap<String, McpConnId>,
}

impl SessionMcp {
    /// A set whose connections `hub` is opening (ids in profile order).
    pub(super) fn connecting(session_id: SessionId, conns: Vec<(McpConnId, Conn)>) -> Self {
        SessionMcp {
            session_id,
            order: conns.iter().map(|(id, _)| *id).collect(),
            connecting: conns.len(),
            conns: conns.into_iter().collect(),
            tools: Vec::new(),
            routes: BTreeMap::new(),
        }
    }

    /// Every connect failed: nothing of the set is left, its holder drops
    /// it (the create was released when the last connect finished).
    pub fn is_done(&self) -> bool {
        self.connecting == 0 && self.order.is_empty()
    }

    /// The session's MCP tools in provider shape.
    pub fn tools(&self) -> &[Value] {
        &self.tools
    }

    /// The server that would run `tool`.
    pub fn route(&self, tool: &str) -> Option<&str> {
        let conn = self.routes.get(tool)?;
        self.conns.get(conn).map(Conn::server_name)
    }

    /// Starts `tools/call`; `None` when no server advertises `tool` (the
    /// engine answers that case itself). Returns the server's name.
    pub fn call(
        &mut self,
        hub: &mut McpHub,
        tool: &str,
        input: &Value,
        token: CallToken,
        now: MonoMs,
    ) -> Option<String> {
        let id = *self.routes.get(tool)?;
        let c = self.conns.get_mut(&id)?;
        let name = c.server_name().to_string();
        let call = PendingCall {
            tool: tool.to_string(),
            input: input.clone(),
            token,
            replayed: false,
        };
        if let (Some(reason), Some(retry_at)) = (c.broken(), c.may_reconnect()) {
            if now < retry_at {
                let text = format!("{reason} (reconnecting in {} ms)", retry_at - now);
                hub.notice(McpNotice::CallDone {
                    token,
                    outcome: CallOutcome::Failed(text),
                });
            } else {
                self.reconnect(hub, id, call, now);
            }
        } else {
            let step = c.call(call, now);
            self.apply(hub, id, step, now);
        }
        self.sync(hub);
        Some(name)
    }

    /// The caller of `token` is gone (a cancelled turn): no notice will
    /// follow and the connection is free for the next call.
    pub fn abandon(&mut self, hub: &mut McpHub, token: CallToken) {
        for c in self.conns.values_mut() {
            c.abandon(token);
        }
        self.sync(hub);
    }

    /// Session DELETE or revocation-close: every connection goes down. A
    /// create still waiting on its connects is released.
    pub fn close(mut self, hub: &mut McpHub) {
        for id in std::mem::take(&mut self.order) {
            if let Some(c) = self.conns.remove(&id) {
                hub.forget(id);
                hub.command(c.close_command(id));
            }
        }
        for id in self.conns.keys() {
            hub.forget(*id);
        }
        if self.connecting > 0 {
            hub.notice(McpNotice::SessionReady {
                session_id: self.session_id,
            });
        }
    }

    /// A transport event of one of this set's connections.
    pub fn handle(&mut self, hub: &mut McpHub, conn: McpConnId, event: McpEvent, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let step = c.handle(event, now);
        self.apply(hub, conn, step, now);
        self.sync(hub);
    }

    /// `conn`'s request deadline passed.
    pub fn expire(&mut self, hub: &mut McpHub, conn: McpConnId, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let step = c.expire(now);
        self.apply(hub, conn, step, now);
        self.sync(hub);
    }

    /// Tells the hub's deadline index where every connection stands.
    fn sync(&self, hub: &mut McpHub) {
        for (id, c) in &self.conns {
            hub.track(*id, c.deadline());
        }
    }

    /// Replaces a broken connection by a new incarnation (a new id, so
    /// late events of the old transport cannot reach it) that sends `call`
    /// once it is ready.
    fn reconnect(&mut self, hub: &mut McpHub, old: McpConnId, call: PendingCall, now: MonoMs) {
        let Some(old_conn) = self.conns.remove(&old) else {
            return;
        };
        hub.forget(old);
        hub.command(old_conn.close_command(old));
        tracing::info!(server = %old_conn.server_name(), "reconnecting MCP server");
        let c = Conn::reopen(&old_conn, call, now, hub.settings());
        let id = hub.open(&self.session_id, &c);
        self.conns.insert(id, c);
        for cid in self.order.iter_mut().filter(|c| **c == old) {
            *cid = id;
        }
        for route in self.routes.values_mut().filter(|r| **r == old) {
            *route = id;
        }
    }

    fn apply(&mut self, hub: &mut McpHub, id: McpConnId, step: Step, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        for message in c.take_outgoing() {
            hub.command(message.into_command(id));
        }
        let reconnecting = c.is_reconnect();
        match step {
            Step::Nothing => {}
            Step::CallDone(token, outcome) => hub.notice(McpNotice::CallDone { token, outcome }),
            Step::Expired(call) => {
                let call = PendingCall {
                    replayed: true,
                    ..call
                };
                self.reconnect(hub, id, call, now);
            }
            Step::Connected(tools) if reconnecting => self.reconnected(hub, id, tools, now),
            Step::Connected(tools) => self.connect_finished(hub, id, Some(tools)),
            Step::ConnectFailed(error) if reconnecting => {
                tracing::warn!(server = %c.server_name(), %error, "MCP reconnect failed");
                let queued = c.take_queued();
                c.backoff(now, error.clone());
                c.mark_closed();
                hub.command(c.close_command(id));
                if let Some(call) = queued {
                    hub.notice(McpNotice::CallDone {
                        token: call.token,
                        outcome: CallOutcome::Failed(error),
                    });
                }
            }
            Step::ConnectFailed(error) => {
                tracing::error!(server = %c.server_name(), %error, "MCP server skipped for this session");
                if let Some(c) = self.conns.remove(&id) {
                    hub.forget(id);
                    hub.command(c.close_command(id));
                }
                self.connect_finished(hub, id, None);
            }
        }
    }

    /// A reconnect's handshake is done: its tools are routable again (they
    /// may have changed), then the call that triggered it goes out.
    fn reconnected(&mut self, hub: &mut McpHub, id: McpConnId, tools: Vec<McpTool>, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.set_tools(tools);
        c.reset_backoff();
        let queued = c.take_queued();
        let name = c.server_name().to_string();
        self.rebuild();
        let Some(call) = queued else {
            return;
        };
        if self.routes.get(&call.tool) != Some(&id) {
            let text = proto::mcp::errors::transport(&format!(
                "MCP server '{name}' no longer offers tool '{}' after reconnecting",
                call.tool
            ));
            hub.notice(McpNotice::CallDone {
                token: call.token,
                outcome: CallOutcome::Failed(text),
            });
            return;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            let step = c.call(call, now);
            self.apply(hub, id, step, now);
        }
    }

    /// One connect of the set is done; the last one builds the route table
    /// in profile order and releases the create.
    fn connect_finished(&mut self, hub: &mut McpHub, id: McpConnId, tools: Option<Vec<McpTool>>) {
        if let (Some(tools), Some(c)) = (tools, self.conns.get_mut(&id)) {
            c.set_tools(tools);
        }
        self.connecting = self.connecting.saturating_sub(1);
        if self.connecting > 0 {
            return;
        }
        let conns = &self.conns;
        self.order.retain(|c| conns.contains_key(c));
        self.rebuild();
        hub.notice(McpNotice::SessionReady {
            session_id: self.session_id.clone(),
        });
    }

    /// Route table and advertised list, in profile order: a later server
    /// overwrites an earlier route; a shared name is advertised once, with
    /// the definition of the server that runs it.
    fn rebuild(&mut self) {
        let mut tools: Vec<Value> = Vec::new();
        let mut slot: BTreeMap<String, usize> = BTreeMap::new();
        self.routes.clear();
        for cid in &self.order {
            let Some(c) = self.conns.get(cid) else {
                continue;
            };
            for t in c.tools() {
                self.routes.insert(t.name.clone(), *cid);
                match slot.get(&t.name) {
                    Some(&i) => {
                        if let Some(v) = tools.get_mut(i) {
                            *v = t.advertised.clone();
                        }
                    }
                    None => {
                        slot.insert(t.name.clone(), tools.len());
                        tools.push(t.advertised.clone());
                    }
                }
            }
        }
        self.tools = tools;
    }
}
