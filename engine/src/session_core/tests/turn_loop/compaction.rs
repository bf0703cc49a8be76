//! Compaction in the session core (spec 07): the manual run on the gate,
//! the automatic run at a completed turn with its backoff, and the atomic
//! trio that replaces the history.

use super::*;

fn summary(t: &str) -> ProviderReply {
    ok_usage(text(t), 900, 40)
}

/// C-170: a manual compaction logs `started`, asks with purpose
/// `compaction` and no tools, then logs preamble, summary and `completed`
/// naming their ids; the history becomes the two, and the completion is
/// the request's answer.
#[test]
fn a_manual_compaction_replaces_the_history() {
    let mut h = Harness::new();
    h.send("key_a", json!("first"));
    h.answer(text("answer"));
    h.seen.clear();
    h.compact("key_a", None);
    let started = &h.payloads(EventType::SessionCompactionStarted)[0];
    assert_eq!(started["trigger"], "client");
    assert_eq!(started["token_count"], 42);
    let request = &h.payloads(EventType::ProviderRequest)[0];
    assert_eq!(request["purpose"], "compaction");
    assert_eq!(request["tools"], json!([]));
    assert_eq!(request["max_tokens"], 4096);
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "history and the instruction: {messages:?}"
    );
    h.reply(10, summary("the gist"));
    let completed = &h.payloads(EventType::SessionCompactionCompleted)[0];
    let messages: Vec<u64> = (h.ids.iter())
        .filter(|(_, id)| {
            [
                &completed["preamble_event_id"],
                &completed["summary_event_id"],
            ]
            .iter()
            .any(|v| v.as_str() == Some(id.as_str()))
        })
        .map(|(seq, _)| *seq)
        .collect();
    assert_eq!(messages.len(), 2, "{completed}");
    assert_eq!(completed["compacted_message_count"], 2);
    assert_eq!(completed["input_tokens"], 900);
    assert_eq!(completed["summary_tokens"], 40);
    let Some(Ending::Compacted(Some(json))) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    assert!(json.contains("session.compaction.completed"));
    let history = h.core.history.as_ref().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history.value(1).unwrap()["content"][0]["text"], "the gist");
    assert!(h.seen.contains(&Seen::HistoryRebuilt));
    assert!(holder_is_free(&h.core));
}

/// The call-level prompt wins over the session's stored one, which wins
/// over the built-in instruction.
#[test]
fn the_instruction_is_the_call_prompt_then_the_stored_one() {
    for (call, stored, want) in [
        (Some("call"), Some("stored"), "call"),
        (None, Some("stored"), "stored"),
        (
            None,
            None,
            crate::session_core::compaction::DEFAULT_INSTRUCTION,
        ),
    ] {
        let mut h = Harness::new();
        h.world.prompt = stored.map(str::to_string);
        h.compact("key_a", call);
        let request = &h.payloads(EventType::ProviderRequest)[0];
        let last = request["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["content"], want, "{call:?} {stored:?}");
    }
}

/// An empty summary fails the manual compaction and leaves the history.
#[test]
fn an_empty_summary_fails_and_keeps_the_history() {
    let mut h = Harness::new();
    h.send("key_a", json!("first"));
    h.answer(text("answer"));
    h.compact("key_a", None);
    h.reply(10, summary("   "));
    assert_eq!(h.payloads(EventType::SessionCompactionCompleted).len(), 0);
    let Some(Ending::Failed { message, .. }) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    assert_eq!(message, "compaction failed: empty summary");
    assert_eq!(h.core.history.as_ref().unwrap().len(), 2);
}

/// A deleted profile refuses the compaction before anything is logged.
#[test]
fn a_compaction_on_a_deleted_profile_is_refused() {
    let mut h = Harness::new();
    h.world.profile_live = false;
    h.compact("key_a", None);
    assert!(h.events().is_empty());
    assert!(
        matches!(h.ending(), Some(Ending::Failed { message, .. }) if message.starts_with("profile_unavailable"))
    );
}

/// Spec 07 §3: a completed turn whose usage crossed the threshold runs an
/// inline compaction, then answers with its own message.
#[test]
fn a_completed_turn_over_the_threshold_compacts_inline() {
    let mut h = Harness::new();
    h.world.auto_size = Some(40);
    h.send("key_a", json!("long"));
    h.answer(text("the answer"));
    let started = &h.payloads(EventType::SessionCompactionStarted)[0];
    assert_eq!(started["trigger"], "auto");
    assert_eq!(started["reason"], "token_threshold");
    assert_eq!(started["token_count"], 42);
    assert_eq!(started["threshold_tokens"], 40);
    h.reply(10, summary("gist"));
    let Some(Ending::Completed(message)) = h.ending() else {
        panic!("{:?}", h.ending());
    };
    let message: Value = serde_json::from_str(message).unwrap();
    assert_eq!(message["content"][0]["text"], "the answer");
    // The compaction's events are the turn's too.
    let t = h.ended.as_ref().unwrap();
    assert_eq!(t.events.len(), h.events().len());
}

/// A failed automatic compaction still answers the turn, and arms the
/// backoff: the next completed turn retries only with a higher count.
#[test]
fn a_failed_auto_compaction_backs_off() {
    let mut h = Harness::new();
    h.world.auto_size = Some(40);
    h.send("key_a", json!("long"));
    h.answer(text("the answer"));
    h.reply(10, failed(500));
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
    assert_eq!(h.core.backoff.map(|b| b.token_count), Some(42));
    // The same count again: no retry.
    h.send("key_a", json!("again"));
    h.answer(text("second"));
    assert_eq!(h.payloads(EventType::SessionCompactionStarted).len(), 1);
    // A higher count after a completed turn: retried.
    h.send("key_a", json!("more"));
    h.reply(10, ok_usage(text("third"), 60, 10));
    let started = h.payloads(EventType::SessionCompactionStarted);
    assert_eq!(started.len(), 2);
    assert_eq!(started[1]["reason"], "retry_after_failure");
}
