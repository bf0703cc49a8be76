//! Parsers for the values of environment variables: whole numbers,
//! seconds, sizes, addresses and flags, each failing with a
//! [`ConfigError`] that names the variable.

use std::net::SocketAddr;
use std::time::Duration;

use super::ConfigError;

/// Whole seconds, at least 1.
pub(super) fn positive_seconds(
    var: &'static str,
    value: Option<String>,
    default: u64,
) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(Duration::from_secs(default)),
        Some(v) => match parse_whole(&v) {
            Some(n) if n > 0 => Ok(Duration::from_secs(n)),
            _ => Err(ConfigError::InvalidValue {
                var,
                value: v,
                expected: "a whole number of seconds, at least 1",
            }),
        },
    }
}

pub(super) fn is_truthy(v: &str) -> bool {
    let t = v.trim();
    t == "1" || t.eq_ignore_ascii_case("true")
}

pub(super) fn parse_addr(
    var: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let value = value.unwrap_or_else(|| default.to_string());
    value
        .parse::<SocketAddr>()
        .map_err(|e| ConfigError::InvalidAddress {
            var,
            value: value.clone(),
            detail: e.to_string(),
        })
}

/// Trimmed, non-empty, ASCII digits only, fits in u64.
pub(super) fn parse_whole(v: &str) -> Option<u64> {
    let t = v.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

pub(super) fn whole(
    var: &'static str,
    value: Option<String>,
    default: u64,
) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => parse_whole(&v).ok_or(ConfigError::NotWholeSeconds { var, value: v }),
    }
}

pub(super) fn seconds(
    var: &'static str,
    value: Option<String>,
    default: u64,
) -> Result<Duration, ConfigError> {
    whole(var, value, default).map(Duration::from_secs)
}

pub(super) fn whole_usize(
    var: &'static str,
    value: Option<String>,
    default: usize,
    expected: &'static str,
) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => match parse_whole(&v).and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Ok(n),
            None => Err(ConfigError::InvalidValue {
                var,
                value: v,
                expected,
            }),
        },
    }
}

pub(super) fn positive_usize(
    var: &'static str,
    value: Option<String>,
    default: usize,
) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => match parse_whole(&v).and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n > 0 => Ok(n),
            _ => Err(ConfigError::InvalidValue {
                var,
                value: v,
                expected: "a positive whole number",
            }),
        },
    }
}

/// `BAE_RESIDENT_SESSIONS`: a whole number of idle sessions to keep in
/// memory, or `all` (any case) to keep every session (`None`).
pub(super) fn resident_sessions(value: Option<String>) -> Result<Option<usize>, ConfigError> {
    let Some(v) = value else {
        return Ok(Some(engine::DEFAULT_RESIDENT_SESSIONS));
    };
    if v.trim().eq_ignore_ascii_case("all") {
        return Ok(None);
    }
    whole_usize(
        "BAE_RESIDENT_SESSIONS",
        Some(v),
        0,
        "a whole number of sessions, or \"all\"",
    )
    .map(Some)
}

/// `BAE_OVERLOAD_*`: the bounds past which new client requests get `503`
/// (each unset = not watched; both unset = off).
pub(super) fn overload(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<engine::overload::OverloadLimits, ConfigError> {
    let bound = |var: &'static str| match get(var) {
        None => Ok(None),
        Some(v) => positive_usize(var, Some(v), 1).map(Some),
    };
    let max_waiting = bound("BAE_OVERLOAD_MAX_WAITING")?;
    let max_store_backlog = bound("BAE_OVERLOAD_MAX_STORE_BACKLOG")?;
    let retry_after = positive_seconds(
        "BAE_OVERLOAD_RETRY_AFTER",
        get("BAE_OVERLOAD_RETRY_AFTER"),
        1,
    )?;
    Ok(engine::overload::OverloadLimits {
        max_waiting,
        max_store_backlog,
        retry_after_s: retry_after.as_secs(),
    })
}
