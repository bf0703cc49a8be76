//! `session.compact` over the real binary (spec 07 §2, §4–§8; checklist
//! C-166…C-178, C-183…C-186), including compaction on the turn gate
//! (queued behind a running turn, `-32020` on a live pause, reclaiming an
//! expired pause) and a turn after compaction on a restarted server.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, RpcStream, Server};

const PREAMBLE: &str = "The earlier part of this conversation was compacted. A summary follows.";
const ABANDONED: &str = "Client tool call was abandoned before returning a result.";

/// Registry: `small` (Anthropic, max_tokens 1024), `big` (Anthropic,
/// max_tokens 8000), `oai` (OpenAI, default 4096), `fb` (Anthropic
/// fallback).
fn config(mock: &MockProvider) -> String {
    let u = &mock.base_url;
    format!(
        r#"
[[providers.entries]]
name = "small"
provider = "anthropic"
base_url = "{u}"
model = "claude-small"
auth_token = "t1"
max_tokens = 1024

[[providers.entries]]
name = "big"
provider = "anthropic"
base_url = "{u}"
model = "claude-big"
auth_token = "t2"
max_tokens = 8000

[[providers.entries]]
name = "oai"
provider = "openai"
base_url = "{u}"
model = "gpt"
auth_token = "t3"

[[providers.entries]]
name = "fb"
provider = "anthropic"
base_url = "{u}"
model = "claude-fb"
auth_token = "t4"
"#
    )
}

fn server_with(env: &[(&str, &str)]) -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let mut o = opts(&config(&mock));
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    let server = Server::start(o);
    (mock, server)
}

fn server() -> (MockProvider, Server) {
    server_with(&[])
}

/// `session.compact` with `params`; (notifications, terminal).
fn compact(server: &Server, f: &Fixture, c: &Client, params: Value) -> (Vec<Value>, Value) {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.compact",
        params,
    )
}

fn compact_stream(server: &Server, f: &Fixture, c: &Client, params: Value) -> RpcStream {
    stream(
        server,
        &f.session_id,
        &c.session_key,
        "session.compact",
        params,
    )
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

#[test]
fn c166_c167_pre_gate_checks() {
    let (mock, server) = server();
    let f = open(&server, "small", &[], &[], json!({}));
    let (_, t) = compact(&server, &f, &f.a, json!({"prompt": 5}));
    assert_rpc_error(
        &t,
        -32001,
        "call session.registerDriver before session.compact",
    );
    testkit::fixtures::register_driver(&server, &f.session_id, &f.a.session_key);
    for bad in [
        json!({"prompt": 5}),
        json!({"prompt": ["x"]}),
        json!({"prompt": {}}),
    ] {
        let (_, t) = compact(&server, &f, &f.a, bad.clone());
        assert_eq!(t["error"]["code"], -32602, "{bad} → {t}");
        assert!(t["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid params: "));
    }
    assert_eq!(mock.request_count(), 0);
    assert_eq!(
        types(&events(&server, &f.session_id, &f.a.session_key)),
        vec!["session.open", "session.driver.register"]
    );
}

#[test]
fn c169_to_c172_c176_c178_successful_manual_compaction() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    mock.push_all([
        Reply::text("first answer").with_usage(100, 20),
        Reply::text("second answer").with_usage(200, 30),
    ]);
    send(&server, &f.session_id, &f.a, json!("first question"));
    send(&server, &f.session_id, &f.a, json!("second question"));
    let before = events(&server, &f.session_id, &f.a.session_key);

    mock.push(Reply::text("THE SUMMARY").with_usage(400, 50));
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    let streamed = note_events(&notes);
    // C-169 sequence, all streamed.
    assert_eq!(
        types(&streamed),
        vec![
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "server.message.send",
            "server.message.send",
            "session.compaction.completed"
        ]
    );
    for e in &streamed {
        assert_eq!(e["client_key_id"], json!(f.a.key_id));
    }
    // C-178: token_count from the newest successful turn response.
    assert_eq!(
        streamed[0]["payload"],
        json!({"trigger": "client", "reason": "manual", "token_count": 230, "threshold_tokens": null})
    );
    let req = &streamed[1]["payload"];
    assert_eq!(req["purpose"], "compaction");
    assert_eq!(req["tools"], json!([]));
    // C-176: max(1024, 4096).
    assert_eq!(req["max_tokens"], 4096);
    assert_eq!(mock.requests()[2].body["max_tokens"], 4096);
    let wire_tools = mock.requests()[2].body.get("tools").cloned();
    assert!(wire_tools.is_none() || wire_tools == Some(json!([])));
    let msgs = req["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 5, "4 history messages + the instruction");
    assert_eq!(msgs[0]["content"], "first question");
    assert_eq!(msgs[3]["content"][0]["text"], "second answer");
    assert!(
        !instruction_of(req).is_empty(),
        "built-in default instruction"
    );
    assert_eq!(streamed[2]["payload"]["purpose"], "compaction");
    assert_eq!(streamed[2]["payload"]["ok"], true);
    // C-170 preamble.
    assert_eq!(
        streamed[3]["payload"],
        json!({"role": "user", "content": [{"type": "text", "text": PREAMBLE}],
               "synthetic": "compaction_preamble"})
    );
    assert_eq!(
        streamed[4]["payload"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "THE SUMMARY"}]})
    );
    let completed = &streamed[5];
    assert_eq!(
        completed["payload"],
        json!({"preamble_event_id": streamed[3]["id"], "summary_event_id": streamed[4]["id"],
               "compacted_message_count": 4, "input_tokens": 400, "summary_tokens": 50})
    );
    // The terminal result is the completed EventView itself.
    assert_eq!(&t["result"], completed);

    // C-171: the next turn starts from preamble + summary.
    mock.push(Reply::text("third answer"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("third question"));
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(
        req["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": PREAMBLE}]},
            {"role": "assistant", "content": [{"type": "text", "text": "THE SUMMARY"}]},
            {"role": "user", "content": "third question"}
        ])
    );
    assert!(req.get("normalized").is_none());
    assert_eq!(mock.requests()[3].body["messages"], req["messages"]);
    // C-172: the log is complete.
    let after = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.len(), before.len() + 6 + 4);
    // A second compaction summarises preamble + summary + the new exchange.
    mock.push(Reply::text("SECOND SUMMARY"));
    let (_, t) = compact(&server, &f, &f.a, json!({}));
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 4);
    // C-178: token_count from the newest non-compaction response (10+5).
    let started = of_type(
        &events(&server, &f.session_id, &f.a.session_key),
        "session.compaction.started",
    );
    assert_eq!(started[1]["payload"]["token_count"], 15);
}

#[test]
fn c176_large_max_tokens_is_kept_and_c186_missing_usage_commits_nulls() {
    let (mock, server) = server();
    let f = open_registered(&server, "big", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    mock.push(Reply::text("summary without usage").without_usage());
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    let streamed = note_events(&notes);
    assert_eq!(streamed[1]["payload"]["max_tokens"], 8000);
    assert_eq!(streamed[2]["payload"]["usage"], Value::Null);
    assert_eq!(t["result"]["event_type"], "session.compaction.completed");
    assert_eq!(t["result"]["payload"]["input_tokens"], Value::Null);
    assert_eq!(t["result"]["payload"]["summary_tokens"], Value::Null);
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 2);
}

#[test]
fn c178_token_count_is_null_without_usable_newest_usage() {
    let (mock, server) = server();
    // No turn at all: null, and an empty history still compacts.
    let f = open_registered(&server, "small", &[], &[], json!({}));
    mock.push(Reply::text("nothing yet"));
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    assert_eq!(
        note_events(&notes)[0]["payload"]["token_count"],
        Value::Null
    );
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 0);
    // Older usage exists, the newest successful response has none: null.
    let g = open_registered(&server, "small", &[], &[], json!({}));
    mock.push_all([
        Reply::text("a").with_usage(50, 50),
        Reply::text("b").without_usage(),
    ]);
    send(&server, &g.session_id, &g.a, json!("1"));
    send(&server, &g.session_id, &g.a, json!("2"));
    mock.push(Reply::text("sum"));
    let (notes, _) = compact(&server, &g, &g.a, json!({}));
    assert_eq!(
        note_events(&notes)[0]["payload"]["token_count"],
        Value::Null
    );
}

#[test]
fn c173_c184_all_compaction_providers_failed() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &["fb"], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    let before = events(&server, &f.session_id, &f.a.session_key);
    mock.push_all([Reply::status(500, "a"), Reply::status(502, "b")]);
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    assert_rpc_error(&t, -32000, "compaction failed: all 2 providers failed");
    let after = events(&server, &f.session_id, &f.a.session_key);
    let new = &after[before.len()..];
    assert_eq!(
        types(new),
        vec![
            "session.compaction.started",
            "provider.request",
            "provider.response",
            "provider.request",
            "provider.response"
        ],
        "C-184: no session.error from a compaction attempt"
    );
    assert_eq!(ids(&note_events(&notes)), ids(new));
    for e in new.iter().skip(1) {
        assert_eq!(e["payload"]["purpose"], "compaction", "{e}");
    }
    assert_eq!(new[3]["payload"]["kind"], "fallback");
    assert_eq!(admin_state(&server, &f.session_id), "open");
    // History unchanged: the next turn still sees the original exchange.
    mock.push(Reply::text("fine"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("next"));
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"], "q");
    assert_eq!(req["messages"].as_array().unwrap().len(), 3);
}

#[test]
fn c174_truncated_summaries_fail_without_fallback() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &["fb"], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    let n = mock.request_count();
    mock.push(Reply::text("cut off").truncated());
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    assert_rpc_error(
        &t,
        -32000,
        "compaction failed: summary truncated: stop_reason max_tokens",
    );
    let streamed = note_events(&notes);
    assert_eq!(
        types(&streamed),
        vec![
            "session.compaction.started",
            "provider.request",
            "provider.response"
        ]
    );
    assert_eq!(streamed[2]["payload"]["ok"], true);
    assert_eq!(
        mock.request_count(),
        n + 1,
        "no fallback after a successful call"
    );

    let g = open_registered(&server, "oai", &[], &[], json!({}));
    send(&server, &g.session_id, &g.a, json!("q"));
    mock.push(Reply::openai_text("cut").truncated());
    let (_, t) = compact(&server, &g, &g.a, json!({}));
    assert_rpc_error(
        &t,
        -32000,
        "compaction failed: summary truncated: finish_reason length",
    );
    assert_eq!(admin_state(&server, &g.session_id), "open");
}

#[test]
fn c175_whitespace_summary_is_empty() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    for reply in [
        Reply::text("  \n\t "),
        Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": "x", "name": "n", "input": {}}),
        ]),
    ] {
        mock.push(reply);
        let (_, t) = compact(&server, &f, &f.a, json!({}));
        assert_rpc_error(&t, -32000, "compaction failed: empty summary");
    }
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.completed").is_empty());
    assert_eq!(admin_state(&server, &f.session_id), "open");
}

#[test]
fn c177_prompt_precedence() {
    let (mock, server) = server();
    let stored = open_registered(
        &server,
        "small",
        &[],
        &[],
        json!({"compaction": {"mode": "client", "prompt": "STORED PROMPT"}}),
    );
    let plain = open_registered(&server, "small", &[], &[], json!({}));
    let auto = open_registered(
        &server,
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
        mock.push(Reply::text("sum"));
        let (notes, t) = compact(&server, f, &f.a, params);
        assert_eq!(
            t["result"]["event_type"], "session.compaction.completed",
            "{t}"
        );
        instructions.push(instruction_of(&note_events(&notes)[1]["payload"]));
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
    let (mock, mut server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    let u = mock.base_url.clone();
    server.restart_with(|o| {
        o.config_toml = Some(testkit::fixtures::provider_toml(&[(
            "other",
            "anthropic",
            &u,
            "m",
            "t",
        )]))
    });
    reregister(&server, &f.session_id, &[&f.a]);
    let before = events(&server, &f.session_id, &f.a.session_key);
    let (notes, t) = compact(&server, &f, &f.a, json!({}));
    assert!(note_events(&notes).is_empty());
    assert_eq!(t["error"]["code"], -32000);
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("compaction failed: provider_config: "),
        "{msg}"
    );
    assert_eq!(events(&server, &f.session_id, &f.a.session_key), before);
    assert_eq!(admin_state(&server, &f.session_id), "open");
}

#[test]
fn c168_compact_during_a_live_pause_fails_fast() {
    let (mock, server) = server_with(&[("BAE_TURN_TIMEOUT", "30")]);
    let (f, b) = get_time_pair(&server, "small");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let before = events(&server, &f.session_id, &f.a.session_key);
    for c in [&f.a, &b] {
        let started = std::time::Instant::now();
        let (notes, t) = compact(&server, &f, c, json!({}));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(notes.is_empty());
        assert_rpc_error(
            &t,
            -32020,
            "turn in progress: resolve the paused turn before compacting",
        );
    }
    assert_eq!(events(&server, &f.session_id, &f.a.session_key), before);
    // The pause is intact: the owner resumes normally.
    mock.push(Reply::text("noon"));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "noon");
}

#[test]
fn compact_queued_behind_a_running_turn_that_then_pauses_gets_32020() {
    let (mock, server) = server_with(&[("BAE_TURN_TIMEOUT", "30")]);
    let (f, b) = get_time_pair(&server, "small");
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})).delayed(Duration::from_millis(400)));
    let mut turn = send_stream(&server, &f.session_id, &f.a, json!("time?"));
    mock.wait_requests(1, WAIT);
    let mut c = compact_stream(&server, &f, &b, json!({}));
    let (_, t) = c.collect_until_terminal(WAIT);
    assert_rpc_error(
        &t.unwrap(),
        -32020,
        "turn in progress: resolve the paused turn before compacting",
    );
    let (_, tt) = turn.collect_until_terminal(WAIT);
    assert_eq!(
        tt.unwrap()["result"]["message"]["content"][0]["dispatch"],
        "client"
    );
    assert_eq!(mock.request_count(), 1);
}

#[test]
fn manual_compact_queues_behind_a_running_turn_and_the_next_send_sees_it() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push_all([
        Reply::text("slow answer").delayed(Duration::from_millis(500)),
        Reply::text("SUMMARY"),
        Reply::text("after"),
    ]);
    let mut turn = send_stream(&server, &f.session_id, &f.a, json!("slow"));
    mock.wait_requests(1, WAIT);
    let mut c = compact_stream(&server, &f, &b, json!({}));
    std::thread::sleep(Duration::from_millis(100));
    // A sendMessage queued behind the compaction.
    let mut next = send_stream(&server, &f.session_id, &f.a, json!("after compaction"));
    c.pump(Duration::from_millis(150));
    assert_eq!(c.body_bytes_received(), 0, "queued compaction is silent");
    let (_, ta) = turn.collect_until_terminal(WAIT);
    let ta = ta.unwrap();
    let (notes, tc) = c.collect_until_terminal(WAIT);
    let tc = tc.unwrap();
    assert_eq!(
        tc["result"]["event_type"], "session.compaction.completed",
        "{tc}"
    );
    let streamed = note_events(&notes);
    assert_eq!(streamed[0]["event_type"], "session.compaction.started");
    assert_eq!(streamed[0]["client_key_id"], json!(b.key_id));
    let log = events(&server, &f.session_id, &f.a.session_key);
    let a_end = log
        .iter()
        .position(|e| e["id"] == result_events(&ta).last().unwrap()["id"])
        .unwrap();
    let c_start = log
        .iter()
        .position(|e| e["id"] == streamed[0]["id"])
        .unwrap();
    assert!(c_start > a_end, "compaction ran after the turn");
    assert_eq!(
        streamed[1]["payload"]["messages"].as_array().unwrap().len(),
        3
    );
    let (_, tn) = next.collect_until_terminal(WAIT);
    let tn = tn.unwrap();
    let req = &of_type(&result_events(&tn), "provider.request")[0]["payload"];
    assert_eq!(req["messages"][0]["content"][0]["text"], PREAMBLE);
    assert_eq!(req["messages"][1]["content"][0]["text"], "SUMMARY");
    assert_eq!(req["messages"][2]["content"], "after compaction");
}

#[test]
fn c183_compact_reclaims_an_expired_pause() {
    let (mock, server) = server_with(&[("BAE_TURN_TIMEOUT", "1")]);
    let (f, b) = get_time_pair(&server, "small");
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_m", "name": "lookup_db", "input": {}}),
        json!({"type": "tool_use", "id": "tu_c", "name": "get_time", "input": {}}),
    ]));
    send(&server, &f.session_id, &f.a, json!("time?"));
    std::thread::sleep(Duration::from_millis(1200));
    mock.push(Reply::text("SUMMARY"));
    let (notes, t) = compact(&server, &f, &b, json!({}));
    let streamed = note_events(&notes);
    assert_eq!(
        types(&streamed),
        vec![
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
    // Streamed to the compact caller, attributed to the owner.
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
    let req = &streamed[4]["payload"];
    let msgs = req["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    let last = msgs[2]["content"].as_array().unwrap();
    assert_eq!(last.len(), 3);
    assert_eq!(last[0], mcp);
    assert_eq!(last[1], synthetic);
    assert_eq!(last[2]["type"], "text");
    assert!(
        msgs[2].get("synthetic").is_none(),
        "synthetic never reaches a provider"
    );
    assert_eq!(t["result"]["payload"]["compacted_message_count"], 3);
    // The owner's late results find nothing to resume.
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c", "x")]),
    );
    assert_rpc_error(
        &t,
        -32000,
        "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
    );
}

#[test]
fn a_turn_after_compaction_on_a_restarted_server() {
    let (mock, mut server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("before"));
    mock.push(Reply::text("PERSISTED SUMMARY"));
    let (_, t) = compact(&server, &f, &f.a, json!({}));
    assert_eq!(t["result"]["event_type"], "session.compaction.completed");
    server.kill9();
    server.restart();
    reregister(&server, &f.session_id, &[&f.a]);
    mock.push(Reply::text("hello again"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("after restart"));
    let req = &of_type(&result_events(&t), "provider.request")[0]["payload"];
    assert_eq!(
        req["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": PREAMBLE}]},
            {"role": "assistant", "content": [{"type": "text", "text": "PERSISTED SUMMARY"}]},
            {"role": "user", "content": "after restart"}
        ])
    );
    // token_count survives too: the newest successful turn usage (10+5).
    mock.push(Reply::text("S2"));
    let (notes, _) = compact(&server, &f, &f.a, json!({}));
    assert_eq!(note_events(&notes)[0]["payload"]["token_count"], 15);
}

#[test]
fn compact_on_an_error_session_and_as_a_notification() {
    let (mock, server) = server();
    // Notification: frames stream, no terminal frame, the body ends.
    let f = open_registered(&server, "small", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("q"));
    mock.push(Reply::text("SUM"));
    let body = json!({"jsonrpc": "2.0", "method": "session.compact", "params": {}});
    let mut s = server
        .client()
        .rpc_stream(&f.session_id, &f.a.session_key, &body);
    let mut frames = Vec::new();
    while let Some(frame) = s.next_frame(WAIT) {
        frames.push(frame);
    }
    assert!(s.is_finished());
    assert!(frames.iter().all(|f| f.get("id").is_none()));
    assert_eq!(
        types(&note_events(&frames)).last().map(String::as_str),
        Some("session.compaction.completed")
    );
    // Error session: -32000 before the gate, nothing logged.
    mock.push(Reply::status(500, "x"));
    send(&server, &f.session_id, &f.a, json!("fails"));
    assert_eq!(admin_state(&server, &f.session_id), "error");
    let before = events(&server, &f.session_id, &f.a.session_key).len();
    let (_, t) = compact(&server, &f, &f.a, json!({}));
    assert_rpc_error(&t, -32000, "session is error, not open");
    assert_eq!(
        events(&server, &f.session_id, &f.a.session_key).len(),
        before
    );
}

/// Spec 07 §8: a compaction waiting on the gate when the session is closed
/// fails the post-gate state check.
#[test]
fn queued_compaction_fails_when_the_session_is_closed() {
    let (mock, server) = server();
    let f = open_registered(&server, "small", &[], &[], json!({}));
    let b = f.join_registered(&server, json!({}));
    mock.push(Reply::text("slow").delayed(Duration::from_millis(500)));
    let _turn = send_stream(&server, &f.session_id, &f.a, json!("slow"));
    mock.wait_requests(1, WAIT);
    let mut c = compact_stream(&server, &f, &b, json!({}));
    c.pump(Duration::from_millis(100));
    assert_eq!(c.body_bytes_received(), 0);
    server
        .client()
        .bearer(&b.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    let (notes, t) = c.collect_until_terminal(WAIT);
    assert!(note_events(&notes).is_empty(), "{notes:?}");
    assert_rpc_error(&t.expect("terminal"), -32000, "session is closed, not open");
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(of_type(&log, "session.compaction.started").is_empty());
}
