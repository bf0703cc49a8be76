//! Usage accounting, the pure parts: a provider entry's prices, the cost of
//! a token count, the answers of the admin usage routes rendered from the
//! store's sums, and the OpenAI cache key of a session.
//!
//! Every successful provider attempt's tokens (`proto::provider::Tokens`,
//! by kind) are kept durably as one row (`StoreWrite::InsertUsage`),
//! written in the same commit as the `provider.response` event they come
//! from, attributed to the session, the acting client key, the session's
//! profile, the provider entry and the request (turn) that made the call.
//! The admin routes ask the store for sums over those rows
//! (`StoreRead::Usage`): a restart, a replica or a session evicted from
//! memory reads the same numbers.

use std::fmt::Write as _;

use proto::provider::Tokens;
use proto::wire::json;
use sha2::{Digest, Sha256};

/// Prices of a provider entry in currency units per million tokens (the
/// currency is the operator's; the admin answers call it `cost`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

impl Prices {
    /// The estimated cost of `t`.
    pub fn cost(&self, t: &Tokens) -> f64 {
        let m = |n: u64, price: f64| n as f64 * price / 1e6;
        m(t.input, self.input)
            + m(t.output, self.output)
            + m(t.cache_write, self.cache_write)
            + m(t.cache_read, self.cache_read)
    }
}

/// OpenAI `prompt_cache_key` of a session: a digest of its id, so that one
/// conversation keeps to one cache without the provider learning the id.
pub fn prompt_cache_key(session_id: &str) -> String {
    let digest = Sha256::digest(format!("bae prompt cache {session_id}").as_bytes());
    let mut key = String::with_capacity(36);
    key.push_str("bae-");
    for b in digest.iter().take(16) {
        let _ = write!(key, "{b:02x}");
    }
    key
}

/// A `since`/`until` bound: `2026-01-02` (midnight UTC),
/// `2026-01-02T03:04:05Z` or `2026-01-02T03:04:05.678Z`, as unix ms.
pub fn parse_instant(s: &str) -> Option<u64> {
    match s.len() {
        10 => proto::wire::time::parse_created_at(&format!("{s}T00:00:00.000Z")),
        20 => proto::wire::time::parse_created_at(&format!("{}.000Z", s.strip_suffix('Z')?)),
        _ => proto::wire::time::parse_created_at(s),
    }
}

/// The scope's members, then `"since"` and `"until"` (as `created_at`
/// texts, or `null`).
pub fn scope_members(scope: &str, window: [Option<u64>; 2]) -> String {
    let mut out = String::from(scope);
    for (name, bound) in ["since", "until"].iter().zip(window) {
        let _ = write!(out, ",\"{name}\":");
        match bound {
            Some(ms) => json::push_str(&mut out, &proto::wire::time::format_created_at(ms)),
            None => out.push_str("null"),
        }
    }
    out
}

/// The four counters as a JSON object's members (no braces).
fn push_tokens(out: &mut String, t: &Tokens) {
    let _ = write!(
        out,
        "\"input_tokens\":{},\"output_tokens\":{},\"cache_write_tokens\":{},\"cache_read_tokens\":{}",
        t.input, t.output, t.cache_write, t.cache_read
    );
}

/// `"cost":N` when every provider entry in `sums` has prices, else
/// `"cost":null`.
fn push_cost(out: &mut String, cost: Option<f64>) {
    match cost {
        // Rounded to a millionth: estimates, not accounts.
        Some(c) => {
            out.push_str(",\"cost\":");
            // A float always renders (as `15.0`, never `15`).
            let c = serde_json::Value::from((c * 1e6).round() / 1e6);
            out.push_str(&json::text(&c));
        }
        None => out.push_str(",\"cost\":null"),
    }
}

/// One group of the store's sums.
pub use crate::store::UsageSum as Sum;

/// Sums `rows` by provider entry (and turn), in the store's order:
/// ascending turn, then provider name (what the stores' queries give).
pub fn sum_rows<'a>(
    rows: impl IntoIterator<Item = &'a crate::store::UsageRow>,
    by_turn: bool,
) -> Vec<Sum> {
    let mut sums: std::collections::BTreeMap<(u64, String), Sum> = Default::default();
    for r in rows {
        let turn = by_turn.then_some(r.turn_seq);
        let s = sums
            .entry((turn.unwrap_or(0), r.provider.clone()))
            .or_insert_with(|| Sum {
                provider: r.provider.clone(),
                turn_seq: turn,
                turn_event_id: by_turn.then(|| r.turn_event_id.clone()),
                ..Sum::default()
            });
        s.calls += 1;
        s.tokens.add(&r.tokens);
    }
    sums.into_values().collect()
}

/// The JSON body of a usage answer: totals, then by provider entry, then
/// (for a session) by turn, each with a cost when prices allow.
/// `scope` is the answer's leading members, already JSON (`"session_id":…`).
pub fn render(scope: &str, sums: &[Sum], prices: impl Fn(&str) -> Option<Prices>) -> String {
    let cost_of = |s: &Sum| prices(&s.provider).map(|p| p.cost(&s.tokens));
    let mut total = Tokens::default();
    let mut calls = 0;
    let mut total_cost = Some(0.0);
    // By provider, in the order they first appear.
    let mut by_provider: Vec<Sum> = Vec::new();
    for s in sums {
        total.add(&s.tokens);
        calls += s.calls;
        total_cost = total_cost.zip(cost_of(s)).map(|(a, b)| a + b);
        match by_provider.iter_mut().find(|p| p.provider == s.provider) {
            Some(p) => {
                p.tokens.add(&s.tokens);
                p.calls += s.calls;
            }
            None => by_provider.push(Sum {
                turn_seq: None,
                turn_event_id: None,
                ..s.clone()
            }),
        }
    }
    by_provider.sort_by(|a, b| a.provider.cmp(&b.provider));
    let mut out = String::with_capacity(256 + sums.len() * 160);
    out.push('{');
    out.push_str(scope);
    out.push_str(",\"total\":{");
    let _ = write!(out, "\"calls\":{calls},");
    push_tokens(&mut out, &total);
    push_cost(&mut out, total_cost);
    out.push_str("},\"by_provider\":[");
    for (i, p) in by_provider.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"provider\":");
        json::push_str(&mut out, &p.provider);
        let _ = write!(out, ",\"calls\":{},", p.calls);
        push_tokens(&mut out, &p.tokens);
        push_cost(&mut out, cost_of(p));
        out.push('}');
    }
    out.push(']');
    if sums.iter().any(|s| s.turn_seq.is_some()) {
        out.push_str(",\"by_turn\":[");
        let mut turns: Vec<(u64, Sum, Option<f64>)> = Vec::new();
        // Rows of one turn arrive together (by turn, then provider).
        for s in sums {
            let seq = s.turn_seq.unwrap_or(0);
            let cost = cost_of(s);
            match turns.iter_mut().find(|(t, _, _)| *t == seq) {
                Some((_, sum, c)) => {
                    sum.tokens.add(&s.tokens);
                    sum.calls += s.calls;
                    *c = c.zip(cost).map(|(a, b)| a + b);
                }
                None => turns.push((seq, s.clone(), cost)),
            }
        }
        for (i, (seq, sum, cost)) in turns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{{\"turn_seq\":{seq},\"turn_event_id\":");
            json::push_opt_str(&mut out, sum.turn_event_id.as_deref());
            let _ = write!(out, ",\"calls\":{},", sum.calls);
            push_tokens(&mut out, &sum.tokens);
            push_cost(&mut out, *cost);
            out.push('}');
        }
        out.push(']');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn t(input: u64, output: u64, w: u64, r: u64) -> Tokens {
        Tokens {
            input,
            output,
            cache_write: w,
            cache_read: r,
        }
    }

    #[test]
    fn sums_render_by_provider_and_turn_with_costs_only_when_priced() {
        let sums = [
            Sum {
                provider: "a".into(),
                turn_seq: Some(3),
                turn_event_id: Some("e3".into()),
                calls: 2,
                tokens: t(1_000_000, 10, 0, 2_000_000),
            },
            Sum {
                provider: "b".into(),
                turn_seq: Some(3),
                turn_event_id: Some("e3".into()),
                calls: 1,
                tokens: t(5, 5, 5, 5),
            },
            Sum {
                provider: "a".into(),
                turn_seq: Some(9),
                turn_event_id: Some("e9".into()),
                calls: 1,
                tokens: t(0, 1_000_000, 0, 0),
            },
        ];
        let priced = |p: &str| {
            (p == "a").then_some(Prices {
                input: 3.0,
                output: 15.0,
                cache_write: 3.75,
                cache_read: 0.3,
            })
        };
        let v: Value =
            serde_json::from_str(&render("\"session_id\":\"s\"", &sums, priced)).unwrap();
        assert_eq!(v["session_id"], "s");
        assert_eq!(v["total"]["calls"], 4);
        assert_eq!(v["total"]["input_tokens"], 1_000_005);
        assert_eq!(v["total"]["cost"], Value::Null, "b has no prices");
        assert_eq!(v["by_provider"][0]["provider"], "a");
        assert_eq!(v["by_provider"][0]["calls"], 3);
        // 1 M input at 3, 10 output, 2 M cache reads at 0.3, 1 M output at 15.
        assert_eq!(v["by_provider"][0]["cost"], json!(18.60015));
        assert_eq!(v["by_provider"][1]["cost"], Value::Null);
        assert_eq!(v["by_turn"][0]["turn_seq"], 3);
        assert_eq!(v["by_turn"][0]["turn_event_id"], "e3");
        assert_eq!(v["by_turn"][0]["calls"], 3);
        assert_eq!(v["by_turn"][1]["output_tokens"], 1_000_000);
        assert_eq!(v["by_turn"][1]["cost"], json!(15.0));
        let none: Value = serde_json::from_str(&render("\"x\":1", &[], priced)).unwrap();
        assert_eq!(none["total"]["calls"], 0);
        assert_eq!(none["total"]["cost"], json!(0.0));
        assert!(none.get("by_turn").is_none());
    }

    #[test]
    fn the_cache_key_is_a_digest_of_the_session() {
        let k = prompt_cache_key("s_1");
        assert!(k.starts_with("bae-") && k.len() == 36, "{k}");
        assert!(!k.contains("s_1"));
        assert_eq!(k, prompt_cache_key("s_1"));
        assert_ne!(k, prompt_cache_key("s_2"));
    }
}
