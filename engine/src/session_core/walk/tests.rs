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
        advice: Default::default(),
    }
}

fn payloads(w: &Walked) -> Vec<Value> {
    (w.events.iter())
        .map(|(_, p)| serde_json::from_str(p).unwrap())
        .collect()
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
    let p = &payloads(&w)[0];
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
        advice: Default::default(),
    };
    let w = on_reply(attempt(0, 2, false), reply);
    assert!(!w.ok && !w.session_error);
    assert!(matches!(w.next, Next::Fallback));
    assert_eq!(types(&w), ["provider.response", "session.error"]);
    let (resp, err) = (&payloads(&w)[0], &payloads(&w)[1]);
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
    assert_eq!(payloads(&w)[0]["kind"], "fallback");
    assert_eq!(payloads(&w)[0]["status"], Value::Null);
    assert_eq!(
        payloads(&w)[1],
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
    assert_eq!(payloads(&w)[1]["reason"], "provider_call_failed");
    assert_eq!(payloads(&w)[2]["reason"], "all_providers_failed");
}

/// A 2xx body that is not a usable message fails the attempt (spec 05 §7).
#[test]
fn an_unusable_body_fails_the_attempt() {
    let w = on_reply(attempt(0, 2, false), ok("not json"));
    assert!(!w.ok && matches!(w.next, Next::Fallback));
    assert_eq!(payloads(&w)[0]["status"], Value::Null);
    assert!(payloads(&w)[0]["error"].is_string());
}

/// A compaction's calls are marked and log no session errors: the
/// compaction reports its own failure (spec 07 §4).
#[test]
fn compaction_calls_are_marked_and_log_no_session_errors() {
    let w = on_reply(attempt(0, 1, true), ok(TEXT));
    assert_eq!(payloads(&w)[0]["purpose"], "compaction");
    let w = on_reply(attempt(0, 1, true), ProviderReply::Transport("x".into()));
    assert_eq!(types(&w), ["provider.response"]);
    assert_eq!(payloads(&w)[0]["purpose"], "compaction");
    assert!(matches!(w.next, Next::Exhausted) && !w.session_error);
}

/// The usable reply's payload, written as text, is byte for byte the
/// `json!` object it replaced (C-083), with and without usage and purpose,
/// around the body's own text.
#[test]
fn the_success_payload_is_the_json_of_its_object() {
    let no_usage =
        r#"{"content":[{"type":"text","text":"\u00e9\u2028"}],"usage":{"input_tokens":-1}}"#;
    for body in [TEXT, no_usage] {
        for (index, compaction) in [(0, false), (1, false), (0, true)] {
            let w = on_reply(attempt(index, 2, compaction), ok(body));
            let raw: Value = serde_json::from_str(body).unwrap();
            let resp =
                provider::parse_response(provider::Kind::Anthropic, body.as_bytes()).unwrap();
            // The body is spliced in as the reply's own compact text.
            let canonical_body = raw.to_string();
            let mut want = json!({
                "attempt": index,
                "kind": if index == 0 { "primary" } else { "fallback" },
                "provider": "anthropic",
                "ok": true,
                "status": 200,
                "body": raw,
                "usage": resp.usage.as_ref().map(|u| u.to_json()),
            });
            if compaction {
                mark_compaction(&mut want);
            }
            let want = want
                .to_string()
                .replacen(&canonical_body, &resp.body_json, 1);
            assert_eq!(w.events[0].1, want);
        }
    }
}
