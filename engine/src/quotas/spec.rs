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

fn int(v: &Value, field: &'static str, max: u64) -> Result<Option<u64>, QuotaError> {
    match v {
        Value::Null => Ok(None),
        _ => match v.as_u64().filter(|n| (1..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(QuotaError::OutOfRange { field, max }),
        },
    }
}

/// What is wrong with a quota body. `Display` is the admin API's `400`
/// detail; each names the field and its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaError {
    NotAnObject,
    UnknownField(String),
    /// A numeric field outside `1..=max` (or not an integer).
    OutOfRange {
        field: &'static str,
        max: u64,
    },
    /// `window` is a string but not a duration in range.
    WindowRange,
    /// `window` is not a string.
    WindowType,
    BurstWithoutRate,
    BudgetWithoutWindow,
    /// Every field unset.
    Empty,
    /// A stored quota that is not JSON (serde's message; logged only).
    Unreadable(String),
}

impl std::fmt::Display for QuotaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields = FIELDS.join(", ");
        match self {
            QuotaError::NotAnObject => f.write_str("expected a JSON object"),
            QuotaError::UnknownField(k) => write!(f, "{k}: unknown field (expected {fields})"),
            QuotaError::OutOfRange { field, max } => {
                write!(f, "{field}: expected an integer from 1 to {max}, or null")
            }
            QuotaError::WindowRange => f.write_str(
                "window: expected a duration from 1m to 366d such as \"1h\" or \"1d\" (units s, m, h, d)",
            ),
            QuotaError::WindowType => {
                f.write_str("window: expected a string such as \"1h\" or \"1d\"")
            }
            QuotaError::BurstWithoutRate => f.write_str("burst: needs requests_per_second"),
            QuotaError::BudgetWithoutWindow => {
                f.write_str("token_budget and window: set both or neither")
            }
            QuotaError::Empty => {
                write!(f, "set at least one of {fields} (DELETE removes a quota)")
            }
            QuotaError::Unreadable(e) => f.write_str(e),
        }
    }
}

/// A quota as the store keeps it (the text [`Quota::to_json`] wrote).
pub fn from_stored(text: &str) -> Result<Quota, QuotaError> {
    let v =
        serde_json::from_str::<Value>(text).map_err(|e| QuotaError::Unreadable(e.to_string()))?;
    parse(&v)
}

/// The quota of a `PUT` body, or what is wrong with it.
pub fn parse(body: &Value) -> Result<Quota, QuotaError> {
    let Some(obj) = body.as_object() else {
        return Err(QuotaError::NotAnObject);
    };
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(QuotaError::UnknownField(k.clone()));
    }
    let get = |f: &str| obj.get(f).unwrap_or(&Value::Null);
    let window_ms = match get("window") {
        Value::Null => None,
        Value::String(s) => Some(parse_window(s).ok_or(QuotaError::WindowRange)?),
        _ => return Err(QuotaError::WindowType),
    };
    let q = Quota {
        max_open_sessions: int(get("max_open_sessions"), "max_open_sessions", MAX_SESSIONS)?,
        requests_per_second: int(get("requests_per_second"), "requests_per_second", MAX_RATE)?,
        burst: int(get("burst"), "burst", MAX_RATE)?,
        token_budget: int(get("token_budget"), "token_budget", MAX_BUDGET)?,
        window_ms,
    };
    if q.burst.is_some() && q.requests_per_second.is_none() {
        return Err(QuotaError::BurstWithoutRate);
    }
    if q.token_budget.is_some() != q.window_ms.is_some() {
        return Err(QuotaError::BudgetWithoutWindow);
    }
    if q == Quota::default() {
        return Err(QuotaError::Empty);
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
