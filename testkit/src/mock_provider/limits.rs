//! Provider-side rate limiting in the mock: scripted rate-limit answers
//! (`429`, `503`, `529` with `Retry-After` in seconds or as an HTTP date,
//! or the providers' own reset headers), and a concurrency limit above
//! which every request is answered `429` with `Retry-After`, as a
//! provider's would be, with the figures a test checks (most calls in
//! flight at once, refusals).

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::{Endpoint, MockProvider, Reply, State};
use proto::http::peer as wire;

/// A rate-limit (or overload) answer: `status`, the endpoint's error body,
/// and `headers` (e.g. `retry-after`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// `429` with `Retry-After: <retry_after>` (seconds or an HTTP date).
    pub fn rate_limited(retry_after: &str) -> Reply {
        Reply::limited(429, &[("retry-after", retry_after)])
    }

    /// `status` in the endpoint's error shape, with `headers`.
    pub fn limited(status: u16, headers: &[(&str, &str)]) -> Reply {
        Reply::Limited(Box::new(Limited {
            status,
            headers: (headers.iter())
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }))
    }
}

/// `Retry-After` as an HTTP date `from_now` ahead (IMF-fixdate, whole
/// seconds rounded up).
pub fn http_date_in(from_now: Duration) -> String {
    let at = SystemTime::now() + from_now + Duration::from_millis(999);
    httpdate::fmt_http_date(at)
}

/// The mock's concurrency limit and what it saw.
#[derive(Debug, Default)]
pub(super) struct Limits {
    /// Above this many requests in flight, answer `429`.
    max: Option<usize>,
    retry_after: String,
    in_flight: usize,
    stats: LimitStats,
}

/// What the concurrency limit saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitStats {
    /// Most requests in flight at once (the refused ones not counted).
    pub max_in_flight: usize,
    /// Requests answered `429` by the limit.
    pub refused: u64,
    /// Requests served within the limit.
    pub served: u64,
}

impl MockProvider {
    /// Answers `429` with `Retry-After: <retry_after>` to every request
    /// that arrives while `max` others are in flight (the script is not
    /// consumed for them).
    pub fn limit_concurrency(&self, max: usize, retry_after: &str) {
        let mut st = self.shared.lock();
        st.limits.max = Some(max);
        st.limits.retry_after = retry_after.to_string();
    }

    pub fn limit_stats(&self) -> LimitStats {
        self.shared.lock().limits.stats
    }
}

/// A request arrived: `Some` refusal when it is over the limit, else it
/// counts as in flight until [`leave`].
pub(super) fn enter(st: &mut State) -> Option<Reply> {
    let l = &mut st.limits;
    if l.max.is_some_and(|m| l.in_flight >= m) {
        l.stats.refused += 1;
        return Some(Reply::rate_limited(&l.retry_after));
    }
    l.in_flight += 1;
    l.stats.served += 1;
    l.stats.max_in_flight = l.stats.max_in_flight.max(l.in_flight);
    None
}

/// A request within the limit was answered.
pub(super) fn leave(st: &mut State) {
    st.limits.in_flight = st.limits.in_flight.saturating_sub(1);
}

/// The error body a provider sends with a rate-limit or overload status.
fn error_body(endpoint: Endpoint, status: u16) -> Value {
    let (kind, message) = match status {
        429 => (
            "rate_limit_error",
            "Number of concurrent requests exceeds your rate limit.",
        ),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "The service is temporarily unavailable."),
    };
    match endpoint {
        Endpoint::Openai => json!({"error": {
            "message": message, "type": "requests", "param": null,
            "code": if status == 429 { "rate_limit_exceeded" } else { "server_error" },
        }}),
        _ => json!({"type": "error", "error": {"type": kind, "message": message}}),
    }
}

/// Writes a [`Limited`] answer.
pub(super) fn answer(
    conn: &mut TcpStream,
    l: &Limited,
    endpoint: Endpoint,
    close: bool,
) -> io::Result<bool> {
    let body = error_body(endpoint, l.status).to_string();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: {}\r\n",
        l.status,
        wire::reason_phrase(l.status),
        body.len(),
        if close { "close" } else { "keep-alive" },
    );
    for (n, v) in &l.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    conn.write_all(&out)?;
    conn.flush()?;
    Ok(true)
}
