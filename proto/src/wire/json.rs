//! Small JSON text helpers used by the concatenation fast paths.
//!
//! The escaping rules match `serde_json`'s compact serializer exactly:
//! `"` and `\` are backslash-escaped, the control characters U+0000..U+001F
//! use the short forms `\b \t \n \f \r` where they exist and `\u00XX`
//! (lowercase hex) otherwise; everything else (including U+007F, `/` and all
//! non-ASCII) is written verbatim.

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Append `s` to `out` as a JSON string literal (with the surrounding quotes).
pub fn push_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        // `i` is at an ASCII byte, hence on a char boundary.
        out.push_str(s.get(start..i).unwrap_or_default());
        match esc {
            Some(e) => out.push_str(e),
            None => {
                out.push_str("\\u00");
                out.push(char::from(
                    HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'),
                ));
                out.push(char::from(
                    HEX.get(usize::from(b & 0xf)).copied().unwrap_or(b'0'),
                ));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// `s` as a JSON string literal (with quotes).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_str(&mut out, s);
    out
}

/// Append `Some(s)` as a string literal and `None` as `null`.
pub fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// serde's "unexpected value" description of `v` (`null`, `boolean \`true\``,
/// `integer \`5\``, `floating point \`1.5\``, `string "x"`, `sequence`,
/// `map`).
pub fn unexpected(v: &serde_json::Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    use serde_json::Value;
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Unexpected::Unsigned(u)
            } else if let Some(i) = n.as_i64() {
                Unexpected::Signed(i)
            } else {
                Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// serde's `invalid type: <unexpected>, expected <expected>` text.
pub fn invalid_type(v: &serde_json::Value, expected: &str) -> String {
    <serde_json::Error as serde::de::Error>::invalid_type(unexpected(v), &expected).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_matches_serde_for_every_ascii_char() {
        for c in 0u32..=0x7f {
            let ch = char::from_u32(c).unwrap();
            let s = format!("a{ch}b{ch}");
            assert_eq!(
                string(&s),
                serde_json::to_string(&s).unwrap(),
                "char {c:#x}"
            );
        }
    }

    #[test]
    fn escaping_matches_serde_for_unicode() {
        for s in [
            "",
            "héllo",
            "日本語",
            "emoji 😀",
            "\u{2028}\u{2029}",
            "/slash/",
            "\u{7f}\u{80}",
        ] {
            assert_eq!(string(s), serde_json::to_string(s).unwrap());
        }
    }

    #[test]
    fn opt_str() {
        let mut out = String::new();
        push_opt_str(&mut out, None);
        out.push(',');
        push_opt_str(&mut out, Some("x\"y"));
        assert_eq!(out, r#"null,"x\"y""#);
    }
}
