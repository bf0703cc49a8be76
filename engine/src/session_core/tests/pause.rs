//! Paused turns: owner-only continuation, the abandonment deadline, and
//! reclaim by another arrival or by the engine's own timer (spec 01 §8.3;
//! C-120, C-121, C-123).

use super::*;

/// `ka` runs and pauses for tool `t1`; returns its connection.
fn paused() -> (Harness, ConnId) {
    let mut h = Harness::new();
    let a = h.send("ka");
    h.pause(&["t1"]);
    assert_eq!(h.paused_owner(), Some("ka"));
    (h, a)
}

#[test]
fn c120_owner_resumes_without_queuing() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    let a2 = h.send("ka");
    assert_eq!(h.how(a2), Some(How::Resume));
    assert_eq!(h.queued(), vec![b], "the other driver still waits");
}

#[test]
fn c120_other_driver_queues_during_a_live_pause() {
    let (mut h, _) = paused();
    h.advance(TIMEOUT - 1);
    let b = h.send("kb");
    assert_eq!(h.queued(), vec![b]);
    assert_eq!(h.paused_owner(), Some("ka"));
}

#[test]
fn resume_carries_the_pause_it_continues() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1", "t2"]);
    h.send("ka");
    let took = h.running.as_ref().and_then(|r| r.took.clone()).unwrap();
    assert_eq!(took.expected, vec!["t1", "t2"]);
    assert_eq!(took.owner, "ka");
}

#[test]
fn c123_owner_after_the_deadline_but_before_anyone_else_resumes() {
    let (mut h, _) = paused();
    h.advance(TIMEOUT * 5);
    let a2 = h.send("ka");
    assert_eq!(h.how(a2), Some(How::Resume));
    assert!(h.abandoned().is_empty());
}

#[test]
fn c121_other_driver_after_the_deadline_retires_the_pause() {
    let (mut h, _) = paused();
    h.advance(TIMEOUT);
    let b = h.send("kb");
    assert_eq!(h.how(b), Some(How::Retire));
    assert_eq!(h.abandoned(), vec!["ka"]);
}

#[test]
fn deadline_is_inclusive() {
    let (mut h, _) = paused();
    h.advance(TIMEOUT - 1);
    let b = h.send("kb");
    assert_eq!(h.queued(), vec![b]);
    h.advance(1);
    assert_eq!(h.how(b), Some(How::Retire), "timer fires at the deadline");
}

#[test]
fn nobody_waiting_means_no_timer() {
    let (h, _) = paused();
    assert_eq!(h.gate.deadline(), None);
}

#[test]
fn a_waiter_arms_the_timer_at_the_pause_deadline() {
    let (mut h, _) = paused();
    let deadline = h.now + TIMEOUT;
    h.send("kb");
    assert_eq!(h.gate.deadline(), Some(deadline));
}

#[test]
fn timer_retires_the_pause_for_the_oldest_waiter() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    let c = h.send("kc");
    h.advance(TIMEOUT);
    assert_eq!(h.how(b), Some(How::Retire));
    assert_eq!(h.queued(), vec![c]);
    assert_eq!(h.abandoned(), vec!["ka"]);
}

#[test]
fn tick_before_the_deadline_does_nothing() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    let closed = h.closed.clone();
    assert!(h.gate.tick(h.now + 1, |c| !closed.contains(&c)).is_none());
    assert_eq!(h.queued(), vec![b]);
    assert_eq!(h.paused_owner(), Some("ka"));
}

#[test]
fn late_arrival_behind_waiters_does_not_jump_them() {
    // After the deadline, with someone already waiting (the timer has not
    // fired yet), a newcomer queues: the oldest waiter retires the pause.
    let (mut h, _) = paused();
    let b = h.send("kb");
    h.now += TIMEOUT; // time passes without the timer firing
    let c = h.send("kc");
    assert_eq!(h.queued(), vec![b, c]);
    h.advance(0);
    assert_eq!(h.running_conn(), Some(b));
}

#[test]
fn owners_own_queued_request_retires_its_pause_at_the_deadline() {
    // A second request the owner queued while its turn ran is a waiter
    // like any other: it does not resume the pause, the timer admits it
    // and it retires the pause.
    let mut h = Harness::new();
    h.send("ka");
    let a2 = h.send("ka");
    h.pause(&["t1"]);
    assert_eq!(h.queued(), vec![a2]);
    h.advance(TIMEOUT);
    assert_eq!(h.how(a2), Some(How::Retire));
    assert_eq!(h.abandoned(), vec!["ka"]);
}

#[test]
fn retired_pause_owner_returning_later_starts_fresh() {
    let (mut h, _) = paused();
    h.advance(TIMEOUT);
    h.send("kb");
    h.complete();
    let a2 = h.send("ka");
    assert_eq!(h.how(a2), Some(How::Fresh));
}

#[test]
fn timer_skips_departed_waiters() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    let c = h.send("kc");
    h.closed.insert(b);
    h.advance(TIMEOUT);
    assert_eq!(h.running_conn(), Some(c));
}

#[test]
fn timer_with_only_departed_waiters_keeps_the_pause() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    h.closed.insert(b);
    h.advance(TIMEOUT);
    assert_eq!(h.paused_owner(), Some("ka"));
    assert_eq!(h.running_conn(), None);
}

#[test]
fn two_pauses_in_a_row_each_time_out_on_their_own() {
    let (mut h, _) = paused();
    let b = h.send("kb");
    h.advance(TIMEOUT);
    assert_eq!(h.running_conn(), Some(b));
    h.pause(&["t2"]);
    let c = h.send("kc");
    h.advance(TIMEOUT - 1);
    assert_eq!(h.queued(), vec![c]);
    h.advance(1);
    assert_eq!(h.how(c), Some(How::Retire));
    assert_eq!(h.abandoned(), vec!["ka", "kb"]);
}
