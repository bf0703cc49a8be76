//! Provider traffic in the turn loop: retries on the same entry (with the
//! advised or backed-off delay asked of the engine), and attempts that
//! wait for a limited entry's slot (docs/extensions.md).

use super::*;
use crate::provider_limits::EntryLimits;
use crate::session_core::retry::{Delay, RetryPolicy};

fn retrying(name: &str, policy: RetryPolicy) -> ProviderEntry {
    ProviderEntry {
        retry: Some(policy),
        ..entry(name)
    }
}

fn limited(name: &str) -> ProviderEntry {
    ProviderEntry {
        limits: Some(EntryLimits {
            max_concurrent: Some(1),
            requests_per_minute: None,
            input_tokens_per_minute: None,
            max_wait_ms: 500,
        }),
        ..entry(name)
    }
}

fn advised(status: u16, ms: u64) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: b"{\"type\":\"error\"}".to_vec(),
        advice: proto::provider::retry::RetryAdvice::AfterMs(ms),
    }
}

fn admissions(h: &Harness) -> Vec<crate::session_core::Admission> {
    h.seen
        .iter()
        .filter_map(|s| match s {
            Seen::Admit(_, a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

/// A 429 that advised 1 s is retried on the same entry once the engine
/// grants the wait: two attempts logged, both attempt 0, no session error.
#[test]
fn an_advised_429_is_retried_after_its_delay_as_a_second_attempt() {
    let mut h = Harness::new();
    h.world.chain = Ok(vec![
        retrying("primary", RetryPolicy::default()),
        entry("backup"),
    ]);
    h.send("key_a", json!("hello"));
    assert!(admissions(&h).is_empty(), "a first try asks for nothing");
    h.admit_at_once = false;
    h.reply(10, advised(429, 1000));
    assert_eq!(
        h.events(),
        [
            EventType::ClientMessageSend,
            EventType::ProviderRequest,
            EventType::ProviderResponse,
        ],
        "the retry's request is logged only when it leaves"
    );
    let a = admissions(&h);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].entry, "primary");
    assert_eq!(a[0].delay, Some(Delay::Advised(1000)));
    let ticket = match h.seen.last() {
        Some(Seen::Admit(id, _)) => *id,
        other => panic!("{other:?}"),
    };
    h.now += 1000;
    assert!(h.core.admitted(ticket));
    h.drive();
    assert_eq!(
        h.last_call(),
        Some(ticket),
        "the call is the admitted ticket"
    );
    h.answer(text("done"));
    let requests = h.payloads(EventType::ProviderRequest);
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r["attempt"] == 0 && r["kind"] == "primary"));
    let responses = h.payloads(EventType::ProviderResponse);
    assert_eq!(responses[0]["status"], 429);
    assert_eq!(responses[1]["ok"], true);
    assert!(h.payloads(EventType::SessionError).is_empty());
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
    // A late admission of a finished attempt is refused.
    assert!(!h.core.admitted(ticket));
}

/// An advised wait past the policy's maximum goes to the fallback at once.
#[test]
fn an_advised_wait_past_the_maximum_falls_back_at_once() {
    let mut h = Harness::new();
    let policy = RetryPolicy {
        max_wait_ms: 2_000,
        ..RetryPolicy::default()
    };
    h.world.chain = Ok(vec![retrying("primary", policy), entry("backup")]);
    h.send("key_a", json!("hello"));
    h.reply(10, advised(429, 5_000));
    assert!(admissions(&h).is_empty());
    let errors = h.payloads(EventType::SessionError);
    assert_eq!(errors[0]["reason"], "provider_call_failed");
    let requests = h.payloads(EventType::ProviderRequest);
    assert_eq!(requests[1]["attempt"], 1);
    assert_eq!(requests[1]["kind"], "fallback");
}

/// Without advice the backoff doubles; past `max_retries` the walk goes
/// on as the reference's; statuses outside the policy are not retried.
#[test]
fn backoff_then_the_walk_when_retries_run_out() {
    let mut h = Harness::new();
    let policy = RetryPolicy {
        max_retries: 2,
        backoff_ms: 100,
        ..RetryPolicy::default()
    };
    h.world.chain = Ok(vec![retrying("primary", policy)]);
    h.send("key_a", json!("hello"));
    h.reply(10, failed(503));
    h.reply(10, failed(503));
    h.reply(10, failed(503));
    let delays: Vec<_> = admissions(&h).into_iter().map(|a| a.delay).collect();
    assert_eq!(
        delays,
        [
            Some(Delay::Backoff { ceiling_ms: 100 }),
            Some(Delay::Backoff { ceiling_ms: 200 })
        ]
    );
    assert_eq!(h.payloads(EventType::ProviderResponse).len(), 3);
    let reasons: Vec<_> = (h.payloads(EventType::SessionError).iter())
        .map(|e| e["reason"].clone())
        .collect();
    assert_eq!(reasons, ["provider_call_failed", "all_providers_failed"]);
    assert!(matches!(h.ending(), Some(Ending::ProvidersFailed)));

    let mut h = Harness::new();
    h.world.chain = Ok(vec![retrying("primary", RetryPolicy::default())]);
    h.send("key_a", json!("hello"));
    h.reply(10, failed(500));
    assert!(admissions(&h).is_empty(), "500 is not in the policy");
    assert!(matches!(h.ending(), Some(Ending::ProvidersFailed)));
}

/// A limited entry's attempt asks for its slot before its request is
/// logged; one that waited too long is logged as a failed attempt and the
/// fallback goes on.
#[test]
fn a_limited_attempt_waits_for_its_slot_and_fails_over_when_it_expires() {
    let mut h = Harness::new();
    h.world.chain = Ok(vec![limited("primary"), entry("backup")]);
    h.admit_at_once = false;
    h.send("key_a", json!("hello"));
    assert_eq!(h.events(), [EventType::ClientMessageSend]);
    let a = admissions(&h);
    assert_eq!((a[0].entry.as_str(), a[0].delay), ("primary", None));
    assert!(a[0].tokens >= 1);
    let ticket = match h.seen.last() {
        Some(Seen::Admit(id, _)) => *id,
        other => panic!("{other:?}"),
    };
    assert!(!h.core.admission_expired(CallId(999), 1, &h.world, h.now));
    assert!(h.core.admission_expired(ticket, 500, &h.world, h.now));
    h.drive();
    let responses = h.payloads(EventType::ProviderResponse);
    assert_eq!(responses[0]["status"], Value::Null);
    assert_eq!(
        responses[0]["error"],
        "provider limit: no call slot within 500 ms"
    );
    assert_eq!(
        h.payloads(EventType::SessionError)[0]["reason"],
        "provider_call_failed"
    );
    // The fallback is unlimited: it leaves at once.
    let requests = h.payloads(EventType::ProviderRequest);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["kind"], "fallback");
    h.answer(text("from backup"));
    assert!(matches!(h.ending(), Some(Ending::Completed(_))));
}
