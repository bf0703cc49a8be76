use std::sync::Arc;

use proto::jsonrpc::{DiscardReason, Extension, Extensions};
use proto::provider::stream::{DeltaKind, Fragment};
use serde_json::Value;

use crate::ids::SessionId;

use super::*;
use crate::streams::{Hub, StreamKind};

const LIMITS: DeltaLimits = DeltaLimits {
    window: 400,
    gapless_window: 32 * 1024,
};

fn batch(request: &str, first: bool, texts: &[&str]) -> DeltaBatch {
    DeltaBatch {
        turn: Arc::from("evt_turn"),
        request: Arc::from(request),
        attempt: 0,
        first,
        fragments: (texts.iter())
            .map(|t| Fragment {
                index: 0,
                kind: DeltaKind::Text,
                text: t.to_string(),
            })
            .collect(),
    }
}

/// Session `s`'s fan-out list: streams 1 to 5 (5 opens in one test).
const FANOUT: &[ConnId] = &[ConnId(1), ConnId(2), ConnId(3), ConnId(4), ConnId(5)];

/// Streams 1 (turn, opted in), 2 (subscription, opted in), 3 (subscription,
/// not opted in), 4 (single, opted in).
fn hub() -> Hub {
    let mut h = Hub::default();
    let on = Extensions::default().with(Extension::TurnDeltas);
    for (c, kind, ext) in [
        (1, StreamKind::Turn, on),
        (2, sub(), on),
        (3, sub(), Extensions::default()),
        (4, StreamKind::Single, on),
    ] {
        h.open(ConnId(c), &SessionId::new("s"), 0, MonoMs(0));
        let s = h.get_mut(ConnId(c)).unwrap();
        s.kind = kind;
        s.ext = ext;
    }
    h
}

fn sub() -> StreamKind {
    StreamKind::Subscribe
}

/// The frames' params, per connection.
fn params(out: &[(ConnId, Bytes)]) -> Vec<(u64, Value)> {
    out.iter()
        .map(|(c, b)| {
            let text = std::str::from_utf8(b).unwrap();
            // chunk head, the line, CRLF
            let line = text.split("\r\n").nth(1).unwrap();
            let v: Value = serde_json::from_str(line).unwrap();
            (c.0, v["params"].clone())
        })
        .collect()
}

#[test]
fn only_opted_in_turn_and_subscription_streams_get_deltas() {
    let mut h = hub();
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", true, &["Hel", "lo"]),
        LIMITS,
        MonoMs(1),
    );
    let got = params(&out);
    assert_eq!(
        got.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        [1, 1, 2, 2]
    );
    assert_eq!(got[0].1["text"], "Hel");
    assert_eq!(got[0].1["request"], "evt_r");
    assert_eq!(got[0].1["kind"], "text");
    // One rendering shared by every stream that takes it.
    assert!(
        matches!((&out[0].1, &out[2].1), (Bytes::Shared(a), Bytes::Shared(b)) if Arc::ptr_eq(a, b))
    );
    // Delta frames never count toward the lag limit in frames.
    let s = h.get(ConnId(1)).unwrap();
    assert_eq!((s.in_flight.len(), s.deltas_in_flight), (2, 2));
}

#[test]
fn a_stream_that_opens_mid_attempt_sees_none_of_it() {
    let mut h = hub();
    h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", true, &["a"]),
        LIMITS,
        MonoMs(1),
    );
    h.open(ConnId(5), &SessionId::new("s"), 0, MonoMs(0));
    let s = h.get_mut(ConnId(5)).unwrap();
    (s.kind, s.ext) = (sub(), Extensions::default().with(Extension::TurnDeltas));
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["b"]),
        LIMITS,
        MonoMs(2),
    );
    assert!(out.iter().all(|(c, _)| c.0 != 5));
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r2", true, &["c"]),
        LIMITS,
        MonoMs(3),
    );
    assert!(
        out.iter().any(|(c, _)| c.0 == 5),
        "the next attempt it follows"
    );
}

/// Over the window: held and joined, sent once drained; past the window
/// held, dropped with one `lagged` marker; the rest of the attempt skipped.
#[test]
fn a_slow_reader_gets_joined_deltas_then_a_lagged_marker() {
    let mut h = hub();
    h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", true, &["x".repeat(450).as_str()]),
        LIMITS,
        MonoMs(1),
    );
    // Stream 1 is over its window now: held.
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["a", "b"]),
        LIMITS,
        MonoMs(2),
    );
    assert!(out.iter().all(|(c, _)| c.0 != 1 && c.0 != 2));
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["c"]),
        LIMITS,
        MonoMs(3),
    );
    assert!(out.is_empty());
    // Stream 1 drains; stream 2 does not.
    h.flushed(ConnId(1), 10_000);
    let sent = h.deltas_drained(ConnId(1), LIMITS, MonoMs(4));
    let text: Vec<String> = sent
        .iter()
        .map(|b| {
            std::str::from_utf8(b)
                .unwrap()
                .split("\r\n")
                .nth(1)
                .unwrap()
                .to_string()
        })
        .map(|l| {
            serde_json::from_str::<Value>(&l).unwrap()["params"]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, ["abc"], "joined per block");
    assert!(h.deltas_drained(ConnId(2), LIMITS, MonoMs(4)).is_empty());
    // Stream 2 holds more than its bound: dropped with the marker.
    let big = "y".repeat(400 * super::HOLD_WINDOWS);
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &[big.as_str()]),
        LIMITS,
        MonoMs(5),
    );
    let got = params(&out);
    let two: Vec<_> = got.iter().filter(|(c, _)| *c == 2).collect();
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].1["reason"], "lagged");
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["z"]),
        LIMITS,
        MonoMs(6),
    );
    assert!(out.iter().all(|(c, _)| c.0 != 2));
    // Draining does not bring a dropped stream back (it would see a gap).
    h.flushed(ConnId(2), 1 << 20);
    assert!(h.deltas_drained(ConnId(2), LIMITS, MonoMs(6)).is_empty());
    let out = h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["w"]),
        LIMITS,
        MonoMs(6),
    );
    assert!(out.iter().all(|(c, _)| c.0 != 2));
    // Its failure discards only where deltas still stand.
    let out = h.deltas_ended(FANOUT, "s", "evt_r", Some(DiscardReason::Failed), MonoMs(7));
    let got = params(&out);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0, got[0].1["reason"].clone()),
        (1, Value::from("failed"))
    );
}

/// A completed attempt hands a held stream its text before the final
/// events; a live one needs nothing.
#[test]
fn a_completed_attempt_flushes_held_text() {
    let mut h = hub();
    h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", true, &["x".repeat(450).as_str()]),
        LIMITS,
        MonoMs(1),
    );
    h.deltas(
        FANOUT,
        "s",
        &batch("evt_r", false, &["tail"]),
        LIMITS,
        MonoMs(2),
    );
    let out = h.deltas_ended(FANOUT, "s", "evt_r", None, MonoMs(3));
    let got = params(&out);
    assert_eq!(got.iter().map(|(c, _)| *c).collect::<Vec<_>>(), [1, 2]);
    assert!(got.iter().all(|(_, p)| p["text"] == "tail"));
    assert!(h
        .deltas_ended(FANOUT, "s", "evt_r", None, MonoMs(4))
        .is_empty());
}
