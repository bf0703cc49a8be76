//! Anthropic Messages specifics (`05-profiles-and-providers.md` §6.1, §7).

use std::borrow::Cow;

use serde_json::Value;

use super::{to_json_text, ProviderResponse, Tokens, Usage};

/// The wire tool list's JSON: `logged_json` (the text of `tools`) itself
/// unless a definition has a `null` description, which the wire omits.
pub(super) fn wire_tools_text<'a>(tools: &[Value], logged_json: &'a str) -> Cow<'a, str> {
    let null_description = |t: &Value| t.get("description").is_some_and(Value::is_null);
    if tools.iter().any(null_description) {
        Cow::Owned(to_json_text(&wire_tools(tools)))
    } else {
        Cow::Borrowed(logged_json)
    }
}

/// Wire tool list: each canonical definition verbatim, except that a `null`
/// `description` is omitted (§10.1). The logged list is not affected.
pub(super) fn wire_tools(tools: &[Value]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                let mut t = t.clone();
                if let Value::Object(obj) = &mut t {
                    if obj.get("description").is_some_and(Value::is_null) {
                        obj.shift_remove("description");
                    }
                }
                t
            })
            .collect(),
    )
}

/// The raw body is the canonical response as is; any 2xx JSON body is a
/// success.
pub(super) fn parse(mut raw: Value) -> ProviderResponse {
    let tokens = raw.get("usage").and_then(tokens);
    let usage = tokens.map(|t| spec_usage(&t));
    let truncated = (raw.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"))
        .then_some("stop_reason max_tokens");
    // The body is rendered before its content moves out: no copy of it.
    let body_json = to_json_text(&raw);
    let content = match raw.get_mut("content").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    ProviderResponse {
        body_json,
        content,
        usage,
        tokens,
        truncated,
    }
}

/// The reply's `usage` by kind; both base numbers must be non-negative
/// integers or there is none (C-079); a cache counter that is absent (or
/// not such a number) counts 0.
pub(super) fn tokens(u: &Value) -> Option<Tokens> {
    let input = u.get("input_tokens")?.as_u64()?;
    let output = u.get("output_tokens")?.as_u64()?;
    let cache = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Some(Tokens {
        input,
        output,
        cache_write: cache("cache_creation_input_tokens"),
        cache_read: cache("cache_read_input_tokens"),
    })
}

/// §7.1: input includes both cache counters (C-080).
pub(super) fn spec_usage(t: &Tokens) -> Usage {
    Usage {
        input_tokens: t.prompt(),
        output_tokens: t.output,
    }
}
