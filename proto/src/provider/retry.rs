//! When a provider asked to be called again, read from its response
//! headers ([`RetryAdvice::from_headers`]): `retry-after-ms`,
//! `Retry-After` (delay-seconds or an HTTP date, RFC 9110 §10.2.3),
//! Anthropic's `anthropic-ratelimit-<limit>-reset` (RFC 3339 instants)
//! and OpenAI's `x-ratelimit-reset-<limit>` (Go durations such as `6m0s`).
//!
//! The driver reads these once per non-2xx reply and hands the engine the
//! typed value; the engine turns it into a delay against its own clock.

/// What a reply's headers advise about calling again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAdvice {
    /// Nothing usable was advised.
    #[default]
    None,
    /// A delay counted from the reply (`retry-after-ms`, `Retry-After:
    /// <seconds>`, OpenAI's resets).
    AfterMs(u64),
    /// A wall-clock instant in Unix milliseconds (`Retry-After:
    /// <HTTP-date>`, Anthropic's resets).
    AtUnixMs(u64),
}

/// The longest advice taken at face value (a day): anything longer is
/// clamped, so no arithmetic overflows and a policy's maximum wait decides.
const MAX_ADVICE_MS: u64 = 86_400_000;

impl RetryAdvice {
    /// The advice in `headers` (names in any case). Precedence, as the
    /// official SDKs read it: `retry-after-ms`, then `Retry-After` as
    /// seconds, then as an HTTP date; then the provider's own reset
    /// headers, for the limits it reports exhausted (`…-remaining: 0`, or
    /// no remaining count at all): the latest of those resets.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> RetryAdvice {
        let mut after_ms = None;
        let mut after_s = None;
        let mut date = None;
        let mut resets = Resets::default();
        for (name, value) in headers {
            let value = value.trim();
            if name.eq_ignore_ascii_case("retry-after-ms") {
                after_ms = after_ms.or_else(|| parse_decimal_ms(value, 1));
            } else if name.eq_ignore_ascii_case("retry-after") {
                match parse_decimal_ms(value, 1000) {
                    Some(ms) => after_s = after_s.or(Some(ms)),
                    None => date = date.or_else(|| parse_http_date(value)),
                }
            } else {
                resets.note(name, value);
            }
        }
        if let Some(ms) = after_ms.or(after_s) {
            return RetryAdvice::AfterMs(ms.min(MAX_ADVICE_MS));
        }
        if let Some(at) = date {
            return RetryAdvice::AtUnixMs(at);
        }
        resets.advice()
    }

    /// Milliseconds to wait from `now_unix_ms` (`None`: no advice). An
    /// instant in the past means at once.
    pub fn delay_ms(self, now_unix_ms: u64) -> Option<u64> {
        match self {
            RetryAdvice::None => None,
            RetryAdvice::AfterMs(ms) => Some(ms),
            RetryAdvice::AtUnixMs(at) => Some(at.saturating_sub(now_unix_ms).min(MAX_ADVICE_MS)),
        }
    }
}

/// A provider's per-limit reset headers, paired with their remaining
/// counts by limit name.
#[derive(Default)]
struct Resets {
    limits: Vec<Limit>,
}

#[derive(Default)]
struct Limit {
    name: String,
    reset: Option<RetryAdvice>,
    exhausted: Option<bool>,
}

impl Resets {
    fn note(&mut self, name: &str, value: &str) {
        let lower = name.to_ascii_lowercase();
        let (limit, reset) = if let Some(rest) = lower.strip_prefix("anthropic-ratelimit-") {
            if let Some(l) = rest.strip_suffix("-reset") {
                (l, Some(parse_rfc3339(value).map(RetryAdvice::AtUnixMs)))
            } else if let Some(l) = rest.strip_suffix("-remaining") {
                (l, None)
            } else {
                return;
            }
        } else if let Some(l) = lower.strip_prefix("x-ratelimit-reset-") {
            (
                l,
                Some(parse_go_duration_ms(value).map(RetryAdvice::AfterMs)),
            )
        } else if let Some(l) = lower.strip_prefix("x-ratelimit-remaining-") {
            (l, None)
        } else {
            return;
        };
        let idx = match self.limits.iter().position(|x| x.name == limit) {
            Some(i) => i,
            None => {
                self.limits.push(Limit {
                    name: limit.to_string(),
                    ..Limit::default()
                });
                self.limits.len() - 1
            }
        };
        let Some(entry) = self.limits.get_mut(idx) else {
            return;
        };
        match reset {
            Some(advice) => entry.reset = advice.or(entry.reset),
            None => entry.exhausted = value.parse::<u64>().ok().map(|n| n == 0),
        }
    }

    /// The latest reset of an exhausted limit. Delays and instants are
    /// not mixed by one provider; if they were, instants win.
    fn advice(&self) -> RetryAdvice {
        let considered = self
            .limits
            .iter()
            .filter(|l| l.exhausted != Some(false))
            .filter_map(|l| l.reset);
        let mut best = RetryAdvice::None;
        for a in considered {
            best = match (best, a) {
                (RetryAdvice::None, a) => a,
                (RetryAdvice::AtUnixMs(x), RetryAdvice::AtUnixMs(y)) => {
                    RetryAdvice::AtUnixMs(x.max(y))
                }
                (RetryAdvice::AfterMs(x), RetryAdvice::AfterMs(y)) => {
                    RetryAdvice::AfterMs(x.max(y))
                }
                (RetryAdvice::AtUnixMs(x), _) | (_, RetryAdvice::AtUnixMs(x)) => {
                    RetryAdvice::AtUnixMs(x)
                }
                (b, RetryAdvice::None) => b,
            };
        }
        match best {
            RetryAdvice::AfterMs(ms) => RetryAdvice::AfterMs(ms.min(MAX_ADVICE_MS)),
            other => other,
        }
    }
}

/// A non-negative decimal number (`2`, `1.5`) times `unit` milliseconds,
/// rounded up to a whole millisecond.
fn parse_decimal_ms(s: &str, unit: u64) -> Option<u64> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Clamp huge values instead of failing: they mean "a long time".
    let whole: u64 = if int.is_empty() {
        0
    } else {
        int.parse::<u64>().unwrap_or(u64::MAX / 1_000_000)
    };
    let mut ms = whole.saturating_mul(unit);
    // Fractional part: up to 9 digits is plenty for milliseconds.
    let digits = frac.get(..frac.len().min(9)).unwrap_or("");
    if !digits.is_empty() {
        let scale = 10u64.pow(digits.len() as u32);
        let f: u64 = digits.parse().unwrap_or(0);
        ms = ms.saturating_add((f * unit).div_ceil(scale));
    }
    Some(ms)
}

/// A Go duration (`1s`, `6m0s`, `20ms`, `1m30.5s`, `1h2m`) in milliseconds,
/// rounded up.
fn parse_go_duration_ms(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total_us: u64 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(tail.len(), |(i, _)| i);
        let (unit, tail) = tail.split_at(unit_len);
        let per_us: u64 = match unit {
            "ns" => 0,
            "us" | "µs" | "μs" => 1,
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            _ => return None,
        };
        let us = if per_us == 0 {
            // Nanoseconds: below a microsecond each; rounded up below.
            u64::from(!num.trim_matches(['0', '.']).is_empty())
        } else {
            let (int, frac) = num.split_once('.').unwrap_or((num, ""));
            if int.is_empty() && frac.is_empty() {
                return None;
            }
            let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
            let digits = frac.get(..frac.len().min(9)).unwrap_or("");
            let part = if digits.is_empty() {
                0
            } else {
                let f: u64 = digits.parse().ok()?;
                (f * per_us).div_ceil(10u64.pow(digits.len() as u32))
            };
            whole.saturating_mul(per_us).saturating_add(part)
        };
        total_us = total_us.saturating_add(us);
        rest = tail;
    }
    Some(total_us.div_ceil(1_000))
}

/// An HTTP date in any of the three formats a recipient must accept
/// (IMF-fixdate, RFC 850, asctime), as Unix milliseconds.
fn parse_http_date(s: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(s).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(d.as_millis()).ok()
}

/// An RFC 3339 instant (`2026-01-02T03:04:05Z`, fractional seconds and a
/// `±hh:mm` offset allowed) as Unix milliseconds. Written here rather than
/// pulled in: the one date shape of one header, on the civil-date helpers
/// the crate already has.
fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let days =
        crate::wire::time::days_from_civil(num(0..4)?, num(5..7)? as u32, num(8..10)? as u32)?;
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let digits = b
            .get(i + 1..)?
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        let first3: String = s.get(i + 1..i + 1 + digits.min(3))?.to_string();
        let padded = format!("{first3:0<3}");
        ms = padded.parse::<u64>().ok()?;
        // Round any further digits up: never earlier than advised.
        if s.get(i + 4..i + 1 + digits)
            .is_some_and(|r| r.bytes().any(|c| c != b'0'))
        {
            ms += 1;
        }
        i += 1 + digits;
    }
    let base = (days * 86_400 + (h * 60 + mi) * 60 + sec) * 1_000 + ms;
    match b.get(i)? {
        b'Z' | b'z' if b.len() == i + 1 => Some(base),
        sign @ (b'+' | b'-') if b.len() == i + 6 && sep(i + 3, b":") => {
            let off = (num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?) * 60_000;
            if *sign == b'+' {
                base.checked_sub(off)
            } else {
                Some(base + off)
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(h: &[(&str, &str)]) -> RetryAdvice {
        RetryAdvice::from_headers(h.iter().copied())
    }

    #[test]
    fn retry_after_seconds_and_ms() {
        assert_eq!(advice(&[("Retry-After", "1")]), RetryAdvice::AfterMs(1000));
        assert_eq!(
            advice(&[("retry-after", " 2.5 ")]),
            RetryAdvice::AfterMs(2500)
        );
        assert_eq!(advice(&[("retry-after", "0")]), RetryAdvice::AfterMs(0));
        assert_eq!(
            advice(&[("retry-after", "3"), ("retry-after-ms", "120")]),
            RetryAdvice::AfterMs(120),
            "retry-after-ms wins, as in the official SDKs"
        );
        assert_eq!(
            advice(&[("retry-after", "99999999999999")]),
            RetryAdvice::AfterMs(MAX_ADVICE_MS)
        );
        assert_eq!(advice(&[("retry-after", "-1")]), RetryAdvice::None);
        assert_eq!(advice(&[("retry-after", "soon")]), RetryAdvice::None);
        assert_eq!(advice(&[]), RetryAdvice::None);
    }

    #[test]
    fn retry_after_http_dates_in_all_three_formats() {
        // 1994-11-06T08:49:37Z
        let at = 784_111_777_000;
        for v in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                advice(&[("Retry-After", v)]),
                RetryAdvice::AtUnixMs(at),
                "{v}"
            );
        }
        let a = RetryAdvice::AtUnixMs(at);
        assert_eq!(a.delay_ms(at - 1500), Some(1500));
        assert_eq!(a.delay_ms(at + 5), Some(0), "a past instant means at once");
    }

    #[test]
    fn anthropic_resets_of_exhausted_limits() {
        let h = [
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-01-02T03:04:05Z"),
            ("anthropic-ratelimit-tokens-remaining", "5000"),
            ("anthropic-ratelimit-tokens-reset", "2026-01-02T03:05:00Z"),
        ];
        let want = parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(advice(&h), RetryAdvice::AtUnixMs(want));
        // Retry-After wins over the resets.
        let mut with = h.to_vec();
        with.push(("retry-after", "7"));
        assert_eq!(advice(&with), RetryAdvice::AfterMs(7000));
        // Nothing exhausted: no advice (backoff decides).
        let none = [
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "2026-01-02T03:04:05Z"),
        ];
        assert_eq!(advice(&none), RetryAdvice::None);
        // A reset without its count counts.
        let lone = [(
            "anthropic-ratelimit-input-tokens-reset",
            "2026-01-02T03:04:05.250Z",
        )];
        assert_eq!(advice(&lone), RetryAdvice::AtUnixMs(want + 250));
    }

    #[test]
    fn openai_resets_are_durations() {
        let h = [
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        assert_eq!(advice(&h), RetryAdvice::AfterMs(360_000));
        assert_eq!(parse_go_duration_ms("20ms"), Some(20));
        assert_eq!(parse_go_duration_ms("1m30.5s"), Some(90_500));
        assert_eq!(parse_go_duration_ms("1h2m"), Some(3_720_000));
        assert_eq!(parse_go_duration_ms("1.0001ms"), Some(2), "rounded up");
        assert_eq!(parse_go_duration_ms("500us"), Some(1));
        assert_eq!(parse_go_duration_ms("3ns"), Some(1));
        assert_eq!(parse_go_duration_ms("0s"), Some(0));
        assert_eq!(parse_go_duration_ms("5"), None);
        assert_eq!(parse_go_duration_ms("5x"), None);
        assert_eq!(parse_go_duration_ms(""), None);
    }

    #[test]
    fn rfc3339_shapes() {
        let z = parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(parse_rfc3339("2026-01-02T05:04:05+02:00"), Some(z));
        assert_eq!(parse_rfc3339("2026-01-02T01:04:05-02:00"), Some(z));
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05.1Z"), Some(z + 100));
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05.0001Z"), Some(z + 1));
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05"), None);
        assert_eq!(parse_rfc3339("2026-13-02T03:04:05Z"), None);
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05.Z"), None);
        assert_eq!(parse_rfc3339("garbage"), None);
        assert_eq!(parse_rfc3339(""), None);
    }
}
