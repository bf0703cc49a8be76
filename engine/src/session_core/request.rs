//! The `provider.request` event payload (spec 05 §5.1), rendered as text so
//! that the history it carries is spliced in once instead of copied into a
//! value tree and serialised again.

use proto::provider;
use serde_json::Value;

/// The `messages` of a payload: text written straight into it.
pub(super) trait Messages {
    fn len(&self) -> usize;
    fn write(&self, out: &mut String);
}

impl Messages for String {
    fn len(&self) -> usize {
        String::len(self)
    }
    fn write(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl Messages for provider::Built<'_> {
    fn len(&self) -> usize {
        self.logged_len()
    }
    fn write(&self, out: &mut String) {
        self.write_logged(out);
    }
}

/// The parts of a `provider.request` payload (spec 05 §5.1).
pub(super) struct RequestPayload<'a> {
    pub attempt: usize,
    pub kind: provider::Kind,
    pub base_url: &'a str,
    pub model: &'a str,
    pub max_tokens: u32,
    /// The attempt's logged messages.
    pub messages: &'a dyn Messages,
    /// Compact JSON of the canonical tool list.
    pub tools_json: &'a str,
    pub normalized: Option<&'a Value>,
    pub compaction: bool,
}

impl RequestPayload<'_> {
    /// Compact JSON text, member for member what serialising the payload
    /// as a `Value` object gives, with the history spliced in as text
    /// instead of being copied into a value tree and serialised again.
    pub fn render(&self) -> String {
        fn text<T: serde::Serialize + ?Sized>(v: &T) -> String {
            // JSON values and strings always serialise.
            serde_json::to_string(v).unwrap_or_default()
        }
        let tools = self.tools_json;
        let mut p = String::with_capacity(self.messages.len() + tools.len() + 256);
        p.push_str("{\"attempt\":");
        p.push_str(&self.attempt.to_string());
        p.push_str(",\"kind\":");
        p.push_str(if self.attempt == 0 {
            "\"primary\""
        } else {
            "\"fallback\""
        });
        p.push_str(",\"provider\":");
        p.push_str(&text(self.kind.as_str()));
        p.push_str(",\"base_url\":");
        p.push_str(&text(self.base_url));
        p.push_str(",\"model\":");
        p.push_str(&text(self.model));
        p.push_str(",\"max_tokens\":");
        p.push_str(&self.max_tokens.to_string());
        p.push_str(",\"messages\":");
        self.messages.write(&mut p);
        p.push_str(",\"tools\":");
        p.push_str(tools);
        if let Some(n) = self.normalized {
            p.push_str(",\"normalized\":");
            p.push_str(&text(n));
        }
        if self.compaction {
            p.push_str(",\"purpose\":\"compaction\"");
        }
        p.push('}');
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The text rendering equals the `Value` object it replaced, byte for
    /// byte, over the members' variants (spec 05 §5.1 payload).
    #[test]
    fn request_payload_text_equals_the_value_rendering() {
        let messages = json!([
            {"role": "user", "content": "h\u{2028}i \"q\" \\ \u{1}"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
        ]);
        let tools = [json!({"name": "t", "description": "d", "input_schema": {"type": "object"}})];
        let normalized = json!({"prepended_user": true, "merged": [[1, 2]]});
        let text = messages.to_string();
        for (attempt, kind, norm, compaction, tools) in [
            (0, provider::Kind::Anthropic, None, false, &tools[..]),
            (1, provider::Kind::Openai, Some(&normalized), false, &[][..]),
            (
                2,
                provider::Kind::Anthropic,
                Some(&normalized),
                true,
                &tools[..],
            ),
        ] {
            let p = RequestPayload {
                attempt,
                kind,
                base_url: "http://h\"x/",
                model: "m\u{7f}é",
                max_tokens: 4096,
                messages: &text,
                tools_json: &serde_json::to_string(tools).unwrap(),
                normalized: norm,
                compaction,
            };
            let mut v = serde_json::Map::new();
            v.insert("attempt".into(), json!(attempt));
            v.insert(
                "kind".into(),
                json!(if attempt == 0 { "primary" } else { "fallback" }),
            );
            v.insert("provider".into(), json!(kind.as_str()));
            v.insert("base_url".into(), json!(p.base_url));
            v.insert("model".into(), json!(p.model));
            v.insert("max_tokens".into(), json!(4096));
            v.insert("messages".into(), messages.clone());
            v.insert("tools".into(), Value::Array(tools.to_vec()));
            if let Some(n) = norm {
                v.insert("normalized".into(), n.clone());
            }
            if compaction {
                v.insert("purpose".into(), json!("compaction"));
            }
            assert_eq!(p.render(), Value::Object(v).to_string());
        }
    }
}
