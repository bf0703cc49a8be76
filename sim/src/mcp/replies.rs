//! Answers to the engine's messages (stdio lines, HTTP replies), the
//! `tools/call` checks, and delivery of transport events.

use super::*;

impl McpSim {
    /// `tools/call` checks: routing, one call in flight per session, no
    /// replay of a processed call.
    pub(super) fn check_call(&mut self, key: Key, v: &Value, now: u64, checker: &mut Checker) {
        self.stats.calls += 1;
        let tmo = self.timeout_ms;
        let tool = v["params"]["name"].as_str().unwrap_or("").to_string();
        let (server, session, uncertain) = {
            let t = &self.transports[&key];
            (t.server, t.session.clone(), t.uncertain)
        };
        let name = self.servers[server].name.clone();
        if !self.servers[server].tools.contains(&tool) {
            checker.fail(
                check::INV_MCP_ROUTING,
                format!(
                    "tools/call {tool} reached {name} (conn={}), which does not advertise it",
                    key.1
                ),
            );
        }
        // The session whose turn asked for it.
        let matches = |s: &SessionMcp| {
            s.req
                .as_ref()
                .is_some_and(|r| r.tool == tool && r.server.as_deref() == Some(name.as_str()))
        };
        let mut session = session;
        let ok = session
            .as_ref()
            .and_then(|s| self.sessions.get(s))
            .is_some_and(matches);
        if !ok && (uncertain || session.is_none()) {
            // Correct a guessed attribution with the turn that uses it.
            let found: Vec<String> = self
                .sessions
                .iter()
                .filter(|(_, s)| matches(s))
                .map(|(k, _)| k.clone())
                .collect();
            if let [one] = found.as_slice() {
                if let Some(old) = session.as_ref().and_then(|s| self.sessions.get_mut(s)) {
                    old.all.retain(|k| *k != key);
                    old.order.retain(|k| *k != key);
                }
                let s = self.sessions.entry(one.clone()).or_default();
                s.all.push(key);
                s.order.push(key);
                session = Some(one.clone());
            }
        } else if !ok {
            let req = session
                .as_ref()
                .and_then(|s| self.sessions.get(s))
                .and_then(|s| s.req.clone());
            checker.fail(
                check::INV_MCP_ROUTING,
                format!(
                    "tools/call {tool} on conn={} ({name}) of session {}, whose pending mcp.request is {req:?}",
                    key.1,
                    session.as_deref().unwrap_or("?")
                ),
            );
        }
        if let Some(t) = self.transports.get_mut(&key) {
            t.session = session.clone();
            t.uncertain = false;
        }
        // At most one call in flight on the session's connection set.
        if let Some(s) = session.as_ref().and_then(|s| self.sessions.get(s)) {
            for k in &s.all {
                let Some(t) = self.transports.get(k) else {
                    continue;
                };
                if t.engine_closed {
                    continue;
                }
                for (id, o) in &t.outstanding {
                    if o.method == Method::ToolsCall && !o.abandoned && now < o.sent_at + tmo {
                        checker.fail(
                            check::INV_MCP_ONE_IN_FLIGHT,
                            format!(
                                "session {}: tools/call {tool} sent on conn={} while tools/call id {id} on conn={} ({}) sent at {} ms is unanswered and within its {tmo} ms timeout",
                                session.as_deref().unwrap_or("?"),
                                key.1,
                                k.1,
                                self.servers[t.server].name,
                                o.sent_at
                            ),
                        );
                    }
                }
            }
        }
        // Never sent again once a server processed it (the tool may have
        // run); an unprocessed one (HTTP 404) at most once more.
        let sig = v["params"].to_string();
        let e = self.calls.entry(sig.clone()).or_insert((0, false));
        if e.1 || e.0 >= 2 {
            checker.fail(
                check::INV_MCP_NO_REPLAY,
                format!(
                    "tools/call {sig} sent again on conn={} ({name}) after {} earlier send(s){}",
                    key.1,
                    e.0,
                    if e.1 {
                        ", one processed by the server"
                    } else {
                        ""
                    }
                ),
            );
        }
        e.0 += 1;
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn stdio_reply(
        &mut self,
        key: Key,
        id: u64,
        result: Option<Value>,
        fault: Fault,
        slow: bool,
        now: u64,
        sw: &McpSwarm,
    ) -> Vec<Scheduled> {
        let conn = key.1;
        let tmo = self.timeout_ms;
        let (dead, mut pipe) = {
            let t = &self.transports[&key];
            (t.dead || t.eof, t.pipe_at)
        };
        if dead {
            // Written into a pipe nobody reads.
            return Vec::new();
        }
        let lat = self.latency(sw, slow);
        let deadline = now + tmo;
        let mut out = Vec::new();
        if self.rng.chance(sw.noise) {
            let at = (now + lat / 2).max(pipe);
            for _ in 0..self.rng.range(1, 3) {
                let line: Vec<u8> = match self.rng.below(7) {
                    0 => b"server starting, please wait".to_vec(),
                    1 => Vec::new(),
                    2 => br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}"#.to_vec(),
                    3 => json!({"jsonrpc": "2.0", "id": id + 1000, "result": {}}).to_string().into_bytes(),
                    4 => json!({"jsonrpc": "2.0", "id": id.to_string(), "result": {}}).to_string().into_bytes(),
                    5 => json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string().into_bytes(),
                    _ => b"[1,2,3]".to_vec(),
                };
                out.push((at, conn, McpEvent::Line(line)));
            }
            pipe = at;
        }
        let mut at = (now + lat).max(pipe);
        if at == deadline {
            at += 1;
        }
        let event = match fault {
            Fault::Exit => {
                let reason = if self.rng.chance(0.25) {
                    Some("MCP server sent a line over the 16777216-byte limit".to_string())
                } else {
                    None
                };
                McpEvent::Closed(reason)
            }
            Fault::RpcError | Fault::Garbage | Fault::Status(_) | Fault::Expire => {
                McpEvent::Line(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "simulated server failure"}})
                        .to_string()
                        .into_bytes(),
                )
            }
            Fault::Normal | Fault::ToolError | Fault::Slow => {
                let msg = json!({"jsonrpc": "2.0", "id": id, "result": result.unwrap_or(Value::Null)});
                let mut line = msg.to_string().into_bytes();
                if self.rng.chance(0.1) {
                    line.insert(0, b' ');
                    line.push(b'\r');
                }
                McpEvent::Line(line)
            }
        };
        let t = self.transports.get_mut(&key).expect("present");
        if matches!(event, McpEvent::Closed(_)) {
            t.dead = true;
            t.eof = true;
        }
        t.pipe_at = at;
        out.push((at, conn, event));
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn http_reply(
        &mut self,
        key: Key,
        exchange: u64,
        method: Method,
        id: Option<u64>,
        result: Option<Value>,
        fault: Fault,
        slow: bool,
        now: u64,
        sw: &McpSwarm,
    ) -> Vec<Scheduled> {
        let conn = key.1;
        let (dead, expired, server) = {
            let t = &self.transports[&key];
            (t.dead, t.expired, t.server)
        };
        let failed = |error: &str| McpEvent::HttpFailed {
            exchange,
            error: error.to_string(),
        };
        let refused = "Connection Failed: Connect error: Connection refused (os error 111)";
        let plain = |status: u16, body: &str| McpEvent::HttpReply {
            exchange,
            status,
            content_type: "text/plain".into(),
            session_id: None,
            body: body.as_bytes().to_vec(),
        };
        if dead {
            let at = now + self.rng.range(0, 2);
            return vec![(at, conn, failed(refused))];
        }
        let at = now + self.latency(sw, slow);
        if expired {
            return vec![(at, conn, plain(404, "session not found"))];
        }
        let event = match fault {
            Fault::Exit => {
                self.transports.get_mut(&key).expect("present").dead = true;
                failed(refused)
            }
            Fault::Status(s) => plain(s, "simulated upstream failure"),
            Fault::Expire => {
                self.stats.expired += 1;
                self.transports.get_mut(&key).expect("present").expired = true;
                plain(404, "session not found")
            }
            _ if method == Method::Initialized => McpEvent::HttpReply {
                exchange,
                status: 202,
                content_type: String::new(),
                session_id: None,
                body: Vec::new(),
            },
            Fault::Garbage => {
                if self.rng.chance(0.5) {
                    let wrong = json!({"jsonrpc": "2.0", "id": exchange + 1000, "result": {}});
                    McpEvent::HttpReply {
                        exchange,
                        status: 200,
                        content_type: "text/event-stream".into(),
                        session_id: None,
                        body: format!("event: message\ndata: {wrong}\n\n").into_bytes(),
                    }
                } else {
                    McpEvent::HttpReply {
                        exchange,
                        status: 200,
                        content_type: "text/html".into(),
                        session_id: None,
                        body: b"<html><body>gateway says hi</body></html>".to_vec(),
                    }
                }
            }
            Fault::RpcError | Fault::Normal | Fault::ToolError | Fault::Slow => {
                let id = id.unwrap_or(0);
                let msg = if matches!(fault, Fault::RpcError) {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "simulated server failure"}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id, "result": result.unwrap_or(Value::Null)})
                };
                let session_id =
                    if method == Method::Initialize && self.servers[server].issues_session {
                        let sid = format!("mcp-{}-{}-{}", self.servers[server].name, key.0, conn);
                        self.transports.get_mut(&key).expect("present").server_sid = true;
                        Some(sid)
                    } else {
                        None
                    };
                if self.rng.chance(0.5) {
                    let mut body = String::new();
                    if self.rng.chance(0.3) {
                        body.push_str("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n");
                    }
                    let m = msg.to_string();
                    match m.find(',') {
                        // The object split over two `data:` lines.
                        Some(i) if self.rng.chance(0.3) => body.push_str(&format!(
                            "event: message\ndata: {}\ndata: {}\n\n",
                            &m[..=i],
                            &m[i + 1..]
                        )),
                        _ => body.push_str(&format!("event: message\ndata: {m}\n\n")),
                    }
                    McpEvent::HttpReply {
                        exchange,
                        status: 200,
                        content_type: "text/event-stream".into(),
                        session_id,
                        body: body.into_bytes(),
                    }
                } else {
                    McpEvent::HttpReply {
                        exchange,
                        status: 200,
                        content_type: "application/json".into(),
                        session_id,
                        body: msg.to_string().into_bytes(),
                    }
                }
            }
        };
        vec![(at, conn, event)]
    }

    /// Whether a scheduled event still reaches the engine, and its
    /// bookkeeping. A stdio child killed by `Close` reports only its open
    /// outcome and EOF; HTTP answers already in flight still arrive.
    pub fn deliver(&mut self, conn: McpConnId, event: &McpEvent, now: u64) -> bool {
        let key = (self.epoch, conn);
        let tmo = self.timeout_ms;
        let Some(t) = self.transports.get_mut(&key) else {
            return false;
        };
        let session = t.session.clone();
        let answered: Option<u64> = match event {
            McpEvent::Opened => {
                t.opened = true;
                None
            }
            McpEvent::OpenFailed(_) => None,
            McpEvent::Line(line) => {
                if t.engine_closed {
                    return false;
                }
                answer_id(line)
            }
            McpEvent::Closed(_) => {
                t.closed_seen = true;
                t.outstanding.clear();
                None
            }
            McpEvent::HttpReply {
                exchange,
                session_id,
                ..
            } => {
                if session_id.is_some() && !t.engine_closed {
                    t.issued_sid = session_id.clone();
                }
                Some(*exchange)
            }
            McpEvent::HttpFailed { exchange, .. } => Some(*exchange),
        };
        if let Some(out) = answered.and_then(|id| t.outstanding.remove(&id)) {
            // An engine that keeps its deadlines has closed a transport whose
            // handshake answer came late (and a late call answer is ignored
            // by id); one that does not is caught when it goes on.
            if out.ok && !t.engine_closed {
                let deadline = out.sent_at + tmo;
                if now >= deadline && out.method != Method::ToolsCall {
                    t.late = Some((out.method, now - deadline));
                }
                match out.method {
                    Method::Initialize => t.init_ok = true,
                    Method::Initialized => t.notif_ok = true,
                    Method::ToolsList => {
                        t.pages += 1;
                        t.gathered.extend(out.page);
                        t.listed = true;
                        if out.next.is_some() {
                            // Routable now unless the engine follows the
                            // cursor (decided at the end of this drain).
                            self.cursor_checks.push(key);
                        } else {
                            // The listing is complete: it replaces what a
                            // reconnect inherited.
                            t.routable = std::mem::take(&mut t.gathered);
                        }
                        t.cursor = out.next;
                    }
                    Method::ToolsCall => self.stats.answered += 1,
                    Method::Other => {}
                }
            }
        }
        if let Some(s) = session {
            self.set_context(&s);
        } else {
            self.ctx.clear();
        }
        true
    }
}
