//! Extension `turn.steer` in-process (docs/extensions.md): guidance added
//! to a running turn lands at its next provider round trip, after the tool
//! results; every refusal is answered. Moved from `io-smol/tests/ext_steer.rs`,
//! which keeps the steer as both provider wire formats carry it.

mod common;

use common::*;
use engine::{ConnId, ProviderReply};
use serde_json::{json, Value};

const STEER_REJECTED: i64 = -32022;

fn register_ext(h: &mut Harness, sid: &str, key: &str) {
    let params = json!({"extensions": ["turn.steer"]});
    let conn = h.rpc_start(sid, key, &call(1, "session.registerDriver", params));
    assert_eq!(h.finished(conn).1["result"]["registered"], true);
}

fn steer_start(h: &mut Harness, sid: &str, key: &str, text: &str) -> ConnId {
    let params = json!({"message": {"role": "user", "content": text}});
    h.rpc_start(sid, key, &call(6, "session.steerTurn", params))
}

fn steer(h: &mut Harness, sid: &str, key: &str, text: &str) -> Value {
    let conn = steer_start(h, sid, key, text);
    h.finished(conn).1
}

/// A session whose creator (declaring `get_time`) opted into steering.
fn setup(h: &mut Harness) -> Fix {
    let f = h.fix(&["get_time"]);
    let body = json!({"tools": [tool("get_time")]});
    let (_, o) = h.client("POST", "/api/v1/sessions", &f.client_key, Some(&body));
    let f = Fix {
        sid: o["session_id"].as_str().unwrap().into(),
        skey: o["session_key"].as_str().unwrap().into(),
        ..f
    };
    register_ext(h, &f.sid, &f.skey);
    f
}

fn joiner(h: &mut Harness, f: &Fix) -> String {
    let (_, ck) = h.key(&f.profile);
    let path = format!("/api/v1/sessions/{}/join", f.sid);
    let (_, j) = h.client("POST", &path, &ck, Some(&json!({})));
    j["session_key"].as_str().unwrap().to_string()
}

#[test]
fn a_steer_lands_after_the_tool_results_of_the_round_it_follows() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    let turn = h.send_start(&f.sid, &f.skey, json!("go"));
    let s = steer_start(&mut h, &f.sid, &f.skey, "prefer the cache");
    assert!(h.frames(s).is_empty(), "answered once applied");
    // Round 1 asks for a server tool; round 2 answers.
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}]),
    ));
    h.replies.push_back(anthropic_text("done"));
    h.pump();
    let t = h.finished(s).1;
    assert_eq!(t["result"]["steered"], true, "{t}");
    let event_id = t["result"]["event_id"]
        .as_str()
        .expect("applied")
        .to_string();
    let (_, terminal) = h.finished(turn);
    assert_eq!(terminal["result"]["message"]["content"][0]["text"], "done");
    let evs = h.events(&f.sid, &f.skey);
    let tail: Vec<String> = types_of(&evs).into_iter().rev().take(5).rev().collect();
    assert_eq!(
        tail,
        [
            "tool.result",
            "client.message.send",
            "provider.request",
            "provider.response",
            "server.message.send",
        ]
    );
    let steer_ev = evs.iter().find(|e| e["id"] == event_id.as_str()).unwrap();
    assert_eq!(
        steer_ev["payload"],
        json!({"role": "user", "content": "prefer the cache"})
    );
    assert!(result_events(&terminal)
        .iter()
        .any(|e| e["id"] == event_id.as_str()));
    // Round 2 carries it after the tool result, in the last user message.
    let round2: Value = serde_json::from_slice(&h.call_bodies[1]).unwrap();
    let last = round2["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user", "{round2}");
    let text = last.to_string();
    let result_at = text.find("tu_m").expect("tool result");
    assert!(
        result_at < text.find("prefer the cache").expect("steer"),
        "{last}"
    );
    // The next turn's history keeps it, right after the turn's input.
    h.replies.push_back(anthropic_text("again"));
    h.send(&f.sid, &f.skey, json!("next"));
    let round3 = String::from_utf8(h.call_bodies[2].clone()).unwrap();
    let go = round3.find("\"go\"").unwrap();
    let at = round3.find("prefer the cache").unwrap();
    assert!(go < at && at < round3.find("done").unwrap(), "{round3}");
}

#[test]
fn steers_that_find_no_boundary_or_no_turn_are_refused() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    let b = joiner(&mut h, &f);
    register_ext(&mut h, &f.sid, &b);
    let plain = joiner(&mut h, &f);
    h.register_driver(&f.sid, &plain);
    assert_rpc_error(
        &steer(&mut h, &f.sid, &f.skey, "x"),
        STEER_REJECTED,
        "steer_rejected: no turn is running",
    );
    assert_rpc_error(
        &steer(&mut h, &f.sid, &plain, "x"),
        -32601,
        "Method not found: session.steerTurn",
    );
    // A running turn that ends without another round trip.
    let turn = h.send_start(&f.sid, &f.skey, json!("go"));
    assert_rpc_error(
        &steer(&mut h, &f.sid, &b, "x"),
        STEER_REJECTED,
        "steer_rejected: only the driver whose turn is running may steer it",
    );
    let late = steer_start(&mut h, &f.sid, &f.skey, "too late");
    h.replies.push_back(anthropic_text("only"));
    h.pump();
    assert_rpc_error(
        &h.finished(late).1,
        STEER_REJECTED,
        "steer_rejected: not applied: the turn ended before its next provider call",
    );
    assert!(h.finished(turn).1.get("result").is_some());
    let evs = h.events(&f.sid, &f.skey);
    assert_eq!(of_type(&evs, "client.message.send").len(), 1, "not logged");
    // A paused turn.
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}]),
    ));
    h.send(&f.sid, &f.skey, json!("time?"));
    assert_rpc_error(
        &steer(&mut h, &f.sid, &f.skey, "x"),
        STEER_REJECTED,
        "steer_rejected: the turn is paused for client tool results; send them with session.sendMessage",
    );
    // Bad params.
    let params = json!({"message": {"role": "assistant", "content": "x"}});
    let conn = h.rpc_start(&f.sid, &f.skey, &call(7, "session.steerTurn", params));
    assert_eq!(h.finished(conn).1["error"]["code"], -32602);
    let conn = h.rpc_start(&f.sid, &f.skey, &call(8, "session.steerTurn", json!({})));
    assert_rpc_error(
        &h.finished(conn).1,
        -32602,
        "Invalid params: missing \"message\"",
    );
}

/// A steer waiting on a turn whose every provider fails is told so, and
/// nothing is logged for it.
#[test]
fn a_steer_waiting_on_a_turn_whose_providers_all_fail_says_so() {
    let mut h = Harness::new(config());
    let f = setup(&mut h);
    let turn = h.send_start(&f.sid, &f.skey, json!("go"));
    let s = steer_start(&mut h, &f.sid, &f.skey, "never applied");
    h.replies.push_back(ProviderReply::Http {
        status: 503,
        body: b"{}".to_vec(),
        advice: Default::default(),
    });
    h.pump();
    assert_rpc_error(
        &h.finished(s).1,
        STEER_REJECTED,
        "steer_rejected: not applied: all providers failed",
    );
    assert!(h.finished(turn).1.get("result").is_some());
    let evs = h.events(&f.sid, &f.skey);
    assert_eq!(of_type(&evs, "client.message.send").len(), 1, "not logged");
    let errors = of_type(&evs, "session.error");
    assert_eq!(
        errors.last().unwrap()["payload"]["reason"],
        "all_providers_failed"
    );
}
