//! One NDJSON frame stays one line for every line reader.

/// Escapes U+2028, U+2029 and U+0085 as `\uXXXX` in a JSON line. JSON allows
/// them raw inside strings, but common line readers (Python's
/// `str.splitlines`, httpx `aiter_lines`) treat them as line breaks and would
/// split one NDJSON frame in two. They can only occur inside JSON strings,
/// so the replacement decodes to the same value.
pub fn escape_line_separators(line: &str) -> std::borrow::Cow<'_, str> {
    // Their UTF-8 encodings start with 0xE2 / 0xC2 (E2 80 A8, E2 80 A9,
    // C2 85): one vectorised search for those lead bytes, and a look at the
    // bytes after each. The line is a whole event, as large as a long
    // session's history; common text (dashes, quotes, no-break spaces)
    // has such lead bytes too, so the characters are never decoded.
    let bytes = line.as_bytes();
    let mut out: Option<String> = None;
    let mut from = 0;
    for i in memchr::memchr2_iter(0xE2, 0xC2, bytes) {
        let (escape, len) = match bytes.get(i..).unwrap_or_default() {
            [0xE2, 0x80, 0xA8, ..] => ("\\u2028", 3),
            [0xE2, 0x80, 0xA9, ..] => ("\\u2029", 3),
            [0xC2, 0x85, ..] => ("\\u0085", 2),
            _ => continue,
        };
        let o = out.get_or_insert_with(|| String::with_capacity(line.len() + 16));
        // `i` is a lead byte and `from` the end of a whole character:
        // both are character boundaries.
        o.push_str(line.get(from..i).unwrap_or_default());
        o.push_str(escape);
        from = i + len;
    }
    match out {
        None => std::borrow::Cow::Borrowed(line),
        Some(mut o) => {
            o.push_str(line.get(from..).unwrap_or_default());
            std::borrow::Cow::Owned(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape_line_separators;

    #[test]
    fn line_separators_are_escaped_and_decode_to_the_same_value() {
        let v = serde_json::json!({"text": "a\u{2028}b\u{2029}c\u{0085}d"});
        let line = v.to_string();
        let escaped = escape_line_separators(&line);
        assert!(!escaped.contains(['\u{2028}', '\u{2029}', '\u{0085}']));
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, v);
        assert!(matches!(
            escape_line_separators("{}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    /// Against the plain character-by-character replacement, over text
    /// full of the lead bytes 0xE2 and 0xC2 (dashes, quotes, U+00A0, U+2027,
    /// U+202A, U+0084, U+0086) around the three characters, at the ends too.
    #[test]
    fn matches_the_char_by_char_replacement() {
        let pieces = [
            "a",
            "\u{2028}",
            "\u{2029}",
            "\u{0085}",
            "\u{2014}",
            "\u{201c}",
            "\u{a0}",
            "\u{2027}",
            "\u{202a}",
            "\u{84}",
            "\u{86}",
            "\u{e9}",
            "\\",
            "\"",
            "\u{1f600}",
        ];
        let reference = |s: &str| -> String {
            s.chars()
                .map(|c| match c {
                    '\u{2028}' => "\\u2028".to_string(),
                    '\u{2029}' => "\\u2029".to_string(),
                    '\u{0085}' => "\\u0085".to_string(),
                    c => c.to_string(),
                })
                .collect()
        };
        // Every string of up to three pieces, and a long mixed one.
        let mut cases: Vec<String> = vec![String::new()];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    cases.push(format!("{a}{b}{c}"));
                }
            }
        }
        cases.push(pieces.concat().repeat(1000));
        for s in &cases {
            let got = escape_line_separators(s);
            assert_eq!(got, reference(s), "{s:?}");
            assert_eq!(
                matches!(got, std::borrow::Cow::Borrowed(_)),
                !s.contains(['\u{2028}', '\u{2029}', '\u{0085}'])
            );
        }
    }
}
