//! `session.compact` in-process (spec 07 §2, §4–§8; checklist C-166…C-178,
//! C-183…C-186): pre-gate checks, failures, empty and truncated summaries,
//! prompt precedence, an unresolvable primary, compaction on the turn gate
//! (queued, `-32020` on a live pause, reclaiming an expired pause), error
//! sessions and notifications. Moved from `io-smol/tests/compaction_manual.rs`,
//! which keeps a full compaction and a truncated OpenAI summary on the
//! mock provider's wire, and a turn after compaction on a restarted server.

mod common;

use common::*;
use engine::{ConnId, ProviderEntry, ProviderReply};
use proto::provider::Kind;
use serde_json::{json, Value};

const PREAMBLE: &str = "The earlier part of this conversation was compacted. A summary follows.";
const ABANDONED: &str = "Client tool call was abandoned before returning a result.";
const PAUSED: &str = "turn in progress: resolve the paused turn before compacting";

fn entry(name: &str, kind: Kind, model: &str, max_tokens: u32) -> ProviderEntry {
    ProviderEntry {
        name: name.into(),
        kind,
        model: model.into(),
        max_tokens,
        ..config().providers.remove(0)
    }
}

/// Registry: `small` (Anthropic, max_tokens 1024), `big` (Anthropic,
/// 8000), `oai` (OpenAI, 4096), `fb` (Anthropic fallback).
fn registry() -> engine::Config {
    engine::Config {
        providers: vec![
            entry("small", Kind::Anthropic, "claude-small", 1024),
            entry("big", Kind::Anthropic, "claude-big", 8000),
            entry("oai", Kind::Openai, "gpt", 4096),
            entry("fb", Kind::Anthropic, "claude-fb", 4096),
        ],
        ..config()
    }
}

fn with_timeout(ms: u64) -> engine::Config {
    engine::Config {
        turn_timeout_ms: ms,
        ..registry()
    }
}

fn http(status: u16, body: Value) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

/// An Anthropic text answer with `usage` (`None`: no usage member).
fn text(t: &str, usage: Option<(u64, u64)>, stop_reason: &str) -> ProviderReply {
    let mut b = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": t}], "stop_reason": stop_reason});
    if let Some((i, o)) = usage {
        b["usage"] = json!({"input_tokens": i, "output_tokens": o});
    }
    http(200, b)
}

fn failed(status: u16) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: b"down".to_vec(),
        advice: Default::default(),
    }
}

fn compact_start(h: &mut Harness, sid: &str, key: &str, params: Value) -> ConnId {
    h.rpc_start(sid, key, &call(9, "session.compact", params))
}

/// `session.compact` that must finish now: (streamed events, terminal).
fn compact(h: &mut Harness, sid: &str, key: &str, params: Value) -> (Vec<Value>, Value) {
    let conn = compact_start(h, sid, key, params);
    let (notes, t) = h.finished(conn);
    (note_events(&notes), t)
}

/// The instruction text the compaction request ended with.
fn instruction_of(req: &Value) -> String {
    let last = req["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.last().unwrap()["text"].as_str().unwrap().to_string(),
        other => panic!("bad content {other}"),
    }
}

fn turn(h: &mut Harness, f: &Live, content: &str) -> Value {
    h.replies.push_back(anthropic_text("ok"));
    h.send(&f.sid, &f.a.session_key, json!(content)).1
}

fn state(h: &mut Harness, sid: &str) -> String {
    h.admin_session(sid)["state"].as_str().unwrap().to_string()
}

fn get_time_pair(h: &mut Harness) -> (Live, Driver) {
    let f = h.open_driver(
        "small",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let b = h.join_driver(&f, json!({}));
    (f, b)
}

#[test]
fn c166_c167_pre_gate_checks() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let (_, ck) = h.key(&f.profile_id);
    let (_, o) = h.client("POST", "/api/v1/sessions", &ck, Some(&json!({})));
    let (sid, key) = (
        o["session_id"].as_str().unwrap(),
        o["session_key"].as_str().unwrap(),
    );
    let (_, t) = compact(&mut h, sid, key, json!({"prompt": 5}));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.compact",
    );
    h.register_driver(sid, key);
    for bad in [
        json!({"prompt": 5}),
        json!({"prompt": ["x"]}),
        json!({"prompt": {}}),
    ] {
        let (_, t) = compact(&mut h, sid, key, bad.clone());
        assert_eq!(t["error"]["code"], -32602, "{bad} → {t}");
        assert!(t["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid params: "));
    }
    assert!(h.call_bodies.is_empty());
    assert_eq!(
        types_of(&h.events(sid, key)),
        ["session.open", "session.driver.register"]
    );
}

#[test]
fn c169_c170_c171_c172_c178_compaction_rewrites_history() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    h.replies
        .push_back(text("first answer", Some((100, 20)), "end_turn"));
    h.replies
        .push_back(text("second answer", Some((200, 30)), "end_turn"));
    h.send(&f.sid, &key, json!("first question"));
    h.send(&f.sid, &key, json!("second question"));
    let before = h.events(&f.sid, &key);
    h.replies
        .push_back(text("THE SUMMARY", Some((400, 50)), "end_turn"));
    let (streamed, t) = compact(&mut h, &f.sid, &key, json!({}));
    assert_eq!(
        types_of(&streamed),
        [
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "server.message.send",
            "server.message.send",
            "session.compaction.completed"
        ]
    );
    // C-178: token_count from the newest successful turn response.
    assert_eq!(
        streamed[0]["payload"],
        json!({"trigger": "client", "reason": "manual", "token_count": 230, "threshold_tokens": null})
    );
    let req = &streamed[1]["payload"];
    assert_eq!(req["purpose"], "compaction");
    assert_eq!(req["max_tokens"], 4096, "C-176: max(1024, 4096)");
    assert_eq!(req["messages"].as_array().unwrap().len(), 5);
    let wire: Value = serde_json::from_slice(&h.call_bodies[2]).unwrap();
    assert_eq!(wire["max_tokens"], 4096);
    assert_eq!(
        streamed[3]["payload"],
        json!({"role": "user", "content": [{"type": "text", "text": PREAMBLE}],
               "synthetic": "compaction_preamble"})
    );
    assert_eq!(
        streamed[5]["payload"],
        json!({"preamble_event_id": streamed[3]["id"], "summary_event_id": streamed[4]["id"],
               "compacted_message_count": 4, "input_tokens": 400, "summary_tokens": 50})
    );
    assert_eq!(
        t["result"], streamed[5],
        "the terminal result is the completed event"
    );
    // C-171: the next turn starts from preamble + summary.
    let t = turn(&mut h, &f, "third question");
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(
        req["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": PREAMBLE}]},
            {"role": "assistant", "content": [{"type": "text", "text": "THE SUMMARY"}]},
            {"role": "user", "content": "third question"}
        ])
    );
    // C-172: the log is complete.
    let after = h.events(&f.sid, &key);
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.len(), before.len() + 6 + 4);
    // A second compaction: token_count from the newest turn response (10+5).
    h.replies.push_back(anthropic_text("SECOND SUMMARY"));
    let (streamed, t) = compact(&mut h, &f.sid, &key, json!({}));
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 4);
    assert_eq!(streamed[0]["payload"]["token_count"], 15);
}

#[test]
fn c176_large_max_tokens_is_kept_and_c186_missing_usage_commits_nulls() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("big", &[], &[], json!({}));
    turn(&mut h, &f, "q");
    h.replies
        .push_back(text("summary without usage", None, "end_turn"));
    let (streamed, t) = compact(&mut h, &f.sid, &f.a.session_key, json!({}));
    assert_eq!(streamed[1]["payload"]["max_tokens"], 8000);
    assert_eq!(streamed[2]["payload"]["usage"], Value::Null);
    assert_eq!(t["result"]["event_type"], "session.compaction.completed");
    assert_eq!(t["result"]["payload"]["input_tokens"], Value::Null);
    assert_eq!(t["result"]["payload"]["summary_tokens"], Value::Null);
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 2);
}

#[test]
fn c178_token_count_is_null_without_usable_newest_usage() {
    let mut h = Harness::new(registry());
    // No turn at all: null, and an empty history still compacts.
    let f = h.open_driver("small", &[], &[], json!({}));
    h.replies.push_back(anthropic_text("nothing yet"));
    let (streamed, t) = compact(&mut h, &f.sid, &f.a.session_key, json!({}));
    assert_eq!(streamed[0]["payload"]["token_count"], Value::Null);
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 0);
    // Older usage exists, the newest successful response has none: null.
    let g = h.open_driver("small", &[], &[], json!({}));
    h.replies.push_back(text("a", Some((50, 50)), "end_turn"));
    h.replies.push_back(text("b", None, "end_turn"));
    h.send(&g.sid, &g.a.session_key, json!("1"));
    h.send(&g.sid, &g.a.session_key, json!("2"));
    h.replies.push_back(anthropic_text("sum"));
    let (streamed, _) = compact(&mut h, &g.sid, &g.a.session_key, json!({}));
    assert_eq!(streamed[0]["payload"]["token_count"], Value::Null);
}

#[test]
fn c173_c184_all_compaction_providers_failed() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &["fb"], &[], json!({}));
    let key = f.a.session_key.clone();
    turn(&mut h, &f, "q");
    let before = h.events(&f.sid, &key);
    h.replies.push_back(failed(500));
    h.replies.push_back(failed(502));
    let (streamed, t) = compact(&mut h, &f.sid, &key, json!({}));
    assert_rpc_error(&t, -32000, "compaction failed: all 2 providers failed");
    let after = h.events(&f.sid, &key);
    let new = &after[before.len()..];
    assert_eq!(
        types_of(new),
        [
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "provider.request",
            "provider.response"
        ],
        "C-184: no session.error from a compaction attempt"
    );
    assert_eq!(ids(&streamed), ids(new));
    assert!(new[1..]
        .iter()
        .all(|e| e["payload"]["purpose"] == "compaction"));
    assert_eq!(new[3]["payload"]["kind"], "fallback");
    assert_eq!(state(&mut h, &f.sid), "open");
    // History unchanged: the next turn still sees the original exchange.
    let t = turn(&mut h, &f, "next");
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"], "q");
    assert_eq!(req["messages"].as_array().unwrap().len(), 3);
}

#[test]
fn c174_truncated_summaries_fail_without_fallback() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &["fb"], &[], json!({}));
    turn(&mut h, &f, "q");
    let n = h.call_bodies.len();
    h.replies
        .push_back(text("cut off", Some((10, 5)), "max_tokens"));
    let (streamed, t) = compact(&mut h, &f.sid, &f.a.session_key, json!({}));
    assert_rpc_error(
        &t,
        -32000,
        "compaction failed: summary truncated: stop_reason max_tokens",
    );
    assert_eq!(
        types_of(&streamed),
        [
            "session.compaction.started",
            "provider.request",
            "provider.response"
        ]
    );
    assert_eq!(streamed[2]["payload"]["ok"], true);
    assert_eq!(
        h.call_bodies.len(),
        n + 1,
        "no fallback after a successful call"
    );
    // OpenAI's finish_reason length.
    let g = h.open_driver("oai", &[], &[], json!({}));
    let oai = |content: &str, finish: &str| {
        http(
            200,
            json!({"id": "c1", "object": "chat.completion", "model": "gpt",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
        )
    };
    h.replies.push_back(oai("a", "stop"));
    h.send(&g.sid, &g.a.session_key, json!("q"));
    h.replies.push_back(oai("cut", "length"));
    let (_, t) = compact(&mut h, &g.sid, &g.a.session_key, json!({}));
    assert_rpc_error(
        &t,
        -32000,
        "compaction failed: summary truncated: finish_reason length",
    );
    assert_eq!(state(&mut h, &g.sid), "open");
}

#[test]
fn c175_whitespace_or_tool_only_summary_is_empty() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    turn(&mut h, &f, "q");
    for reply in [
        anthropic_text("  \n\t "),
        anthropic_tool_use(json!([{"type": "tool_use", "id": "x", "name": "n", "input": {}}])),
    ] {
        h.replies.push_back(reply);
        let (_, t) = compact(&mut h, &f.sid, &f.a.session_key, json!({}));
        assert_rpc_error(&t, -32000, "compaction failed: empty summary");
    }
    let log = h.events(&f.sid, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.completed").is_empty());
    assert_eq!(state(&mut h, &f.sid), "open");
}

#[test]
fn c177_prompt_precedence() {
    let mut h = Harness::new(registry());
    let stored = h.open_driver(
        "small",
        &[],
        &[],
        json!({"compaction": {"mode": "client", "prompt": "STORED PROMPT"}}),
    );
    let plain = h.open_driver("small", &[], &[], json!({}));
    let auto = h.open_driver(
        "small",
        &[],
        &[],
        json!({"compaction": {"mode": "auto", "size": 100000}}),
    );
    let mut instructions = Vec::new();
    for (f, params) in [
        (&stored, json!({"prompt": "CALL PROMPT"})),
        (&stored, json!({"prompt": null})),
        (&stored, json!({})),
        (&plain, json!({})),
        (&plain, json!({"prompt": "CALL PROMPT"})),
        (&auto, json!({"prompt": "AUTO CALL PROMPT"})),
        (&auto, json!({})),
    ] {
        h.replies.push_back(anthropic_text("sum"));
        let (streamed, t) = compact(&mut h, &f.sid, &f.a.session_key, params);
        assert_eq!(
            t["result"]["event_type"], "session.compaction.completed",
            "{t}"
        );
        instructions.push(instruction_of(&streamed[1]["payload"]));
    }
    assert_eq!(instructions[0], "CALL PROMPT");
    assert_eq!(instructions[1], "STORED PROMPT");
    assert_eq!(instructions[2], "STORED PROMPT");
    let default = &instructions[3];
    assert!(!default.is_empty() && default != "STORED PROMPT");
    assert_eq!(instructions[4], "CALL PROMPT");
    assert_eq!(instructions[5], "AUTO CALL PROMPT");
    assert_eq!(&instructions[6], default, "the default is a fixed string");
}

#[test]
fn c185_unresolvable_primary_fails_before_logging() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turn(&mut h, &f, "q");
    // Restarted with a registry that no longer has `small`.
    h.restart(engine::Config {
        providers: vec![entry("other", Kind::Anthropic, "m", 1024)],
        ..config()
    });
    h.register_driver(&f.sid, &key);
    let before = h.events(&f.sid, &key);
    let (streamed, t) = compact(&mut h, &f.sid, &key, json!({}));
    assert!(streamed.is_empty());
    assert_eq!(t["error"]["code"], -32000);
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("compaction failed: provider_config: "),
        "{msg}"
    );
    assert_eq!(h.events(&f.sid, &key), before);
    assert_eq!(state(&mut h, &f.sid), "open");
}

#[test]
fn c168_compact_during_a_live_pause_fails_fast() {
    let mut h = Harness::new(with_timeout(30_000));
    let (f, b) = get_time_pair(&mut h);
    let key = f.a.session_key.clone();
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}]),
    ));
    h.send(&f.sid, &key, json!("time?"));
    let before = h.events(&f.sid, &key);
    for k in [&key, &b.session_key] {
        let (streamed, t) = compact(&mut h, &f.sid, k, json!({}));
        assert!(streamed.is_empty());
        assert_rpc_error(&t, -32020, PAUSED);
    }
    assert_eq!(h.events(&f.sid, &key), before);
    // The pause is intact: the owner resumes normally.
    h.replies.push_back(anthropic_text("noon"));
    let (_, t) = h.send(&f.sid, &key, json!([tool_result("tu_1", "12:00")]));
    assert_eq!(text_of(&t["result"]["message"]), "noon");
}

#[test]
fn compact_queued_behind_a_running_turn_that_then_pauses_gets_32020() {
    let mut h = Harness::new(with_timeout(30_000));
    let (f, b) = get_time_pair(&mut h);
    let turn = h.send_start(&f.sid, &f.a.session_key, json!("time?"));
    let c = compact_start(&mut h, &f.sid, &b.session_key, json!({}));
    assert!(h.frames(c).is_empty(), "queued compaction is silent");
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}]),
    ));
    h.pump();
    assert_rpc_error(&h.finished(c).1, -32020, PAUSED);
    let (_, tt) = h.finished(turn);
    assert_eq!(tt["result"]["message"]["content"][0]["dispatch"], "client");
    assert_eq!(h.call_bodies.len(), 1);
}

#[test]
fn manual_compact_queues_behind_a_running_turn_and_the_next_send_sees_it() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let key = f.a.session_key.clone();
    let turn = h.send_start(&f.sid, &key, json!("slow"));
    let c = compact_start(&mut h, &f.sid, &b.session_key, json!({}));
    let next = h.send_start(&f.sid, &key, json!("after compaction"));
    h.advance(150);
    assert!(h.frames(c).is_empty(), "queued compaction is silent");
    for t in ["slow answer", "SUMMARY", "after"] {
        h.replies.push_back(anthropic_text(t));
    }
    h.pump();
    let (_, ta) = h.finished(turn);
    let (notes, tc) = h.finished(c);
    assert_eq!(
        tc["result"]["event_type"], "session.compaction.completed",
        "{tc}"
    );
    let streamed = note_events(&notes);
    assert_eq!(streamed[0]["event_type"], "session.compaction.started");
    assert_eq!(streamed[0]["client_key_id"], json!(b.key_id));
    let log = h.events(&f.sid, &key);
    let pos = |id: &Value| log.iter().position(|e| &e["id"] == id).unwrap();
    assert!(pos(&streamed[0]["id"]) > pos(&result_events(&ta).last().unwrap()["id"]));
    assert_eq!(
        streamed[1]["payload"]["messages"].as_array().unwrap().len(),
        3
    );
    let (_, tn) = h.finished(next);
    let req = &of_type(&result_events(&tn), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"][0]["text"], PREAMBLE);
    assert_eq!(req["messages"][1]["content"][0]["text"], "SUMMARY");
    assert_eq!(req["messages"][2]["content"], "after compaction");
}

#[test]
fn c183_compact_reclaims_an_expired_pause() {
    let mut h = Harness::new(with_timeout(1_000));
    let (f, b) = get_time_pair(&mut h);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}},
        {"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}},
    ])));
    h.send(&f.sid, &f.a.session_key, json!("time?"));
    h.advance(1_200);
    h.replies.push_back(anthropic_text("SUMMARY"));
    let (streamed, t) = compact(&mut h, &f.sid, &b.session_key, json!({}));
    assert_eq!(
        types_of(&streamed),
        [
            "session.error",
            "server.message.send",
            "tool.result",
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "server.message.send",
            "server.message.send",
            "session.compaction.completed"
        ]
    );
    assert_eq!(
        streamed[0]["payload"],
        json!({"reason": "driver_turn_abandoned", "owner_client_key_id": f.a.key_id})
    );
    assert_eq!(streamed[0]["client_key_id"], json!(f.a.key_id));
    let mcp = json!({"type": "tool_result", "tool_use_id": "tu_m", "is_error": true,
        "content": [{"type": "text", "text": "MCP error: no MCP server is configured for tool 'lookup_db'"}]});
    let synthetic = json!({"type": "tool_result", "tool_use_id": "tu_c", "content": ABANDONED, "is_error": true});
    assert_eq!(
        streamed[1]["payload"],
        json!({"role": "user", "content": [mcp, synthetic], "synthetic": "abandoned_tool_results"})
    );
    assert_eq!(streamed[1]["client_key_id"], json!(b.key_id));
    assert_eq!(
        streamed[2]["payload"],
        json!({"tool_use_id": "tu_c", "dispatch": "client", "server_name": null,
               "is_error": true, "content": ABANDONED})
    );
    // The trailing user message carries the instruction as a text block.
    let msgs = streamed[4]["payload"]["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(msgs.len(), 3);
    let last = msgs[2]["content"].as_array().unwrap();
    assert_eq!((last.len(), &last[0], &last[1]), (3, &mcp, &synthetic));
    assert_eq!(last[2]["type"], "text");
    assert!(
        msgs[2].get("synthetic").is_none(),
        "synthetic never reaches a provider"
    );
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 3);
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!([tool_result("tu_c", "x")]));
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
}

#[test]
fn compact_on_an_error_session_and_as_a_notification() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let key = f.a.session_key.clone();
    turn(&mut h, &f, "q");
    // Notification: frames stream, no terminal frame, the body ends.
    h.replies.push_back(anthropic_text("SUM"));
    let body = json!({"jsonrpc": "2.0", "method": "session.compact", "params": {}});
    let conn = h.rpc_start(&f.sid, &key, &body);
    let frames = h.frames(conn);
    assert!(h.sent[&conn].ends_with(b"0\r\n\r\n"));
    assert!(frames.iter().all(|f| f.get("id").is_none()));
    assert_eq!(
        types_of(&note_events(&frames)).last().map(String::as_str),
        Some("session.compaction.completed")
    );
    // Error session: -32000 before the gate, nothing logged.
    h.replies.push_back(failed(500));
    h.send(&f.sid, &key, json!("fails"));
    assert_eq!(state(&mut h, &f.sid), "error");
    let before = h.events(&f.sid, &key).len();
    let (_, t) = compact(&mut h, &f.sid, &key, json!({}));
    assert_rpc_error(&t, -32000, "session is error, not open");
    assert_eq!(h.events(&f.sid, &key).len(), before);
}

/// Spec 07 §8: a compaction waiting on the gate when the session is closed
/// fails the post-gate state check.
#[test]
fn queued_compaction_fails_when_the_session_is_closed() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("small", &[], &[], json!({}));
    let b = h.join_driver(&f, json!({}));
    let _turn = h.send_start(&f.sid, &f.a.session_key, json!("slow"));
    let c = compact_start(&mut h, &f.sid, &b.session_key, json!({}));
    assert!(h.frames(c).is_empty());
    let path = format!("/api/v1/sessions/{}", f.sid);
    assert_eq!(h.client("DELETE", &path, &b.session_key, None).0, 200);
    let (notes, t) = h.finished(c);
    assert!(note_events(&notes).is_empty(), "{notes:?}");
    assert_rpc_error(&t, -32000, "session is closed, not open");
    let log = h.events(&f.sid, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.started").is_empty());
}
