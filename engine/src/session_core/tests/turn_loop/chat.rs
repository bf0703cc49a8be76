//! The chat loop: the recorded user message, the provider attempt walk,
//! round trips and their limit (spec 01 §8.4, spec 05 §5, §9).

use super::*;

/// C-060/C-070: a text turn records the user message (unechoed), one
/// request and its response, the assistant message, and completes with it;
/// every event is in the turn's `result.events`, in order.
#[test]
fn a_text_turn_records_its_events_and_completes() {
    let mut h = Harness::new();
    h.send("key_a", json!("hello"));
    assert_eq!(
        h.events(),
        [EventType::ClientMessageSend, EventType::ProviderRequest]
    );
    assert!(matches!(&h.seen[0], Seen::Event(_, p, true) if p["content"] == "hello"));
    assert_eq!(h.last_body()["messages"][0]["content"], "hello");
    h.answer(text("hi there"));
    assert_eq!(
        h.events(),
        [
            EventType::ClientMessageSend,
            EventType::ProviderRequest,
            EventType::ProviderResponse,
            EventType::ServerMessageSend
        ]
    );
    let Some(Ending::Completed(message)) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    // The answer is the logged `server.message.send` payload, serialised once.
    let message: Value = serde_json::from_str(message).unwrap();
    assert_eq!(message, h.payloads(EventType::ServerMessageSend)[0]);
    assert_eq!(message["content"][0]["text"], "hi there");
    let t = h.ended.as_ref().unwrap();
    assert_eq!(t.event_seqs, [1, 2, 3, 4]);
    assert_eq!(t.events.len(), 4);
    assert!(holder_is_free(&h.core));
    // The cached history holds the exchange, as a rebuild from the log would.
    let history = h.core.history.as_ref().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(h.core.newest_usage, Some((30, 12)));
}

/// The provider's latency and outcome are measured per attempt.
#[test]
fn each_reply_is_measured_with_its_latency() {
    let mut h = Harness::new();
    h.send("key_a", json!("hello"));
    h.reply(250, ok(text("x")));
    let returned = h
        .facts()
        .into_iter()
        .find_map(|f| match f {
            Fact::ProviderReturned {
                call,
                ok,
                latency_ms,
                ..
            } => Some((*call, *ok, *latency_ms)),
            _ => None,
        })
        .unwrap();
    assert_eq!(returned, (CallId(1), true, 250));
}

/// Spec 05 §5: a failed primary logs its response and a session error,
/// then the fallback is asked (attempt 1) and its answer completes the turn.
#[test]
fn a_failed_primary_falls_back_to_the_next_entry() {
    let mut h = Harness::new();
    h.world.chain = Ok(vec![entry("primary"), entry("backup")]);
    h.send("key_a", json!("hello"));
    h.reply(5, failed(500));
    let requests = h.payloads(EventType::ProviderRequest);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["kind"], "fallback");
    assert_eq!(requests[1]["base_url"], "http://backup.test");
    let errors = h.payloads(EventType::SessionError);
    assert_eq!(errors[0]["reason"], "provider_call_failed");
    assert!(h.count(|s| matches!(s, Seen::Call(_, 1, _))) == 1);
    h.answer(text("from backup"));
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
    assert_eq!(h.count(|s| *s == Seen::SessionError), 0);
}

/// C-084/C-085: every provider failed: `all_providers_failed`, the
/// session goes to `error`, the turn ends `ProvidersFailed`.
#[test]
fn when_every_provider_fails_the_session_errors() {
    let mut h = Harness::new();
    h.world.chain = Ok(vec![entry("primary"), entry("backup")]);
    h.send("key_a", json!("hello"));
    h.reply(5, ProviderReply::Transport("refused".into()));
    h.reply(5, failed(503));
    let reasons: Vec<Value> = h
        .payloads(EventType::SessionError)
        .iter()
        .map(|p| p["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [json!("provider_call_failed"), json!("all_providers_failed")]
    );
    assert_eq!(h.count(|s| *s == Seen::SessionError), 1);
    assert_eq!(h.ending(), Some(&Ending::ProvidersFailed));
}

/// A reply for a call that is not in flight changes nothing.
#[test]
fn a_stray_reply_is_refused() {
    let mut h = Harness::new();
    h.send("key_a", json!("hello"));
    let before = h.seen.len();
    assert!(!h.core.on_reply(CallId(99), ok(text("x")), &h.world, h.now));
    h.drive();
    assert_eq!(h.seen.len(), before);
    // The real reply still completes the turn; a second copy is refused.
    h.answer(text("x"));
    assert!(!h.core.on_reply(CallId(1), ok(text("x")), &h.world, h.now));
}

/// Spec 05 §9: an all-server round goes round again; the ninth round trip
/// is refused with `loop_limit` and the session errors.
#[test]
fn the_loop_stops_after_eight_round_trips() {
    let mut h = Harness::new();
    h.send("key_a", json!("loop"));
    for i in 0..8 {
        // An MCP tool no server advertises completes at once with an error.
        h.answer(json!([tool_use(
            &format!("tu_{i}"),
            "unknown_tool",
            json!({})
        )]));
    }
    let errors = h.payloads(EventType::SessionError);
    assert_eq!(errors.last().unwrap()["reason"], "loop_limit");
    assert_eq!(errors.last().unwrap()["max_iterations"], 8);
    assert_eq!(h.payloads(EventType::ProviderRequest).len(), 8);
    assert_eq!(h.ending(), Some(&Ending::ProvidersFailed));
    // Each later request carried the earlier rounds after the user message.
    let body = h.last_body();
    assert_eq!(body["messages"].as_array().unwrap().len(), 1 + 2 * 7);
}

/// A closed session takes no turn: the request fails, nothing is logged.
#[test]
fn a_session_that_is_not_open_fails_the_request() {
    let mut h = Harness::new();
    h.world.open_error = Some("session is closed, not open".into());
    h.send("key_a", json!("hello"));
    assert!(h.events().is_empty());
    assert_eq!(
        h.ending(),
        Some(&Ending::Failed {
            code: proto::jsonrpc::codes::APPLICATION_ERROR,
            message: "session is closed, not open".into()
        })
    );
}

/// `tool_result`s with no paused turn: refused, nothing logged (C-108).
#[test]
fn tool_results_without_a_paused_turn_are_refused() {
    let mut h = Harness::new();
    let content = json!([{"type": "tool_result", "tool_use_id": "tu_1", "content": "x"}]);
    h.send("key_a", content);
    assert!(h.events().is_empty());
    let Some(Ending::Failed { message, .. }) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    assert!(message.contains("no paused turn"), "{message}");
}

/// A deleted profile: `profile_unavailable`, the session errors.
#[test]
fn a_deleted_profile_errors_the_session_after_the_user_message() {
    let mut h = Harness::new();
    h.world.chain = Err(ChainError::ProfileUnavailable {
        profile_id: "pro_1".into(),
    });
    h.send("key_a", json!("hello"));
    assert_eq!(
        h.events(),
        [EventType::ClientMessageSend, EventType::SessionError]
    );
    assert_eq!(
        h.payloads(EventType::SessionError)[0],
        json!({"reason": "profile_unavailable", "profile_id": "pro_1"})
    );
    assert_eq!(h.count(|s| *s == Seen::SessionError), 1);
    assert!(matches!(h.ending(), Some(Ending::Failed { .. })));
}

/// An unconfigured primary provider: `provider_config`, ProvidersFailed.
#[test]
fn an_unconfigured_primary_ends_the_turn_as_failed_providers() {
    let mut h = Harness::new();
    h.world.chain = Err(ChainError::PrimaryMissing {
        name: "gone".into(),
    });
    h.send("key_a", json!("hello"));
    let e = &h.payloads(EventType::SessionError)[0];
    assert_eq!(e["reason"], "provider_config");
    assert!(e["detail"].as_str().unwrap().contains("\"gone\""));
    assert_eq!(h.ending(), Some(&Ending::ProvidersFailed));
}

/// After a restart the cached history is missing: the core asks for it,
/// and the request goes out with it.
#[test]
fn a_missing_history_is_loaded_before_the_first_call() {
    let mut h = Harness::new();
    h.core.history = None;
    h.stored_history = Ok(vec![
        json!({"role": "user", "content": "earlier"}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
    ]);
    h.send("key_a", json!("hello"));
    assert!(h.seen.contains(&Seen::LoadHistory));
    assert!(h.seen.contains(&Seen::HistoryRebuilt));
    let messages = h.last_body()["messages"].clone();
    assert_eq!(messages.as_array().unwrap().len(), 2, "{messages}");
    assert_eq!(h.core.newest_usage, Some((10, 5)));
}

/// A failed history read fails the request with `session loop failed`.
#[test]
fn a_failed_history_read_fails_the_request() {
    let mut h = Harness::new();
    h.core.history = None;
    h.stored_history = Err(crate::store::ReadError::Store("disk".into()));
    h.send("key_a", json!("hello"));
    assert_eq!(h.count(|s| matches!(s, Seen::Call(..))), 0);
    let Some(Ending::Failed { message, .. }) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    assert_eq!(message, "session loop failed");
}

/// Reconnecting MCP servers come before the first call: nothing leaves
/// until the engine says they are ready.
#[test]
fn the_first_call_waits_for_restored_mcp_servers() {
    let mut h = Harness::new();
    h.mcp_at_once = false;
    h.send("key_a", json!("hello"));
    assert!(h.seen.contains(&Seen::RestoreMcp));
    assert_eq!(h.count(|s| matches!(s, Seen::Call(..))), 0);
    h.core.mcp_ready(&h.world);
    h.drive();
    assert_eq!(h.count(|s| matches!(s, Seen::Call(..))), 1);
    // A second notice changes nothing.
    h.core.mcp_ready(&h.world);
    h.drive();
    assert_eq!(h.count(|s| matches!(s, Seen::Call(..))), 1);
}

/// The tool list is asked for again at every round trip (spec 05 §9 3a).
#[test]
fn tools_are_recomputed_for_every_round_trip() {
    let mut h = Harness::new();
    h.send("key_a", json!("hello"));
    assert_eq!(h.last_body()["tools"].as_array().unwrap().len(), 3);
    h.world.client.push("another_tool");
    h.answer(json!([tool_use("tu_1", "get_time", json!({}))]));
    h.core.on_mcp_done(mcp_text("12:00"), &h.world, h.now);
    h.drive();
    assert_eq!(h.last_body()["tools"].as_array().unwrap().len(), 4);
}
