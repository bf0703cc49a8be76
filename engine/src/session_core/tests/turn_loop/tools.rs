//! Tool rounds (spec 06 §2): classification, server-side blocks in block
//! order (MCP and sandbox calls wait; unavailable tools answer at once),
//! the pause for client blocks and its continuation.

use super::*;
use crate::sandbox::ExecOutput;
use crate::session_core::Pause;

fn exec(stdout: &str, exit_code: i64) -> ExecOutput {
    ExecOutput {
        stdout: stdout.into(),
        stderr: String::new(),
        exit_code,
        stdout_truncated: false,
        stderr_truncated: false,
    }
}

/// C-101: a client tool pauses the turn: its `tool.call`, then the
/// assistant message with every `tool_use` tagged, and the pause names the
/// expected ids, its owner and its deadline.
#[test]
fn a_client_tool_pauses_the_turn() {
    let mut h = Harness::new();
    h.send("key_a", json!("use a tool"));
    h.answer(json!([tool_use("tu_1", "client_tool", json!({"q": 1}))]));
    let call = &h.payloads(EventType::ToolCall)[0];
    assert_eq!(call["dispatch"], "client");
    assert_eq!(call["input"], json!({"q": 1}));
    let Some(Ending::Paused(message, pause)) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    let message: Value = serde_json::from_str(message).unwrap();
    assert_eq!(message["content"][0]["dispatch"], "client");
    assert_eq!(pause.expected, ["tu_1"]);
    assert_eq!(&*pause.owner, "key_a");
    assert_eq!(pause.deadline, h.now + TIMEOUT);
    assert!(matches!(h.core.gate.holder(), Holder::Paused(_)));
}

/// C-104: the owner's continuation merges its results into one user
/// message, logs each client `tool.result` (unechoed) and goes on.
#[test]
fn the_owner_continues_a_paused_turn_with_its_results() {
    let mut h = Harness::new();
    h.send("key_a", json!("use a tool"));
    h.answer(json!([tool_use("tu_1", "client_tool", json!({}))]));
    let Some(Ending::Paused(_, pause)) = h.ending().cloned() else {
        panic!();
    };
    h.seen.clear();
    h.core.gate = Default::default();
    let content = json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "42"}]);
    h.send_after("key_a", content, Takeover::Resume(pause));
    assert_eq!(
        h.events(),
        [
            EventType::ClientMessageSend,
            EventType::ToolResult,
            EventType::ProviderRequest
        ]
    );
    assert!(h
        .seen
        .iter()
        .take(2)
        .all(|s| matches!(s, Seen::Event(_, _, true))));
    let result = &h.payloads(EventType::ToolResult)[0];
    assert_eq!(result["dispatch"], "client");
    assert_eq!(result["content"], "42");
}

/// A continuation that does not fit the pause is logged as
/// `tool_result_merge_invalid` and errors the session.
#[test]
fn a_continuation_that_does_not_fit_errors_the_session() {
    let mut h = Harness::new();
    let pause = Pause {
        owner: "key_a".into(),
        deadline: MonoMs(99_999),
        expected: vec!["tu_1".into()],
        server_results: Vec::new(),
        auto_trigger: None,
        cancelled: false,
    };
    let content = json!([{"type": "tool_result", "tool_use_id": "tu_9", "content": "x"}]);
    h.send_after("key_a", content, Takeover::Resume(pause));
    let e = &h.payloads(EventType::SessionError)[0];
    assert_eq!(e["reason"], "tool_result_merge_invalid");
    assert!(h.seen.contains(&Seen::SessionError));
    assert!(matches!(h.ending(), Some(Ending::Failed { .. })));
}

/// A pause carries its crossing of the auto-compaction threshold to the
/// request that resumes it (spec 07 §3.2).
#[test]
fn a_pause_carries_its_threshold_crossing() {
    let mut h = Harness::new();
    h.world.auto_size = Some(40);
    h.send("key_a", json!("go"));
    h.reply(5, ok(json!([tool_use("tu_1", "client_tool", json!({}))])));
    let Some(Ending::Paused(_, pause)) = h.ending() else {
        panic!();
    };
    assert_eq!(pause.auto_trigger, Some(42));
}

/// An MCP tool waits for its call; the outcome is logged as `mcp.response`
/// and `tool.result`, and the round goes on with the next round trip.
#[test]
fn an_mcp_tool_waits_for_its_call_then_the_loop_goes_on() {
    let mut h = Harness::new();
    h.send("key_a", json!("time?"));
    h.answer(json!([tool_use("tu_1", "get_time", json!({"tz": "UTC"}))]));
    assert_eq!(h.payloads(EventType::ToolCall)[0]["server_name"], "clock");
    assert_eq!(h.payloads(EventType::McpRequest)[0]["server_name"], "clock");
    assert!(h.seen.contains(&Seen::CallMcp(
        "get_time".into(),
        json!({"tz": "UTC"}).to_string()
    )));
    assert_eq!(h.payloads(EventType::ProviderRequest).len(), 1);
    h.now += 40;
    h.core.on_mcp_done(mcp_text("12:00"), &h.world, h.now);
    h.drive();
    assert_eq!(h.payloads(EventType::McpResponse)[0]["ok"], true);
    let result = &h.payloads(EventType::ToolResult)[0];
    assert_eq!(result["dispatch"], "mcp");
    assert_eq!(result["server_name"], "clock");
    let body = h.last_body();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    // The block's latency is measured from its start.
    let latency = h.facts().into_iter().find_map(|f| match f {
        Fact::ToolDone { latency_ms, .. } => *latency_ms,
        _ => None,
    });
    assert_eq!(latency, Some(40));
}

/// An MCP outcome nobody waits for changes nothing.
#[test]
fn a_stray_mcp_outcome_is_ignored() {
    let mut h = Harness::new();
    h.send("key_a", json!("hello"));
    let before = h.seen.len();
    h.core.on_mcp_done(mcp_text("late"), &h.world, h.now);
    h.drive();
    assert_eq!(h.seen.len(), before);
}

/// Spec 06 §2.1: a tool no MCP server advertises answers at once with the
/// unrouted error, logged as a failed `mcp.request`/`mcp.response`.
#[test]
fn an_unrouted_tool_answers_at_once_with_an_error() {
    let mut h = Harness::new();
    h.send("key_a", json!("x"));
    h.answer(json!([tool_use("tu_1", "nowhere", json!({}))]));
    let response = &h.payloads(EventType::McpResponse)[0];
    assert_eq!(response["server_name"], Value::Null);
    assert!(response["error"].as_str().unwrap().contains("'nowhere'"));
    assert_eq!(h.payloads(EventType::ToolResult)[0]["is_error"], true);
    assert_eq!(h.payloads(EventType::ProviderRequest).len(), 2);
}

/// Spec 06 §5.5: with a running sandbox, a sandbox tool's command is run;
/// its output is logged and becomes the rendered result text.
#[test]
fn a_sandbox_tool_runs_in_the_running_sandbox() {
    let mut h = Harness::new();
    h.world.sandbox = Some(("img".into(), "c1".into()));
    h.send("key_a", json!("ls"));
    h.answer(json!([tool_use("tu_1", "bash", json!({"command": "ls"}))]));
    assert!(h.seen.contains(&Seen::Exec(0, "ls".into())));
    h.core
        .on_exec_done(0, ("img", "c1"), Ok(exec("a\nb", 2)), &h.world, h.now);
    h.drive();
    let response = &h.payloads(EventType::SandboxResponse)[0];
    assert_eq!(response["sandbox_id"], "c1");
    assert_eq!(response["ok"], false);
    let result = &h.payloads(EventType::ToolResult)[0];
    assert_eq!(result["content"][0]["text"], "a\nb\n[exit_code: 2]");
    assert_eq!(result["is_error"], true);
}

/// A driver error of an exec is the turn's `session.sandbox.error` first,
/// then a failed `sandbox.response`.
#[test]
fn a_failed_exec_logs_the_driver_error_first() {
    let mut h = Harness::new();
    h.world.sandbox = Some(("img".into(), "c1".into()));
    h.send("key_a", json!("ls"));
    h.answer(json!([tool_use("tu_1", "bash", json!({"command": "ls"}))]));
    h.core.on_exec_done(
        0,
        ("img", "c1"),
        Err(crate::sandbox::SandboxError::Stopped),
        &h.world,
        h.now,
    );
    h.drive();
    let tail: Vec<EventType> = h.events().into_iter().rev().take(4).collect();
    assert_eq!(
        tail,
        [
            EventType::ProviderRequest,
            EventType::ToolResult,
            EventType::SandboxResponse,
            EventType::SessionSandboxError
        ]
    );
    // The error is logged as its documented text.
    let detail = &h.payloads(EventType::SessionSandboxError)[0]["detail"];
    assert_eq!(
        detail,
        "sandbox runtime error: the remote sandbox was stopped"
    );
    // An exec outcome for another block is not this one's.
    h.core
        .on_exec_done(3, ("img", "c1"), Ok(exec("", 0)), &h.world, h.now);
    h.drive();
    assert_eq!(h.payloads(EventType::ToolResult).len(), 1);
}

/// Without a sandbox, a sandbox tool answers at once with its documented
/// error; with one but no string `command`, with the other.
#[test]
fn sandbox_tools_without_a_sandbox_or_command_answer_at_once() {
    let mut h = Harness::new();
    h.send("key_a", json!("ls"));
    h.answer(json!([tool_use("tu_1", "bash", json!({"command": "ls"}))]));
    let e = h.payloads(EventType::SandboxResponse)[0]["error"].clone();
    assert!(e
        .as_str()
        .unwrap()
        .starts_with("no remote sandbox is running"));
    let mut h = Harness::new();
    h.world.sandbox = Some(("img".into(), "c1".into()));
    h.send("key_a", json!("ls"));
    h.answer(json!([tool_use("tu_1", "bash", json!({"cmd": "ls"}))]));
    let e = h.payloads(EventType::SandboxResponse)[0]["error"].clone();
    assert!(e.as_str().unwrap().contains("missing the required string"));
}

/// Spec 06 §6.3: a launched subagent is logged as started then running,
/// and its result tells the model its id.
#[test]
fn a_launched_subagent_logs_start_and_running() {
    let mut h = Harness::new();
    h.subagent = SubagentAnswer::Launched {
        id: "sba_1".into(),
        harness: "claude".into(),
        model: "m".into(),
    };
    h.send("key_a", json!("delegate"));
    h.answer(json!([tool_use("tu_1", "launch_subagent", json!({}))]));
    let tail: Vec<EventType> = h.events().into_iter().skip(3).take(4).collect();
    assert_eq!(
        tail,
        [
            EventType::ToolCall,
            EventType::SessionSubagentStart,
            EventType::SessionSubagentRunning,
            EventType::ToolResult
        ]
    );
    let result = &h.payloads(EventType::ToolResult)[0];
    assert!(result["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"sba_1\""));
}

/// Server blocks run in block order around client blocks; the pause keeps
/// the server's results for the merge.
#[test]
fn server_blocks_run_in_order_and_their_results_wait_in_the_pause() {
    let mut h = Harness::new();
    h.send("key_a", json!("mixed"));
    h.answer(json!([
        tool_use("tu_1", "nowhere", json!({})),
        tool_use("tu_2", "client_tool", json!({})),
        tool_use("tu_3", "also_nowhere", json!({}))
    ]));
    let ids: Vec<Value> = h
        .payloads(EventType::ToolResult)
        .iter()
        .map(|p| p["tool_use_id"].clone())
        .collect();
    assert_eq!(ids, [json!("tu_1"), json!("tu_3")]);
    let Some(Ending::Paused(message, pause)) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    let message: Value = serde_json::from_str(message).unwrap();
    assert_eq!(pause.expected, ["tu_1", "tu_2", "tu_3"]);
    assert_eq!(pause.server_results.len(), 2);
    let tags: Vec<&Value> = (message["content"].as_array().unwrap())
        .iter()
        .map(|b| &b["dispatch"])
        .collect();
    assert_eq!(tags, [&json!("mcp"), &json!("client"), &json!("mcp")]);
}
