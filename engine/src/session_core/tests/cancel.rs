//! Cancels (extension `turn.cancel`) and session close against the gate.

use super::*;

#[test]
fn owner_cancels_its_pause_and_the_next_arrival_retires_it() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    assert_eq!(h.gate.cancel_pause(Some("ka")).as_deref(), Some("ka"));
    let a2 = h.send("ka");
    assert_eq!(
        h.how(a2),
        Some(How::Retire),
        "a cancelled pause is not resumed"
    );
    assert!(h.abandoned().is_empty(), "logged at the cancel, not again");
}

#[test]
fn cancel_expires_the_pause_for_waiters_at_once() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    let b = h.send("kb");
    h.gate.cancel_pause(None);
    assert_eq!(h.gate.deadline(), Some(MonoMs(0)));
    h.advance(0);
    assert_eq!(h.how(b), Some(How::Retire));
}

#[test]
fn another_key_cannot_cancel_the_pause() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    assert_eq!(h.gate.cancel_pause(Some("kb")), None);
    let a2 = h.send("ka");
    assert_eq!(h.how(a2), Some(How::Resume));
}

#[test]
fn a_pause_is_cancelled_once() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    assert!(h.gate.cancel_pause(None).is_some());
    assert_eq!(h.gate.cancel_pause(None), None);
}

#[test]
fn nothing_to_cancel_on_a_running_or_free_gate() {
    let mut h = Harness::new();
    assert_eq!(h.gate.cancel_pause(None), None);
    h.send("ka");
    assert_eq!(h.gate.cancel_pause(Some("ka")), None);
}

#[test]
fn cancelling_queued_requests_takes_only_the_owners() {
    let mut h = Harness::new();
    h.send("ka");
    let b1 = h.send("kb");
    let c = h.send("kc");
    let b2 = h.compact("kb");
    let gone: Vec<ConnId> = h
        .gate
        .remove_queued_of("kb")
        .iter()
        .map(|w| w.conn)
        .collect();
    assert_eq!(gone, vec![b1, b2]);
    assert_eq!(h.queued(), vec![c]);
    assert!(h.gate.remove_queued_of("kb").is_empty());
}

#[test]
fn close_hands_back_every_waiter_for_an_answer() {
    let mut h = Harness::new();
    h.send("ka");
    h.pause(&["t1"]);
    let b = h.send("kb");
    let c = h.send_idem("kc", "x");
    let streams: Vec<Vec<ConnId>> = h.gate.drain().iter().map(Waiter::streams).collect();
    assert_eq!(streams, vec![vec![b], vec![c]]);
    assert_eq!(h.gate.deadline(), None, "no timer for an empty queue");
}
