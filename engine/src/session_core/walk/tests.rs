use super::*;

const TEXT: &str = r#"{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}}"#;

fn attempt(index: usize, chain_len: usize, compaction: bool) -> Attempt {
    Attempt {
        index,
        chain_len,
        kind: provider::Kind::Anthropic,
        compaction,
    }
}

fn ok(body: &str) -> ProviderReply {
    ProviderReply::Http {
        status: 200,
        body: body.as_bytes().to_vec(),
    }
}

fn types(w: &Walked) -> Vec<&str> {
    w.events.iter().map(|(t, _)| t.as_str()).collect()
}

/// C-083: a usable reply logs one `provider.response` and goes on.
#[test]
fn a_usable_reply_is_an_answer() {
    let w = on_reply(attempt(0, 2, false), ok(TEXT));
    assert!(w.ok && !w.session_error);
    assert_eq!(types(&w), ["provider.response"]);
    let p = &w.events[0].1;
    assert_eq!(
        (p["attempt"].clone(), p["kind"].clone(), p["status"].clone()),
        (json!(0), json!("primary"), json!(200))
    );
    assert_eq!(p["usage"], json!({"input_tokens": 3, "output_tokens": 2}));
    assert!(p.get("purpose").is_none());
    let Next::Answer(resp) = w.next else {
        panic!("{:?}", w.next)
    };
    assert_eq!(resp.content, vec![json!({"type": "text", "text": "hi"})]);
}

/// A failed primary logs `provider_call_failed` and falls back (C-083).
#[test]
fn a_failed_primary_falls_back_with_a_session_error() {
    let reply = ProviderReply::Http {
        status: 500,
        body: b"boom".to_vec(),
    };
    let w = on_reply(attempt(0, 2, false), reply);
    assert!(!w.ok && !w.session_error);
    assert!(matches!(w.next, Next::Fallback));
    assert_eq!(types(&w), ["provider.response", "session.error"]);
    let (resp, err) = (&w.events[0].1, &w.events[1].1);
    assert_eq!(
        (
            resp["ok"].clone(),
            resp["status"].clone(),
            resp["body"].clone()
        ),
        (json!(false), json!(500), json!("boom"))
    );
    assert_eq!(resp["error"], "provider returned HTTP 500");
    assert_eq!(
        *err,
        json!({"reason": "provider_call_failed", "provider": "anthropic", "detail": "provider returned HTTP 500"})
    );
}

/// The last entry failing ends the walk: `all_providers_failed`, and the
/// session goes to `error`; a fallback's failure logs no `provider_call_failed`.
#[test]
fn the_last_failure_exhausts_the_chain() {
    let w = on_reply(
        attempt(1, 2, false),
        ProviderReply::Transport("refused".into()),
    );
    assert!(matches!(w.next, Next::Exhausted) && w.session_error);
    assert_eq!(types(&w), ["provider.response", "session.error"]);
    assert_eq!(w.events[0].1["kind"], "fallback");
    assert_eq!(w.events[0].1["status"], Value::Null);
    assert_eq!(
        w.events[1].1,
        json!({"reason": "all_providers_failed", "attempts": 2})
    );
    // A one-entry chain logs both errors, in that order.
    let w = on_reply(
        attempt(0, 1, false),
        ProviderReply::Credential("unset".into()),
    );
    assert_eq!(
        types(&w),
        ["provider.response", "session.error", "session.error"]
    );
    assert_eq!(w.events[1].1["reason"], "provider_call_failed");
    assert_eq!(w.events[2].1["reason"], "all_providers_failed");
}

/// A 2xx body that is not a usable message fails the attempt (spec 05 §7).
#[test]
fn an_unusable_body_fails_the_attempt() {
    let w = on_reply(attempt(0, 2, false), ok("not json"));
    assert!(!w.ok && matches!(w.next, Next::Fallback));
    assert_eq!(w.events[0].1["status"], Value::Null);
    assert!(w.events[0].1["error"].is_string());
}

/// A compaction's calls are marked and log no session errors: the
/// compaction reports its own failure (spec 07 §4).
#[test]
fn compaction_calls_are_marked_and_log_no_session_errors() {
    let w = on_reply(attempt(0, 1, true), ok(TEXT));
    assert_eq!(w.events[0].1["purpose"], "compaction");
    let w = on_reply(attempt(0, 1, true), ProviderReply::Transport("x".into()));
    assert_eq!(types(&w), ["provider.response"]);
    assert_eq!(w.events[0].1["purpose"], "compaction");
    assert!(matches!(w.next, Next::Exhausted) && !w.session_error);
}
