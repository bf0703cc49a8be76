//! FIFO order, queue limits, departed waiters and queue positions
//! (spec 01 §8.3; C-118, C-119, C-124).

use super::*;

#[test]
fn free_gate_with_nobody_waiting_is_taken_at_once() {
    let mut h = Harness::new();
    let a = h.send("ka");
    assert_eq!(h.how(a), Some(How::Fresh));
    assert_eq!(h.running_conn(), Some(a));
    assert!(h.queued().is_empty());
}

#[test]
fn c118_second_driver_waits_while_a_turn_runs() {
    let mut h = Harness::new();
    let a = h.send("ka");
    let b = h.send("kb");
    assert_eq!(h.started_order(), vec![a]);
    assert_eq!(h.queued(), vec![b]);
    assert!(h.seen.contains(&Seen::Queued(b)));
}

#[test]
fn c119_waiters_run_in_arrival_order() {
    let mut h = Harness::new();
    let a = h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    let d = h.send("ka");
    for _ in 0..3 {
        h.complete();
    }
    assert_eq!(h.started_order(), vec![a, b, c, d]);
    h.complete();
    assert!(matches!(h.gate.holder(), Holder::Free));
}

#[test]
fn same_key_queues_behind_its_own_running_turn() {
    let mut h = Harness::new();
    let a = h.send("ka");
    let a2 = h.send("ka");
    assert_eq!(h.running_conn(), Some(a));
    assert_eq!(h.queued(), vec![a2]);
}

#[test]
fn release_with_nobody_waiting_frees_the_gate() {
    let mut h = Harness::new();
    h.send("ka");
    h.complete();
    assert!(matches!(h.gate.holder(), Holder::Free));
    assert_eq!(h.gate.deadline(), None);
}

#[test]
fn release_past_only_departed_waiters_frees_the_gate() {
    let mut h = Harness::new();
    let a = h.send("ka");
    let b = h.send("kb");
    h.closed.insert(b); // gone, but not yet forgotten
    h.complete();
    let c = h.send("kc");
    assert_eq!(h.started_order(), vec![a, c]);
    assert!(h.queued().is_empty());
}

#[test]
fn departed_waiter_is_skipped_at_admission() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    h.closed.insert(b);
    h.complete();
    assert_eq!(h.running_conn(), Some(c));
}

#[test]
fn forget_removes_the_waiter_and_reports_a_change() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    assert!(h.close(b));
    assert_eq!(h.queued(), vec![c]);
    assert!(
        !h.close(ConnId(999)),
        "an unknown connection changes nothing"
    );
}

#[test]
fn forgetting_the_running_request_leaves_the_queue_alone() {
    let mut h = Harness::new();
    let a = h.send("ka");
    let b = h.send("kb");
    assert!(!h.close(a));
    assert_eq!(h.queued(), vec![b]);
    h.complete();
    assert_eq!(h.running_conn(), Some(b));
}

#[test]
fn queue_full_refuses_the_newcomer_only() {
    let mut h = Harness::new();
    h.limits.max_queued = 2;
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    let d = h.send("kd");
    assert_eq!(h.refused(d), Some(Refusal::QueueFull));
    assert_eq!(h.queued(), vec![b, c]);
}

#[test]
fn shutdown_refuses_new_waiters_but_not_a_free_gate_take() {
    let mut h = Harness::new();
    h.limits.shutting_down = true;
    let a = h.send("ka");
    let b = h.send("kb");
    assert_eq!(h.how(a), Some(How::Fresh));
    assert_eq!(h.refused(b), Some(Refusal::ShuttingDown));
}

#[test]
fn drain_empties_the_queue() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    let gone: Vec<ConnId> = h.gate.drain().iter().map(|w| w.conn).collect();
    assert_eq!(gone, vec![b, c]);
    h.complete();
    assert!(matches!(h.gate.holder(), Holder::Free));
}

#[test]
fn positions_are_told_once_and_again_when_they_move() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    assert_eq!(h.gate.position_changes(), vec![(b, 1), (c, 2)]);
    assert_eq!(h.gate.position_changes(), vec![], "nothing moved");
    h.complete();
    assert_eq!(h.gate.position_changes(), vec![(c, 1)]);
}

#[test]
fn positions_move_when_a_waiter_leaves() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send("kb");
    let c = h.send("kc");
    let d = h.send("kd");
    h.gate.position_changes();
    h.close(b);
    assert_eq!(h.gate.position_changes(), vec![(c, 1), (d, 2)]);
}

#[test]
fn idempotent_waiter_keeps_its_place_when_its_first_stream_drops() {
    let mut h = Harness::new();
    h.send("ka");
    let b = h.send_idem("kb", "k-1");
    let c = h.send("kc");
    let retry = h.conn();
    h.gate
        .queued_idem("kb", "k-1")
        .expect("queued key")
        .watchers
        .push(retry);
    assert!(!h.close(b), "the retry takes the request's place");
    assert_eq!(h.queued(), vec![retry, c]);
    h.complete();
    assert_eq!(h.running_conn(), Some(retry));
}

#[test]
fn queued_idem_matches_key_and_owner_only() {
    let mut h = Harness::new();
    h.send("ka");
    h.send_idem("kb", "k-1");
    assert!(h.gate.queued_idem("kb", "k-1").is_some());
    assert!(h.gate.queued_idem("kb", "k-2").is_none());
    assert!(h.gate.queued_idem("kc", "k-1").is_none());
}

#[test]
fn waiter_streams_include_attached_retries() {
    let mut w = Waiter::new(
        ConnId(7),
        "k".into(),
        Op::Send(message(Some(Idem {
            key: "x".into(),
            watchers: vec![ConnId(8), ConnId(9)],
        }))),
    );
    assert_eq!(w.streams(), [7, 8, 9].map(ConnId));
    w.forget(ConnId(8));
    assert_eq!(w.streams(), [7, 9].map(ConnId));
    w.forget(ConnId(7));
    assert_eq!(w.conn, ConnId(9));
    assert_eq!(w.streams(), [ConnId(9)]);
}
