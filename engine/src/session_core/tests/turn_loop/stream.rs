//! Streamed provider attempts in the core: what is logged is exactly what
//! the same reply unstreamed logs, whatever the chunks; deltas name the
//! turn and the attempt and add up to the final text; every stream fault
//! and timeout is one failed attempt (the call closed, its deltas
//! discarded) and the fallback walk goes on.

use proto::jsonrpc::DiscardReason;
use proto::provider::stream::encode;
use proto::provider::stream::DeltaKind;
use proto::provider::Kind;

use super::*;
use crate::StreamSettings;

const SETTINGS: StreamSettings = StreamSettings {
    first_byte_timeout_ms: 3_000,
    idle_timeout_ms: 1_000,
    max_bytes: 1 << 20,
};

fn streaming(name: &str) -> ProviderEntry {
    ProviderEntry {
        stream: Some(SETTINGS),
        ..entry(name)
    }
}

/// The reply body `ok(content)` sends, as a value.
fn body_of(content: Value) -> Value {
    match ok(content) {
        ProviderReply::Http { body, .. } => serde_json::from_slice(&body).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// The stream of `body`, text cut into runs of 3 characters.
fn stream_of(body: &Value) -> Vec<u8> {
    encode::events(Kind::Anthropic, body, 3)
        .concat()
        .into_bytes()
}

impl Harness {
    fn streamed(chain: Vec<ProviderEntry>) -> Self {
        let mut h = Harness::new();
        h.world.chain = Ok(chain);
        h
    }

    /// Body bytes of the call in flight, `ms` later.
    fn chunk(&mut self, ms: u64, bytes: &[u8]) {
        self.now += ms;
        let call = self.last_call().unwrap();
        let rearm = self.core.on_chunk(call, bytes, &self.world, self.now);
        if let Some(Some(at)) = rearm {
            self.check = Some(at);
        }
        assert!(rearm.is_some(), "the chunk was not taken");
        self.drive();
    }

    /// The watchdog looks at the call in flight at its asked time.
    fn watchdog(&mut self) -> Option<MonoMs> {
        let at = self.check.expect("no check armed");
        self.now = at;
        let call = self.last_call().unwrap();
        let next = self.core.stream_check(call, &self.world, self.now);
        self.drive();
        if next.is_some() {
            self.check = next;
        }
        next
    }

    fn deltas(&self) -> Vec<crate::streams::DeltaBatch> {
        (self.seen.iter())
            .filter_map(|s| match s {
                Seen::Deltas(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    fn logged(&self) -> Vec<(EventType, Value)> {
        (self.seen.iter())
            .filter_map(|s| match s {
                Seen::Event(t, p, _) => Some((*t, p.clone())),
                _ => None,
            })
            .collect()
    }

    fn id_of(&self, of: EventType) -> Arc<str> {
        let (seq, _) = (self.seen.iter())
            .filter_map(|s| match s {
                Seen::Event(t, _, _) => Some(*t),
                _ => None,
            })
            .enumerate()
            .filter(|(_, t)| *t == of)
            .last()
            .unwrap();
        self.ids[&(seq as u64 + 1)].as_str().into()
    }
}

/// The same turn, once unstreamed and once streamed in every chunk size:
/// the same events, payloads and ending, and deltas that add up.
#[test]
fn a_streamed_turn_logs_exactly_what_the_unstreamed_turn_logs() {
    for content in [
        text("Héllo, \"world\"!\n"),
        json!([{"type": "text", "text": "let me check"}, tool_use("tu_1", "client_tool", json!({"q": [1, 2]}))]),
    ] {
        let mut plain = Harness::new();
        plain.send("k1", json!("hi"));
        plain.answer(content.clone());

        let body = body_of(content.clone());
        let bytes = stream_of(&body);
        for size in [1, 2, 7, 64, bytes.len()] {
            let mut h = Harness::streamed(vec![streaming("primary")]);
            h.send("k1", json!("hi"));
            assert_eq!(
                h.last_body()["stream"],
                true,
                "the request asks for a stream"
            );
            for piece in bytes.chunks(size) {
                h.chunk(1, piece);
            }
            h.reply(1, ProviderReply::Streamed);
            assert_eq!(h.logged(), plain.logged(), "chunks of {size}");
            let ended = |h: &Harness| match h.ending() {
                Some(Ending::Paused(m, p)) => format!("paused {m} {:?}", p.expected),
                other => format!("{other:?}"),
            };
            assert_eq!(ended(&h), ended(&plain), "chunks of {size}");

            let deltas = h.deltas();
            assert!(deltas[0].first && deltas.iter().skip(1).all(|d| !d.first));
            let turn = h.id_of(EventType::ClientMessageSend);
            let request = h.id_of(EventType::ProviderRequest);
            assert!(deltas
                .iter()
                .all(|d| d.turn == turn && d.request == request && d.attempt == 0));
            let frags: Vec<_> = deltas.iter().flat_map(|d| d.fragments.clone()).collect();
            for (i, block) in content.as_array().unwrap().iter().enumerate() {
                let of = |k| -> String {
                    (frags.iter().filter(|f| f.index == i && f.kind == k))
                        .map(|f| f.text.as_str())
                        .collect()
                };
                match block["type"].as_str().unwrap() {
                    "text" => assert_eq!(of(DeltaKind::Text), block["text"]),
                    _ => {
                        let input: Value = serde_json::from_str(&of(DeltaKind::InputJson)).unwrap();
                        assert_eq!(input, block["input"]);
                    }
                }
            }
            assert_eq!(h.count(|s| matches!(s, Seen::DeltasEnded(_, None))), 1);
            assert_eq!(h.count(|s| matches!(s, Seen::Abort(_))), 0);
        }
    }
}

/// The failed attempt's `provider.response` (status null, the error, the
/// body), then the fallback's own attempt.
fn failed_attempt(h: &Harness) -> Value {
    h.payloads(EventType::ProviderResponse)[0].clone()
}

fn fallback_chain() -> Vec<ProviderEntry> {
    vec![streaming("primary"), entry("fallback")]
}

/// Everything a fault leaves: one failed attempt, deltas discarded, the
/// call closed (when it was still open), the fallback answering.
fn assert_fell_back(h: &mut Harness, error: &str, body: Value, closed: bool) {
    let p = failed_attempt(h);
    assert_eq!(p["ok"], false);
    assert_eq!(p["status"], Value::Null);
    assert_eq!(p["error"], error);
    assert_eq!(p["body"], body);
    assert_eq!(
        h.count(|s| matches!(s, Seen::Abort(CallId(1)))),
        usize::from(closed)
    );
    let discarded = h.count(|s| matches!(s, Seen::DeltasEnded(_, Some(DiscardReason::Failed))));
    assert_eq!(discarded, usize::from(!h.deltas().is_empty()));
    assert_eq!(
        h.payloads(EventType::SessionError)[0]["reason"],
        "provider_call_failed"
    );
    // Nothing of the partial reply reached history or a message event.
    assert!(h.payloads(EventType::ServerMessageSend).is_empty());
    h.answer(text("from the fallback"));
    assert_eq!(
        h.payloads(EventType::ProviderResponse)[1]["kind"],
        "fallback"
    );
    assert!(matches!(h.ending(), Some(Ending::Completed(m)) if m.contains("from the fallback")));
}

#[test]
fn a_stream_cut_before_its_last_event_fails_the_attempt() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    let bytes = stream_of(&body_of(text("partial answer")));
    h.chunk(5, &bytes[..bytes.len() - 40]);
    assert!(!h.deltas().is_empty());
    h.reply(5, ProviderReply::Streamed);
    let e = "provider stream ended before message_stop";
    assert_fell_back(&mut h, e, Value::Null, false);
}

#[test]
fn a_transport_failure_mid_stream_fails_the_attempt() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    let bytes = stream_of(&body_of(text("partial answer")));
    h.chunk(5, &bytes[..200]);
    h.reply(5, ProviderReply::Transport("Network Error: reset".into()));
    assert_fell_back(&mut h, "Network Error: reset", Value::Null, false);
}

#[test]
fn an_error_event_mid_stream_fails_at_once_and_closes_the_call() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    let events = encode::events(Kind::Anthropic, &body_of(text("abcdefgh")), 2);
    h.chunk(5, events[..4].concat().as_bytes());
    let error = encode::error(Kind::Anthropic, "overloaded_error", "Overloaded");
    h.chunk(5, error.as_bytes());
    let raw = error
        .lines()
        .nth(1)
        .unwrap()
        .strip_prefix("data: ")
        .unwrap();
    let e = "provider stream error: overloaded_error: Overloaded";
    assert_fell_back(&mut h, e, json!(raw), true);
    // A late end of the closed call is nobody's.
    assert!(!h
        .core
        .on_reply(CallId(1), ProviderReply::Streamed, &h.world, h.now));
}

#[test]
fn a_malformed_event_fails_at_once() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    h.chunk(5, b"event: message_start\ndata: {not json}\n\n");
    let p = failed_attempt(&h);
    assert!(p["error"]
        .as_str()
        .unwrap()
        .starts_with("provider stream event is not valid: data is not JSON"));
    assert_fell_back(&mut h, p["error"].as_str().unwrap(), Value::Null, true);
}

#[test]
fn a_reply_over_the_size_limit_fails_at_once() {
    let mut small = streaming("primary");
    small.stream = Some(StreamSettings {
        max_bytes: 300,
        ..SETTINGS
    });
    let mut h = Harness::streamed(vec![small, entry("fallback")]);
    h.send("k1", json!("hi"));
    let bytes = stream_of(&body_of(text(&"long ".repeat(100))));
    for piece in bytes.chunks(100) {
        if h.count(|s| matches!(s, Seen::Abort(_))) > 0 {
            break;
        }
        h.chunk(1, piece);
    }
    assert_fell_back(
        &mut h,
        "provider stream larger than 300 bytes",
        Value::Null,
        true,
    );
}

#[test]
fn nothing_within_the_first_byte_timeout_fails_the_attempt() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    assert_eq!(h.check, Some(MonoMs(1_000 + 3_000)));
    assert_eq!(h.watchdog(), None);
    let e = "provider stream timed out: nothing received within 3000 ms";
    assert_fell_back(&mut h, e, Value::Null, true);
}

#[test]
fn pings_alone_do_not_keep_a_stream_alive() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    let events = encode::events(Kind::Anthropic, &body_of(text("abc")), 1);
    h.chunk(10, events[0].as_bytes());
    assert_eq!(
        h.check,
        Some(MonoMs(1_010 + 1_000)),
        "the first byte re-arms for idle"
    );
    // The first check finds fresh progress and asks to look again later.
    h.chunk(500, events[1].as_bytes());
    assert_eq!(h.watchdog(), Some(MonoMs(1_510 + 1_000)));
    for _ in 0..3 {
        h.chunk(150, encode::ping(Kind::Anthropic).as_bytes());
    }
    assert_eq!(h.watchdog(), None);
    let e = "provider stream timed out: only pings for 1000 ms";
    assert_fell_back(&mut h, e, Value::Null, true);
}

#[test]
fn silence_after_progress_fails_the_attempt() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    let events = encode::events(Kind::Anthropic, &body_of(text("abc")), 1);
    h.chunk(10, events[..3].concat().as_bytes());
    assert_eq!(h.watchdog(), None);
    let e = "provider stream timed out: no event for 1000 ms";
    assert_fell_back(&mut h, e, Value::Null, true);
}

/// The last event came but the body never ended: the reply is whole; the
/// hanging connection is closed.
#[test]
fn a_complete_stream_whose_body_never_ends_is_an_answer() {
    let mut h = Harness::streamed(vec![streaming("primary")]);
    h.send("k1", json!("hi"));
    h.chunk(10, &stream_of(&body_of(text("done"))));
    assert_eq!(h.watchdog(), None);
    assert_eq!(h.count(|s| matches!(s, Seen::Abort(CallId(1)))), 1);
    assert_eq!(h.payloads(EventType::ProviderResponse)[0]["ok"], true);
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
}

/// An error status of a streamed call is read as unstreamed.
#[test]
fn an_error_status_reads_as_it_does_unstreamed() {
    let mut h = Harness::streamed(fallback_chain());
    h.send("k1", json!("hi"));
    h.reply(5, failed(529));
    let p = failed_attempt(&h);
    assert_eq!(
        (p["status"].clone(), p["error"].clone()),
        (json!(529), json!("provider returned HTTP 529"))
    );
    assert!(h.deltas().is_empty());
}

/// A compaction's summary streams too, but its text is no assistant
/// message: no deltas.
#[test]
fn a_streamed_compaction_sends_no_deltas() {
    let mut h = Harness::streamed(vec![streaming("primary")]);
    h.send("k1", json!("hi"));
    h.answer(text("first"));
    let before = h.deltas().len();
    h.compact("k1", None);
    h.chunk(5, &stream_of(&body_of(text("the summary"))));
    h.reply(1, ProviderReply::Streamed);
    assert_eq!(h.deltas().len(), before);
    assert!(h.events().contains(&EventType::SessionCompactionCompleted));
}

/// Streamed attempts under provider traffic (docs/extensions.md, "Provider
/// traffic"): the admission, the retry of an error status answered before
/// the stream, and a stream fault retried only with `transport = true`.
mod traffic {
    use super::*;
    use crate::provider_limits::EntryLimits;
    use crate::session_core::retry::{Delay, RetryPolicy};
    use proto::provider::retry::RetryAdvice;

    fn retrying(policy: RetryPolicy) -> ProviderEntry {
        ProviderEntry {
            retry: Some(policy),
            ..streaming("primary")
        }
    }

    fn admissions(h: &Harness) -> Vec<(CallId, Option<Delay>)> {
        (h.seen.iter())
            .filter_map(|s| match s {
                Seen::Admit(id, a) => Some((*id, a.delay)),
                _ => None,
            })
            .collect()
    }

    /// A chunk and then an Anthropic `error` event: a fault of the stream.
    fn fault_mid_stream(h: &mut Harness) {
        let events = encode::events(Kind::Anthropic, &body_of(text("abcdefgh")), 2);
        h.chunk(5, events[..4].concat().as_bytes());
        assert!(!h.deltas().is_empty());
        let error = encode::error(Kind::Anthropic, "overloaded_error", "Overloaded");
        h.chunk(5, error.as_bytes());
    }

    #[test]
    fn a_streamed_attempt_waits_for_its_slot_before_its_request_is_logged() {
        let limited = ProviderEntry {
            limits: Some(EntryLimits {
                max_concurrent: Some(1),
                requests_per_minute: None,
                input_tokens_per_minute: None,
                max_wait_ms: 500,
            }),
            ..streaming("primary")
        };
        let mut h = Harness::streamed(vec![limited]);
        h.admit_at_once = false;
        h.send("k1", json!("hi"));
        assert_eq!(h.events(), [EventType::ClientMessageSend]);
        let [(ticket, None)] = admissions(&h)[..] else {
            panic!("{:?}", admissions(&h));
        };
        assert!(h.core.admitted(ticket));
        h.drive();
        assert_eq!(h.last_call(), Some(ticket));
        assert_eq!(h.last_body()["stream"], true);
        h.chunk(5, &stream_of(&body_of(text("hello"))));
        let request = h.id_of(EventType::ProviderRequest);
        assert!(h.deltas().iter().all(|d| d.request == request));
        h.reply(1, ProviderReply::Streamed);
        assert!(matches!(h.ending(), Some(Ending::Completed(m)) if m.contains("hello")));
    }

    /// The status answered before any stream is retried as unstreamed; a
    /// fault of the retry's stream walks to the fallback (transport off).
    #[test]
    fn an_advised_429_before_the_stream_is_retried_and_a_stream_fault_falls_back() {
        let mut h = Harness::streamed(vec![retrying(RetryPolicy::default()), entry("fallback")]);
        h.send("k1", json!("hi"));
        let limited = ProviderReply::Http {
            status: 429,
            body: b"{\"type\":\"error\"}".to_vec(),
            advice: RetryAdvice::AfterMs(1000),
        };
        h.reply(5, limited);
        assert_eq!(
            admissions(&h)[..],
            [(CallId(2), Some(Delay::Advised(1000)))]
        );
        assert!(h.payloads(EventType::SessionError).is_empty());
        assert_eq!(h.last_call(), Some(CallId(2)), "the retry left");
        assert_eq!(h.last_body()["stream"], true);
        fault_mid_stream(&mut h);
        assert_eq!(admissions(&h).len(), 1, "a stream fault is not retried");
        h.answer(text("from the fallback"));
        let attempts: Vec<_> = (h.payloads(EventType::ProviderRequest).iter())
            .map(|r| r["attempt"].clone())
            .collect();
        assert_eq!(attempts, [0, 0, 1]);
        let responses = h.payloads(EventType::ProviderResponse);
        assert_eq!(responses[0]["status"], 429);
        assert_eq!(
            responses[1]["error"],
            "provider stream error: overloaded_error: Overloaded"
        );
        assert_eq!(h.payloads(EventType::SessionError).len(), 1);
        assert!(matches!(h.ending(), Some(Ending::Completed(m)) if m.contains("fallback")));
    }

    /// With `transport = true` a fault mid-stream is retried on the same
    /// entry: the failed stream's deltas are discarded, the retry's deltas
    /// name its own request.
    #[test]
    fn with_transport_retries_a_stream_fault_is_retried_on_the_same_entry() {
        let policy = RetryPolicy {
            transport: true,
            ..RetryPolicy::default()
        };
        let mut h = Harness::streamed(vec![retrying(policy)]);
        h.send("k1", json!("hi"));
        fault_mid_stream(&mut h);
        assert_eq!(h.count(|s| matches!(s, Seen::Abort(CallId(1)))), 1);
        let discarded = h.count(|s| matches!(s, Seen::DeltasEnded(_, Some(DiscardReason::Failed))));
        assert_eq!(discarded, 1);
        let [(ticket, Some(Delay::Backoff { .. }))] = admissions(&h)[..] else {
            panic!("{:?}", admissions(&h));
        };
        assert_eq!(h.last_call(), Some(ticket));
        let first = h.deltas().len();
        h.chunk(5, &stream_of(&body_of(text("second try"))));
        let request = h.id_of(EventType::ProviderRequest);
        assert!(h.deltas()[first..].iter().all(|d| d.request == request));
        h.reply(1, ProviderReply::Streamed);
        let requests = h.payloads(EventType::ProviderRequest);
        assert!(requests.len() == 2 && requests.iter().all(|r| r["attempt"] == 0));
        assert!(h.payloads(EventType::SessionError).is_empty());
        assert!(matches!(h.ending(), Some(Ending::Completed(m)) if m.contains("second try")));
    }
}
