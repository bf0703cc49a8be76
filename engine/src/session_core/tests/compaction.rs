//! Compaction against the gate: it never waits on a live pause, reclaims
//! an expired one, and queues like any request behind a running turn
//! (spec 07 §4.2; C-168, C-183).

use super::*;

#[test]
fn c168_compaction_during_a_live_pause_is_refused_at_once() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    let c = h.compact("ka");
    assert_eq!(h.refused(c), Some(Refusal::TurnInProgress));
    assert_eq!(h.paused_owner(), Some("ka"));
}

#[test]
fn c168_refused_even_for_another_driver() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    let c = h.compact("kb");
    assert_eq!(h.refused(c), Some(Refusal::TurnInProgress));
}

#[test]
fn c183_compaction_over_an_expired_pause_reclaims_it() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    h.advance(TIMEOUT);
    let c = h.compact("kb");
    assert_eq!(h.how(c), Some(How::Retire));
    assert_eq!(h.abandoned(), vec!["ka"]);
    assert!(h.running.as_ref().is_some_and(|r| r.compaction));
}

#[test]
fn compaction_queues_behind_a_running_turn() {
    let mut h = Harness::new();
    h.send("ka");
    let c = h.compact("kb");
    assert_eq!(h.queued(), vec![c]);
    h.complete();
    assert_eq!(h.how(c), Some(How::Fresh));
}

#[test]
fn queued_compactions_fail_fast_when_the_turn_pauses() {
    let mut h = Harness::new();
    h.send("ka");
    let c1 = h.compact("kb");
    let b = h.send("kb");
    let c2 = h.compact("kc");
    h.pause(&["t1"]);
    assert_eq!(h.refused(c1), Some(Refusal::TurnInProgress));
    assert_eq!(h.refused(c2), Some(Refusal::TurnInProgress));
    assert_eq!(h.queued(), vec![b], "sends keep waiting");
}

#[test]
fn queued_compaction_behind_an_expired_pause_retires_it() {
    // Queued behind a running turn, then the turn paused and a send queued:
    // the compaction was refused at the pause; a later compaction after the
    // deadline with a waiter ahead queues and the waiter retires.
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    let b = h.send("kb");
    h.now += TIMEOUT;
    let c = h.compact("kc");
    assert_eq!(h.queued(), vec![b, c]);
    h.advance(0);
    assert_eq!(h.how(b), Some(How::Retire));
    h.complete();
    assert_eq!(h.how(c), Some(How::Fresh));
}

#[test]
fn compaction_holding_the_gate_makes_sends_wait() {
    let mut h = Harness::new();
    let c = h.compact("ka");
    let a = h.send("ka");
    assert_eq!(h.running_conn(), Some(c));
    assert_eq!(h.queued(), vec![a]);
    h.complete();
    assert_eq!(h.running_conn(), Some(a));
}

#[test]
fn compaction_never_resumes_its_owners_pause() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    h.advance(TIMEOUT);
    let c = h.compact("ka");
    assert_eq!(
        h.how(c),
        Some(How::Retire),
        "the owner's compaction retires"
    );
}
