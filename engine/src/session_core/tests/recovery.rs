//! Restart rebuild: arrivals before history is loaded wait for the one
//! rebuild, then go through the arrival rules against the pause found in
//! the log (spec 01 §10 note 3).

use super::*;

#[test]
fn first_arrival_starts_the_one_rebuild() {
    let mut h = Harness::restarted();
    assert!(h.gate.begin_recovery());
    assert!(matches!(h.gate.holder(), Holder::Recovering));
    assert!(
        !h.gate.begin_recovery(),
        "later arrivals do not start another"
    );
}

#[test]
fn arrivals_during_recovery_queue_in_order() {
    let mut h = Harness::restarted();
    let a = h.send("ka");
    let b = h.send("kb");
    assert_eq!(h.queued(), vec![a, b]);
    assert_eq!(h.running_conn(), None);
}

#[test]
fn recovered_without_a_pause_runs_the_first_and_queues_the_rest() {
    let mut h = Harness::restarted();
    let a = h.send("ka");
    let b = h.send("kb");
    h.recovered(None);
    assert_eq!(h.how(a), Some(How::Fresh));
    assert_eq!(h.queued(), vec![b]);
}

#[test]
fn recovered_pause_is_resumed_by_its_owner_even_behind_others() {
    let mut h = Harness::restarted();
    let b = h.send("kb");
    let a = h.send("ka");
    let deadline = h.now + TIMEOUT;
    h.recovered(Some(pause_of("ka", deadline, &["t1"])));
    assert_eq!(h.how(a), Some(How::Resume));
    assert_eq!(h.queued(), vec![b]);
}

#[test]
fn recovered_pause_gets_a_fresh_deadline_for_others() {
    let mut h = Harness::restarted();
    let b = h.send("kb");
    let deadline = h.now + TIMEOUT;
    h.recovered(Some(pause_of("ka", deadline, &["t1"])));
    assert_eq!(h.queued(), vec![b]);
    assert_eq!(h.gate.deadline(), Some(deadline));
    h.advance(TIMEOUT);
    assert_eq!(h.how(b), Some(How::Retire));
    assert_eq!(h.abandoned(), vec!["ka"]);
}

#[test]
fn restored_cancelled_pause_is_retired_by_the_first_arrival() {
    let mut h = Harness::restarted();
    let a = h.send("ka");
    let mut p = pause_of("ka", MonoMs(0), &["t1"]);
    p.cancelled = true;
    h.recovered(Some(p));
    assert_eq!(h.how(a), Some(How::Retire));
    assert!(
        h.abandoned().is_empty(),
        "its abandonment is already logged"
    );
}

#[test]
fn recovered_compaction_against_a_restored_live_pause_is_refused() {
    let mut h = Harness::restarted();
    let c = h.compact("kb");
    let deadline = h.now + TIMEOUT;
    h.recovered(Some(pause_of("ka", deadline, &["t1"])));
    assert_eq!(h.refused(c), Some(Refusal::TurnInProgress));
}

#[test]
fn waiters_gone_during_recovery_are_dropped() {
    let mut h = Harness::restarted();
    let a = h.send("ka");
    let b = h.send("kb");
    h.close(a);
    h.recovered(None);
    assert_eq!(h.how(b), Some(How::Fresh));
}

#[test]
fn recovery_failure_frees_the_gate_and_hands_back_waiters() {
    let mut h = Harness::restarted();
    let a = h.send("ka");
    let b = h.send("kb");
    let back: Vec<ConnId> = h.gate.recovery_failed().iter().map(|w| w.conn).collect();
    assert_eq!(back, vec![a, b]);
    assert!(matches!(h.gate.holder(), Holder::Free));
    assert!(h.gate.begin_recovery(), "the next arrival tries again");
}

#[test]
fn recovery_respects_the_queue_limit() {
    let mut h = Harness::restarted();
    h.limits.max_queued = 1;
    h.send("ka");
    let b = h.send("kb");
    assert_eq!(h.refused(b), Some(Refusal::QueueFull));
}
