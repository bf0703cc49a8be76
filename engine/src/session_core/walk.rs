//! The provider attempt walk's decisions (spec 05 §5), transport-free: what
//! one provider reply means for the turn, as the events it logs and the
//! step that follows. It knows nothing of the engine, streams or the store;
//! [`super::provider_walk`] feeds it replies and routes its answer.

use std::fmt::Write as _;

use proto::provider;
use proto::wire::{json, EventType};
use serde_json::{json, Value};

use crate::ProviderReply;

/// The attempt a reply answers.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// Position in the provider chain (0 = the primary).
    pub index: usize,
    /// Entries in the chain.
    pub chain_len: usize,
    pub kind: provider::Kind,
    /// A compaction's summary call (spec 07 §4): its events are marked
    /// `"purpose": "compaction"` and it logs no session errors of its own.
    pub compaction: bool,
}

/// What follows a reply.
#[derive(Debug)]
pub enum Next {
    /// A parsed assistant message: the turn goes on with it.
    Answer(provider::ProviderResponse),
    /// The attempt failed and the chain has another entry.
    Fallback,
    /// The attempt failed and it was the last one.
    Exhausted,
}

/// A reply's meaning: the events to log, in order, then the next step.
#[derive(Debug)]
pub struct Walked {
    /// Each event with its payload as compact JSON.
    pub events: Vec<(EventType, String)>,
    /// Whether the attempt succeeded (metrics, spans).
    pub ok: bool,
    pub next: Next,
    /// A chat turn whose chain is exhausted puts its session in `error`.
    pub session_error: bool,
}

/// How a streamed attempt ended, when not as a plain HTTP reply.
#[derive(Debug)]
pub enum Streamed {
    /// The stream assembled into a usable reply.
    Reply(provider::ProviderResponse),
    /// A stream fault or timeout (`status: null`); `body` is the error
    /// event's data when the provider sent one.
    Failed { error: String, body: Option<String> },
}

/// The meaning of `reply` to `attempt`.
pub fn on_reply(attempt: Attempt, reply: ProviderReply) -> Walked {
    let (status, error, body) = match reply {
        ProviderReply::Credential(msg) | ProviderReply::Transport(msg) => {
            (Value::Null, msg, Value::Null)
        }
        ProviderReply::Http { status, body, .. } if !(200..300).contains(&status) => (
            json!(status),
            provider::http_error_text(status),
            Value::String(String::from_utf8_lossy(&body).into_owned()),
        ),
        ProviderReply::Http { body, .. } => match provider::parse_response(attempt.kind, &body) {
            Ok(resp) => return answered(attempt, resp),
            Err(e) => (Value::Null, e.to_string(), Value::Null),
        },
        // The core reads a streamed body itself ([`on_stream`]); this
        // reaching the walk means the call was not streamed.
        ProviderReply::Streamed => (
            Value::Null,
            "provider stream reported for an unstreamed call".to_string(),
            Value::Null,
        ),
    };
    failed(attempt, status, error, body)
}

/// An attempt that failed before any response (its provider slot was not
/// granted in time): `status: null`, `error`, `body: null`.
pub fn on_failure(attempt: Attempt, error: String) -> Walked {
    failed(attempt, Value::Null, error, Value::Null)
}

/// The meaning of a streamed attempt's end: the same events and steps as
/// the unstreamed reply would give (docs/extensions.md, streamed calls).
pub fn on_stream(attempt: Attempt, outcome: Streamed) -> Walked {
    match outcome {
        Streamed::Reply(resp) => answered(attempt, resp),
        Streamed::Failed { error, body } => {
            let body = body.map_or(Value::Null, Value::String);
            failed(attempt, Value::Null, error, body)
        }
    }
}

fn answered(attempt: Attempt, resp: provider::ProviderResponse) -> Walked {
    let payload = success_payload(attempt, kind_label(attempt), &resp);
    Walked {
        events: vec![(EventType::ProviderResponse, payload)],
        ok: true,
        next: Next::Answer(resp),
        session_error: false,
    }
}

fn kind_label(attempt: Attempt) -> &'static str {
    if attempt.index == 0 {
        "primary"
    } else {
        "fallback"
    }
}

fn failed(attempt: Attempt, status: Value, error: String, body: Value) -> Walked {
    let mut payload = json!({
        "attempt": attempt.index,
        "kind": kind_label(attempt),
        "provider": attempt.kind.as_str(),
        "ok": false,
        "status": status,
        "error": error,
        "body": body,
    });
    if attempt.compaction {
        mark_compaction(&mut payload);
    }
    let mut events = vec![(EventType::ProviderResponse, json::text(&payload))];
    if attempt.index == 0 && !attempt.compaction {
        let error = json!({"reason": "provider_call_failed", "provider": attempt.kind.as_str(), "detail": error});
        events.push((EventType::SessionError, json::text(&error)));
    }
    let last = attempt.index + 1 >= attempt.chain_len;
    if last && !attempt.compaction {
        let error = json!({"reason": "all_providers_failed", "attempts": attempt.chain_len});
        events.push((EventType::SessionError, json::text(&error)));
    }
    Walked {
        events,
        ok: false,
        next: if last {
            Next::Exhausted
        } else {
            Next::Fallback
        },
        session_error: last && !attempt.compaction,
    }
}

/// A usable reply's `provider.response` payload, written around the
/// body's JSON: the bytes `json!` of `{attempt, kind, provider, ok,
/// status, body, usage}` (then `purpose` for a compaction) would give.
fn success_payload(
    attempt: Attempt,
    kind_label: &str,
    resp: &provider::ProviderResponse,
) -> String {
    let usage = resp.usage.as_ref().map(|u| json::text(&u.to_json()));
    let usage = usage.as_deref().unwrap_or("null");
    let mut out = String::with_capacity(resp.body_json.len() + usage.len() + 128);
    let _ = write!(out, "{{\"attempt\":{},\"kind\":", attempt.index);
    json::push_str(&mut out, kind_label);
    out.push_str(",\"provider\":");
    json::push_str(&mut out, attempt.kind.as_str());
    out.push_str(",\"ok\":true,\"status\":200,\"body\":");
    out.push_str(&resp.body_json);
    out.push_str(",\"usage\":");
    out.push_str(usage);
    if attempt.compaction {
        out.push_str(",\"purpose\":\"compaction\"");
    }
    out.push('}');
    out
}

/// `"purpose": "compaction"` on a provider event payload (an object).
pub fn mark_compaction(payload: &mut Value) {
    if let Some(o) = payload.as_object_mut() {
        o.insert("purpose".into(), json!("compaction"));
    }
}

#[cfg(test)]
mod tests;
