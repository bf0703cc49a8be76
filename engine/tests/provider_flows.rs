//! The provider attempt walk in-process (spec 05 §3–§9; checklist C-084,
//! C-085, C-087, C-094–C-096, C-101): exhaustion as a result, skipped
//! unresolvable fallbacks, the normaliser, the loop limit, a primary gone
//! after a restart, unusable 2xx bodies, what is stripped before the
//! provider sees a message. Moved from `io-smol/tests/live_providers.rs`,
//! which keeps both wire formats, credentials from the environment, the
//! HTTP client (pooling, timeouts, closed connections) and transport
//! failures against the loopback mock provider.

mod common;

use common::*;
use engine::{ProviderEntry, ProviderReply};
use proto::provider::Kind;
use serde_json::{json, Value};

const UNAVAILABLE: &str = "The provider is currently unavailable.";

fn entry(name: &str, kind: Kind, model: &str) -> ProviderEntry {
    ProviderEntry {
        name: name.into(),
        kind,
        model: model.into(),
        ..config().providers.remove(0)
    }
}

/// Registry: `anth` (Anthropic) and `oai` (OpenAI).
fn registry() -> engine::Config {
    engine::Config {
        providers: vec![
            entry("anth", Kind::Anthropic, "claude-mock"),
            entry("oai", Kind::Openai, "gpt-mock"),
        ],
        ..config()
    }
}

fn http(status: u16, body: &[u8]) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: body.to_vec(),
        advice: Default::default(),
    }
}

fn payloads(evs: &[Value], event_type: &str) -> Vec<Value> {
    of_type(evs, event_type)
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect()
}

fn send_as(h: &mut Harness, f: &Live, role: &str, content: Value) -> Value {
    let params = json!({"message": {"role": role, "content": content}});
    let conn = h.rpc_start(
        &f.sid,
        &f.a.session_key,
        &call(1, "session.sendMessage", params),
    );
    h.finished(conn).1
}

#[test]
fn c084_c085_all_providers_failed_is_a_result_and_errors_the_session() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &["oai"], &[], json!({}));
    h.replies.push_back(http(503, b"a"));
    h.replies.push_back(http(429, b"b"));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
    assert!(t.get("error").is_none(), "exhaustion is a result: {t}");
    assert_eq!(
        t["result"]["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": UNAVAILABLE}]})
    );
    let evs = result_events(&t);
    assert_eq!(
        types_of(&evs),
        [
            "client.message.send",
            "provider.request",
            "provider.response",
            "session.error",
            "provider.request",
            "provider.response",
            "session.error"
        ]
    );
    assert_eq!(evs[3]["payload"]["reason"], "provider_call_failed");
    assert_eq!(
        evs[6]["payload"],
        json!({"reason": "all_providers_failed", "attempts": 2})
    );
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
}

#[test]
fn c087_unresolvable_fallbacks_are_skipped_with_contiguous_attempts() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &["ghost", "oai", "phantom"], &[], json!({}));
    h.replies.push_back(http(500, b"x"));
    h.replies.push_back(http(500, b"y"));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
    let evs = result_events(&t);
    let attempts: Vec<Value> = payloads(&evs, "provider.request")
        .iter()
        .map(|p| json!([p["attempt"], p["kind"], p["provider"]]))
        .collect();
    assert_eq!(
        attempts,
        [
            json!([0, "primary", "anthropic"]),
            json!([1, "fallback", "openai"])
        ]
    );
    let err = error_with_reason(&evs, "all_providers_failed").unwrap();
    assert_eq!(err["payload"]["attempts"], 2);
    assert_eq!(h.call_bodies.len(), 2);
}

#[test]
fn c093_c094_dispatch_stripped_and_the_normaliser_merges() {
    let mut h = Harness::new(registry());
    let f = h.open_driver(
        "anth",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    h.replies.push_back(anthropic_tool_use(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]),
    ));
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("time?"));
    assert_eq!(t["result"]["message"]["content"][0]["dispatch"], "client");
    h.replies.push_back(anthropic_text("noon"));
    let (_, t) = h.send(
        &f.sid,
        &f.a.session_key,
        json!([tool_result("toolu_1", "12:00")]),
    );
    let req = &payloads(&result_events(&t), "provider.request")[0];
    assert_eq!(
        req["messages"][1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}})
    );
    assert!(
        req.get("normalized").is_none(),
        "nothing to normalise: {req}"
    );
    assert!(!h.call_bodies[1].windows(8).any(|w| w == b"dispatch"));
    let wire: Value = serde_json::from_slice(&h.call_bodies[1]).unwrap();
    assert_eq!(wire["messages"], req["messages"]);
    // C-094: two consecutive assistant messages are folded and recorded.
    h.replies.push_back(anthropic_text("ack"));
    let t = send_as(&mut h, &f, "assistant", json!("a note"));
    let req = &payloads(&result_events(&t), "provider.request")[0];
    assert_eq!(req["normalized"], json!({"merged": [[3, 4]]}), "{req}");
    let msgs = req["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        msgs[3],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "noon"}, {"type": "text", "text": "a note"}
        ]})
    );
    let wire: Value = serde_json::from_slice(&h.call_bodies[2]).unwrap();
    assert_eq!(wire["messages"], req["messages"]);
}

#[test]
fn c094_first_assistant_message_prepends_a_user_message() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &[], &[], json!({}));
    h.replies.push_back(anthropic_text("ok"));
    let t = send_as(&mut h, &f, "assistant", json!("I start"));
    let req = &payloads(&result_events(&t), "provider.request")[0];
    assert_eq!(req["normalized"], json!({"prepended_user": true}));
    assert_eq!(
        req["messages"][0],
        json!({"role": "user", "content": [{"type": "text",
               "text": "The earlier part of this conversation was compacted. A summary follows."}]})
    );
}

#[test]
fn c095_c101_eight_all_server_rounds_hit_the_loop_limit() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &[], &[], json!({}));
    for _ in 0..9 {
        h.replies.push_back(anthropic_tool_use(
            json!([{"type": "tool_use", "id": "tu_loop", "name": "mystery_tool", "input": {"n": 1}}]),
        ));
    }
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("loop forever"));
    assert_eq!(text_of(&t["result"]["message"]), UNAVAILABLE);
    let evs = result_events(&t);
    assert_eq!(of_type(&evs, "provider.request").len(), 8);
    assert_eq!(h.call_bodies.len(), 8);
    assert_eq!(of_type(&evs, "tool.call").len(), 8);
    // C-101: no intermediate server.message.send.
    assert!(of_type(&evs, "server.message.send").is_empty());
    assert_eq!(
        evs.last().unwrap()["payload"],
        json!({"reason": "loop_limit", "max_iterations": 8})
    );
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
    // The 8th request has 1 user + 7 × (assistant, user) messages.
    let last_req = &payloads(&evs, "provider.request")[7];
    assert_eq!(last_req["messages"].as_array().unwrap().len(), 15);
}

#[test]
fn c096_primary_missing_at_turn_time_errors_the_session() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &[], &[], json!({}));
    // Restarted with a registry that no longer has `anth`.
    h.restart(engine::Config {
        providers: vec![entry("oai", Kind::Openai, "gpt-mock")],
        ..config()
    });
    h.register_driver(&f.sid, &f.a.session_key);
    let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
    assert_eq!(text_of(&t["result"]["message"]), UNAVAILABLE);
    let evs = result_events(&t);
    assert_eq!(types_of(&evs), ["client.message.send", "session.error"]);
    assert_eq!(
        evs[1]["payload"],
        json!({"reason": "provider_config",
               "detail": "primary provider \"anth\" is not configured in bae-config.toml"})
    );
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
    assert!(h.call_bodies.is_empty());
}

/// Spec 05 §5.2 failure table: unusable 2xx bodies fail the attempt with
/// `status: null`, `body: null`, and the fallback answers.
#[test]
fn unusable_2xx_bodies_fail_the_attempt() {
    let mut h = Harness::new(registry());
    let cases: Vec<(&str, &[u8], &str)> = vec![
        ("anth", b"this is not json", "provider returned non-JSON body: "),
        (
            "oai",
            br#"{"id": "x", "choices": []}"#,
            "provider response is missing choices[0].message",
        ),
        (
            "oai",
            br#"{"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]},
                "finish_reason": "tool_calls"}]}"#,
            "tool_calls entry is missing function.name",
        ),
    ];
    for (primary, body, prefix) in cases {
        let f = h.open_driver(primary, &["anth"], &[], json!({}));
        h.replies.push_back(http(200, body));
        h.replies.push_back(anthropic_text("fallback"));
        let (_, t) = h.send(&f.sid, &f.a.session_key, json!("hi"));
        let failed = &payloads(&result_events(&t), "provider.response")[0];
        assert_eq!(failed["ok"], false, "{primary}: {failed}");
        assert_eq!(failed["status"], Value::Null, "{primary}");
        assert_eq!(failed["body"], Value::Null, "{primary}");
        let err = failed["error"].as_str().unwrap();
        assert!(err.starts_with(prefix), "{primary}: {err}");
        assert_eq!(text_of(&t["result"]["message"]), "fallback");
    }
}

/// Spec 05 §6.1 step 1: `dispatch` and the reserved `caller` member are
/// stripped from every `tool_use` block before the provider sees it.
#[test]
fn dispatch_and_caller_are_stripped_from_recorded_client_content() {
    let mut h = Harness::new(registry());
    let f = h.open_driver("anth", &[], &[], json!({}));
    h.replies.push_back(anthropic_text("ok"));
    let block = json!({"type": "tool_use", "id": "tu_9", "name": "n", "input": {"a": 1},
                       "dispatch": "client", "caller": {"type": "direct"}});
    let t = send_as(
        &mut h,
        &f,
        "user",
        json!([{"type": "text", "text": "see"}, block]),
    );
    let evs = result_events(&t);
    // Recorded as sent…
    assert_eq!(
        evs[0]["payload"]["content"][1]["caller"],
        json!({"type": "direct"})
    );
    // …but stripped for the provider (logged request and wire body).
    let req = &payloads(&evs, "provider.request")[0];
    assert_eq!(
        req["messages"][0]["content"][1],
        json!({"type": "tool_use", "id": "tu_9", "name": "n", "input": {"a": 1}})
    );
    let wire: Value = serde_json::from_slice(&h.call_bodies[0]).unwrap();
    assert_eq!(wire["messages"], req["messages"]);
}
