//! Engine-level flows through the in-process harness (no sockets): fast
//! feedback on check orders and event sequences. End-to-end coverage over
//! the real binary lives in `io-smol/tests`.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

fn types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn health_and_meta_c001_c002() {
    let mut h = Harness::new(config());
    let (s, b) = h.request(Listener::Client, "GET", "/healthz", None, None);
    assert_eq!((s, b), (200, Value::Null));
    let (s, b) = h.request(Listener::Client, "GET", "/api/v1/meta", None, None);
    assert_eq!(s, 200);
    assert_eq!(b["api_versions"], json!(["v1"]));
}

#[test]
fn create_join_events_close_lifecycle() {
    let mut h = Harness::new(config());
    let (key, sid, skey) = h.open_session(&["get_time"], json!({"tools": [{"name": "get_time"}]}));
    assert!(sid.starts_with("ses_") && sid.len() == 36);
    assert!(skey.starts_with("bae_ses_") && skey.len() == 56);
    // Join with the same client key mints a second session key (C-037).
    let (s, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &key,
        Some(&json!({})),
    );
    assert_eq!(s, 201, "{j}");
    assert_ne!(j["session_key"], json!(skey));
    // Compaction on join is rejected even for unknown sessions (C-031/C-032).
    let (s, e) = h.client(
        "POST",
        "/api/v1/sessions/ses_nope/join",
        &key,
        Some(&json!({"compaction": null})),
    );
    assert_eq!(s, 400);
    assert_eq!(
        e["detail"],
        "compaction is a session-level setting fixed at creation and cannot be set on join"
    );
    let (s, page) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &skey,
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(types(&page["items"]), vec!["session.open", "session.join"]);
    assert_eq!(page["next_cursor"], Value::Null);
    assert_eq!(page["items"][0]["payload"]["tools"], json!(["get_time"]));
    // Paging with limit=1 yields a cursor.
    let (_, p1) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events?limit=1"),
        &skey,
        None,
    );
    assert_eq!(p1["items"].as_array().unwrap().len(), 1);
    let cursor = p1["next_cursor"].as_str().unwrap().to_string();
    let (_, p2) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events?limit=1&cursor={cursor}"),
        &skey,
        None,
    );
    assert_eq!(types(&p2["items"]), vec!["session.join"]);
    // Close, then close again (C-044, C-045).
    let (s, c) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &skey, None);
    assert_eq!((s, c), (200, json!({"session_id": sid, "state": "closed"})));
    let (s, c) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &skey, None);
    assert_eq!(s, 409, "{c}");
    // Events still readable after close (C-043) and survive a restart.
    h.restart(config());
    let (s, page) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &skey,
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(
        types(&page["items"]),
        vec!["session.open", "session.join", "session.close"]
    );
}

#[test]
fn auth_rules_c003_c010() {
    let mut h = Harness::new(config());
    let (key, sid, skey) = h.open_session(&[], json!({}));
    let (s, b) = h.request(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        None,
        Some(&json!({})),
    );
    assert_eq!(s, 401);
    assert_eq!(b["type"], "unauthorized");
    let (s, _) = h.client("POST", "/api/v1/sessions", &skey, Some(&json!({})));
    assert_eq!(s, 401, "session key where a client key is required");
    let (s, _) = h.client("GET", &format!("/api/v1/sessions/{sid}/events"), &key, None);
    assert_eq!(s, 401, "client key where a session key is required");
    let (s, _) = h.client(
        "GET",
        "/api/v1/sessions/ses_00000000000000000000000000000000/events",
        &skey,
        None,
    );
    assert_eq!(s, 401, "unknown session id on a session-key route");
    let (s, _) = h.client("GET", "/api/v1/sessions/x/events", ADMIN_KEY, None);
    assert_eq!(s, 401);
}

#[test]
fn text_turn_c072_c073_c074() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    let f = h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"}),
    );
    assert_eq!(
        f,
        vec![json!({"jsonrpc": "2.0", "id": 1, "result": {"registered": true}})]
    );
    h.replies.push_back(anthropic_text("hello"));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage", "params": {"message": {"content": "hi"}}});
    let frames = h.rpc(&sid, &skey, &call);
    let last = frames.last().unwrap();
    assert_eq!(last["id"], 2);
    assert_eq!(
        types(&last["result"]["events"]),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(last["result"]["message"]["content"][0]["text"], "hello");
    // Notifications exclude the sender's own client.message.send.
    let notes: Vec<&str> = frames[..frames.len() - 1]
        .iter()
        .map(|f| f["params"]["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        vec![
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(h.calls.len(), 0);
}

#[test]
fn client_tool_pause_and_resume_c102_c104() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(
        &["get_time"],
        json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]}),
    );
    h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"}),
    );
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}},
        {"type": "tool_use", "id": "tu_2", "name": "list_dir", "input": {"path": "/"}}
    ])));
    let send = |content: Value| json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage", "params": {"message": {"role": "user", "content": content}}});
    let frames = h.rpc(&sid, &skey, &send(json!("time?")));
    let result = &frames.last().unwrap()["result"];
    let blocks = result["message"]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["dispatch"], "client");
    assert_eq!(blocks[1]["dispatch"], "mcp");
    assert_eq!(
        types(&result["events"]),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "tool.call",
            "tool.call",
            "mcp.request",
            "mcp.response",
            "tool.result",
            "server.message.send"
        ]
    );
    // Resume with the client's result only; the server's is merged in.
    h.replies.push_back(anthropic_text("it is noon"));
    let frames = h.rpc(
        &sid,
        &skey,
        &send(json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}])),
    );
    let result = &frames.last().unwrap()["result"];
    let ev = result["events"].as_array().unwrap();
    assert_eq!(ev[0]["event_type"], "client.message.send");
    let merged = ev[0]["payload"]["content"].as_array().unwrap();
    assert_eq!(merged[0]["tool_use_id"], "tu_1");
    assert_eq!(merged[1]["tool_use_id"], "tu_2");
    assert_eq!(ev[1]["event_type"], "tool.result");
    assert_eq!(ev[1]["payload"]["dispatch"], "client");
    assert_eq!(ev[2]["event_type"], "provider.request");
    // dispatch never reaches the provider (C-093).
    let msgs = ev[2]["payload"]["messages"].to_string();
    assert!(!msgs.contains("dispatch"), "{msgs}");
    assert_eq!(result["message"]["content"][0]["text"], "it is noon");
}

#[test]
fn fifo_gate_second_driver_waits_silently_c118() {
    let mut h = Harness::new(config());
    let (key, sid, skey) = h.open_session(&[], json!({}));
    let (_, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &key,
        Some(&json!({})),
    );
    let skey2 = j["session_key"].as_str().unwrap().to_string();
    for k in [&skey, &skey2] {
        h.rpc(
            &sid,
            k,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"}),
        );
    }
    let send = |t: &str| json!({"jsonrpc": "2.0", "id": 9, "method": "session.sendMessage", "params": {"message": {"content": t}}});
    let a = h.rpc_start(&sid, &skey, &send("first"));
    let b = h.rpc_start(&sid, &skey2, &send("second"));
    assert!(h.frames(b).is_empty(), "queued stream writes no frames");
    assert_eq!(h.calls.len(), 1);
    h.replies.push_back(anthropic_text("one"));
    h.replies.push_back(anthropic_text("two"));
    h.advance(0);
    h.input(engine::Input::Flushed { conn: a, bytes: 0 });
    let fa = h.frames(a);
    let fb = h.frames(b);
    assert_eq!(
        fa.last().unwrap()["result"]["message"]["content"][0]["text"],
        "one"
    );
    assert_eq!(
        fb.last().unwrap()["result"]["message"]["content"][0]["text"],
        "two"
    );
}

#[test]
fn all_providers_failed_c084_c085() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"}),
    );
    h.replies.push_back(engine::ProviderReply::Http {
        status: 500,
        body: b"boom".to_vec(),
        advice: Default::default(),
    });
    let frames = h.rpc(&sid, &skey, &json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage", "params": {"message": {"content": "hi"}}}));
    let result = &frames.last().unwrap()["result"];
    assert_eq!(
        result["message"]["content"][0]["text"],
        "The provider is currently unavailable."
    );
    assert_eq!(
        types(&result["events"]),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "session.error",
            "session.error"
        ]
    );
    assert_eq!(
        result["events"][4]["payload"],
        json!({"reason": "all_providers_failed", "attempts": 1})
    );
    let again = h.rpc(&sid, &skey, &json!({"jsonrpc": "2.0", "id": 3, "method": "session.sendMessage", "params": {"message": {"content": "hi"}}}));
    assert_eq!(again[0]["error"]["message"], "session is error, not open");
}

fn send(h: &mut Harness, sid: &str, key: &str, content: Value) -> Vec<Value> {
    h.rpc(sid, key, &json!({"jsonrpc": "2.0", "id": 5, "method": "session.sendMessage", "params": {"message": {"content": content}}}))
}

#[test]
fn manual_compaction_rewrites_provider_history_c169_c171() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(
        &[],
        json!({"compaction": {"mode": "client", "prompt": "keep TODOs"}}),
    );
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("first answer"));
    send(&mut h, &sid, &skey, json!("first"));
    h.replies.push_back(anthropic_text("the summary"));
    let frames = h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "session.compact", "params": {}}),
    );
    let notes: Vec<&str> = frames[..frames.len() - 1]
        .iter()
        .map(|f| f["params"]["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        vec![
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "server.message.send",
            "server.message.send",
            "session.compaction.completed"
        ]
    );
    let done = &frames.last().unwrap()["result"];
    assert_eq!(done["event_type"], "session.compaction.completed");
    assert_eq!(done["payload"]["compacted_message_count"], 2);
    assert_eq!(frames[0]["params"]["payload"]["token_count"], 15);
    let req = &frames[1]["params"]["payload"];
    assert_eq!(req["purpose"], "compaction");
    assert_eq!(req["max_tokens"], 4096);
    assert_eq!(
        req["messages"][2]["content"], "keep TODOs",
        "stored client prompt is the instruction"
    );
    // The next turn starts from preamble + summary.
    h.replies.push_back(anthropic_text("after"));
    let frames = send(&mut h, &sid, &skey, json!("next"));
    let ev = frames.last().unwrap()["result"]["events"]
        .as_array()
        .unwrap()
        .clone();
    let msgs = &ev[1]["payload"]["messages"];
    assert_eq!(
        msgs[0]["content"][0]["text"],
        proto::provider::PREAMBLE_TEXT
    );
    assert_eq!(msgs[1]["content"][0]["text"], "the summary");
    assert_eq!(msgs[2]["content"], "next");
    assert_eq!(msgs.as_array().unwrap().len(), 3);
    // Same after a restart (history rebuilt from the log).
    h.restart(config());
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("again"));
    let frames = send(&mut h, &sid, &skey, json!("more"));
    let ev = frames.last().unwrap()["result"]["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(ev[1]["payload"]["messages"].as_array().unwrap().len(), 5);
}

#[test]
fn compact_during_live_pause_is_turn_in_progress_c168() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&["t"], json!({"tools": [{"name": "t"}]}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_1", "name": "t", "input": {}}]),
    ));
    send(&mut h, &sid, &skey, json!("go"));
    let f = h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "session.compact"}),
    );
    assert_eq!(
        f,
        vec![
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32020, "message": "turn in progress: resolve the paused turn before compacting"}})
        ]
    );
    // After the timeout the pause is reclaimed (C-183).
    h.advance(121_000);
    h.replies.push_back(anthropic_text("sum"));
    let f = h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "session.compact"}),
    );
    let notes: Vec<String> = f[..f.len() - 1]
        .iter()
        .map(|x| x["params"]["event_type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        &notes[..4],
        &[
            "session.error",
            "server.message.send",
            "tool.result",
            "session.compaction.started"
        ]
    );
    assert_eq!(
        f[1]["params"]["payload"]["synthetic"],
        "abandoned_tool_results"
    );
    assert_eq!(
        f.last().unwrap()["result"]["event_type"],
        "session.compaction.completed"
    );
}

#[test]
fn auto_compaction_strictly_above_threshold_c179_c180() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) =
        h.open_session(&[], json!({"compaction": {"mode": "auto", "size": 1000}}));
    h.register_driver(&sid, &skey);
    let reply = |i: u64, o: u64| {
        engine::ProviderReply::Http {
        status: 200,
        body: json!({"role": "assistant", "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn", "usage": {"input_tokens": i, "output_tokens": o}}).to_string().into_bytes(),
        advice: Default::default(),
    }
    };
    h.replies.push_back(reply(900, 100));
    let f = send(&mut h, &sid, &skey, json!("a"));
    assert_eq!(
        types(&f.last().unwrap()["result"]["events"]).len(),
        4,
        "exactly at size: no compaction"
    );
    h.replies.push_back(reply(900, 101));
    h.replies.push_back(anthropic_text("summary"));
    let f = send(&mut h, &sid, &skey, json!("b"));
    let t = types(&f.last().unwrap()["result"]["events"]);
    assert_eq!(t[4], "session.compaction.started");
    assert_eq!(t.last().unwrap(), "session.compaction.completed");
    assert_eq!(
        f.last().unwrap()["result"]["message"]["content"][0]["text"],
        "x"
    );
    assert_eq!(
        f.last().unwrap()["result"]["events"][4]["payload"],
        json!({"trigger": "auto", "reason": "token_threshold", "token_count": 1001, "threshold_tokens": 1000})
    );
}

#[test]
fn opt_in_keepalive_writes_blank_lines_only_when_enabled() {
    let mut cfg = config();
    cfg.ndjson_keepalive_ms = 1_000;
    let mut h = Harness::new(cfg);
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    let conn = h.rpc_start(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "method": "session.subscribe"}),
    );
    h.advance(1_500);
    let raw = h.take(conn);
    let (_, body) = parse_response(&raw);
    assert_eq!(body, b"\n", "one blank NDJSON line");
    // Off by default.
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    let conn = h.rpc_start(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "method": "session.subscribe"}),
    );
    h.advance(60_000);
    let (_, body) = parse_response(&h.take(conn));
    assert!(body.is_empty());
}

#[test]
fn subscriber_replay_then_live_without_duplicates_c127() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("one"));
    send(&mut h, &sid, &skey, json!("a"));
    let (_, page) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &skey,
        None,
    );
    let first = page["items"][0]["id"].as_str().unwrap().to_string();
    let sub = h.rpc_start(&sid, &skey, &json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": {"since_event_id": first}}));
    h.replies.push_back(anthropic_text("two"));
    send(&mut h, &sid, &skey, json!("b"));
    let ids: Vec<String> = h
        .frames(sub)
        .iter()
        .map(|f| f["params"]["id"].as_str().unwrap().to_string())
        .collect();
    let (_, page) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &skey,
        None,
    );
    let all: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, all[1..].to_vec());
    // unsubscribe ends it (C-130).
    let f = h.rpc(
        &sid,
        &skey,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "session.unsubscribe"}),
    );
    assert_eq!(f[0]["result"]["unsubscribed"], true);
    assert!(h.sent.get(&sub).unwrap().ends_with(b"0\r\n\r\n"));
}

#[test]
fn slowloris_head_gets_408_and_idle_connections_close() {
    let mut h = Harness::new(config());
    let slow = h.connect(Listener::Client);
    h.send_bytes(slow, b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
    let idle = h.connect(Listener::Client);
    h.advance(29_000);
    assert!(!h.closed.contains(&slow));
    h.advance(2_000);
    assert!(h.closed.contains(&slow));
    assert!(h.take(slow).starts_with(b"HTTP/1.1 408"));
    assert!(!h.closed.contains(&idle));
    h.advance(50_000);
    assert!(
        h.closed.contains(&idle),
        "idle keep-alive connection closed"
    );
}

#[test]
fn close_cancels_the_in_flight_turn_c047() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    let a = h.rpc_start(&sid, &skey, &json!({"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": {"message": {"content": "x"}}}));
    assert_eq!(h.calls.len(), 1);
    let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{sid}"), &skey, None);
    assert_eq!(s, 200);
    assert!(h.sent[&a].ends_with(b"0\r\n\r\n"), "stream ended");
    assert!(
        !h.frames(a).iter().any(|f| f.get("id").is_some()),
        "no terminal frame"
    );
    h.replies.push_back(anthropic_text("late"));
    h.advance(0);
    let (_, page) = h.client(
        "GET",
        &format!("/api/v1/sessions/{sid}/events"),
        &skey,
        None,
    );
    assert_eq!(
        types(&page["items"]).last().unwrap(),
        "session.close",
        "nothing logged after close"
    );
}

/// Issue 15: a live event reaching several streams is rendered once and its
/// bytes shared; each stream still gets exactly the frame a lone stream
/// would (C-127's live half).
#[test]
fn observers_share_one_rendering_of_each_live_event() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = h.open_session(&[], json!({}));
    h.register_driver(&sid, &skey);
    let subscribe = json!({"jsonrpc": "2.0", "method": "session.subscribe"});
    let subs: Vec<engine::ConnId> = (0..3)
        .map(|_| h.rpc_start(&sid, &skey, &subscribe))
        .collect();
    let before = h.shared_sends;
    h.replies.push_back(anthropic_text("hello"));
    send(&mut h, &sid, &skey, json!("hi"));
    let frames: Vec<Vec<Value>> = subs.iter().map(|c| h.frames(*c)).collect();
    assert!(frames[0].len() >= 3, "{:?}", frames[0]);
    assert!(frames.iter().all(|f| *f == frames[0]), "{frames:?}");
    // Every event of the turn went to the three subscribers shared.
    assert!(
        h.shared_sends - before >= 3 * frames[0].len(),
        "{}",
        h.shared_sends
    );
    // A lone subscriber gets the same frames.
    let mut lone = Harness::new(config());
    let (_key, sid, skey) = lone.open_session(&[], json!({}));
    lone.register_driver(&sid, &skey);
    let sub = lone.rpc_start(&sid, &skey, &subscribe);
    lone.replies.push_back(anthropic_text("hello"));
    send(&mut lone, &sid, &skey, json!("hi"));
    let types = |f: &Vec<Value>| -> Vec<Value> {
        f.iter()
            .map(|e| e["params"]["event_type"].clone())
            .collect()
    };
    assert_eq!(types(&lone.frames(sub)), types(&frames[0]));
}

/// C-016: the create and join answers are written as text; they must be the
/// bytes `serde_json` gives for the same object (key order, escaping).
#[test]
fn open_and_join_answers_are_serde_json_bytes_c016() {
    let mut h = Harness::new(config());
    let name = "p \"q\" \\ \u{1} é\u{2028}";
    let tools = json!(["get_time", "tab\tname", "q\"uote", "\u{7f}ü"]);
    let (s, p) = h.admin(
        "POST",
        "/admin/v1/profiles",
        Some(&json!({"name": name, "primary_provider": "main", "allowed_tools": tools})),
    );
    assert_eq!(s, 201, "{p}");
    let (s, k) = h.admin(
        "POST",
        "/admin/v1/keys",
        Some(&json!({"name": "k", "profile_id": p["id"]})),
    );
    assert_eq!(s, 201, "{k}");
    let key = k["key"].as_str().unwrap().to_string();
    let expected = |sid: &str, skey: &str| {
        serde_json::to_string(&json!({
            "session_id": sid,
            "session_key": skey,
            "profile": {
                "id": p["id"],
                "name": name,
                "allowed_tools": tools,
                "mcp_servers": [],
                "provider": {"provider": "anthropic", "model": "claude-test"},
            },
        }))
        .unwrap()
    };
    let answer = |h: &mut Harness, path: &str| {
        let conn = h.connect(Listener::Client);
        let req = build_request("POST", path, Some(&key), Some(&json!({})));
        h.send_bytes(conn, &req);
        let (status, body) = parse_response(&h.take(conn));
        let body = String::from_utf8(body).unwrap();
        assert_eq!(status, 201, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let (sid, skey) = (
            v["session_id"].as_str().unwrap(),
            v["session_key"].as_str().unwrap(),
        );
        assert_eq!(body, expected(sid, skey));
        sid.to_string()
    };
    let sid = answer(&mut h, "/api/v1/sessions");
    let joined = answer(&mut h, &format!("/api/v1/sessions/{sid}/join"));
    assert_eq!(joined, sid);
}

/// C-027: the `session.open` and `session.join` payloads are written as text;
/// the stored bytes must be what `serde_json` gives for the same object.
#[test]
fn open_and_join_payloads_are_serde_json_bytes_c027() {
    let mut h = Harness::new(config());
    let version = "v\"1\\ é";
    let (key, sid, skey) = h.open_session(
        &["get_time"],
        json!({"client_version": version, "tools": [{"name": "get_time"}]}),
    );
    let (s, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        &key,
        Some(&json!({})),
    );
    assert_eq!(s, 201, "{j}");
    let conn = h.connect(Listener::Client);
    let path = format!("/api/v1/sessions/{sid}/events");
    h.send_bytes(conn, &build_request("GET", &path, Some(&skey), None));
    let (status, body) = parse_response(&h.take(conn));
    let body = String::from_utf8(body).unwrap();
    assert_eq!(status, 200, "{body}");
    let open = json!({"client_version": version, "tools": ["get_time"], "sandbox_tools": [], "subagent_tools": []});
    let join =
        json!({"client_version": null, "tools": [], "sandbox_tools": [], "subagent_tools": []});
    for payload in [open, join] {
        let text = format!("\"payload\":{}", serde_json::to_string(&payload).unwrap());
        assert!(body.contains(&text), "{text} not in {body}");
    }
}
