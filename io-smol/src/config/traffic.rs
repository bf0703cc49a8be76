//! `retry` and `limits` of a `[[providers.entries]]` entry (extensions,
//! docs/configuration.md): declared as serde tables with strict key sets,
//! then checked into the engine's types. Absent: the reference's
//! behaviour (no retry, no shared limits).

use serde::Deserialize;

use engine::provider_limits::{EntryLimits, DEFAULT_MAX_WAIT_MS};
use engine::RetryPolicy;

/// `[providers.entries.retry]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryTable {
    pub max_retries: Option<i64>,
    pub max_wait_ms: Option<i64>,
    pub backoff_ms: Option<i64>,
    pub statuses: Option<Vec<i64>>,
    pub transport: Option<bool>,
}

/// `[providers.entries.limits]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsTable {
    pub max_concurrent: Option<i64>,
    pub requests_per_minute: Option<i64>,
    pub input_tokens_per_minute: Option<i64>,
    pub max_wait_ms: Option<i64>,
}

/// A whole number in `lo..=hi`, or the error naming `at`.
fn within(at: &str, key: &str, v: i64, lo: i64, hi: i64) -> Result<u64, String> {
    if (lo..=hi).contains(&v) {
        Ok(v as u64)
    } else {
        Err(format!("{at}.{key}: {v} is out of range ({lo} to {hi})"))
    }
}

/// Longest configurable wait: ten minutes.
const MAX_WAIT_LIMIT_MS: i64 = 600_000;

impl RetryTable {
    /// The engine's policy; `at` names the table in errors
    /// (`providers.entries[0].retry`).
    pub fn policy(&self, at: &str) -> Result<RetryPolicy, String> {
        let d = RetryPolicy::default();
        let max_retries = match self.max_retries {
            Some(n) => within(at, "max_retries", n, 0, 10)? as u32,
            None => d.max_retries,
        };
        let max_wait_ms = match self.max_wait_ms {
            Some(n) => within(at, "max_wait_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
            None => d.max_wait_ms,
        };
        let backoff_ms = match self.backoff_ms {
            Some(n) => within(at, "backoff_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
            None => d.backoff_ms,
        };
        let statuses = match &self.statuses {
            Some(list) => {
                let mut out = Vec::with_capacity(list.len());
                for s in list {
                    out.push(within(at, "statuses", *s, 400, 599)? as u16);
                }
                out
            }
            None => d.statuses,
        };
        Ok(RetryPolicy {
            max_retries,
            max_wait_ms,
            backoff_ms,
            statuses,
            transport: self.transport.unwrap_or(d.transport),
        })
    }
}

impl LimitsTable {
    /// The engine's limits; `at` names the table in errors.
    pub fn limits(&self, at: &str) -> Result<EntryLimits, String> {
        let count = |key, v: Option<i64>| v.map(|n| within(at, key, n, 1, i64::MAX)).transpose();
        let limits = EntryLimits {
            max_concurrent: count("max_concurrent", self.max_concurrent)?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            requests_per_minute: count("requests_per_minute", self.requests_per_minute)?,
            input_tokens_per_minute: count(
                "input_tokens_per_minute",
                self.input_tokens_per_minute,
            )?,
            max_wait_ms: match self.max_wait_ms {
                Some(n) => within(at, "max_wait_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
                None => DEFAULT_MAX_WAIT_MS,
            },
        };
        if limits.max_concurrent.is_none()
            && limits.requests_per_minute.is_none()
            && limits.input_tokens_per_minute.is_none()
        {
            return Err(format!(
                "{at}: set at least one of max_concurrent, requests_per_minute, input_tokens_per_minute"
            ));
        }
        Ok(limits)
    }
}

/// Reads `key` of an entry table as `T` (a strict serde table).
pub fn table<T: for<'de> Deserialize<'de>>(
    t: &toml::Table,
    key: &str,
    at: &str,
) -> Result<Option<T>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(v @ toml::Value::Table(_)) => v
            .clone()
            .try_into()
            .map(Some)
            .map_err(|e| format!("{at}.{key}: {}", e.message())),
        Some(_) => Err(format!("{at}.{key}: expected a table")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(toml_text: &str) -> Result<RetryPolicy, String> {
        let t: toml::Table = toml_text.parse().unwrap();
        let r: RetryTable = table(&t, "retry", "e")?.unwrap();
        r.policy("e.retry")
    }

    fn limits(toml_text: &str) -> Result<EntryLimits, String> {
        let t: toml::Table = toml_text.parse().unwrap();
        let l: LimitsTable = table(&t, "limits", "e")?.unwrap();
        l.limits("e.limits")
    }

    #[test]
    fn retry_defaults_and_bounds() {
        let p = retry("[retry]").unwrap();
        assert_eq!(p, RetryPolicy::default());
        let p = retry(
            "[retry]\nmax_retries = 5\nmax_wait_ms = 2000\nstatuses = [429]\ntransport = true",
        )
        .unwrap();
        assert_eq!((p.max_retries, p.max_wait_ms, p.transport), (5, 2000, true));
        assert_eq!(p.statuses, [429]);
        let e = retry("[retry]\nmax_retries = 11").unwrap_err();
        assert_eq!(e, "e.retry.max_retries: 11 is out of range (0 to 10)");
        let e = retry("[retry]\nstatuses = [200]").unwrap_err();
        assert!(e.contains("statuses: 200 is out of range"), "{e}");
        let e = retry("[retry]\nmax_wait_ms = 0").unwrap_err();
        assert!(e.contains("max_wait_ms: 0"), "{e}");
        let e = retry("[retry]\nretries = 1").unwrap_err();
        assert!(e.starts_with("e.retry: unknown field `retries`"), "{e}");
        let e = retry("[retry]\nmax_retries = \"2\"").unwrap_err();
        assert!(e.starts_with("e.retry: invalid type"), "{e}");
        let t: toml::Table = "retry = 3".parse().unwrap();
        assert_eq!(
            table::<RetryTable>(&t, "retry", "e").unwrap_err(),
            "e.retry: expected a table"
        );
    }

    #[test]
    fn limits_need_one_limit_and_positive_values() {
        let l = limits("[limits]\nmax_concurrent = 4").unwrap();
        assert_eq!(l.max_concurrent, Some(4));
        assert_eq!(l.max_wait_ms, DEFAULT_MAX_WAIT_MS);
        let l = limits(
            "[limits]\nrequests_per_minute = 60\ninput_tokens_per_minute = 1000\nmax_wait_ms = 5",
        )
        .unwrap();
        assert_eq!(
            (
                l.requests_per_minute,
                l.input_tokens_per_minute,
                l.max_wait_ms
            ),
            (Some(60), Some(1000), 5)
        );
        let e = limits("[limits]\nmax_wait_ms = 10").unwrap_err();
        assert!(e.contains("set at least one of"), "{e}");
        let e = limits("[limits]\nmax_concurrent = 0").unwrap_err();
        assert!(e.contains("max_concurrent: 0 is out of range"), "{e}");
        let e = limits("[limits]\nmax_concurrent = 1\nburst = 3").unwrap_err();
        assert!(e.contains("unknown field `burst`"), "{e}");
    }
}
