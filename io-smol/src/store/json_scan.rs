//! A strict JSON scanner over text (RFC 8259 grammar, no allocation per
//! value, no recursion): it finds where values, object members and array
//! elements start and end, so that stored payloads can be cut and spliced
//! byte for byte. Re-serialising a parsed value could change its bytes
//! (escapes, number forms), which the wire contract does not allow.

/// A cursor over the bytes of one text.
pub(super) struct Scanner<'a> {
    b: &'a [u8],
    /// Current byte offset.
    pub i: usize,
    /// Open containers of [`Scanner::value`] (`{` or `[`), kept between
    /// calls so that scanning many values allocates once.
    stack: Vec<u8>,
}

impl<'a> Scanner<'a> {
    pub fn new(text: &'a str, at: usize) -> Self {
        Scanner {
            b: text.as_bytes(),
            i: at,
            stack: Vec::new(),
        }
    }

    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }

    /// Skips JSON whitespace; whether there was any.
    pub fn ws(&mut self) -> bool {
        let start = self.i;
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
        self.i > start
    }

    /// Consumes `c` if it is the next byte.
    pub fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// One string, quotes included.
    pub fn string(&mut self) -> Option<()> {
        if !self.eat(b'"') {
            return None;
        }
        loop {
            let rest = self.b.get(self.i..)?;
            let n = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            self.i += n;
            match self.b[self.i] {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.b.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.') && self.digits() == 0 {
            return None;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// `"key"`, optional whitespace, `:`, optional whitespace.
    fn member_head(&mut self) -> Option<()> {
        self.string()?;
        self.ws();
        if !self.eat(b':') {
            return None;
        }
        self.ws();
        Some(())
    }

    /// One complete value starting at the cursor (no leading whitespace);
    /// the cursor ends right after it. `None` if it is not valid JSON.
    pub fn value(&mut self) -> Option<()> {
        self.stack.clear();
        loop {
            // A value is expected here.
            match self.peek()? {
                b'{' => {
                    self.i += 1;
                    self.ws();
                    if !self.eat(b'}') {
                        self.stack.push(b'{');
                        self.member_head()?;
                        continue;
                    }
                }
                b'[' => {
                    self.i += 1;
                    self.ws();
                    if !self.eat(b']') {
                        self.stack.push(b'[');
                        continue;
                    }
                }
                b'"' => self.string()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers until one takes another.
            loop {
                let Some(&open) = self.stack.last() else {
                    return Some(());
                };
                self.ws();
                let close = if open == b'{' { b'}' } else { b']' };
                if self.eat(b',') {
                    self.ws();
                    if open == b'{' {
                        self.member_head()?;
                    }
                    break;
                }
                if !self.eat(close) {
                    return None;
                }
                self.stack.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where one value starting at 0 ends, if it is valid.
    fn end(text: &str) -> Option<usize> {
        let mut s = Scanner::new(text, 0);
        s.value().map(|()| s.i)
    }

    #[test]
    fn values_end_where_json_says() {
        for (text, n) in [
            ("0", 1),
            ("-0.5e+10,", 8),
            ("12]", 2),
            ("true}", 4),
            ("null", 4),
            (r#""a\"b\\c\u00e9\n""#, 17),
            (r#"{"a":[1,{"b":"}"}],"c":{}} tail"#, 26),
            ("[ 1 , [ ] , { } ]", 17),
            (r#"{ "k" : "v" }"#, 13),
            ("[[[[[[[[[[]]]]]]]]]]", 20),
        ] {
            assert_eq!(end(text), Some(n), "{text}");
        }
    }

    /// Whether `text` is exactly one valid value.
    fn whole(text: &str) -> bool {
        end(text) == Some(text.len())
    }

    #[test]
    fn invalid_values_are_refused() {
        for text in [
            "",
            "01",
            "1.",
            "-",
            "1e",
            ".5",
            "tru",
            "nul",
            "\"abc",
            "\"a\u{1}\"",
            r#""\x""#,
            r#""\u12g4""#,
            "[1,]",
            "[1 2]",
            "{\"a\"}",
            "{\"a\":}",
            "{a:1}",
            "{\"a\":1,}",
            "[",
            "{",
            "]",
            "{\"a\":1]",
            "[1}",
        ] {
            assert!(!whole(text), "{text:?}");
        }
    }

    #[test]
    fn deep_nesting_needs_no_recursion() {
        let depth = 200_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(end(&text), Some(text.len()));
        let unclosed = "[{\"a\":".repeat(depth);
        assert_eq!(end(&unclosed), None);
    }

    /// Everything serde_json writes is accepted, and ends where it ends.
    #[test]
    fn agrees_with_serde_json_output() {
        let v = serde_json::json!({
            "messages": [{"role": "user", "content": "é \u{2028} \" \\ \n \u{7f}"},
                         {"role": "assistant", "content": [{"type": "text", "text": ""}]}],
            "n": [0, -1, 1.5, 1e300, u64::MAX, i64::MIN], "t": true, "f": false, "z": null,
        });
        let text = v.to_string();
        assert_eq!(end(&text), Some(text.len()));
    }
}
