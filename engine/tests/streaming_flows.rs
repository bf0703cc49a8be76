//! Streamed provider replies in-process (`stream = true` on a registry
//! entry; extension `turn.deltas`, docs/extensions.md): the faults of a
//! streamed primary (cut, malformed event, in-stream error, pings only,
//! silence, over the size limit) each fail the attempt with a documented
//! payload, a discard marker after its deltas, and the fallback answers.
//! The events are `proto::provider::stream::encode`'s rendering of a reply
//! body (what the mock provider streams), fed as `Input::ProviderChunk`s
//! on virtual time. Moved from `io-smol/tests/live_streaming.rs`, which
//! keeps streamed and unstreamed sessions logging the same over real HTTP,
//! a cancel closing the provider's connection, delta scoping and a
//! stalled observer.

mod common;

use common::*;
use engine::{CallId, Input, ProviderEntry, ProviderReply, StreamSettings};
use proto::provider::stream::encode;
use proto::provider::Kind;
use serde_json::{json, Value};

/// `primary` (streamed, `settings`) and `fallback` (unstreamed), of `kind`.
fn registry(kind: Kind, settings: StreamSettings) -> engine::Config {
    let base = ProviderEntry {
        kind,
        model: "mock-model".into(),
        ..config().providers.remove(0)
    };
    engine::Config {
        providers: vec![
            ProviderEntry {
                name: "primary".into(),
                stream: Some(settings),
                ..base.clone()
            },
            ProviderEntry {
                name: "fallback".into(),
                ..base
            },
        ],
        ..config()
    }
}

/// The unstreamed body of a text answer in `kind`'s format.
fn text_body(kind: Kind, text: &str) -> Value {
    match kind {
        Kind::Anthropic => json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "mock-model", "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}}),
        Kind::Openai => json!({"id": "c1", "object": "chat.completion", "created": 1,
            "model": "mock-model", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
    }
}

/// The fallback's (unstreamed) answer.
fn fallback_reply(kind: Kind) -> ProviderReply {
    ProviderReply::Http {
        status: 200,
        body: text_body(kind, "from the fallback")
            .to_string()
            .into_bytes(),
        advice: Default::default(),
    }
}

/// A session on `primary` → `fallback` whose creator opted into deltas.
fn session(h: &mut Harness) -> Fix {
    let body = json!({"name": "streamed", "primary_provider": "primary", "fallback_providers": ["fallback"]});
    let (s, p) = h.admin("POST", "/admin/v1/profiles", Some(&body));
    assert_eq!(s, 201, "{p}");
    let profile = p["id"].as_str().unwrap().to_string();
    let (key_id, client_key) = h.key(&profile);
    let (s, o) = h.client("POST", "/api/v1/sessions", &client_key, Some(&json!({})));
    assert_eq!(s, 201, "{o}");
    let f = Fix {
        profile,
        key_id,
        client_key,
        sid: o["session_id"].as_str().unwrap().into(),
        skey: o["session_key"].as_str().unwrap().into(),
    };
    let params = json!({"extensions": ["turn.deltas"]});
    let conn = h.rpc_start(&f.sid, &f.skey, &call(1, "session.registerDriver", params));
    assert_eq!(h.finished(conn).1["result"]["registered"], true);
    f
}

/// Starts a turn; returns its stream and the streamed primary call.
fn start(h: &mut Harness, f: &Fix) -> (engine::ConnId, CallId) {
    let turn = h.send_start(&f.sid, &f.skey, json!("hi"));
    let c = h.calls.pop_front().expect("the primary call");
    assert!(c.stream, "the primary entry streams");
    (turn, c.id)
}

fn chunk(h: &mut Harness, call: CallId, ev: &str) {
    h.input(Input::ProviderChunk {
        call,
        bytes: ev.as_bytes().to_vec(),
    });
}

/// The turn's end: the fallback answers; (notifications, failed payload).
fn fell_back(
    h: &mut Harness,
    kind: Kind,
    turn: engine::ConnId,
    error: &str,
) -> (Vec<Value>, Value) {
    h.replies.push_back(fallback_reply(kind));
    h.pump();
    let (notes, t) = h.finished(turn);
    assert_eq!(text_of(&t["result"]["message"]), "from the fallback", "{t}");
    let events = result_events(&t);
    let failed = of_type(&events, "provider.response")[0]["payload"].clone();
    assert_eq!(failed["ok"], false, "{failed}");
    assert_eq!(failed["status"], Value::Null, "{failed}");
    assert!(
        failed["error"].as_str().unwrap().starts_with(error),
        "{failed}"
    );
    let err = error_with_reason(&events, "provider_call_failed").unwrap();
    assert_eq!(err["payload"]["detail"], failed["error"]);
    // Nothing of the partial reply was logged as a message.
    assert_eq!(of_type(&events, "server.message.send").len(), 1);
    let deltas: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "session.delta")
        .collect();
    let marks: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "session.delta_discard")
        .collect();
    if !deltas.is_empty() {
        assert_eq!(marks.len(), 1, "{notes:?}");
        assert_eq!(marks[0]["params"]["reason"], "failed");
        assert_eq!(
            marks[0]["params"]["request"],
            deltas[0]["params"]["request"]
        );
        let at = |pred: &dyn Fn(&Value) -> bool| notes.iter().position(pred).unwrap();
        let mark = at(&|n| n["method"] == "session.delta_discard");
        let response = at(&|n| n["params"]["event_type"] == "provider.response");
        assert!(
            mark < response,
            "the marker comes before the failed attempt's event"
        );
    }
    (notes, failed)
}

const KINDS: [Kind; 2] = [Kind::Anthropic, Kind::Openai];

#[test]
fn a_stream_cut_mid_reply_falls_back() {
    for kind in KINDS {
        let mut h = Harness::new(registry(kind, StreamSettings::default()));
        let f = session(&mut h);
        let (turn, c) = start(&mut h, &f);
        let events = encode::events(kind, &text_body(kind, "a long answer cut in the middle"), 3);
        for ev in &events[..6] {
            chunk(&mut h, c, ev);
        }
        h.input(Input::ProviderDone {
            call: c,
            reply: ProviderReply::Streamed,
        });
        let (notes, failed) = fell_back(&mut h, kind, turn, "provider stream ended before");
        let end = if kind == Kind::Anthropic {
            "message_stop"
        } else {
            "[DONE]"
        };
        assert!(failed["error"].as_str().unwrap().ends_with(end), "{failed}");
        assert!(
            notes.iter().any(|n| n["method"] == "session.delta"),
            "{notes:?}"
        );
    }
}

#[test]
fn a_malformed_event_falls_back() {
    for kind in KINDS {
        let mut h = Harness::new(registry(kind, StreamSettings::default()));
        let f = session(&mut h);
        let (turn, c) = start(&mut h, &f);
        let events = encode::events(kind, &text_body(kind, "some text here"), 3);
        for ev in &events[..3] {
            chunk(&mut h, c, ev);
        }
        chunk(
            &mut h,
            c,
            "event: content_block_delta\ndata: {\"type\": oops}\n\n",
        );
        fell_back(&mut h, kind, turn, "provider stream event is not valid");
    }
}

#[test]
fn an_error_event_mid_stream_falls_back_with_its_body() {
    for kind in KINDS {
        let mut h = Harness::new(registry(kind, StreamSettings::default()));
        let f = session(&mut h);
        let (turn, c) = start(&mut h, &f);
        let events = encode::events(kind, &text_body(kind, "some text here"), 3);
        for ev in &events[..4] {
            chunk(&mut h, c, ev);
        }
        chunk(
            &mut h,
            c,
            &encode::error(kind, "overloaded_error", "Overloaded"),
        );
        h.input(Input::ProviderDone {
            call: c,
            reply: ProviderReply::Streamed,
        });
        let (_, failed) = fell_back(&mut h, kind, turn, "provider stream error: ");
        let body: Value = serde_json::from_str(failed["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"]["message"], "Overloaded", "{failed}");
    }
}

#[test]
fn a_stream_of_pings_only_times_out_and_falls_back() {
    for kind in KINDS {
        let settings = StreamSettings {
            idle_timeout_ms: 1_000,
            ..StreamSettings::default()
        };
        let mut h = Harness::new(registry(kind, settings));
        let f = session(&mut h);
        let (turn, c) = start(&mut h, &f);
        let events = encode::events(kind, &text_body(kind, "never finished"), 3);
        for ev in &events[..3] {
            chunk(&mut h, c, ev);
        }
        for _ in 0..9 {
            h.advance(100);
            chunk(&mut h, c, &encode::ping(kind));
        }
        assert!(h.aborted.is_empty(), "pings alone do not end it before 1 s");
        h.advance(100);
        h.advance(100);
        assert_eq!(h.aborted, [c], "the call is closed at the idle timeout");
        let (_, failed) = fell_back(&mut h, kind, turn, "provider stream timed out");
        assert_eq!(
            failed["error"],
            "provider stream timed out: only pings for 1000 ms"
        );
    }
}

#[test]
fn a_silent_provider_times_out_on_its_first_byte() {
    let settings = StreamSettings {
        first_byte_timeout_ms: 1_000,
        ..StreamSettings::default()
    };
    let mut h = Harness::new(registry(Kind::Anthropic, settings));
    let f = session(&mut h);
    let (turn, c) = start(&mut h, &f);
    h.advance(999);
    assert!(h.aborted.is_empty());
    h.advance(1);
    assert_eq!(h.aborted, [c]);
    let (_, failed) = fell_back(&mut h, Kind::Anthropic, turn, "provider stream timed out");
    assert_eq!(
        failed["error"],
        "provider stream timed out: nothing received within 1000 ms"
    );
}

#[test]
fn a_reply_over_the_size_limit_falls_back() {
    let settings = StreamSettings {
        max_bytes: 4096,
        ..StreamSettings::default()
    };
    let mut h = Harness::new(registry(Kind::Openai, settings));
    let f = session(&mut h);
    let (turn, c) = start(&mut h, &f);
    for ev in encode::events(
        Kind::Openai,
        &text_body(Kind::Openai, &"x".repeat(20_000)),
        4,
    ) {
        chunk(&mut h, c, &ev);
        if !h.aborted.is_empty() {
            break;
        }
    }
    assert_eq!(h.aborted, [c], "the call is closed past the limit");
    let (_, failed) = fell_back(&mut h, Kind::Openai, turn, "provider stream larger");
    assert_eq!(failed["error"], "provider stream larger than 4096 bytes");
}
