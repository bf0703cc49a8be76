//! Extension `turn.steer` in the session core: who may steer, where an
//! applied steer lands, and what happens to steers a turn never applies.

use super::*;
use crate::session_core::SteerRefusal;

/// A steer waits for the running turn's next round trip; it is logged
/// there, after the round's tool results, answered right after its event,
/// and sent after the turn's tool rounds.
#[test]
fn a_steer_is_applied_at_the_next_round_trip() {
    let mut h = Harness::new();
    h.send("key_a", json!("start"));
    assert_eq!(
        h.core.steer(ConnId(7), "key_a", json!("focus on X")),
        Ok(())
    );
    h.answer(json!([tool_use("tu_1", "nowhere", json!({}))]));
    let at = h
        .seen
        .iter()
        .position(|s| matches!(s, Seen::SteerApplied(ConnId(7), _)))
        .expect("applied");
    let Seen::Event(EventType::ClientMessageSend, payload, false) = &h.seen[at - 1] else {
        panic!("{:?}", h.seen[at - 1]);
    };
    assert_eq!(payload["content"], "focus on X");
    let Seen::SteerApplied(_, event_id) = &h.seen[at] else {
        panic!();
    };
    assert_eq!(Some(event_id), h.ids.values().nth(at_event_index(&h, at)));
    // Sent after the round's results (Anthropic merges the two user
    // messages into one).
    let messages = h.last_body()["messages"].clone();
    let last = messages.as_array().unwrap().last().unwrap();
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][1]["text"], "focus on X");
}

/// The index among logged events of the event just before `seen[at]`.
fn at_event_index(h: &Harness, at: usize) -> usize {
    h.seen[..at]
        .iter()
        .filter(|s| matches!(s, Seen::Event(..)))
        .count()
        - 1
}

/// Only the running turn's driver may steer, never a compaction or a
/// paused turn, and at most 16 steers wait.
#[test]
fn who_may_steer_and_how_many() {
    let mut h = Harness::new();
    assert_eq!(
        h.core.steer(ConnId(7), "key_a", json!("x")),
        Err(SteerRefusal::NotRunning)
    );
    h.send("key_a", json!("start"));
    assert_eq!(
        h.core.steer(ConnId(7), "key_b", json!("x")),
        Err(SteerRefusal::NotOwner)
    );
    for i in 0..16 {
        assert_eq!(h.core.steer(ConnId(10 + i), "key_a", json!("x")), Ok(()));
    }
    assert_eq!(
        h.core.steer(ConnId(7), "key_a", json!("x")),
        Err(SteerRefusal::TooMany)
    );
    h.answer(json!([tool_use("tu_1", "client_tool", json!({}))]));
    assert_eq!(
        h.core.steer(ConnId(7), "key_a", json!("x")),
        Err(SteerRefusal::Paused)
    );
    let mut h = Harness::new();
    h.compact("key_a", None);
    assert_eq!(
        h.core.steer(ConnId(7), "key_a", json!("x")),
        Err(SteerRefusal::Compaction)
    );
}

/// A turn that completes before its next provider call never applies its
/// steers; the engine answers them from the ended turn.
#[test]
fn steers_of_a_turn_that_ends_stay_unapplied() {
    let mut h = Harness::new();
    h.send("key_a", json!("start"));
    h.core.steer(ConnId(7), "key_a", json!("late")).unwrap();
    h.answer(text("done"));
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
    assert_eq!(h.count(|s| matches!(s, Seen::SteerApplied(..))), 0);
    assert_eq!(h.ended.as_ref().unwrap().steers.len(), 1);
}

/// An inline compaction retires the waiting steers itself.
#[test]
fn an_inline_compaction_retires_waiting_steers() {
    let mut h = Harness::new();
    h.world.auto_size = Some(40);
    h.send("key_a", json!("start"));
    h.core.steer(ConnId(7), "key_a", json!("late")).unwrap();
    h.answer(text("done"));
    assert!(h.seen.contains(&Seen::SteerRetired(
        ConnId(7),
        "the turn ended before its next provider call"
    )));
}

/// A turn that fails before its next provider call says why to its waiting
/// steers (docs/extensions.md): every provider failed, the loop limit, or
/// a failure of the turn itself.
#[test]
fn steers_of_a_failing_turn_say_how_it_failed() {
    // Every provider failed.
    let mut h = Harness::new();
    h.send("key_a", json!("start"));
    h.core.steer(ConnId(7), "key_a", json!("late")).unwrap();
    h.reply(5, failed(503));
    assert_eq!(h.ending(), Some(&Ending::ProvidersFailed));
    assert!(
        h.seen
            .contains(&Seen::SteerRetired(ConnId(7), "all providers failed")),
        "{:?}",
        h.seen
    );
    // The loop limit: the steer arrives during the eighth round trip.
    let mut h = Harness::new();
    h.send("key_a", json!("loop"));
    for i in 0..8 {
        if i == 7 {
            h.core.steer(ConnId(8), "key_a", json!("stop")).unwrap();
        }
        h.answer(json!([tool_use(
            &format!("tu_{i}"),
            "unknown_tool",
            json!({})
        )]));
    }
    assert_eq!(h.ending(), Some(&Ending::ProvidersFailed));
    assert!(h.seen.contains(&Seen::SteerRetired(
        ConnId(8),
        "the turn reached its loop limit"
    )));
    assert_eq!(h.count(|s| matches!(s, Seen::SteerApplied(..))), 0);
}
