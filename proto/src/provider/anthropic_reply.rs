//! A usable Anthropic reply read without building the whole body as a
//! value tree: only `content`, `usage` and `stop_reason` become values,
//! every other member is skipped by the parser, and the logged body is the
//! received text with the whitespace between its tokens removed.
//!
//! Parsing the whole body cost the engine about 13,000 instructions per
//! reply (an ordered map per object, each key hashed and allocated), most
//! of it for members the server never reads (`id`, `model`, …). Whoever
//! reads the logged body gets the same JSON value either way; only its
//! spelling may differ where the provider's did (`\u00e9` for `é`).

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::{anthropic, ProviderResponse};

/// The reply of `body`, or `None` when it is not a plain JSON object this
/// path can take (the caller then parses it whole, errors included).
pub(super) fn parse(body: &[u8]) -> Option<ProviderResponse> {
    let text = std::str::from_utf8(body).ok()?;
    let members: Members = serde_json::from_str(text).ok()?;
    let body_json = crate::wire::json::compact(text)?;
    let tokens = members.usage.as_ref().and_then(anthropic::tokens);
    let usage = tokens.as_ref().map(anthropic::spec_usage);
    let truncated = (members.stop_reason.as_ref().and_then(Value::as_str) == Some("max_tokens"))
        .then_some("stop_reason max_tokens");
    let content = match members.content {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    Some(ProviderResponse {
        body_json,
        content,
        usage,
        tokens,
        truncated,
    })
}

/// The members the server reads. A repeated member keeps its last value,
/// as a whole-body parse (and the body's other readers) would.
#[derive(Default)]
struct Members {
    content: Option<Value>,
    usage: Option<Value>,
    stop_reason: Option<Value>,
}

enum Field {
    Content,
    Usage,
    StopReason,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, s: &str) -> Result<Field, E> {
                Ok(match s {
                    "content" => Field::Content,
                    "usage" => Field::Usage,
                    "stop_reason" => Field::StopReason,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_str(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut m = Members::default();
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Content => m.content = Some(map.next_value()?),
                        Field::Usage => m.usage = Some(map.next_value()?),
                        Field::StopReason => m.stop_reason = Some(map.next_value()?),
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the whole-body parse gives: the reference for the fast path.
    fn whole(body: &str) -> ProviderResponse {
        anthropic::parse(serde_json::from_str(body).unwrap())
    }

    #[test]
    fn the_fast_path_reads_what_a_whole_parse_reads() {
        for body in [
            r#"{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}}"#,
            r#"{"content":[{"type":"tool_use","id":"t","name":"n","input":{"q":[1,{"a":null}]}}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":4}}"#,
            r#"{"content":"not an array","usage":{"input_tokens":-1,"output_tokens":2}}"#,
            r#"{"stop_reason":7,"usage":null,"extra":{"deep":[[["x"]]]}}"#,
            r#"{"content":[{"type":"text","text":"first"}],"content":[{"type":"text","text":"last"}]}"#,
            r#"{}"#,
            "{ \"content\" : [ {\"type\": \"text\", \"text\": \"spaced \\\" out\\n\"} ],\n \"usage\": {\"input_tokens\": 5, \"output_tokens\": 6} }",
        ] {
            let fast = parse(body.as_bytes()).expect(body);
            let want = whole(body);
            assert_eq!(fast.content, want.content, "{body}");
            assert_eq!(fast.usage, want.usage, "{body}");
            assert_eq!(fast.tokens, want.tokens, "{body}");
            assert_eq!(fast.truncated, want.truncated, "{body}");
            let (a, b): (Value, Value) = (
                serde_json::from_str(&fast.body_json).unwrap(),
                serde_json::from_str(&want.body_json).unwrap(),
            );
            assert_eq!(a, b, "{body}");
            assert!(!fast.body_json.contains('\n'), "one line: {body}");
        }
    }

    /// Bodies the fast path leaves to the whole parse (its errors, its
    /// reading of non-objects and of exponents) are not taken.
    #[test]
    fn what_the_fast_path_leaves_to_the_whole_parse() {
        for body in [
            &b"not json"[..],
            b"[1,2]",
            b"\"text\"",
            b"{\"content\":[]",
            b"{\"x\":1e400}",
            b"{\"usage\":{\"input_tokens\":1E2}}",
            b"{\"id\":\"\xff\"}",
        ] {
            assert!(parse(body).is_none(), "{}", String::from_utf8_lossy(body));
        }
    }
}
