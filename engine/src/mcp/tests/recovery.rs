//! Reconnects, expired HTTP sessions, paged tool lists and abandoned calls.

use super::*;
use crate::ids::SessionId;

fn ready_reconnecting(h: &mut Hub, names: &[&str]) {
    h.connect_session(
        &SessionId::new("s"),
        vec![reconnecting(stdio("a"))],
        MonoMs(0),
    );
    commands(h);
    handshake_stdio(h, McpConnId(1), names, 0);
    commands(h);
    notices(h);
}

#[test]
fn reconnect_a_dead_stdio_server_on_the_next_call_and_never_replay_the_failed_one() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.call("s", "t", &json!({"n": 1}), CallToken(1), MonoMs(10));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(11));
    // The call that died with the transport fails; nothing is re-sent.
    assert_eq!(
        done(&mut h),
        vec![(1, CallOutcome::Failed(errors::CLOSED.into()))]
    );
    assert!(commands(&mut h).is_empty());
    // The next call reconnects under a new id, re-lists, then calls.
    h.call("s", "t", &json!({"n": 2}), CallToken(2), MonoMs(20));
    let cmds = commands(&mut h);
    assert_eq!(
        cmds[0],
        McpCommand::Close {
            conn: McpConnId(1),
            session_id: None
        }
    );
    assert_eq!(opens(&cmds), vec![2]);
    // Late events of the old transport cannot reach the new one.
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {}})),
        MonoMs(21),
    );
    assert!(done(&mut h).is_empty());
    handshake_stdio(&mut h, McpConnId(2), &["t", "new"], 22);
    let s = sends(&commands(&mut h));
    let call = s.last().unwrap();
    assert_eq!(call.0, 2);
    assert_eq!(
        call.2["params"],
        json!({"name": "t", "arguments": {"n": 2}})
    );
    assert_eq!(
        h.route("s", "new"),
        Some("a"),
        "tools re-listed and routable"
    );
    h.handle(
        McpConnId(2),
        line(json!({"jsonrpc": "2.0", "id": call.1, "result": {}})),
        MonoMs(23),
    );
    assert!(matches!(
        done(&mut h).as_slice(),
        [(2, CallOutcome::Returned { .. })]
    ));
}

#[test]
fn a_failed_reconnect_backs_off_and_fails_fast_meanwhile() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(1));
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(100));
    assert_eq!(opens(&commands(&mut h)), vec![2]);
    h.handle(
        McpConnId(2),
        McpEvent::OpenFailed("cannot start srv: gone".into()),
        MonoMs(101),
    );
    assert_eq!(
        done(&mut h),
        vec![(
            1,
            CallOutcome::Failed("MCP connect failed: cannot start srv: gone".into())
        )]
    );
    // Within the backoff: no attempt, an immediate error.
    h.call("s", "t", &json!({}), CallToken(2), MonoMs(200));
    let cmds = commands(&mut h);
    assert!(opens(&cmds).is_empty(), "{cmds:?}");
    let (token, CallOutcome::Failed(text)) = done(&mut h).remove(0) else {
        panic!("expected a failure")
    };
    assert_eq!(token, 2);
    assert!(text.ends_with("(reconnecting in 151 ms)"), "{text}");
    // After it: a new attempt, whose failure doubles the wait.
    h.call("s", "t", &json!({}), CallToken(3), MonoMs(351));
    assert_eq!(opens(&commands(&mut h)), vec![3]);
    h.handle(
        McpConnId(3),
        McpEvent::OpenFailed("again".into()),
        MonoMs(352),
    );
    done(&mut h);
    h.call("s", "t", &json!({}), CallToken(4), MonoMs(352 + 499));
    assert!(opens(&commands(&mut h)).is_empty());
    h.call("s", "t", &json!({}), CallToken(5), MonoMs(352 + 500));
    assert_eq!(opens(&commands(&mut h)), vec![4]);
}

#[test]
fn a_tool_gone_after_reconnecting_fails_clearly() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(1));
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(2));
    commands(&mut h);
    handshake_stdio(&mut h, McpConnId(2), &["other"], 3);
    let out = done(&mut h);
    assert_eq!(
        out,
        vec![(
            1,
            CallOutcome::Failed(errors::transport(
                "MCP server 'a' no longer offers tool 't' after reconnecting"
            ))
        )]
    );
    assert_eq!(h.route("s", "t"), None);
    assert_eq!(h.route("s", "other"), Some("a"));
}

/// Answers the HTTP handshake of `conn`, handing out `sid`.
fn handshake_http(h: &mut Hub, conn: McpConnId, sid: &str, tools: &[&str]) {
    let json_reply = |exchange: u64, body: Value| McpEvent::HttpReply {
        exchange,
        status: 200,
        content_type: "application/json".into(),
        session_id: Some(sid.into()),
        body: body.to_string().into_bytes(),
    };
    h.handle(conn, McpEvent::Opened, MonoMs(0));
    h.handle(
        conn,
        json_reply(1, json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        MonoMs(0),
    );
    h.handle(
        conn,
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
        conn,
        json_reply(
            2,
            json!({"jsonrpc": "2.0", "id": 2, "result": tools_result(tools)}),
        ),
        MonoMs(0),
    );
}

#[test]
fn an_expired_http_session_is_renewed_and_the_unprocessed_call_sent_once_more() {
    let mut h = hub();
    h.connect_session(
        &SessionId::new("s"),
        vec![reconnecting(http("w"))],
        MonoMs(0),
    );
    commands(&mut h);
    handshake_http(&mut h, McpConnId(1), "old", &["t"]);
    notices(&mut h);
    commands(&mut h);
    h.call("s", "t", &json!({"k": 1}), CallToken(9), MonoMs(5));
    commands(&mut h);
    let not_found = |exchange| McpEvent::HttpReply {
        exchange,
        status: 404,
        content_type: "text/plain".into(),
        session_id: None,
        body: b"session not found".to_vec(),
    };
    h.handle(McpConnId(1), not_found(3), MonoMs(6));
    let cmds = commands(&mut h);
    // No DELETE for a session the server already forgot.
    assert_eq!(
        cmds[0],
        McpCommand::Close {
            conn: McpConnId(1),
            session_id: None
        }
    );
    assert_eq!(opens(&cmds), vec![2]);
    assert!(done(&mut h).is_empty(), "the call is pending, not failed");
    handshake_http(&mut h, McpConnId(2), "new", &["t"]);
    let cmds = commands(&mut h);
    let McpCommand::Send {
        session_id,
        message,
        exchange,
        ..
    } = cmds.last().unwrap()
    else {
        panic!("{cmds:?}")
    };
    assert_eq!(session_id.as_deref(), Some("new"));
    let v: Value = serde_json::from_slice(message).unwrap();
    assert_eq!(v["params"], json!({"name": "t", "arguments": {"k": 1}}));
    // A second 404 on the replay is not replayed again.
    h.handle(McpConnId(2), not_found(*exchange), MonoMs(7));
    assert_eq!(
        done(&mut h),
        vec![(9, CallOutcome::Failed(errors::http_status(404)))]
    );
    assert!(opens(&commands(&mut h)).is_empty());
}

#[test]
fn tools_list_pages_are_followed_through_next_cursor() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![stdio("a")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(0));
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        MonoMs(0),
    );
    commands(&mut h);
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "p1"}], "nextCursor": "c2"}})),
        MonoMs(0),
    );
    let s = sends(&commands(&mut h));
    assert_eq!(
        s,
        vec![(
            1,
            3,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "c2"}})
        )]
    );
    assert!(notices(&mut h).is_empty());
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": "p2"}]}})),
        MonoMs(0),
    );
    assert_eq!(notices(&mut h).len(), 1);
    assert_eq!(h.route("s", "p1"), Some("a"));
    assert_eq!(h.route("s", "p2"), Some("a"));
}

#[test]
fn an_endless_cursor_stops_after_a_bounded_number_of_pages() {
    let mut h = hub();
    h.connect_session(&SessionId::new("s"), vec![stdio("a")], MonoMs(0));
    commands(&mut h);
    h.handle(McpConnId(1), McpEvent::Opened, MonoMs(0));
    h.handle(
        McpConnId(1),
        line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        MonoMs(0),
    );
    let mut pages = 0;
    for id in 2..200u64 {
        h.handle(
            McpConnId(1),
            line(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": format!("t{id}")}], "nextCursor": "again"}})),
            MonoMs(0),
        );
        pages += 1;
        if !notices(&mut h).is_empty() {
            break;
        }
    }
    assert_eq!(pages, 64);
    assert_eq!(h.tools("s").len(), 64);
}

#[test]
fn a_closed_failed_reconnect_keeps_its_connect_error_found_by_sim_seed_495() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(1));
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(10));
    commands(&mut h);
    h.handle(McpConnId(2), McpEvent::Opened, MonoMs(11));
    h.handle(
        McpConnId(2),
        line(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}})),
        MonoMs(12),
    );
    done(&mut h);
    // The driver reports the killed child's EOF after the hub closed it.
    h.handle(McpConnId(2), McpEvent::Closed(None), MonoMs(13));
    h.call("s", "t", &json!({}), CallToken(2), MonoMs(20));
    let (_, CallOutcome::Failed(text)) = done(&mut h).remove(0) else {
        panic!("expected a failure")
    };
    assert!(
        text.starts_with("MCP connect failed: MCP protocol error: [-32603] boom (reconnecting in"),
        "{text}"
    );
}

#[test]
fn a_reconnect_handshake_shares_one_deadline() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(0));
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(1_000));
    commands(&mut h);
    h.handle(McpConnId(2), McpEvent::Opened, MonoMs(1_000 + T - 10));
    // initialize was sent late in the window: its deadline is the
    // handshake's, not a fresh full timeout.
    assert_eq!(h.poll_timeout(), Some(MonoMs(1_000 + T)));
    h.handle_timeout(MonoMs(1_000 + T));
    assert_eq!(
        done(&mut h),
        vec![(
            1,
            CallOutcome::Failed(errors::connect(&errors::timed_out("initialize")))
        )]
    );
}

#[test]
fn an_abandoned_call_frees_the_connection_and_its_late_answer_is_skipped() {
    let mut h = hub();
    let conn = ready_session(&mut h, &["t"]);
    h.call("s", "t", &json!({}), CallToken(1), MonoMs(0));
    commands(&mut h);
    h.abandon(CallToken(1));
    assert_eq!(h.poll_timeout(), None, "no timer for an abandoned call");
    h.call("s", "t", &json!({}), CallToken(2), MonoMs(5));
    let s = sends(&commands(&mut h));
    assert_eq!(s.len(), 1, "sent at once, not refused as busy");
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 3, "result": {}})),
        MonoMs(6),
    );
    assert!(
        notices(&mut h).is_empty(),
        "the abandoned call's answer is skipped"
    );
    h.handle(
        conn,
        line(json!({"jsonrpc": "2.0", "id": 4, "result": {}})),
        MonoMs(7),
    );
    assert!(matches!(
        done(&mut h).as_slice(),
        [(2, CallOutcome::Returned { .. })]
    ));
}

#[test]
fn a_call_abandoned_during_its_reconnect_is_never_sent_found_by_sim_seed_2729() {
    let mut h = hub();
    ready_reconnecting(&mut h, &["t"]);
    h.handle(McpConnId(1), McpEvent::Closed(None), MonoMs(1));
    h.call("s", "t", &json!({"n": 1}), CallToken(1), MonoMs(10));
    assert_eq!(opens(&commands(&mut h)), vec![2]);
    // The turn is cancelled while the new transport shakes hands.
    h.abandon(CallToken(1));
    handshake_stdio(&mut h, McpConnId(2), &["t"], 11);
    let s = sends(&commands(&mut h));
    assert!(
        s.iter().all(|m| m.2["method"] != "tools/call"),
        "no tools/call for the abandoned call: {s:?}"
    );
    assert!(done(&mut h).is_empty());
    assert_eq!(h.route("s", "t"), Some("a"), "the server is usable again");
}
