//! The MCP hub and its per-session sets in isolation: typed commands in,
//! transport events in, commands and notices out, virtual time. No HTTP,
//! no store.

use crate::ids::SessionId;
use proto::mcp::{errors, CallOutcome};
use serde_json::{json, Value};

use super::*;

const T: u64 = 30_000;

/// The hub with the sets it routes to, held by session id as the
/// engine's sessions table holds them (and dropped when done, as it does).
struct Hub {
    hub: McpHub,
    sets: std::collections::BTreeMap<SessionId, SessionMcp>,
}

impl Hub {
    fn connect_session(&mut self, id: &SessionId, servers: Vec<McpServerSpec>, now: MonoMs) {
        if let Some(set) = self.hub.connect_session(id, servers, now) {
            self.sets.insert(id.clone(), set);
        }
    }

    fn with<R>(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut SessionMcp, &mut McpHub) -> R,
    ) -> Option<R> {
        let set = self.sets.get_mut(id)?;
        let r = f(set, &mut self.hub);
        if set.is_done() {
            self.sets.remove(id);
        }
        Some(r)
    }

    fn call(
        &mut self,
        id: &str,
        tool: &str,
        input: &Value,
        token: CallToken,
        now: MonoMs,
    ) -> Option<String> {
        self.with(id, |set, hub| set.call(hub, tool, input, token, now))?
    }

    fn abandon(&mut self, token: CallToken) {
        let ids: Vec<SessionId> = self.sets.keys().cloned().collect();
        for id in ids {
            self.with(&id, |set, hub| set.abandon(hub, token));
        }
    }

    fn close_session(&mut self, id: &str) {
        if let Some(set) = self.sets.remove(id) {
            set.close(&mut self.hub);
        }
    }

    fn handle(&mut self, conn: McpConnId, event: McpEvent, now: MonoMs) {
        if let Some(id) = self.hub.owner(conn).cloned() {
            self.with(&id, |set, hub| set.handle(hub, conn, event, now));
        }
    }

    fn handle_timeout(&mut self, now: MonoMs) {
        for conn in self.hub.due(now) {
            if let Some(id) = self.hub.owner(conn).cloned() {
                self.with(&id, |set, hub| set.expire(hub, conn, now));
            }
        }
    }

    fn tools(&self, id: &str) -> &[Value] {
        self.sets.get(id).map_or(&[], |s| s.tools())
    }

    fn route(&self, id: &str, tool: &str) -> Option<&str> {
        self.sets.get(id)?.route(tool)
    }

    fn live_sessions(&self) -> usize {
        // The hub counts the sessions it routes to; it must agree with
        // the sets held.
        assert_eq!(self.hub.live_sessions(), self.sets.len());
        self.sets.len()
    }

    fn poll_timeout(&self) -> Option<MonoMs> {
        self.hub.poll_timeout()
    }

    fn poll_command(&mut self) -> Option<McpCommand> {
        self.hub.poll_command()
    }

    fn poll_notice(&mut self) -> Option<McpNotice> {
        self.hub.poll_notice()
    }
}

fn hub() -> Hub {
    Hub {
        hub: McpHub::new(McpSettings {
            server_version: "9.9.9".into(),
            timeout_ms: T,
            max_message_bytes: 1 << 20,
        }),
        sets: Default::default(),
    }
}

fn stdio(name: &str) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: "srv".into(),
            args: vec![],
        },
        reconnect: false,
    }
}

fn http(name: &str) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        transport: McpTransport::Http {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: vec![],
        },
        reconnect: false,
    }
}

fn reconnecting(mut spec: McpServerSpec) -> McpServerSpec {
    spec.reconnect = true;
    spec
}

/// Raw ids of the transports opened (tests compare them with literals).
fn opens(cmds: &[McpCommand]) -> Vec<u64> {
    cmds.iter()
        .filter_map(|c| match c {
            McpCommand::Open { conn, .. } => Some(conn.0),
            _ => None,
        })
        .collect()
}

fn done(h: &mut Hub) -> Vec<(u64, CallOutcome)> {
    notices(h)
        .into_iter()
        .filter_map(|n| match n {
            McpNotice::CallDone { token, outcome } => Some((token.0, outcome)),
            _ => None,
        })
        .collect()
}

fn commands(h: &mut Hub) -> Vec<McpCommand> {
    std::iter::from_fn(|| h.poll_command()).collect()
}

fn notices(h: &mut Hub) -> Vec<McpNotice> {
    std::iter::from_fn(|| h.poll_notice()).collect()
}

/// `(conn, exchange, parsed message)` of every `Send`.
fn sends(cmds: &[McpCommand]) -> Vec<(u64, u64, Value)> {
    cmds.iter()
        .filter_map(|c| match c {
            McpCommand::Send {
                conn,
                exchange,
                message,
                ..
            } => Some((conn.0, *exchange, serde_json::from_slice(message).unwrap())),
            _ => None,
        })
        .collect()
}

fn line(v: Value) -> McpEvent {
    McpEvent::Line(v.to_string().into_bytes())
}

fn tools_result(names: &[&str]) -> Value {
    let tools: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    json!({"tools": tools})
}

/// Drives one stdio connection through its handshake, answering
/// `tools/list` with `names`.
fn handshake_stdio(h: &mut Hub, conn: McpConnId, names: &[&str], now: u64) {
    h.handle(conn, McpEvent::Opened, MonoMs(now));
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        MonoMs(now),
    );
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 2, "result": tools_result(names)})),
        MonoMs(now),
    );
}

fn ready_session(h: &mut Hub, names: &[&str]) -> McpConnId {
    h.connect_session(&SessionId::new("s"), vec![stdio("a")], MonoMs(0));
    commands(h);
    handshake_stdio(h, McpConnId(1), names, 0);
    commands(h);
    assert_eq!(
        notices(h),
        vec![McpNotice::SessionReady {
            session_id: SessionId::new("s")
        }]
    );
    McpConnId(1)
}

#[test]
fn every_server_of_a_session_is_opened_at_once() {
    let mut h = hub();
    h.connect_session(
        &SessionId::new("s"),
        vec![stdio("a"), http("b"), stdio("c")],
        MonoMs(0),
    );
    let cmds = commands(&mut h);
    let opened: Vec<(u64, String)> = cmds
        .iter()
        .filter_map(|c| match c {
            McpCommand::Open { conn, server, .. } => Some((conn.0, server.name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        opened,
        vec![(1, "a".into()), (2, "b".into()), (3, "c".into())]
    );
    assert!(notices(&mut h).is_empty(), "ready only when all are done");
}

#[test]
fn stdio_handshake_is_initialize_then_initialized_then_tools_list_spec_06_4_2() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![stdio("a")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(5));
    let s = sends(&commands(&mut h));
    assert_eq!(
        s,
        vec![(
            1,
            1,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2024-11-05", "capabilities": {},
                "clientInfo": {"name": "baesrv", "version": "9.9.9"}}})
        )]
    );
    // Noise and other ids are skipped; the matching answer moves on.
    h.handle(
        McpConnId(1),
        McpEvent::Line(b"not json".to_vec()),
        MonoMs(6),
    );
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "method": "notifications/x"})),
        MonoMs(6),
    );
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 7, "result": {}})),
        MonoMs(6),
    );
    assert!(commands(&mut h).is_empty());
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 1, "result": {"whatever": 1}})),
        MonoMs(7),
    );
    let s = sends(&commands(&mut h));
    assert_eq!(s.len(), 2);
    assert_eq!(
        s[0],
        (
            1,
            0,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})
        )
    );
    assert_eq!(
        s[1],
        (
            1,
            2,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        )
    );
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 2, "result": tools_result(&["x", "y"])})),
        MonoMs(8),
    );
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::SessionReady {
            session_id: SessionId::new("s")
        }]
    );
    assert_eq!(h.route("s", "y"), Some("a"));
    assert_eq!(h.tools("s").len(), 2);
    assert_eq!(h.live_sessions(), 1);
}

#[test]
fn http_handshake_waits_for_the_notification_post_and_echoes_the_session_id() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![http("w")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(0));
    commands(&mut h);
    let reply = |exchange: u64, status: u16, body: Value| McpEvent::HttpReply {
        exchange,
        status,
        content_type: "text/event-stream".into(),
        session_id: Some("sid-1".into()),
        body: format!("event: message\r\ndata: {body}\r\n\r\n").into_bytes(),
    };
    h.handle(
        McpConnId(1),
        reply(1, 200, json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        MonoMs(1),
    );
    let cmds = commands(&mut h);
    assert_eq!(
        sends(&cmds).len(),
        1,
        "tools/list waits for the notification's POST"
    );
    assert!(matches!(
        &cmds[0],
        McpCommand::Send { exchange: 0, session_id: Some(id), .. } if id == "sid-1"
    ));
    h.handle(
        McpConnId(1),
        McpEvent::HttpReply {
            exchange: 0,
            status: 202,
            content_type: String::new(),
            session_id: None,
            body: vec![],
        },
        MonoMs(2),
    );
    let cmds = commands(&mut h);
    assert!(matches!(
        &cmds[0],
        McpCommand::Send { exchange: 2, session_id: Some(id), .. } if id == "sid-1"
    ));
    h.handle(
        McpConnId(1),
        reply(
            2,
            200,
            json!({"jsonrpc": "2.0", "id": 2, "result": tools_result(&["t"])}),
        ),
        MonoMs(3),
    );
    assert_eq!(notices(&mut h).len(), 1);
    assert_eq!(h.route("s", "t"), Some("w"));
    // Teardown ends the HTTP session by id.
    h.close_session("s");
    assert_eq!(
        commands(&mut h),
        vec![McpCommand::Close {
            conn: McpConnId(1),
            session_id: Some("sid-1".into())
        }]
    );
}

#[test]
fn routes_follow_profile_order_whatever_order_connects_finish_in() {
    let mut h = hub();
    h.connect_session(
        &SessionId::new("s"),
        vec![stdio("first"), stdio("second")],
        MonoMs(0),
    );
    commands(&mut h);
    // The later server finishes first.
    handshake_stdio(&mut h, McpConnId(2), &["shared", "only2"], 1);
    assert!(notices(&mut h).is_empty());
    handshake_stdio(&mut h, McpConnId(1), &["only1", "shared"], 2);
    assert_eq!(notices(&mut h).len(), 1);
    assert_eq!(h.route("s", "shared"), Some("second"));
    assert_eq!(h.route("s", "only1"), Some("first"));
    let names: Vec<&str> = h
        .tools("s")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["only1", "shared", "only2"],
        "connect order, one entry per name"
    );
}

#[test]
fn a_failed_open_or_handshake_is_skipped_and_its_transport_closed() {
    let mut h = hub();
    h.connect_session(
        &SessionId::new("s"),
        vec![stdio("bad"), stdio("err"), stdio("good")],
        MonoMs(0),
    );
    commands(&mut h);
    h.handle(
        McpConnId(1),
        McpEvent::OpenFailed("cannot start srv: No such file".into()),
        MonoMs(1),
    );
    h.handle(McpConnId(2), McpEvent::Opened, MonoMs(1));
    h.handle(
        McpConnId(2),
        line(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "no"}})),
        MonoMs(1),
    );
    handshake_stdio(&mut h, McpConnId(3), &["t"], 1);
    let cmds = commands(&mut h);
    let closed: Vec<u64> = cmds
        .iter()
        .filter_map(|c| match c {
            McpCommand::Close { conn, .. } => Some(conn.0),
            _ => None,
        })
        .collect();
    assert_eq!(closed, vec![1, 2]);
    assert_eq!(notices(&mut h).len(), 1);
    assert_eq!(h.route("s", "t"), Some("good"));
}

#[test]
fn a_silent_handshake_times_out_on_the_engine_timer() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![stdio("a")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(10));
    assert_eq!(h.poll_timeout(), Some(MonoMs(10 + T)));
    h.handle_timeout(MonoMs(10 + T - 1));
    assert!(notices(&mut h).is_empty());
    h.handle_timeout(MonoMs(10 + T));
    assert_eq!(notices(&mut h).len(), 1);
    assert!(h.tools("s").is_empty());
    assert_eq!(h.live_sessions(), 0, "no server connected: no set");
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn calls_return_results_errors_and_tool_errors() {
    let mut h = hub();
    let conn = ready_session(&mut h, &["t"]);
    assert_eq!(
        h.call("s", "t", &json!({"q": 1}), CallToken(77), MonoMs(100)),
        Some("a".into())
    );
    let s = sends(&commands(&mut h));
    assert_eq!(
        s,
        vec![(
            conn.0,
            3,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t", "arguments": {"q": 1}}})
        )]
    );
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [], "isError": true}})),
        MonoMs(101),
    );
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::CallDone {
            token: CallToken(77),
            outcome: CallOutcome::Returned {
                result: json!({"content": [], "isError": true}),
                is_error: true
            }
        }]
    );
    h.call("s", "t", &json!({}), CallToken(78), MonoMs(102));
    commands(&mut h);
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": "bad args"}})),
        MonoMs(103),
    );
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::CallDone {
            token: CallToken(78),
            outcome: CallOutcome::Failed("MCP protocol error: [-32602] bad args".into())
        }]
    );
    assert_eq!(
        h.call("s", "nope", &json!({}), CallToken(79), MonoMs(104)),
        None
    );
    assert!(commands(&mut h).is_empty());
}

#[test]
fn a_timed_out_call_fails_and_its_late_answer_is_ignored() {
    let mut h = hub();
    let conn = ready_session(&mut h, &["t"]);
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(1_000));
    commands(&mut h);
    assert_eq!(h.poll_timeout(), Some(MonoMs(1_000 + T)));
    h.handle_timeout(MonoMs(1_000 + T));
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::CallDone {
            token: CallToken(1),
            outcome: CallOutcome::Failed(errors::timed_out("tools/call"))
        }]
    );
    h.call("s", "t", &json!({}), CallToken(2), MonoMs(40_000));
    commands(&mut h);
    // The old answer (id 3) arrives late: skipped; id 4 is the new call's.
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {"content": ["late"]}})),
        MonoMs(40_001),
    );
    assert!(notices(&mut h).is_empty());
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 4, "result": {}})),
        MonoMs(40_002),
    );
    assert!(matches!(
        notices(&mut h).as_slice(),
        [McpNotice::CallDone {
            token: CallToken(2),
            outcome: CallOutcome::Returned { .. }
        }]
    ));
}

#[test]
fn a_dead_server_fails_its_call_and_every_later_one_at_once() {
    let mut h = hub();
    let conn = ready_session(&mut h, &["t"]);
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(0));
    commands(&mut h);
    h.handle(conn, McpEvent::Closed(None), MonoMs(1));
    let closed = CallOutcome::Failed(errors::CLOSED.into());
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::CallDone {
            token: CallToken(1),
            outcome: closed.clone()
        }]
    );
    assert_eq!(
        h.call("s", "t", &json!({}), CallToken(2), MonoMs(2)),
        Some("a".into())
    );
    assert!(
        sends(&commands(&mut h)).is_empty(),
        "nothing is sent to a dead server"
    );
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::CallDone {
            token: CallToken(2),
            outcome: closed
        }]
    );
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn http_failures_map_to_the_spec_texts() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![http("w")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(0));
    h.handle(
        McpConnId(1),
        McpEvent::HttpReply {
            exchange: 1,
            status: 200,
            content_type: "application/json".into(),
            session_id: None,
            body: br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec(),
        },
        MonoMs(0),
    );
    h.handle(
        McpConnId(1),
        McpEvent::HttpReply {
            exchange: 0,
            status: 202,
            content_type: String::new(),
            session_id: None,
            body: vec![],
        },
        MonoMs(0),
    );
    h.handle(
        McpConnId(1),
        McpEvent::HttpReply {
            exchange: 2,
            status: 200,
            content_type: "application/json".into(),
            session_id: None,
            body: format!(
                r#"{{"jsonrpc":"2.0","id":2,"result":{}}}"#,
                tools_result(&["t"])
            )
            .into_bytes(),
        },
        MonoMs(0),
    );
    notices(&mut h);
    commands(&mut h);
    let cases: Vec<(McpEvent, String)> = vec![
        (
            McpEvent::HttpReply {
                exchange: 3,
                status: 500,
                content_type: "text/plain".into(),
                session_id: None,
                body: b"oops".to_vec(),
            },
            errors::http_status(500),
        ),
        (
            McpEvent::HttpReply {
                exchange: 4,
                status: 200,
                content_type: "text/event-stream".into(),
                session_id: None,
                body: b"data: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n\n".to_vec(),
            },
            errors::NO_SSE_MATCH.into(),
        ),
        (
            McpEvent::HttpReply {
                exchange: 5,
                status: 200,
                content_type: "text/html".into(),
                session_id: None,
                body: b"<html></html>".to_vec(),
            },
            errors::NOT_JSON.into(),
        ),
        (
            McpEvent::HttpFailed {
                exchange: 6,
                error: "Connection Failed: refused".into(),
            },
            errors::transport("Connection Failed: refused"),
        ),
    ];
    for (i, (event, text)) in cases.into_iter().enumerate() {
        let token = 10 + i as u64;
        h.call("s", "t", &json!({}), CallToken(token), MonoMs(1));
        commands(&mut h);
        h.handle(McpConnId(1), event, MonoMs(2));
        assert_eq!(
            notices(&mut h),
            vec![McpNotice::CallDone {
                token: CallToken(token),
                outcome: CallOutcome::Failed(text)
            }]
        );
    }
}

#[test]
fn closing_a_session_mid_connect_releases_the_create_and_closes_everything() {
    let mut h = hub();
    h.connect_session(
        &SessionId::new("s"),
        vec![stdio("a"), stdio("b")],
        MonoMs(0),
    );
    commands(&mut h);
    handshake_stdio(&mut h, McpConnId(1), &["t"], 0);
    commands(&mut h);
    h.close_session("s");
    let cmds = commands(&mut h);
    assert_eq!(cmds.len(), 2);
    assert!(cmds.iter().all(|c| matches!(c, McpCommand::Close { .. })));
    assert_eq!(
        notices(&mut h),
        vec![McpNotice::SessionReady {
            session_id: SessionId::new("s")
        }]
    );
    // Late transport events for the closed connections are ignored.
    h.handle(McpConnId(2), McpEvent::Opened, MonoMs(1));
    assert!(commands(&mut h).is_empty());
    assert_eq!(h.poll_timeout(), None);
    assert_eq!(h.live_sessions(), 0);
}

#[test]
fn sessions_do_not_share_connections() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s1"), vec![stdio("a")], MonoMs(0));
    h.connect_session(&SessionId::new("s2"), vec![stdio("a")], MonoMs(0));
    commands(&mut h);
    handshake_stdio(&mut h, McpConnId(1), &["x"], 0);
    handshake_stdio(&mut h, McpConnId(2), &["y"], 0);
    assert_eq!(h.route("s1", "x"), Some("a"));
    assert_eq!(h.route("s1", "y"), None);
    assert_eq!(h.route("s2", "y"), Some("a"));
    h.close_session("s1");
    assert_eq!(h.route("s2", "y"), Some("a"));
    assert_eq!(h.live_sessions(), 1);
}

mod recovery;
