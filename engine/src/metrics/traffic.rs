//! Traffic control figures (docs/extensions.md, "Traffic control"): the
//! provider entries' queues, slots and retries, and the overload bounds,
//! as Prometheus text for `GET /metrics` and as the JSON of `GET
//! /admin/v1/traffic` (the console's traffic panel). Nothing is rendered
//! for what is not configured, so a server without traffic control
//! scrapes as before.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::overload;
use crate::provider_limits::EntryStatus;

/// A Prometheus label value: `\`, `"` and line feeds escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Appends the traffic series: per provider entry with limits or a retry
/// policy (`watched`), then the overload figures when a bound is on.
pub fn render_prometheus(
    out: &mut String,
    entries: &[EntryStatus],
    watched: impl Fn(&str) -> bool,
    overload: &overload::Status,
) {
    let entries: Vec<&EntryStatus> = entries.iter().filter(|e| watched(&e.name)).collect();
    type Series = (
        &'static str,
        &'static str,
        &'static str,
        fn(&EntryStatus) -> u64,
    );
    let series: [Series; 7] = [
        (
            "bae_provider_queue_waiting",
            "gauge",
            "Calls waiting in a limited provider entry's queue.",
            |e| e.queued as u64,
        ),
        (
            "bae_provider_retry_waiting",
            "gauge",
            "Failed attempts waiting out their retry delay.",
            |e| e.sleeping as u64,
        ),
        (
            "bae_provider_in_flight",
            "gauge",
            "Calls in flight on a limited provider entry.",
            |e| u64::from(e.in_flight),
        ),
        (
            "bae_provider_queue_oldest_wait_milliseconds",
            "gauge",
            "How long the oldest queued call has waited.",
            |e| e.oldest_wait_ms,
        ),
        (
            "bae_provider_admitted_total",
            "counter",
            "Calls that left through a limited entry's queue.",
            |e| e.admitted_total,
        ),
        (
            "bae_provider_queue_expired_total",
            "counter",
            "Calls whose queue wait passed the entry's bound (attempt failed).",
            |e| e.expired_total,
        ),
        (
            "bae_provider_retries_total",
            "counter",
            "Failed attempts tried again under the entry's retry policy.",
            |e| e.retries_total,
        ),
    ];
    if !entries.is_empty() {
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for e in &entries {
                let _ = writeln!(out, "{name}{{entry=\"{}\"}} {}", label(&e.name), value(e));
            }
        }
    }
    if overload.limits.is_on() {
        let name = "bae_overload_refused_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests refused with 503 past an overload bound.\n# TYPE {name} counter"
        );
        for (cause, n) in overload::Cause::ALL.iter().zip(overload.refused) {
            let _ = writeln!(out, "{name}{{cause=\"{}\"}} {n}", cause.as_str());
        }
        let gauges = [
            (
                "bae_overload_waiting_requests",
                "Gated requests waiting over all sessions (at the last check).",
                overload.waiting as u64,
            ),
            (
                "bae_store_backlog_writes",
                "Store writes emitted and not yet committed.",
                overload.backlog as u64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
    }
}

/// `bae_quota_refused_total{kind}`: requests refused by a quota, by the
/// quota that refused (`requests_per_second`, `max_open_sessions`,
/// `token_budget`); shown once a quota is set or anything was refused.
/// `refused` pairs each kind's label with its count.
pub fn render_quota_refusals(out: &mut String, on: bool, refused: &[(&str, u64)]) {
    if !on && refused.iter().all(|(_, n)| *n == 0) {
        return;
    }
    let name = "bae_quota_refused_total";
    let _ = writeln!(
        out,
        "# HELP {name} Requests refused by a client key's or profile's quota.\n# TYPE {name} counter"
    );
    for (kind, n) in refused {
        let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {n}");
    }
}

/// The body of `GET /admin/v1/traffic`.
pub fn status_json(
    entries: &[EntryStatus],
    retry: impl Fn(&str) -> Option<Value>,
    overload: &overload::Status,
) -> Value {
    let providers: Vec<Value> = entries
        .iter()
        .map(|e| {
            let limits = e.limits.map(|l| {
                json!({
                    "max_concurrent": l.max_concurrent,
                    "requests_per_minute": l.requests_per_minute,
                    "input_tokens_per_minute": l.input_tokens_per_minute,
                    "max_wait_ms": l.max_wait_ms,
                })
            });
            json!({
                "name": e.name,
                "limits": limits,
                "retry": retry(&e.name),
                "in_flight": e.in_flight,
                "queued": e.queued,
                "retry_waiting": e.sleeping,
                "oldest_wait_ms": e.oldest_wait_ms,
                "admitted_total": e.admitted_total,
                "expired_total": e.expired_total,
                "retries_total": e.retries_total,
                "requests_available": e.requests_available,
                "tokens_available": e.tokens_available,
            })
        })
        .collect();
    let l = overload.limits;
    let refused: serde_json::Map<String, Value> = (overload::Cause::ALL.iter())
        .zip(overload.refused)
        .map(|(c, n)| (c.as_str().to_string(), json!(n)))
        .collect();
    json!({
        "providers": providers,
        "overload": {
            "max_waiting": l.max_waiting,
            "max_store_backlog": l.max_store_backlog,
            "retry_after_s": l.retry_after_s,
            "waiting": overload.waiting,
            "store_backlog": overload.backlog,
            "refused": refused,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider_limits::{Ask, EntryLimits, ProviderLimits};
    use crate::{CallId, MonoMs};

    #[test]
    fn only_watched_entries_and_bounds_that_are_on_are_rendered() {
        let lim = EntryLimits {
            max_concurrent: Some(1),
            requests_per_minute: None,
            input_tokens_per_minute: None,
            max_wait_ms: 1000,
        };
        let mut l = ProviderLimits::new([("a\"b", Some(lim)), ("plain", None)], MonoMs(0));
        for c in 1..=3 {
            l.ask(
                MonoMs(0),
                Ask {
                    call: CallId(c),
                    session: crate::ids::SessionId::new("s"),
                    entry: "a\"b",
                    tokens: 1,
                    not_before: None,
                },
            );
        }
        let status = l.status(MonoMs(250));
        let mut out = String::new();
        render_prometheus(
            &mut out,
            &status,
            |n| n != "plain",
            &overload::Status::default(),
        );
        assert!(
            out.contains("bae_provider_queue_waiting{entry=\"a\\\"b\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("bae_provider_in_flight{entry=\"a\\\"b\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("bae_provider_queue_oldest_wait_milliseconds{entry=\"a\\\"b\"} 250\n"),
            "{out}"
        );
        assert!(!out.contains("plain") && !out.contains("overload"), "{out}");
        let mut q = String::new();
        render_quota_refusals(&mut q, false, &[("requests_per_second", 0)]);
        assert_eq!(q, "", "no quota, nothing refused: no series");
        render_quota_refusals(
            &mut q,
            true,
            &[("requests_per_second", 2), ("token_budget", 1)],
        );
        assert!(
            q.contains("bae_quota_refused_total{kind=\"requests_per_second\"} 2\n"),
            "{q}"
        );
        assert!(
            q.contains("bae_quota_refused_total{kind=\"token_budget\"} 1\n"),
            "{q}"
        );
        let mut none = String::new();
        render_prometheus(&mut none, &status, |_| false, &overload::Status::default());
        assert!(none.is_empty());
        let j = status_json(&status, |_| None, &overload::Status::default());
        assert_eq!(j["providers"][0]["queued"], 2);
        assert_eq!(j["providers"][1]["limits"], Value::Null);
    }
}
