//! The MCP invariants seen from the emitted event log, and the end-of-run
//! checks.

use super::*;

impl McpSim {
    // ---- the event log ---------------------------------------------------------

    /// Every event the engine emits, in emission order.
    pub fn on_event(&mut self, row: &EventRow, now: u64, checker: &mut Checker) {
        let sid = row.session_id.as_str();
        self.note_session(sid);
        let ty = row.event_type.as_str();
        match ty {
            "tool.call" | "tool.result" | "mcp.request" | "mcp.response" => {}
            "provider.request"
            | "server.message.send"
            | "client.message.send"
            | "session.compaction.started"
            | "session.error" => {
                let Some(s) = self.sessions.get_mut(sid) else {
                    return;
                };
                if !s.uses.is_empty() || s.req.is_some() {
                    let ids: Vec<&str> = s.uses.iter().map(|u| u.id.as_str()).collect();
                    checker.fail(
                        check::INV_MCP_ONE_RESULT,
                        format!(
                            "session {sid}: {ty} {} while MCP tool.call(s) {ids:?} have no tool.result (pending mcp.request {:?})",
                            row.id, s.req
                        ),
                    );
                    s.uses.clear();
                    s.req = None;
                }
                return;
            }
            "session.close" => {
                let s = self.sessions.entry(sid.to_string()).or_default();
                s.closed = true;
                s.uses.clear();
                s.req = None;
                self.closing.push(sid.to_string());
                return;
            }
            _ => return,
        }
        let p: Value = serde_json::from_str(&row.payload).unwrap_or(Value::Null);
        let server = p["server_name"].as_str().map(str::to_string);
        let tmo = self.timeout_ms;
        match ty {
            "tool.call" => {
                if p["dispatch"] != "mcp" {
                    return;
                }
                let name = p["name"].as_str().unwrap_or("").to_string();
                let expected = self.route(sid, &name);
                if expected != server {
                    checker.fail(
                        check::INV_MCP_ROUTING,
                        format!(
                            "session {sid}: tool.call {} {name} routed to {server:?}; the last server in profile order that listed it is {expected:?}",
                            row.id
                        ),
                    );
                }
                let s = self.sessions.entry(sid.to_string()).or_default();
                s.uses.push_back(Use {
                    id: p["id"].as_str().unwrap_or("").to_string(),
                    name,
                    server,
                    responded: false,
                });
            }
            "mcp.request" => {
                let tool = p["tool"].as_str().unwrap_or("").to_string();
                let s = self.sessions.entry(sid.to_string()).or_default();
                let mut problems = Vec::new();
                if let Some(r) = &s.req {
                    problems.push(format!(
                        "the previous mcp.request {r:?} has no mcp.response"
                    ));
                }
                match s.uses.front() {
                    Some(u) if u.name == tool && u.server == server && !u.responded => {}
                    other => problems.push(format!(
                        "the next MCP block in order is {other:?}, not {tool} on {server:?}"
                    )),
                }
                if !problems.is_empty() {
                    checker.fail(
                        check::INV_MCP_ONE_RESULT,
                        format!(
                            "session {sid}: mcp.request {}: {}",
                            row.id,
                            problems.join("; ")
                        ),
                    );
                }
                s.req = Some(Req {
                    tool,
                    server,
                    at: now,
                    ops: 0,
                });
            }
            "mcp.response" => {
                if p["error"].as_str().is_some_and(|e| e.contains("timed out")) {
                    self.stats.timeouts += 1;
                }
                let s = self.sessions.entry(sid.to_string()).or_default();
                let Some(r) = s.req.take() else {
                    checker.fail(
                        check::INV_MCP_ONE_RESULT,
                        format!(
                            "session {sid}: mcp.response {} without an mcp.request",
                            row.id
                        ),
                    );
                    return;
                };
                if r.server != server {
                    checker.fail(
                        check::INV_MCP_ONE_RESULT,
                        format!(
                            "session {sid}: mcp.response {} names {server:?}, its request {r:?}",
                            row.id
                        ),
                    );
                }
                let limit = r.at + r.ops * tmo;
                self.stats.max_hold_pct = self.stats.max_hold_pct.max((now - r.at) * 100 / tmo);
                self.stats.max_ops = self.stats.max_ops.max(r.ops);
                if now > limit {
                    checker.fail(
                        check::INV_MCP_CALL_BOUNDED,
                        format!(
                            "session {sid}: mcp.response {} for {} on {:?} after {} ms: requested at {} ms, {} transport operation(s) × {tmo} ms allow {} ms",
                            row.id,
                            r.tool,
                            r.server,
                            now - r.at,
                            r.at,
                            r.ops,
                            limit - r.at
                        ),
                    );
                }
                if let Some(u) = s.uses.front_mut() {
                    u.responded = true;
                }
            }
            "tool.result" => {
                if p["dispatch"] != "mcp" {
                    return;
                }
                let id = p["tool_use_id"].as_str().unwrap_or("");
                let s = self.sessions.entry(sid.to_string()).or_default();
                let front = s.uses.pop_front();
                let fine = s.req.is_none()
                    && front
                        .as_ref()
                        .is_some_and(|u| u.id == id && u.responded && u.server == server);
                if !fine {
                    checker.fail(
                        check::INV_MCP_ONE_RESULT,
                        format!(
                            "session {sid}: tool.result {} for {id} on {server:?}: expected the answered next MCP block {front:?} (pending request {:?})",
                            row.id, s.req
                        ),
                    );
                }
            }
            _ => {}
        }
    }

    /// A running turn was cancelled (extension `turn.cancel`): its MCP
    /// blocks get no result, and its call in flight is abandoned (the
    /// engine frees the server for the next call at once).
    pub fn on_turn_cancelled(&mut self, sid: &str) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        s.uses.clear();
        s.req = None;
        for k in s.all.clone() {
            if let Some(t) = self.transports.get_mut(&k) {
                for o in t.outstanding.values_mut() {
                    o.abandoned |= o.method == Method::ToolsCall;
                }
            }
        }
    }

    /// The server a session's tool routes to: the last transport in profile
    /// order whose `tools/list` was answered in time and lists it.
    pub(super) fn route(&self, sid: &str, tool: &str) -> Option<String> {
        let s = self.sessions.get(sid)?;
        s.order
            .iter()
            .rev()
            .filter_map(|k| self.transports.get(k))
            .find(|t| t.routable.iter().any(|n| n == tool))
            .map(|t| self.servers[t.server].name.clone())
    }

    /// End of the run: nothing stuck, nothing left open for a closed
    /// session.
    pub fn finish(&mut self, now: u64, checker: &mut Checker) {
        let tmo = self.timeout_ms;
        let closed: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.closed)
            .map(|(k, _)| k.clone())
            .collect();
        for sid in closed {
            self.check_teardown(&sid, "the run", checker);
        }
        for (sid, s) in &self.sessions {
            if let Some(r) = &s.req {
                let limit = r.at + r.ops * tmo;
                if now > limit {
                    checker.fail(
                        check::INV_MCP_CALL_BOUNDED,
                        format!(
                            "session {sid}: mcp.request {r:?} still has no mcp.response at the end ({now} ms > {limit} ms)"
                        ),
                    );
                }
            } else if !s.uses.is_empty() {
                checker.fail(
                    check::INV_MCP_ONE_RESULT,
                    format!(
                        "session {sid}: MCP tool.call(s) {:?} never got a tool.result",
                        s.uses
                    ),
                );
            }
        }
        self.stats.error_session_live = self
            .transports
            .values()
            .filter(|t| {
                !t.engine_closed
                    && t.session
                        .as_ref()
                        .is_some_and(|s| checker.states.get(s) == Some(&SessionState::Error))
            })
            .count() as u64;
    }
}
