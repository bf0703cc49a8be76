//! `session.compact` over the real binary (spec 07 §2, §4–§8; checklist
//! C-169…C-176): a full compaction and truncated summaries as the mock
//! provider serves them in both wire formats, and a turn after compaction
//! on a server restarted with kill -9. Pre-gate checks, failures, prompt
//! precedence, compaction on the turn gate and the other cases of
//! C-166…C-186 are tested in-process in `engine/tests/compaction_flows.rs`.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{MockProvider, Reply, Server};

const PREAMBLE: &str = "The earlier part of this conversation was compacted. A summary follows.";

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
