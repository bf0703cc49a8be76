//! The slot oracle at the edge of a wait: a slot freed in the very
//! millisecond a waiter's `max_wait_ms` runs out (sim seed 127).

use engine::store::EventRow;
use engine::{AuthPlacement, CallId, ProviderCall, ProviderReply};
use serde_json::{json, Value};

use super::super::{EntryTraffic, TrafficSwarm, ENTRY_URLS};
use super::TrafficSim;
use crate::check::{Checker, INV_SLOT_FIFO};
use crate::rng::Rng;

const MAX_WAIT: u64 = 300;

fn limited_to_one() -> TrafficSwarm {
    let limits = engine::provider_limits::EntryLimits {
        max_concurrent: Some(1),
        requests_per_minute: None,
        input_tokens_per_minute: None,
        max_wait_ms: MAX_WAIT,
    };
    let mut sw = TrafficSwarm::default();
    sw.entries[0] = EntryTraffic {
        retry: None,
        limits: Some(limits),
    };
    sw
}

fn row(sid: &str, event_type: &str, payload: Value) -> EventRow {
    EventRow {
        seq: 0,
        id: String::new(),
        session_id: sid.into(),
        client_key_id: Some("key".into()),
        event_type: event_type.into(),
        payload: payload.to_string(),
        created_at: String::new(),
    }
}

fn request() -> Value {
    json!({"attempt": 0, "kind": "primary", "base_url": ENTRY_URLS[0]})
}

fn call(id: u64) -> ProviderCall {
    ProviderCall {
        id: CallId(id),
        url: format!("{}/v1/messages", ENTRY_URLS[0]),
        headers: Vec::new(),
        auth_template: String::new(),
        auth: AuthPlacement::XApiKey,
        body: Vec::new(),
        timeout_ms: 30_000,
        stream: false,
    }
}

/// Session `a` holds the entry's one slot; `b` waits for it from 16 768
/// ms (an advised retry's due time). `a`'s reply comes at `freed`, its
/// next turn's call is admitted then, and `b`'s wait expires at 17 068 ms
/// (logged after `a`'s call, as the engine routes its notices).
fn violations(freed: u64) -> Vec<&'static str> {
    let (mut t, mut ck) = (
        TrafficSim::new(Rng::new(1), &limited_to_one(), 0, 0),
        Checker::default(),
    );
    let (a, b) = ("ses_a", "ses_b");
    t.on_emit(&row(a, "client.message.send", json!({})), 16_000, &mut ck);
    t.on_emit(&row(a, "provider.request", request()), 16_000, &mut ck);
    t.on_call_output(&call(1), 16_000, &mut ck);
    t.sessions.entry(b.into()).or_default().waiting = Some((0, 16_768));
    let ok = ProviderReply::Http {
        status: 200,
        body: Vec::new(),
        advice: Default::default(),
    };
    t.on_reply(CallId(1), &ok, freed);
    t.on_emit(
        &row(a, "provider.response", json!({"ok": true})),
        freed,
        &mut ck,
    );
    t.on_emit(&row(a, "server.message.send", json!({})), freed, &mut ck);
    t.on_emit(&row(a, "client.message.send", json!({})), freed, &mut ck);
    t.on_emit(&row(a, "provider.request", request()), freed, &mut ck);
    t.on_call_output(&call(2), freed, &mut ck);
    let expired = json!({"ok": false, "status": null,
        "error": format!("provider limit: no call slot within {MAX_WAIT} ms")});
    t.on_emit(&row(b, "provider.request", request()), 17_068, &mut ck);
    t.on_emit(&row(b, "provider.response", expired), 17_068, &mut ck);
    ck.violations.iter().map(|v| v.invariant).collect()
}

#[test]
fn a_slot_freed_as_a_wait_runs_out_is_not_the_waiters() {
    assert_eq!(violations(17_068), Vec::<&str>::new());
}

#[test]
fn a_slot_freed_before_a_wait_runs_out_is_the_waiters() {
    assert_eq!(violations(17_067), [INV_SLOT_FIFO, INV_SLOT_FIFO]);
}
