//! Lowercase hex, the one form the protocol writes: key digests, ids,
//! secrets and trace ids. Encoding is the `hex` crate's; decoding also
//! refuses uppercase, which the digests (spec 08 §4.2) and trace context
//! forbid and `hex` alone would accept.

/// Lowercase hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Appends the lowercase hex of `bytes` to `out` (no allocation of its own
/// for up to 32 bytes at a time).
pub fn push(out: &mut String, bytes: &[u8]) {
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(32) {
        let Some(dst) = buf.get_mut(..chunk.len() * 2) else {
            return;
        };
        if hex::encode_to_slice(chunk, dst).is_ok() {
            out.push_str(std::str::from_utf8(dst).unwrap_or_default());
        }
    }
}

/// Whether `s` is exactly `len` lowercase hex digits.
pub fn is_lower(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `N` bytes from exactly `2N` lowercase hex digits.
pub fn decode_lower<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    if !s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_case() {
        let bytes: Vec<u8> = (0u8..=255).collect();
        let text = encode(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert!(text.bytes().all(|b| !b.is_ascii_uppercase()));
        let mut pushed = String::from("x_");
        push(&mut pushed, &bytes);
        assert_eq!(pushed, format!("x_{text}"));
        assert_eq!(decode_lower::<2>(b"0aff"), Some([0x0a, 0xff]));
        assert_eq!(decode_lower::<2>(b"0AFF"), None);
        assert_eq!(decode_lower::<2>(b"0af"), None);
        assert_eq!(decode_lower::<1>(b"0aff"), None);
        assert!(is_lower("0a", 2) && !is_lower("0A", 2) && !is_lower("0a", 3));
    }
}
