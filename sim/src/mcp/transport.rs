//! The simulated transports and servers: what each `Output::Mcp` does,
//! with the seed's latencies and faults.

use super::*;

impl McpSim {
    // ---- transports ----------------------------------------------------------

    /// One `Output::Mcp`; returns the events the transport reports.
    pub fn on_command(
        &mut self,
        cmd: McpCommand,
        now: u64,
        sw: &McpSwarm,
        checker: &mut Checker,
    ) -> Vec<Scheduled> {
        self.after_command = true;
        let prev_close = self.last_close.take();
        match cmd {
            McpCommand::Open {
                conn,
                server,
                max_message_bytes: _,
                timeout_ms,
            } => self.on_open(conn, &server, timeout_ms, prev_close, now, sw, checker),
            McpCommand::Send {
                conn,
                exchange,
                message,
                session_id,
            } => self.on_send(
                conn,
                exchange,
                &message,
                session_id.as_deref(),
                now,
                sw,
                checker,
            ),
            McpCommand::Close { conn, session_id } => {
                self.on_close(conn, session_id.as_deref(), now, checker)
            }
        }
    }

    /// Latency of one answer: the seed's range, or past the engine's
    /// timeout when slow; never exactly at the engine's deadline (the
    /// timer and the answer would then race on the event order alone).
    pub(super) fn latency(&mut self, sw: &McpSwarm, slow: bool) -> u64 {
        let t = self.timeout_ms;
        let lat = if slow {
            t + 1 + self.rng.range(0, t)
        } else {
            self.rng.range(sw.latency_ms.0, sw.latency_ms.1)
        };
        if lat == t {
            lat + 1
        } else {
            lat
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_open(
        &mut self,
        conn: McpConnId,
        server: &McpServerSpec,
        timeout_ms: u64,
        prev_close: Option<Key>,
        now: u64,
        sw: &McpSwarm,
        checker: &mut Checker,
    ) -> Vec<Scheduled> {
        let key = (self.epoch, conn);
        if self.transports.contains_key(&key) {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("Open reuses transport id conn={conn}"),
            );
            return Vec::new();
        }
        let Some(idx) = self.servers.iter().position(|s| s.name == server.name) else {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!(
                    "Open conn={conn} of {:?}, which is not in the registry",
                    server.name
                ),
            );
            return vec![(now, conn, McpEvent::OpenFailed("unknown server".into()))];
        };
        if *server != spec_of(&self.servers[idx]) || timeout_ms != self.timeout_ms {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("Open conn={conn}: {server:?} / timeout {timeout_ms} ms differ from the registry / config"),
            );
        }
        self.stats.transports += 1;
        // Whose transport is it?
        let inherited = prev_close.filter(|k| {
            self.transports
                .get(k)
                .is_some_and(|t| t.server == idx && t.session.is_some())
        });
        let (session, uncertain, routable) = match inherited {
            Some(k) => {
                let t = &self.transports[&k];
                (t.session.clone(), t.uncertain, t.routable.clone())
            }
            None => match self.ctx.as_slice() {
                [] => (None, false, Vec::new()),
                [one] => (Some(one.clone()), false, Vec::new()),
                many => (many.last().cloned(), true, Vec::new()),
            },
        };
        if session.is_none() {
            self.stats.unattributed += 1;
        }
        if inherited.is_some() {
            self.stats.reconnects += 1;
        }
        if uncertain {
            self.stats.uncertain += 1;
        }
        if let Some(sid) = &session {
            let s = self.sessions.entry(sid.clone()).or_default();
            if s.closed && !uncertain {
                checker.fail(
                    check::INV_MCP_TEARDOWN,
                    format!(
                        "Open conn={conn} ({}) for session {sid}, which is closed",
                        server.name
                    ),
                );
            }
            match inherited.and_then(|k| s.order.iter().position(|o| *o == k)) {
                Some(i) => s.order[i] = key,
                None => s.order.push(key),
            }
            s.all.push(key);
            if let Some(r) = s.req.as_mut() {
                r.ops += 1;
            }
        }
        let http = self.servers[idx].http;
        let fails = self.rng.chance(sw.open_fail);
        let at = if http {
            // io-smol prepares an HTTP endpoint at once.
            now
        } else {
            let slow = self.rng.chance(sw.slow * 0.2);
            now + self.latency(sw, slow)
        };
        self.transports.insert(
            key,
            Transport {
                server: idx,
                session,
                uncertain,
                open_at: at,
                open_ok: !fails,
                next_id: 1,
                routable,
                pipe_at: at,
                ..Transport::default()
            },
        );
        let event = if !fails {
            McpEvent::Opened
        } else if http {
            McpEvent::OpenFailed("header authorization: SIM_MCP_TOKEN is not set".into())
        } else {
            McpEvent::OpenFailed(format!(
                "cannot start sim-mcp-{}: No such file or directory (os error 2)",
                server.name
            ))
        };
        vec![(at, conn, event)]
    }

    pub(super) fn on_close(
        &mut self,
        conn: McpConnId,
        session_id: Option<&str>,
        now: u64,
        checker: &mut Checker,
    ) -> Vec<Scheduled> {
        let key = (self.epoch, conn);
        let Some(t) = self.transports.get_mut(&key) else {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("Close of conn={conn}, which was never opened"),
            );
            return Vec::new();
        };
        if t.engine_closed {
            // A server in reconnect backoff is closed again when it is
            // replaced: harmless, and its replacement follows.
            self.stats.double_close += 1;
            self.last_close = Some(key);
            return Vec::new();
        }
        t.engine_closed = true;
        t.outstanding.clear();
        let s = &self.servers[t.server];
        let http = s.http;
        if http {
            if let Some(sid) = &t.issued_sid {
                if !t.expired && session_id != Some(sid.as_str()) {
                    checker.fail(
                        check::INV_MCP_TEARDOWN,
                        format!(
                            "Close conn={conn} ({}) carries session id {session_id:?}: the HTTP session {sid} is never ended with DELETE",
                            s.name
                        ),
                    );
                }
            } else if session_id.is_some() {
                checker.fail(
                    check::INV_MCP_PROTOCOL,
                    format!(
                        "Close conn={conn} ({}) carries session id {session_id:?} the server never issued",
                        s.name
                    ),
                );
            }
        }
        self.last_close = Some(key);
        let mut out = Vec::new();
        if !http && t.open_ok && !t.eof {
            // The driver kills the child; its stdout ends (io-smol reports
            // that EOF for a closed transport too).
            t.eof = true;
            let at = now.max(t.open_at) + self.rng.range(0, 2);
            out.push((at, conn, McpEvent::Closed(None)));
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_send(
        &mut self,
        conn: McpConnId,
        exchange: u64,
        message: &[u8],
        session_id: Option<&str>,
        now: u64,
        sw: &McpSwarm,
        checker: &mut Checker,
    ) -> Vec<Scheduled> {
        let key = (self.epoch, conn);
        let Some(t) = self.transports.get(&key) else {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("Send on conn={conn}, which was never opened"),
            );
            return Vec::new();
        };
        let srv = self.servers[t.server].clone();
        let who = format!(
            "conn={conn} ({}, session {})",
            srv.name,
            t.session.as_deref().unwrap_or("?")
        );
        let refuse = if t.engine_closed {
            Some("after its Close")
        } else if t.closed_seen {
            Some("after it reported Closed")
        } else if !t.opened {
            Some("before Opened")
        } else {
            None
        };
        if let Some(why) = refuse {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("Send on {who} {why}: {}", text(message)),
            );
            return Vec::new();
        }
        let Ok(v) = serde_json::from_slice::<Value>(message) else {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("{who}: message is not JSON: {}", text(message)),
            );
            return Vec::new();
        };
        let method = Method::parse(v["method"].as_str().unwrap_or(""));
        let id = v.get("id").and_then(Value::as_u64);
        let mut problems: Vec<String> = Vec::new();
        match id {
            None if exchange != 0 => {
                problems.push(format!("notification with exchange {exchange}"))
            }
            Some(i) if exchange != i => {
                problems.push(format!("id {i} sent as exchange {exchange}"))
            }
            Some(i) if i != t.next_id => {
                problems.push(format!("request id {i}, expected {}", t.next_id))
            }
            _ => {}
        }
        if srv.http && session_id != t.issued_sid.as_deref() {
            problems.push(format!(
                "mcp-session-id {session_id:?}, the server issued {:?}",
                t.issued_sid
            ));
        }
        let cursor = v["params"]["cursor"].as_str().map(str::to_string);
        let order_ok = match method {
            Method::Initialize => id == Some(1) && !t.init_ok,
            Method::Initialized => id.is_none() && t.init_ok && !t.notif_sent,
            // The first page, or the page the last one's `nextCursor` names.
            Method::ToolsList => match &cursor {
                None => t.notif_sent && (t.notif_ok || !srv.http) && !t.list_sent,
                Some(c) => t.cursor.as_ref() == Some(c),
            },
            Method::ToolsCall => t.listed && id.is_some(),
            Method::Other => false,
        };
        if let Some((m, past)) = t.late.filter(|_| order_ok) {
            checker.fail(
                check::INV_MCP_CALL_BOUNDED,
                format!(
                    "{who}: the engine sent {:?} after taking the {m:?} answer {past} ms past its {} ms deadline",
                    method, self.timeout_ms
                ),
            );
        }
        if !order_ok {
            problems.push(format!(
                "{:?} out of order (init_ok={} notif_sent={} notif_ok={} listed={})",
                method, t.init_ok, t.notif_sent, t.notif_ok, t.listed
            ));
        }
        if !problems.is_empty() {
            checker.fail(
                check::INV_MCP_PROTOCOL,
                format!("{who}: {} in {}", problems.join("; "), text(message)),
            );
        }
        // Timers the engine armed for a pending call of this session.
        let deadline_bearing = id.is_some() || srv.http;
        let session = t.session.clone();
        if deadline_bearing {
            if let Some(r) = session
                .as_ref()
                .and_then(|s| self.sessions.get_mut(s))
                .and_then(|s| s.req.as_mut())
            {
                r.ops += 1;
            }
        }
        if method == Method::ToolsCall {
            self.check_call(key, &v, now, checker);
        }
        let t = self.transports.get_mut(&key).expect("present");
        t.late = None;
        if let Some(i) = id {
            t.next_id = t.next_id.max(i + 1);
        }
        match method {
            Method::Initialized => {
                t.notif_sent = true;
                if !srv.http {
                    t.notif_ok = true;
                }
            }
            Method::ToolsList => {
                t.list_sent = true;
                t.cursor = None;
            }
            _ => {}
        }
        let is_call = method == Method::ToolsCall;
        // The server's side.
        let fault = {
            // Handshakes fail less often (or few sessions would have tools).
            let f = if is_call { 1.0 } else { 0.2 };
            let r = self.rng.unit();
            let has_sid = t.server_sid;
            let mut acc = 0.0;
            let mut hit = |p: f64| {
                acc += p;
                r < acc
            };
            if hit(sw.exit * f) {
                Fault::Exit
            } else if srv.http && hit(sw.http_status * f) {
                Fault::Status(*self.rng.pick(&[500, 502, 503, 400, 429]))
            } else if srv.http && has_sid && hit(sw.expire * f) {
                Fault::Expire
            } else if hit(sw.error * f) {
                Fault::RpcError
            } else if is_call && hit(sw.is_error) {
                Fault::ToolError
            } else if hit(sw.slow * f) {
                Fault::Slow
            } else if srv.http && hit(sw.noise * f) {
                Fault::Garbage
            } else {
                Fault::Normal
            }
        };
        let t = self.transports.get_mut(&key).expect("present");
        // Never reached the server, or rejected by it with a 404.
        let unprocessed = t.dead || (srv.http && (t.expired || matches!(fault, Fault::Expire)));
        if is_call {
            let sig = v["params"].to_string();
            if let Some(e) = self.calls.get_mut(&sig) {
                e.1 |= !unprocessed;
            }
        }
        let mut page: Vec<String> = Vec::new();
        let mut next_cursor: Option<String> = None;
        let result = match method {
            Method::Initialize => Some(json!({
                "protocolVersion": "2024-11-05",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": srv.name, "version": "0.0.sim"},
            })),
            Method::ToolsList => {
                // A paged server lists half its tools, then the rest.
                let half = srv.tools.len().div_ceil(2);
                let (names, next) = match cursor.as_deref() {
                    None if srv.paged => (&srv.tools[..half], Some("page-2".to_string())),
                    None => (&srv.tools[..], None),
                    Some("page-2") if srv.paged => (&srv.tools[half..], None),
                    Some(_) => (&srv.tools[..0], None),
                };
                page = names.to_vec();
                next_cursor = next.clone();
                let mut tools: Vec<Value> = names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        if i == 0 {
                            json!({"name": name})
                        } else {
                            json!({"name": name, "description": format!("sim {} tool {name}", srv.name),
                                   "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}})
                        }
                    })
                    .collect();
                tools.push(json!({"description": "an entry without a name is skipped"}));
                let mut r = json!({ "tools": tools });
                if let Some(c) = next {
                    r["nextCursor"] = json!(c);
                }
                Some(r)
            }
            Method::ToolsCall => {
                let tool = v["params"]["name"].as_str().unwrap_or("");
                let args = &v["params"]["arguments"];
                let mut r = json!({"content": [{"type": "text", "text": format!("{}:{tool} says {args}", srv.name)}]});
                if matches!(fault, Fault::ToolError) {
                    r["isError"] = json!(true);
                }
                Some(r)
            }
            Method::Initialized | Method::Other => None,
        };
        // Whether the planned answer is a success for the engine (HTTP
        // notifications get their `202` unless the POST itself fails).
        let ok = match fault {
            Fault::Exit | Fault::Status(_) | Fault::Expire => false,
            Fault::RpcError | Fault::Garbage => method == Method::Initialized,
            Fault::Normal | Fault::ToolError | Fault::Slow => true,
        } && !t.dead
            && !t.expired
            && method != Method::Other;
        let slow = matches!(fault, Fault::Slow);
        let out_id = id.unwrap_or(0);
        if deadline_bearing {
            t.outstanding.insert(
                out_id,
                Out {
                    method,
                    sent_at: now,
                    ok,
                    page,
                    next: next_cursor,
                    abandoned: false,
                },
            );
        }
        if srv.http {
            self.http_reply(key, out_id, method, id, result, fault, slow, now, sw)
        } else if id.is_some() {
            self.stdio_reply(key, out_id, result, fault, slow, now, sw)
        } else {
            Vec::new()
        }
    }
}
