//! The stream hub in-process: filtering a session's fan-out list, the flow
//! accounting (earlier bytes first, partial frames, the byte window).

use super::*;

#[test]
fn a_fanout_list_is_filtered_to_the_streams_still_open_on_its_session() {
    let mut h = Hub::default();
    h.open(ConnId(3), &SessionId::new("s1"), 0, MonoMs(0));
    h.open(ConnId(1), &SessionId::new("s1"), 0, MonoMs(0));
    h.open(ConnId(2), &SessionId::new("s2"), 0, MonoMs(0));
    let fanout = [1, 2, 3, 4].map(ConnId);
    assert_eq!(h.of_session(&fanout, "s1"), [ConnId(1), ConnId(3)]);
    assert_eq!(h.of_session(&fanout, "s2"), [ConnId(2)]);
    assert!(h.of_session(&fanout, "nope").is_empty());
}

#[test]
fn an_ended_stream_is_reported_once_with_its_session() {
    let mut h = Hub::default();
    h.open(ConnId(1), &SessionId::new("s"), 0, MonoMs(0));
    h.open(ConnId(2), &SessionId::new("s"), 0, MonoMs(0));
    assert_eq!(
        h.end(ConnId(1)).map(|s| s.session_id),
        Some(SessionId::new("s"))
    );
    assert!(h.end(ConnId(1)).is_none());
    let fanout = [ConnId(1), ConnId(2)];
    assert_eq!(h.of_session(&fanout, "s"), [ConnId(2)]);
    assert_eq!(h.take_ended(), [(ConnId(1), SessionId::new("s"))]);
    assert!(h.take_ended().is_empty());
    h.end(ConnId(2));
    assert!(h.of_session(&fanout, "s").is_empty());
    assert!(h.get(ConnId(2)).is_none());
}

#[test]
fn flush_reports_cover_earlier_bytes_before_this_streams_frames() {
    let mut h = Hub::default();
    h.open(ConnId(1), &SessionId::new("s"), 100, MonoMs(0));
    h.sent(ConnId(1), 10, MonoMs(1));
    h.sent(ConnId(1), 20, MonoMs(2));
    h.flushed(ConnId(1), 100);
    let s = h.get(ConnId(1)).unwrap();
    assert_eq!(
        (s.in_flight.len(), s.in_flight_bytes),
        (2, 30),
        "only the head flushed"
    );
    h.flushed(ConnId(1), 15);
    let s = h.get(ConnId(1)).unwrap();
    assert_eq!(
        s.in_flight.len(),
        1,
        "the first frame is out, half the second"
    );
    assert_eq!((s.flushed_partial, s.in_flight_bytes), (5, 15));
    h.flushed(ConnId(1), 15);
    let s = h.get(ConnId(1)).unwrap();
    assert!(s.in_flight.is_empty());
    assert_eq!((s.flushed_partial, s.in_flight_bytes), (0, 0));
}

#[test]
fn keepalives_are_due_after_silence_only() {
    let mut h = Hub::default();
    assert_eq!(h.next_keepalive(1_000), None);
    h.open(ConnId(1), &SessionId::new("s"), 0, MonoMs(0));
    h.open(ConnId(2), &SessionId::new("s"), 0, MonoMs(0));
    h.sent(ConnId(2), 5, MonoMs(600));
    assert_eq!(h.next_keepalive(1_000), Some(MonoMs(1_000)));
    assert_eq!(h.keepalives_due(1_000, MonoMs(999)), []);
    assert_eq!(h.keepalives_due(1_000, MonoMs(1_000)), [ConnId(1)]);
    assert_eq!(
        h.keepalives_due(1_000, MonoMs(1_600)),
        [ConnId(1), ConnId(2)]
    );
}

#[test]
fn extensions_are_per_stream() {
    let mut h = Hub::default();
    h.open(ConnId(1), &SessionId::new("s"), 0, MonoMs(0));
    h.open(ConnId(2), &SessionId::new("s"), 0, MonoMs(0));
    let ext = Extensions::default().with(Extension::SubscribeGapless);
    h.get_mut(ConnId(1)).unwrap().ext = ext;
    assert!(h.has(ConnId(1), Extension::SubscribeGapless));
    assert!(!h.has(ConnId(2), Extension::SubscribeGapless));
    assert!(!h.has(ConnId(9), Extension::SubscribeGapless));
}

fn ev(seq: u64) -> Appended {
    Appended {
        seq,
        id: format!("evt_{seq}"),
        json: std::sync::Arc::new("{}".to_string()),
    }
}

const LIMITS: FlowLimits = FlowLimits {
    lag_limit: 2,
    window_bytes: 100,
};

fn with_kind(h: &mut Hub, conn: u64, kind: StreamKind) {
    h.open(ConnId(conn), &SessionId::new("s"), 0, MonoMs(0));
    h.get_mut(ConnId(conn)).unwrap().kind = kind;
}

fn subscription(phase: Phase) -> Subscription {
    Subscription {
        phase,
        buffered: Vec::new(),
        delivered: 0,
        marker: crate::streams::Marker::Done,
        until: crate::streams::Until::Close,
    }
}

#[test]
fn turn_streams_get_every_event_but_their_own_input() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Turn);
    assert_eq!(
        h.publish(ConnId(1), None, &ev(1), false, LIMITS),
        Live::Frame
    );
    assert_eq!(h.publish(ConnId(1), None, &ev(2), true, LIMITS), Live::Skip);
}

#[test]
fn single_and_queued_streams_stay_silent() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Single);
    with_kind(&mut h, 2, StreamKind::Queued);
    assert_eq!(
        h.publish(ConnId(1), None, &ev(1), false, LIMITS),
        Live::Skip
    );
    assert_eq!(
        h.publish(ConnId(2), None, &ev(1), false, LIMITS),
        Live::Skip
    );
}

#[test]
fn a_live_subscriber_gets_each_event_once() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Subscribe);
    let mut sub = subscription(Phase::Live);
    let s = &mut sub;
    assert_eq!(
        h.publish(ConnId(1), Some(s), &ev(5), false, LIMITS),
        Live::Frame
    );
    assert_eq!(
        h.deliver(ConnId(1), Some(&mut sub), &ev(5), LIMITS),
        Live::Skip,
        "duplicate"
    );
    let older = h.deliver(ConnId(1), Some(&mut sub), &ev(4), LIMITS);
    assert_eq!(older, Live::Skip, "older");
    assert_eq!(
        h.publish(ConnId(1), None, &ev(6), false, LIMITS),
        Live::Skip
    );
}

#[test]
fn a_plain_consumer_with_too_many_frames_in_flight_lags() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Turn);
    h.sent(ConnId(1), 10, MonoMs(0));
    h.sent(ConnId(1), 10, MonoMs(0));
    assert_eq!(
        h.publish(ConnId(1), None, &ev(1), false, LIMITS),
        Live::Lagged
    );
}

#[test]
fn a_replaying_subscriber_buffers_then_lags_past_the_limit() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Subscribe);
    let mut sub = subscription(Phase::Reading { overflow: false });
    let mut publish = |seq| h.publish(ConnId(1), Some(&mut sub), &ev(seq), false, LIMITS);
    assert_eq!(publish(1), Live::Skip);
    assert_eq!(publish(2), Live::Skip);
    assert_eq!(publish(3), Live::Lagged);
}

#[test]
fn a_gapless_replaying_subscriber_drops_its_buffer_and_rereads() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Subscribe);
    let mut sub = subscription(Phase::Reading { overflow: false });
    h.get_mut(ConnId(1)).unwrap().ext = Extensions::default().with(Extension::SubscribeGapless);
    for seq in 1..=3 {
        let live = h.publish(ConnId(1), Some(&mut sub), &ev(seq), false, LIMITS);
        assert_eq!(live, Live::Skip);
    }
    assert_eq!(sub.phase, Phase::Reading { overflow: true });
    assert!(sub.buffered.is_empty());
}

#[test]
fn a_gapless_subscriber_over_its_window_stalls_instead_of_lagging() {
    let mut h = Hub::default();
    with_kind(&mut h, 1, StreamKind::Subscribe);
    let mut sub = subscription(Phase::Live);
    h.get_mut(ConnId(1)).unwrap().ext = Extensions::default().with(Extension::SubscribeGapless);
    for _ in 0..5 {
        h.sent(ConnId(1), 30, MonoMs(0));
    }
    let live = h.publish(ConnId(1), Some(&mut sub), &ev(1), false, LIMITS);
    assert_eq!(live, Live::Skip);
    assert_eq!(sub.phase, Phase::Stalled);
    assert_eq!(
        h.publish(ConnId(1), Some(&mut sub), &ev(2), false, LIMITS),
        Live::Skip,
        "nothing while stalled"
    );
}

/// An ended turn stream is reported once to the engine's `settle` (its turn
/// then stops listing it); other kinds are not.
#[test]
fn ended_turn_streams_are_reported_once() {
    let mut h = Hub::default();
    h.open(ConnId(1), &SessionId::new("s"), 0, MonoMs(0));
    h.open(ConnId(2), &SessionId::new("s"), 0, MonoMs(0));
    if let Some(s) = h.get_mut(ConnId(1)) {
        s.kind = StreamKind::Turn;
    }
    assert!(!h.has_ended_turns());
    h.end(ConnId(2));
    assert!(
        !h.has_ended_turns(),
        "a single-answer stream is not a turn's"
    );
    h.end(ConnId(1));
    assert!(h.has_ended_turns());
    assert_eq!(h.take_ended_turns(), [ConnId(1)]);
    assert!(h.take_ended_turns().is_empty());
    assert!(h.end(ConnId(1)).is_none());
    assert!(!h.has_ended_turns(), "ending it again reports nothing");
}

/// The `replay_complete` marker is due once, carrying the last replayed
/// id; replays after the first switch to live do not touch it, and only a
/// stream reading on past its session's close finishes when live.
#[test]
fn a_subscription_sends_its_marker_once_and_ends_at_the_log_end_only_when_asked() {
    let mut sub = Subscription::new(true);
    assert_eq!(sub.phase, Phase::Reading { overflow: false });
    sub.replayed(3, "evt_3".into());
    sub.replayed(4, "evt_4".into());
    assert_eq!(sub.delivered, 4);
    assert!(!sub.finished());
    assert_eq!(sub.go_live(), Some(Some("evt_4".into())));
    assert_eq!(sub.phase, Phase::Live);
    assert!(!sub.finished());
    sub.phase = Phase::Stalled;
    sub.replayed(5, "evt_5".into());
    assert_eq!((sub.go_live(), &sub.marker), (None, &Marker::Done));
    sub.until = Until::LogEnd;
    assert!(sub.finished());
    // Live from the start: the marker has no event to name.
    let mut live = Subscription::new(false);
    assert_eq!(live.phase, Phase::Live);
    assert_eq!(live.go_live(), Some(None));
}
