//! The prompt caching and price keys of a `[[providers.entries]]` entry
//! (extensions, docs/configuration.md "Prompt caching and prices"):
//!
//! ```toml
//! prompt_cache = true              # default false: requests as the reference's
//! prompt_cache_ttl = "1h"          # "5m" (default) or "1h"; Anthropic only
//! prompt_cache_min_tokens = 2048   # default 1024: shortest prefix worth a breakpoint
//! prices = { input = 3.0, output = 15.0, cache_write = 3.75, cache_read = 0.3 }
//! ```
//!
//! Kept apart from the entry's own keys, one function per key taking the
//! key's TOML value, so that whichever way the entry itself is read these
//! keys read the same and fail with the same messages (phase 1 of
//! `file.rs`: `invalid config file "<path>": <detail>`, exit 2).

use engine::usage::Prices;
use proto::provider::{Caching, Kind, DEFAULT_MIN_CACHE_TOKENS};
use toml::{Table, Value};

/// Largest `prompt_cache_min_tokens` accepted (no model's prompt is longer).
pub const MAX_MIN_TOKENS: i64 = 1_000_000;

/// The entry's caching (`None`: off) and prices (`None`: no cost shown).
pub fn parse(t: &Table, at: &str, kind: Kind) -> Result<(Option<Caching>, Option<Prices>), String> {
    let on = match t.get("prompt_cache") {
        None => false,
        Some(Value::Boolean(b)) => *b,
        Some(v) => return Err(expected(at, "prompt_cache", "a boolean", v)),
    };
    let ttl = t
        .get("prompt_cache_ttl")
        .map(|v| ttl(v, at, kind))
        .transpose()?;
    let min = t
        .get("prompt_cache_min_tokens")
        .map(|v| min_tokens(v, at))
        .transpose()?;
    if !on {
        if let Some(key) = ["prompt_cache_ttl", "prompt_cache_min_tokens"]
            .into_iter()
            .find(|k| t.contains_key(*k))
        {
            return Err(format!(
                "{at}.{key}: set, but prompt_cache is not true (caching is off for this entry)"
            ));
        }
    }
    let caching = on.then(|| Caching {
        ttl_1h: ttl.unwrap_or(false),
        min_tokens: min.unwrap_or(DEFAULT_MIN_CACHE_TOKENS),
    });
    let prices = t.get("prices").map(|v| prices(v, at)).transpose()?;
    Ok((caching, prices))
}

fn expected(at: &str, key: &str, what: &str, v: &Value) -> String {
    format!("{at}.{key}: expected {what}, found {}", v.type_str())
}

/// `true` for `"1h"`.
fn ttl(v: &Value, at: &str, kind: Kind) -> Result<bool, String> {
    let s = v
        .as_str()
        .ok_or_else(|| expected(at, "prompt_cache_ttl", "a string", v))?;
    let one_hour = match s {
        "5m" => false,
        "1h" => true,
        other => {
            return Err(format!(
                "{at}.prompt_cache_ttl: unsupported value \"{other}\" (expected \"5m\" or \"1h\")"
            ))
        }
    };
    if one_hour && kind == Kind::Openai {
        return Err(format!(
            "{at}.prompt_cache_ttl: \"1h\" applies to anthropic entries only \
             (OpenAI caches prompts automatically and takes no TTL)"
        ));
    }
    Ok(one_hour)
}

fn min_tokens(v: &Value, at: &str) -> Result<u32, String> {
    match v {
        Value::Integer(n) if (1..=MAX_MIN_TOKENS).contains(n) => Ok(*n as u32),
        Value::Integer(n) => Err(format!(
            "{at}.prompt_cache_min_tokens: {n} is out of range (1 to {MAX_MIN_TOKENS})"
        )),
        v => Err(expected(at, "prompt_cache_min_tokens", "an integer", v)),
    }
}

/// `{input, output, cache_write, cache_read}`: each required, a
/// non-negative number, per million tokens.
fn prices(v: &Value, at: &str) -> Result<Prices, String> {
    let t = v
        .as_table()
        .ok_or_else(|| expected(at, "prices", "a table", v))?;
    const NAMES: [&str; 4] = ["input", "output", "cache_write", "cache_read"];
    if let Some(k) = t.keys().find(|k| !NAMES.contains(&k.as_str())) {
        return Err(format!(
            "{at}.prices: unknown key \"{k}\" (expected input, output, cache_write, cache_read)"
        ));
    }
    let price = |name: &str| -> Result<f64, String> {
        let n = match t.get(name) {
            None => {
                return Err(format!(
                    "{at}.prices: missing \"{name}\" (every kind needs a price, 0 if free)"
                ))
            }
            Some(Value::Float(f)) => *f,
            Some(Value::Integer(i)) => *i as f64,
            Some(v) => return Err(expected(at, &format!("prices.{name}"), "a number", v)),
        };
        if !(n.is_finite() && n >= 0.0) {
            return Err(format!(
                "{at}.prices.{name}: {n} is not a price (a finite number, 0 or more, per million tokens)"
            ));
        }
        Ok(n)
    };
    Ok(Prices {
        input: price("input")?,
        output: price("output")?,
        cache_write: price("cache_write")?,
        cache_read: price("cache_read")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(extra: &str) -> Table {
        format!("name = \"x\"\n{extra}").parse().unwrap()
    }

    fn err(extra: &str, kind: Kind) -> String {
        parse(&entry(extra), "providers.entries[0]", kind).unwrap_err()
    }

    #[test]
    fn off_unless_asked_and_defaults_when_on() {
        let (c, p) = parse(&entry(""), "e", Kind::Anthropic).unwrap();
        assert_eq!((c, p), (None, None));
        let (c, _) = parse(&entry("prompt_cache = true"), "e", Kind::Openai).unwrap();
        assert_eq!(c, Some(Caching::default()));
        let t = "prompt_cache = true\nprompt_cache_ttl = \"1h\"\nprompt_cache_min_tokens = 4096\n\
                 prices = { input = 3, output = 15.0, cache_write = 3.75, cache_read = 0.3 }";
        let (c, p) = parse(&entry(t), "e", Kind::Anthropic).unwrap();
        assert_eq!(
            c,
            Some(Caching {
                ttl_1h: true,
                min_tokens: 4096
            })
        );
        assert_eq!(p.unwrap().input, 3.0);
    }

    #[test]
    fn every_mistake_is_named() {
        let at = "providers.entries[0]";
        for (extra, kind, want) in [
            ("prompt_cache = \"yes\"", Kind::Anthropic, format!("{at}.prompt_cache: expected a boolean, found string")),
            ("prompt_cache = true\nprompt_cache_ttl = \"2h\"", Kind::Anthropic, format!("{at}.prompt_cache_ttl: unsupported value \"2h\" (expected \"5m\" or \"1h\")")),
            ("prompt_cache = true\nprompt_cache_ttl = \"1h\"", Kind::Openai, format!("{at}.prompt_cache_ttl: \"1h\" applies to anthropic entries only (OpenAI caches prompts automatically and takes no TTL)")),
            ("prompt_cache_ttl = \"5m\"", Kind::Anthropic, format!("{at}.prompt_cache_ttl: set, but prompt_cache is not true (caching is off for this entry)")),
            ("prompt_cache = true\nprompt_cache_min_tokens = 0", Kind::Anthropic, format!("{at}.prompt_cache_min_tokens: 0 is out of range (1 to 1000000)")),
            ("prices = 3", Kind::Anthropic, format!("{at}.prices: expected a table, found integer")),
            ("prices = { input = 1, output = 1, cache_write = 1 }", Kind::Anthropic, format!("{at}.prices: missing \"cache_read\" (every kind needs a price, 0 if free)")),
            ("prices = { input = 1, output = 1, cache_write = 1, cache_read = -1 }", Kind::Anthropic, format!("{at}.prices.cache_read: -1 is not a price (a finite number, 0 or more, per million tokens)")),
            ("prices = { input = 1, output = 1, cache_write = 1, cache_read = 1, reasoning = 2 }", Kind::Anthropic, format!("{at}.prices: unknown key \"reasoning\" (expected input, output, cache_write, cache_read)")),
            ("prices = { input = \"1\", output = 1, cache_write = 1, cache_read = 1 }", Kind::Anthropic, format!("{at}.prices.input: expected a number, found string")),
        ] {
            assert_eq!(err(extra, kind), want, "{extra}");
        }
    }
}
