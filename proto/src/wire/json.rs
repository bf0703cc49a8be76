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
    let mut i = 0;
    while i < bytes.len() {
        // Most text needs no escape: skip it a word at a time.
        i += clean_prefix(bytes.get(i..).unwrap_or_default());
        let Some(&b) = bytes.get(i) else { break };
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            _ => None,
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
        i += 1;
        start = i;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// Whether `b` must be escaped in a JSON string: `"`, `\` or a control
/// character below U+0020.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Length of the longest prefix of `bytes` with no byte that
/// [`needs_escape`], tested eight bytes at a time.
fn clean_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `x` is zero exactly where the word has the high bit set in
    // `(x - ONES) & !x & HIGHS`; bytes >= 0x80 (UTF-8) are masked out by
    // `!word`, so only ASCII bytes below 0x20 or equal to '"' or '\\' hit.
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_ne_bytes(word);
        let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
        let quote = has_zero(w ^ (ONES * u64::from(b'"')));
        let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
        if below_space | quote | backslash != 0 {
            break;
        }
        n += 8;
    }
    let rest = bytes.get(n..).unwrap_or_default();
    n + rest.iter().take_while(|&&b| !needs_escape(b)).count()
}

/// `text` (valid JSON) without the whitespace between its tokens, strings
/// kept byte for byte: the compact form of a body parsed elsewhere.
/// `None` when a number has an exponent, which `serde_json` reads as a
/// float it may refuse as out of range: such text is not passed on as is.
pub fn compact(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut in_number = false;
    for &b in bytes {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                in_number = false;
                continue;
            }
            b'"' => in_string = true,
            b'e' | b'E' if in_number => return None,
            _ => {}
        }
        in_number = b.is_ascii_digit() || (in_number && matches!(b, b'.' | b'-' | b'+'));
        out.push(b);
    }
    // Only ASCII whitespace was removed, at token boundaries.
    String::from_utf8(out).ok()
}

/// `s` as a JSON string literal (with quotes).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_str(&mut out, s);
    out
}

/// `v` as compact JSON text: the same text as `v.to_string()`, written
/// straight into the buffer (`Display` goes through `fmt::Write` for every
/// token, which costs twice as many instructions on event payloads).
pub fn text(v: &serde_json::Value) -> String {
    // A `Value` always serialises: its keys are strings and its numbers
    // finite.
    serde_json::to_string(v).unwrap_or_default()
}

/// Append `Some(s)` as a string literal and `None` as `null`.
pub fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// Append the strings as a JSON array of string literals.
pub fn push_str_array<'a>(out: &mut String, items: impl IntoIterator<Item = &'a str>) {
    out.push('[');
    for (i, s) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, s);
    }
    out.push(']');
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
    fn compact_drops_token_whitespace_and_keeps_strings() {
        let pretty =
            "{\n  \"a\" : [1, -2.5, true,\tnull],\r\n \"s\": \" x \\\" \\\\ \\n\u{e9}\u{2028}\" }";
        let compacted = compact(pretty).unwrap();
        assert_eq!(
            compacted,
            "{\"a\":[1,-2.5,true,null],\"s\":\" x \\\" \\\\ \\n\u{e9}\u{2028}\"}"
        );
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(pretty).unwrap(),
            serde_json::from_str(&compacted).unwrap(),
        );
        assert_eq!(a, b);
        // Text already compact is unchanged; "e" in literals and strings is
        // not an exponent.
        let flat = r#"{"t":true,"f":false,"e":"1e5","n":[0,10.25]}"#;
        assert_eq!(compact(flat).as_deref(), Some(flat));
        for exponent in ["[1e5]", "[1E400]", "{\"x\":-2.5e-3}", "[0e0]"] {
            assert_eq!(compact(exponent), None, "{exponent}");
        }
    }

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
    fn escaping_matches_serde_at_every_offset_of_long_text() {
        // The word-at-a-time scan: an escape in any lane of any word, after
        // multi-byte characters, and in the tail shorter than a word.
        let specials = ['"', '\\', '\n', '\u{0}', '\u{1f}', '\u{7f}', ' ', 'é', '😀'];
        for c in specials {
            for at in 0..26 {
                let mut s: String = "abcdefgh日本ijklmnop".chars().cycle().take(26).collect();
                let byte = s.char_indices().nth(at).map(|(i, _)| i).unwrap();
                s.insert(byte, c);
                assert_eq!(
                    string(&s),
                    serde_json::to_string(&s).unwrap(),
                    "{c:?} at {at}"
                );
            }
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
    fn str_array_matches_serde_json() {
        for items in [vec![], vec!["a"], vec!["a\"b", "\u{1}", "é"]] {
            let mut out = String::new();
            push_str_array(&mut out, items.iter().copied());
            assert_eq!(out, serde_json::to_string(&items).unwrap());
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
