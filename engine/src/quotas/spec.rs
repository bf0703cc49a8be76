//! A quota as the admin API takes it and the store keeps it (JSON), with
//! every field's range checked: a refusal names the field and its range.

use serde_json::{json, Value};

/// One scope's quota; an unset field does not limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    pub max_open_sessions: Option<u64>,
    pub requests_per_second: Option<u64>,
    /// Requests a full bucket holds (default: `requests_per_second`).
    pub burst: Option<u64>,
    /// Input, output and cache tokens over `window_ms`.
    pub token_budget: Option<u64>,
    pub window_ms: Option<u64>,
}

const FIELDS: [&str; 5] = [
    "max_open_sessions",
    "requests_per_second",
    "burst",
    "token_budget",
    "window",
];

const MAX_SESSIONS: u64 = 1_000_000;
const MAX_RATE: u64 = 1_000_000;
const MAX_BUDGET: u64 = 1_000_000_000_000_000;
const MIN_WINDOW_MS: u64 = 60_000;
const MAX_WINDOW_MS: u64 = 366 * 86_400_000;

/// `30m`, `1h`, `1d`… as ms; windows run from 1 minute to 366 days.
fn parse_window(s: &str) -> Option<u64> {
    let unit = match s.chars().last()? {
        's' => 1000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return None,
    };
    let digits = s.get(..s.len() - 1)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = digits.parse::<u64>().ok()?.checked_mul(unit)?;
    (MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&ms).then_some(ms)
}

/// A window in the largest unit that divides it (`86400000` → `1d`).
pub fn render_window(ms: u64) -> String {
    for (unit, suffix) in [
        (86_400_000, 'd'),
        (3_600_000, 'h'),
        (60_000, 'm'),
        (1000, 's'),
    ] {
        if ms.is_multiple_of(unit) {
            return format!("{}{suffix}", ms / unit);
        }
    }
    format!("{}s", ms.div_ceil(1000))
}

fn int(v: &Value, field: &str, max: u64) -> Result<Option<u64>, String> {
    match v {
        Value::Null => Ok(None),
        _ => match v.as_u64().filter(|n| (1..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(format!(
                "{field}: expected an integer from 1 to {max}, or null"
            )),
        },
    }
}

/// The quota of a `PUT` body, or what is wrong with it.
pub fn parse(body: &Value) -> Result<Quota, String> {
    let Some(obj) = body.as_object() else {
        return Err("expected a JSON object".into());
    };
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "{k}: unknown field (expected {})",
            FIELDS.join(", ")
        ));
    }
    let get = |f: &str| obj.get(f).unwrap_or(&Value::Null);
    let window_ms = match get("window") {
        Value::Null => None,
        Value::String(s) => match parse_window(s) {
            Some(ms) => Some(ms),
            None => {
                return Err(
                    "window: expected a duration from 1m to 366d such as \"1h\" or \"1d\" (units s, m, h, d)"
                        .into(),
                )
            }
        },
        _ => return Err("window: expected a string such as \"1h\" or \"1d\"".into()),
    };
    let q = Quota {
        max_open_sessions: int(get("max_open_sessions"), "max_open_sessions", MAX_SESSIONS)?,
        requests_per_second: int(get("requests_per_second"), "requests_per_second", MAX_RATE)?,
        burst: int(get("burst"), "burst", MAX_RATE)?,
        token_budget: int(get("token_budget"), "token_budget", MAX_BUDGET)?,
        window_ms,
    };
    if q.burst.is_some() && q.requests_per_second.is_none() {
        return Err("burst: needs requests_per_second".into());
    }
    if q.token_budget.is_some() != q.window_ms.is_some() {
        return Err("token_budget and window: set both or neither".into());
    }
    if q == Quota::default() {
        return Err(format!(
            "set at least one of {} (DELETE removes a quota)",
            FIELDS.join(", ")
        ));
    }
    Ok(q)
}

impl Quota {
    /// The stored and answered form (every field, unset ones `null`).
    pub fn to_json(&self) -> Value {
        json!({
            "max_open_sessions": self.max_open_sessions,
            "requests_per_second": self.requests_per_second,
            "burst": self.requests_per_second.map(|r| self.burst.unwrap_or(r)),
            "token_budget": self.token_budget,
            "window": self.window_ms.map(render_window),
        })
    }
}
