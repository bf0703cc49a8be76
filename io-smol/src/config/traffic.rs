//! `retry` and `limits` of a `[[providers.entries]]` entry (extensions,
//! docs/configuration.md): declared as serde tables with strict key sets,
//! then checked into the engine's types. Absent: the reference's
//! behaviour (no retry, no shared limits).

use serde::Deserialize;

use engine::provider_limits::{EntryLimits, DEFAULT_MAX_WAIT_MS};
use engine::RetryPolicy;

/// `[providers.entries.retry]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub struct RetryTable {
    pub max_retries: Option<i64>,
    pub max_wait_ms: Option<i64>,
    pub backoff_ms: Option<i64>,
    pub statuses: Option<Vec<i64>>,
    pub transport: Option<bool>,
}

/// `[providers.entries.limits]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub struct LimitsTable {
    pub max_concurrent: Option<i64>,
    pub requests_per_minute: Option<i64>,
    pub input_tokens_per_minute: Option<i64>,
    pub max_wait_ms: Option<i64>,
}

/// A whole number in `lo..=hi`, or the error naming `key` (the loader
/// prefixes the table's path: `providers.entries[0].retry: max_retries: …`).
fn within(key: &str, v: i64, lo: i64, hi: i64) -> Result<u64, String> {
    if (lo..=hi).contains(&v) {
        Ok(v as u64)
    } else {
        Err(format!("{key}: {v} is out of range ({lo} to {hi})"))
    }
}

/// Longest configurable wait: ten minutes.
const MAX_WAIT_LIMIT_MS: i64 = 600_000;

impl RetryTable {
    /// The engine's policy, or what is wrong.
    pub fn policy(&self) -> Result<RetryPolicy, String> {
        let d = RetryPolicy::default();
        let max_retries = match self.max_retries {
            Some(n) => within("max_retries", n, 0, 10)? as u32,
            None => d.max_retries,
        };
        let max_wait_ms = match self.max_wait_ms {
            Some(n) => within("max_wait_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
            None => d.max_wait_ms,
        };
        let backoff_ms = match self.backoff_ms {
            Some(n) => within("backoff_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
            None => d.backoff_ms,
        };
        let statuses = match &self.statuses {
            Some(list) => {
                let mut out = Vec::with_capacity(list.len());
                for s in list {
                    out.push(within("statuses", *s, 400, 599)? as u16);
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
    /// The engine's limits, or what is wrong.
    pub fn limits(&self) -> Result<EntryLimits, String> {
        let count = |key, v: Option<i64>| v.map(|n| within(key, n, 1, i64::MAX)).transpose();
        let limits = EntryLimits {
            max_concurrent: count("max_concurrent", self.max_concurrent)?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            requests_per_minute: count("requests_per_minute", self.requests_per_minute)?,
            input_tokens_per_minute: count(
                "input_tokens_per_minute",
                self.input_tokens_per_minute,
            )?,
            max_wait_ms: match self.max_wait_ms {
                Some(n) => within("max_wait_ms", n, 1, MAX_WAIT_LIMIT_MS)?,
                None => DEFAULT_MAX_WAIT_MS,
            },
        };
        if limits.max_concurrent.is_none()
            && limits.requests_per_minute.is_none()
            && limits.input_tokens_per_minute.is_none()
        {
            return Err(
                "set at least one of max_concurrent, requests_per_minute, input_tokens_per_minute"
                    .into(),
            );
        }
        Ok(limits)
    }
}

/// `retry` of an entry (`#[serde(deserialize_with)]`): the table, then
/// its checks, as one schema error.
pub fn retry<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RetryPolicy>, D::Error> {
    let t = RetryTable::deserialize(d)?;
    t.policy().map(Some).map_err(serde::de::Error::custom)
}

/// `limits` of an entry, like [`retry`].
pub fn limits<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<EntryLimits>, D::Error> {
    let t = LimitsTable::deserialize(d)?;
    t.limits().map(Some).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::file::{parse_file_str, ProviderEntry};
    use super::super::ConfigError;
    use super::*;

    /// The one entry of a file whose entry adds `extra` (its tables).
    fn entry(extra: &str) -> Result<ProviderEntry, String> {
        let text = format!(
            "[[providers.entries]]\nname = \"a\"\nprovider = \"anthropic\"\n\
             model = \"m\"\nauth_token = \"t\"\n{extra}"
        );
        match parse_file_str(&text, Path::new("bae-config.toml")) {
            Ok(mut cfg) => Ok(cfg.providers.remove(0)),
            Err(ConfigError::InvalidFile { detail, .. }) => Err(detail),
            Err(other) => Err(other.to_string()),
        }
    }

    fn retry(table: &str) -> Result<RetryPolicy, String> {
        entry(&format!("[providers.entries.retry]\n{table}")).map(|e| e.retry.unwrap())
    }

    fn limits(table: &str) -> Result<EntryLimits, String> {
        entry(&format!("[providers.entries.limits]\n{table}")).map(|e| e.limits.unwrap())
    }

    #[test]
    fn absent_tables_are_the_reference_behaviour() {
        let e = entry("").unwrap();
        assert_eq!((e.retry, e.limits), (None, None));
    }

    #[test]
    fn retry_defaults_and_bounds() {
        let p = retry("").unwrap();
        assert_eq!(p, RetryPolicy::default());
        let p = retry("max_retries = 5\nmax_wait_ms = 2000\nstatuses = [429]\ntransport = true")
            .unwrap();
        assert_eq!((p.max_retries, p.max_wait_ms, p.transport), (5, 2000, true));
        assert_eq!(p.statuses, [429]);
        assert_eq!(
            retry("max_retries = 11").unwrap_err(),
            "providers.entries[0].retry: max_retries: 11 is out of range (0 to 10)"
        );
        let e = retry("statuses = [200]").unwrap_err();
        assert!(e.contains("statuses: 200 is out of range"), "{e}");
        let e = retry("max_wait_ms = 0").unwrap_err();
        assert!(e.contains("max_wait_ms: 0"), "{e}");
        assert_eq!(
            retry("retries = 1").unwrap_err(),
            "unknown key \"retries\" in [providers.entries[0].retry]"
        );
        assert_eq!(
            retry("max_retries = \"2\"").unwrap_err(),
            "providers.entries[0].retry.max_retries: expected an integer, found string"
        );
        assert_eq!(
            entry("retry = 3").unwrap_err(),
            "providers.entries[0].retry: expected a table, found integer"
        );
    }

    #[test]
    fn limits_need_one_limit_and_positive_values() {
        let l = limits("max_concurrent = 4").unwrap();
        assert_eq!(l.max_concurrent, Some(4));
        assert_eq!(l.max_wait_ms, DEFAULT_MAX_WAIT_MS);
        let l = limits("requests_per_minute = 60\ninput_tokens_per_minute = 1000\nmax_wait_ms = 5")
            .unwrap();
        assert_eq!(
            (
                l.requests_per_minute,
                l.input_tokens_per_minute,
                l.max_wait_ms
            ),
            (Some(60), Some(1000), 5)
        );
        assert_eq!(
            limits("max_wait_ms = 10").unwrap_err(),
            "providers.entries[0].limits: set at least one of max_concurrent, \
             requests_per_minute, input_tokens_per_minute"
        );
        let e = limits("max_concurrent = 0").unwrap_err();
        assert!(e.contains("max_concurrent: 0 is out of range"), "{e}");
        assert_eq!(
            limits("max_concurrent = 1\nburst = 3").unwrap_err(),
            "unknown key \"burst\" in [providers.entries[0].limits]"
        );
    }
}
