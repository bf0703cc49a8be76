//! Provider traffic in the simulation (docs/extensions.md, "Provider
//! traffic"): `retry` and `limits` tables on some provider entries, and a
//! simulated provider that answers `429`/`503`/`529` with advised waits in
//! every form the driver reads (`retry-after-ms`, `Retry-After` as seconds
//! and as an HTTP date, Anthropic's and OpenAI's reset headers) and with a
//! `429` whenever more of its calls are in flight than it accepts. The
//! headers go through the driver's own parser
//! ([`RetryAdvice::from_headers`]); the oracle ([`oracle`]) judges the
//! engine against what the simulated provider *meant*, not against that
//! parser.
//!
//! Every decision comes from the traffic generator of its own, drawn only
//! in seeds that turn traffic on, so other seeds draw what they drew before.

pub mod oracle;

use std::fmt;

use engine::provider_limits::EntryLimits;
use engine::{ProviderReply, RetryPolicy};
use proto::provider::retry::RetryAdvice;

use crate::rng::Rng;

/// The simulated provider entries, in registry order (`world/mod.rs`).
pub const ENTRY_URLS: [&str; 2] = ["http://main.provider.sim", "http://backup.provider.sim"];

/// One entry's tables.
#[derive(Debug, Clone, Default)]
pub struct EntryTraffic {
    pub retry: Option<RetryPolicy>,
    pub limits: Option<EntryLimits>,
}

/// Traffic options of a seed (drawn after everything else).
#[derive(Debug, Clone, Default)]
pub struct TrafficSwarm {
    pub on: bool,
    /// `main`, `backup`.
    pub entries: [EntryTraffic; 2],
    /// Per call: answered with this status and an advised wait.
    pub r429: f64,
    pub r503: f64,
    pub r529: f64,
    /// The provider answers `429` to a call that finds this many of the
    /// entry's calls already in flight (its own concurrency limit).
    pub overload_at: Option<usize>,
    /// Advised waits are drawn in this range (sometimes past the policy's
    /// `max_wait_ms`, which must walk to the fallback at once).
    pub advice_ms: (u64, u64),
}

fn draw_retry(rng: &mut Rng) -> RetryPolicy {
    let mut statuses = vec![429, 503, 529];
    if rng.chance(0.3) {
        statuses.retain(|s| *s != 503);
    }
    if rng.chance(0.3) {
        statuses.push(500);
    }
    RetryPolicy {
        max_retries: rng.range(0, 3) as u32,
        max_wait_ms: *rng.pick(&[200, 1_000, 5_000, 30_000]),
        backoff_ms: *rng.pick(&[1, 10, 100, 500]),
        statuses,
        transport: rng.chance(0.4),
    }
}

fn draw_limits(rng: &mut Rng) -> EntryLimits {
    let mut l = EntryLimits {
        max_concurrent: rng.chance(0.8).then(|| rng.range(1, 3) as u32),
        requests_per_minute: rng.chance(0.4).then(|| *rng.pick(&[6, 30, 120, 1_000])),
        input_tokens_per_minute: rng
            .chance(0.2)
            .then(|| *rng.pick(&[2_000, 20_000, 200_000])),
        max_wait_ms: *rng.pick(&[50, 300, 2_000, 60_000]),
    };
    // A table needs at least one of the three (docs/configuration.md).
    if l.max_concurrent.is_none()
        && l.requests_per_minute.is_none()
        && l.input_tokens_per_minute.is_none()
    {
        l.max_concurrent = Some(rng.range(1, 3) as u32);
    }
    l
}

impl TrafficSwarm {
    pub fn draw(rng: &mut Rng) -> TrafficSwarm {
        if !rng.chance(0.5) {
            return TrafficSwarm::default();
        }
        let mut entries: [EntryTraffic; 2] = Default::default();
        for e in entries.iter_mut() {
            if rng.chance(0.7) {
                e.retry = Some(draw_retry(rng));
            }
            if rng.chance(0.6) {
                e.limits = Some(draw_limits(rng));
            }
        }
        let hi = *rng.pick(&[50, 500, 3_000, 40_000]);
        TrafficSwarm {
            on: true,
            entries,
            r429: rng.rate(0.3, 0.4),
            r503: rng.rate(0.5, 0.15),
            r529: rng.rate(0.5, 0.15),
            overload_at: *rng.pick(&[None, Some(1), Some(2), Some(3)]),
            advice_ms: (0, hi),
        }
    }

    /// No more rate-limit answers (the liveness phase); the tables stay.
    pub fn calm(&mut self) {
        self.r429 = 0.0;
        self.r503 = 0.0;
        self.r529 = 0.0;
        self.overload_at = None;
    }

    /// The entry a call goes to, by its URL.
    pub fn entry_of(url: &str) -> Option<usize> {
        ENTRY_URLS.iter().position(|u| url.starts_with(u))
    }
}

impl fmt::Display for TrafficSwarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.on {
            return write!(f, "traffic[off]");
        }
        let show = |e: &EntryTraffic| {
            let r = e.retry.as_ref().map(|r| {
                format!(
                    "retry(max={} wait<={} backoff={} {:?} transport={})",
                    r.max_retries, r.max_wait_ms, r.backoff_ms, r.statuses, r.transport
                )
            });
            let l = e.limits.map(|l| {
                format!(
                    "limits(conc={:?} rpm={:?} itpm={:?} wait<={})",
                    l.max_concurrent,
                    l.requests_per_minute,
                    l.input_tokens_per_minute,
                    l.max_wait_ms
                )
            });
            format!("{}{}", r.unwrap_or_default(), l.unwrap_or_default())
        };
        write!(
            f,
            "traffic[main={} backup={} 429={} 503={} 529={} overload_at={:?} advice={}..{}ms]",
            show(&self.entries[0]),
            show(&self.entries[1]),
            self.r429,
            self.r503,
            self.r529,
            self.overload_at,
            self.advice_ms.0,
            self.advice_ms.1,
        )
    }
}

/// What the simulated provider meant its headers to advise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meant {
    None,
    /// This many ms after the reply.
    After(u64),
    /// This Unix instant (ms).
    At(u64),
}

/// A rate-limit answer: status, headers, and what they mean.
#[derive(Debug, Clone)]
pub struct Limited {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub meant: Meant,
}

impl Limited {
    /// The reply as the driver hands it to the engine: the headers read by
    /// the driver's parser.
    pub fn reply(&self) -> ProviderReply {
        let kind = match self.status {
            429 => "rate_limit_error",
            _ => "overloaded_error",
        };
        let body = format!(
            r#"{{"type":"error","error":{{"type":"{kind}","message":"simulated {}"}}}}"#,
            self.status
        );
        ProviderReply::Http {
            status: self.status,
            body: body.into_bytes(),
            advice: RetryAdvice::from_headers(
                self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            ),
        }
    }
}

/// Draws a rate-limit answer's advice in one of the forms providers use,
/// `unix_ms` being the wall clock when the reply leaves the provider
/// (`latency` before the engine reads it).
pub fn draw_limited(rng: &mut Rng, status: u16, sw: &TrafficSwarm, unix_ms: u64) -> Limited {
    let wait = rng.range(sw.advice_ms.0, sw.advice_ms.1);
    let h = |k: &str, v: String| (k.to_string(), v);
    let (headers, meant) = match rng.below(7) {
        0 => (vec![], Meant::None),
        1 => (
            vec![h("retry-after-ms", wait.to_string())],
            Meant::After(wait),
        ),
        2 => {
            let s = wait.div_ceil(1000);
            (
                vec![h("Retry-After", s.to_string())],
                Meant::After(s * 1000),
            )
        }
        3 => {
            // Whole seconds on the wire: the instant is the next second.
            let at = (unix_ms + wait).div_ceil(1000) * 1000;
            (vec![h("Retry-After", http_date(at))], Meant::At(at))
        }
        4 => {
            // Anthropic: the exhausted limit's reset counts; a limit with
            // requests left (its later reset) does not.
            let at = (unix_ms + wait).div_ceil(1000) * 1000;
            let later = at + 3_600_000;
            (
                vec![
                    h("anthropic-ratelimit-requests-remaining", "0".into()),
                    h("anthropic-ratelimit-requests-reset", rfc3339(at)),
                    h("anthropic-ratelimit-tokens-remaining", "4000".into()),
                    h("anthropic-ratelimit-tokens-reset", rfc3339(later)),
                ],
                Meant::At(at),
            )
        }
        5 => (
            vec![
                h("x-ratelimit-remaining-requests", "0".into()),
                h("x-ratelimit-reset-requests", go_duration(wait)),
                h("x-ratelimit-remaining-tokens", "9000".into()),
                h("x-ratelimit-reset-tokens", "59m0s".into()),
            ],
            Meant::After(wait),
        ),
        _ => {
            // `retry-after-ms` wins over `Retry-After` (the SDKs' order).
            let s = wait / 1000 + 7;
            (
                vec![
                    h("Retry-After", s.to_string()),
                    h("retry-after-ms", wait.to_string()),
                ],
                Meant::After(wait),
            )
        }
    };
    Limited {
        status,
        headers,
        meant,
    }
}

/// `(year, month, day)` of a day count since 1970-01-01 (the proleptic
/// Gregorian calendar; Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn split(unix_ms: u64) -> (i64, u64) {
    let secs = unix_ms / 1000;
    ((secs / 86_400) as i64, secs % 86_400)
}

/// IMF-fixdate (RFC 9110 §5.6.7), whole seconds.
pub fn http_date(unix_ms: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, s) = split(unix_ms);
    let (y, m, d) = civil(days);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// RFC 3339 in UTC, whole seconds (as Anthropic sends its resets).
pub fn rfc3339(unix_ms: u64) -> String {
    let (days, s) = split(unix_ms);
    let (y, m, d) = civil(days);
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A Go duration as OpenAI sends its resets (`20ms`, `1.5s`, `6m0s`).
pub fn go_duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, rest) = (ms / 60_000, ms % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let frac = format!("{:03}", rest % 1000);
        format!("{}.{}s", rest / 1000, frac.trim_end_matches('0'))
    };
    if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_forms_parse_to_what_they_mean() {
        // 2026-12-06T12:00:00Z
        let noon = 1_796_558_400_000;
        assert_eq!(http_date(noon), "Sun, 06 Dec 2026 12:00:00 GMT");
        assert_eq!(rfc3339(noon + 61_000), "2026-12-06T12:01:01Z");
        assert_eq!(go_duration(20), "20ms");
        assert_eq!(go_duration(1_500), "1.5s");
        assert_eq!(go_duration(360_000), "6m0s");
        assert_eq!(go_duration(61_250), "1m1.25s");
        let mut rng = Rng::new(7);
        let sw = TrafficSwarm {
            advice_ms: (0, 40_000),
            ..TrafficSwarm::default()
        };
        for _ in 0..500 {
            let l = draw_limited(&mut rng, 429, &sw, noon + 123);
            let ProviderReply::Http { advice, .. } = l.reply() else {
                panic!()
            };
            let want = match l.meant {
                Meant::None => RetryAdvice::None,
                Meant::After(ms) => RetryAdvice::AfterMs(ms),
                Meant::At(at) => RetryAdvice::AtUnixMs(at),
            };
            assert_eq!(advice, want, "{:?}", l.headers);
        }
    }
}
